//! `firehose bench udp --quick`: every receiver (the floor loop, udpsrc, fhudpsrc) runs
//! at every step with a plain sender, and the report has the summary (with ratios to
//! udpsrc and to the floor), every step and the charts. The run holds each receiver to
//! one core (`--cpu-limit 1`, as root) so the cgroup path is exercised; the lowest rates
//! need far less.

mod common;

use std::time::Duration;

use common::{run, temp_path};

/// The cells of the report's step rows (`| run | payload | receiver | …`).
fn step_rows(report: &str) -> Vec<Vec<String>> {
    report
        .lines()
        .filter(|l| l.starts_with("| 1 | "))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

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
        report.contains("plain sender: one datagram per send"),
        "{report}"
    );
    assert!(report.contains("gso=false"), "{report}");
    assert!(
        report.contains("- CPU budget: 1 of one core per receiver process"),
        "{report}"
    );
    assert!(
        report.contains("| CPU vs udpsrc | CPU vs floor | lossless Gb/s per budget core |"),
        "{report}"
    );
    for size in ["8972 B", "1472 B"] {
        for receiver in ["floor", "udpsrc", "fhudpsrc"] {
            assert!(
                report.contains(&format!("| {size} | {receiver} |")),
                "{size} {receiver}\n{report}"
            );
        }
    }
    // 2 sizes × 2 rates × 3 receivers.
    let rows = step_rows(&report);
    assert_eq!(rows.len(), 12, "{report}");
    // At the lowest quick rate (0.5 Gb/s of 1472 B) every receiver keeps up on any
    // machine that runs this suite: it must receive nearly all that was offered.
    // Compared with what the sender managed, not with the rate asked: on a loaded
    // 2-core machine the sender itself once offered only 0.42 Gb/s, all of it received.
    let low: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[2] == "1472 B" && r[4] == "0.50")
        .collect();
    assert_eq!(low.len(), 3, "{report}");
    for r in low {
        let offered: f64 = r[5].parse().unwrap();
        let received: f64 = r[6].parse().unwrap();
        assert!(offered > 0.2, "the sender barely ran: {r:?}");
        assert!(received >= 0.95 * offered, "{r:?}");
        let cpu: f64 = r[11].parse().unwrap();
        assert!(
            cpu > 0.0,
            "a receiver that received has a CPU figure: {r:?}"
        );
        // What one wake-up took (udpsrc reports no receive calls), and how often the
        // budget held the receiver back (0 to 100 %).
        if r[3] != "udpsrc" {
            let per: f64 = r[12].parse().unwrap();
            assert!((1.0..=64.0).contains(&per), "{r:?}");
        }
        let throttled: f64 = r[13].parse().unwrap();
        assert!((0.0..=100.0).contains(&throttled), "{r:?}");
    }
    assert!(
        report.contains("| datagrams per receive | throttled periods % |"),
        "{report}"
    );
    // The charts: one per size, next to the report, linked from it.
    for size in [8972, 1472] {
        let svg = md.with_file_name(format!(
            "{}-{size}.svg",
            md.file_stem().unwrap().to_string_lossy()
        ));
        let text = std::fs::read_to_string(&svg).expect("chart written");
        assert!(text.trim_start().starts_with("<svg"), "{}", svg.display());
        assert!(
            text.contains("fhudpsrc") && text.contains("floor"),
            "{text}"
        );
        assert!(
            report.contains(&format!(
                "]({})",
                svg.file_name().unwrap().to_string_lossy()
            )),
            "{report}"
        );
        let _ = std::fs::remove_file(&svg);
    }
    let _ = std::fs::remove_file(&md);
}

#[test]
fn bench_usage_errors() {
    let out = run(&["bench"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    let out = run(&["bench", "tcp"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("'tcp'"), "{}", out.all());
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
    // A SPEAD receiver is not a UDP benchmark's.
    let out = run(
        &["bench", "udp", "--receivers", "spead2"],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("bench spead"), "{}", out.all());
}

#[test]
fn bench_help_describes_every_benchmark() {
    let out = run(&["bench", "--help"], Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{}", out.all());
    for kind in ["udp", "spead", "bypass", "record"] {
        assert!(out.stdout.contains(kind), "{kind}\n{}", out.all());
    }
    for kind in ["udp", "spead", "bypass"] {
        let out = run(&["bench", kind, "--help"], Duration::from_secs(30));
        assert_eq!(out.code, Some(0), "{}", out.all());
        for option in ["--gso", "--repeat", "--plot", "--receivers", "--cpu-limit"] {
            assert!(
                out.stdout.contains(option),
                "{kind} {option}\n{}",
                out.all()
            );
        }
    }
    let out = run(&["bench", "record", "--help"], Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("--block-size"), "{}", out.all());
}
