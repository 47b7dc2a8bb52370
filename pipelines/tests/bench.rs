//! `firehose bench udp --quick`: both receivers run at every step and the report has
//! the step table, the summary and the ratios. The run holds each receiver to one core
//! (`--cpu-limit 1`, as root) so the cgroup path is exercised; the lowest rates need far
//! less.

mod common;

use std::time::Duration;

use common::{run, temp_path};

#[test]
fn quick_bench_produces_a_table() {
    let md = temp_path("bench.md");
    let out = run(
        &[
            "bench",
            "udp",
            "--quick",
            "--cpu-limit",
            "1",
            "--out",
            md.to_str().unwrap(),
        ],
        Duration::from_secs(180),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    let report = std::fs::read_to_string(&md).expect("--out file written");
    assert!(
        out.stdout.contains(report.trim()),
        "stdout and --out differ\n{}",
        out.all()
    );
    assert!(report.contains("- command: `"), "{report}");
    assert!(
        report.contains("bench udp --quick --cpu-limit 1 --out"),
        "{report}"
    );
    assert!(
        report.contains("- CPU budget: 1 of one core per receiver process"),
        "{report}"
    );
    for size in ["8972 B", "1472 B"] {
        for receiver in ["udpsrc", "fhudpsrc", "fhudpsrc/udpsrc"] {
            assert!(
                report.contains(&format!("| {size} | {receiver} |")),
                "{size} {receiver}\n{report}"
            );
        }
    }
    // 2 sizes × 2 rates × 2 receivers.
    let rows = report
        .lines()
        .filter(|l| {
            l.starts_with("| ") && l.matches('|').count() == 10 && !l.starts_with("| payload")
        })
        .count();
    assert_eq!(rows, 8, "{report}");
    // At the lowest quick rate (0.5 Gb/s of 1472 B) both receivers keep up on any machine
    // that runs this suite: they must receive nearly all that was offered. Compared with
    // what the sender managed, not with the rate asked: on a loaded 2-core machine the
    // sender itself once offered only 0.42 Gb/s, all of it received.
    let low: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("| 1472 B |") && l.contains("| 0.50 |"))
        .collect();
    assert_eq!(low.len(), 2, "{report}");
    for l in low {
        let cols: Vec<&str> = l.split('|').map(str::trim).collect();
        let offered: f64 = cols[4].parse().unwrap();
        let received: f64 = cols[5].parse().unwrap();
        assert!(offered > 0.2, "the sender barely ran: {l}");
        assert!(received >= 0.95 * offered, "{l}");
    }
    let _ = std::fs::remove_file(&md);
}

#[test]
fn bench_usage_errors() {
    let out = run(&["bench"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    let out = run(&["bench", "tcp"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("unknown benchmark 'tcp'"),
        "{}",
        out.all()
    );
    let out = run(
        &["bench", "udp", "--sizes", "99999"],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("65507"), "{}", out.all());
    let out = run(
        &["bench", "udp", "--cpu-limit", "lots"],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("number of cores"), "{}", out.all());
}
