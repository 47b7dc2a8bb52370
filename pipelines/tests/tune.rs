//! `firehose tune`: run for real on this machine (it must not crash, whatever the host
//! lacks) and against a fake sysfs/procfs tree, where `--apply` may change files.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{assert_contains_all, run, run_code, temp_path, usage_errors};

const T: Duration = Duration::from_secs(20);

fn put(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The text of `path` under the fake `root`.
fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path.trim_start_matches('/'))).unwrap()
}

#[test]
fn check_runs_on_the_real_host() {
    let out = run(&["tune", "--check"], T);
    // 0 = nothing failed, 1 = something failed: both are answers; a crash is neither.
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.all());
    out.assert_stdout(&[" ok, ", " not checked", "rmem_max"]);
    let failed = out.stdout.contains("[fail]");
    assert_eq!(
        out.code == Some(1),
        failed,
        "exit status follows the failures\n{}",
        out.all()
    );

    let out = run(
        &[
            "tune",
            "--check",
            "--json",
            "--interface",
            "lo",
            "--pipeline",
            "fhudpsrc port=7148 ! fakesink",
        ],
        T,
    );
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.all());
    let json = out.stdout.trim();
    assert!(
        json.starts_with("[{") && json.ends_with("}]"),
        "{}",
        out.all()
    );
    assert_contains_all(
        json,
        &[
            "\"rmem_max\"",
            "\"mtu\"",
            "\"rx-ring\"",
            "\"gro\"",
            "\"conntrack\"",
        ],
    );
}

#[test]
fn usage_errors_exit_2() {
    usage_errors(&[
        (
            &["tune", "--check", "--interface", "no-such-if0"],
            &["no interface 'no-such-if0'"],
        ),
        // --check or --apply is required.
        (&["tune"], &[]),
        (
            &["tune", "--check", "--pipeline", "nosuchelement ! fakesink"],
            &[],
        ),
    ]);
}

#[test]
fn apply_on_a_fake_root_asks_then_changes_and_check_passes() {
    let root = temp_path("tune-root");
    let _ = std::fs::remove_dir_all(&root);
    let rmem = "/proc/sys/net/core/rmem_max";
    let hugepages = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    put(&root, rmem, "212992\n");
    put(&root, "/proc/sys/net/core/wmem_max", "212992\n");
    put(&root, "/proc/meminfo", "Hugepagesize:       2048 kB\n");
    put(&root, &format!("{hugepages}/free_hugepages"), "0\n");
    put(&root, &format!("{hugepages}/nr_hugepages"), "0\n");
    let r = root.to_str().unwrap();
    let pipeline = "fhudpsrc buffer-size=33554432 memory=hugepages pool-size=2097152 ! fakesink";
    let tune = |args: &[&str], code: i32| {
        let mut all = vec!["tune"];
        all.extend(args);
        all.extend(["--root", r, "--pipeline", pipeline]);
        run_code(&all, T, code)
    };

    tune(&["--check"], 1).assert_stdout(&[
        "fix: sysctl -w net.core.rmem_max=33554432",
        "fix: sysctl -w vm.nr_hugepages=1",
    ]);

    // Without --yes it asks; no answer (stdin closed) changes nothing.
    tune(&["--apply"], 1).assert_stdout(&["apply these changes? [y/N]", "nothing changed"]);
    assert_eq!(read(&root, rmem), "212992\n");

    // It checks again after the changes: rmem_max is fixed, but a fake tree has no
    // kernel to hand out the hugepages asked for (a real one may also give fewer, on
    // fragmented memory), so hugepages still fail and say so.
    let out = tune(&["--apply", "--yes"], 1);
    let after = &out.stdout[out.stdout.find("after the changes:").expect("checks again")..];
    assert_contains_all(after, &["[  ok] rmem_max", "[fail] hugepages"]);
    out.assert_stdout(&[
        "write 33554432 to /proc/sys/net/core/rmem_max",
        // Persistence is explained.
        "/etc/sysctl.d/90-firehose.conf",
    ]);
    assert_eq!(read(&root, rmem), "33554432");
    assert_eq!(read(&root, &format!("{hugepages}/nr_hugepages")), "1");
    // What the kernel would have done: the reserved page is free.
    put(&root, &format!("{hugepages}/free_hugepages"), "1\n");
    let out = tune(&["--check"], 0);
    assert!(!out.stdout.contains("[fail]"), "{}", out.all());
    let _ = std::fs::remove_dir_all(&root);
}
