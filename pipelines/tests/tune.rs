//! `firehose tune`: run for real on this machine (it must not crash, whatever the host
//! lacks) and against a fake sysfs/procfs tree, where `--apply` may change files.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{run, temp_path};

fn put(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn check_runs_on_the_real_host() {
    let out = run(&["tune", "--check"], Duration::from_secs(20));
    // 0 = nothing failed, 1 = something failed: both are answers; a crash is neither.
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.all());
    assert!(
        out.stdout.contains(" ok, ") && out.stdout.contains(" not checked"),
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("rmem_max"), "{}", out.all());
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
        Duration::from_secs(20),
    );
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.all());
    let json = out.stdout.trim();
    assert!(
        json.starts_with("[{") && json.ends_with("}]"),
        "{}",
        out.all()
    );
    for check in [
        "\"rmem_max\"",
        "\"mtu\"",
        "\"rx-ring\"",
        "\"gro\"",
        "\"conntrack\"",
    ] {
        assert!(json.contains(check), "{check} missing: {json}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = run(
        &["tune", "--check", "--interface", "no-such-if0"],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("no interface 'no-such-if0'"),
        "{}",
        out.all()
    );
    let out = run(&["tune"], Duration::from_secs(20));
    assert_eq!(
        out.code,
        Some(2),
        "--check or --apply is required\n{}",
        out.all()
    );
    let out = run(
        &["tune", "--check", "--pipeline", "nosuchelement ! fakesink"],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
}

#[test]
fn apply_on_a_fake_root_asks_then_changes_and_check_passes() {
    let root = temp_path("tune-root");
    let _ = std::fs::remove_dir_all(&root);
    put(&root, "/proc/sys/net/core/rmem_max", "212992\n");
    put(&root, "/proc/sys/net/core/wmem_max", "212992\n");
    put(&root, "/proc/meminfo", "Hugepagesize:       2048 kB\n");
    put(
        &root,
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "0\n",
    );
    put(
        &root,
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        "0\n",
    );
    let r = root.to_str().unwrap();
    let pipeline = "fhudpsrc buffer-size=33554432 memory=hugepages pool-size=2097152 ! fakesink";

    let out = run(
        &["tune", "--check", "--root", r, "--pipeline", pipeline],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(
        out.stdout
            .contains("fix: sysctl -w net.core.rmem_max=33554432"),
        "{}",
        out.all()
    );
    assert!(
        out.stdout.contains("fix: sysctl -w vm.nr_hugepages=1"),
        "{}",
        out.all()
    );

    // Without --yes it asks; no answer (stdin closed) changes nothing.
    let out = run(
        &["tune", "--apply", "--root", r, "--pipeline", pipeline],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(
        out.stdout.contains("apply these changes? [y/N]"),
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("nothing changed"), "{}", out.all());
    assert_eq!(
        std::fs::read_to_string(root.join("proc/sys/net/core/rmem_max")).unwrap(),
        "212992\n"
    );

    let out = run(
        &[
            "tune",
            "--apply",
            "--yes",
            "--root",
            r,
            "--pipeline",
            pipeline,
        ],
        Duration::from_secs(20),
    );
    // It checks again after the changes: rmem_max is fixed, but a fake tree has no
    // kernel to hand out the hugepages asked for (a real one may also give fewer, on
    // fragmented memory), so hugepages still fail and say so.
    assert_eq!(out.code, Some(1), "{}", out.all());
    let after = &out.stdout[out.stdout.find("after the changes:").expect("checks again")..];
    assert!(after.contains("[  ok] rmem_max"), "{}", out.all());
    assert!(after.contains("[fail] hugepages"), "{}", out.all());
    assert!(
        out.stdout
            .contains("write 33554432 to /proc/sys/net/core/rmem_max"),
        "{}",
        out.all()
    );
    assert!(
        out.stdout.contains("/etc/sysctl.d/90-firehose.conf"),
        "persistence is explained\n{}",
        out.all()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("proc/sys/net/core/rmem_max")).unwrap(),
        "33554432"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"))
            .unwrap(),
        "1"
    );
    // What the kernel would have done: the reserved page is free.
    put(
        &root,
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "1\n",
    );
    let out = run(
        &["tune", "--check", "--root", r, "--pipeline", pipeline],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(!out.stdout.contains("[fail]"), "{}", out.all());
    let _ = std::fs::remove_dir_all(&root);
}
