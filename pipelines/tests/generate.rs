//! `firehose generate`: man pages and completions from the command's own definitions,
//! which `scripts/setup install` and the Debian package install.

mod common;

use std::time::Duration;

use common::{run, temp_path};

#[test]
fn man_pages_and_completions_describe_every_subcommand() {
    let dir = temp_path("man");
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(
        &["generate", "man", dir.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for want in [
        "firehose.1",
        "firehose-launch.1",
        "firehose-bench-record.1",
        "firehose-record-check.1",
        "firehose-record-repair.1",
        "firehose-tune.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} missing: {pages:?}");
    }
    assert!(
        !pages
            .iter()
            .any(|p| p.contains("help") || p.contains("bench-recv")),
        "no pages for help or hidden subcommands: {pages:?}"
    );
    let repair = std::fs::read_to_string(dir.join("firehose-record-repair.1")).unwrap();
    assert!(
        repair.contains("firehose\\-record\\-repair") && repair.contains("in\\-place"),
        "{repair}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    for (shell, marker) in [
        ("bash", "_firehose()"),
        ("zsh", "#compdef firehose"),
        ("fish", "complete -c firehose"),
    ] {
        let out = run(&["generate", "completions", shell], Duration::from_secs(30));
        assert_eq!(out.code, Some(0), "{}", out.all());
        assert!(
            out.stdout.contains(marker),
            "{shell}: {}",
            &out.stdout[..out.stdout.len().min(300)]
        );
        assert!(
            out.stdout.contains("repair"),
            "{shell} completes the record subcommands"
        );
    }
}
