//! `firehose bench spead --quick`: every receiver runs at every step (spead2's own
//! receiver included: this fails, never skips, without the venv), the report has the
//! step table and the summary, and at the lowest rates nothing is lost. The run holds
//! each receiver to one core (`--cpu-limit 1`, as root), so the cgroup path is exercised
//! without changing what the lowest rates need.

mod common;

use std::time::Duration;

use common::{
    assert_contains_all, quick_one_core_report, run_code, run_report, table_rows, temp_path,
    usage_errors,
};

#[test]
fn quick_spead_bench_produces_a_table() {
    let md = temp_path("benchspead.md");
    let report = quick_one_core_report(
        "spead",
        &md,
        Duration::from_secs(300),
        "(the spead2 receiver needs <repo>/.venv: python3 -m venv .venv && \
         .venv/bin/pip install spead2==4.5.1 numpy)",
    );
    assert_contains_all(
        &report,
        &["| CPU vs spead2 | CPU vs floor | CPU vs batch-floor |"],
    );
    // Both floors, spead2 and speaddepay always; the others whenever this build has their
    // element (fhspeadsrc, fhdepay, fhudpchunksrc) — otherwise the report says it left
    // them out.
    let mut receivers = vec!["floor", "batch-floor", "spead2", "speaddepay"];
    for rx in ["spead-src", "chunk", "direct"] {
        if report.contains(&format!("- note: {rx} left out")) {
            eprintln!("{rx} not in this build; left out of the comparison");
        } else {
            receivers.push(rx);
        }
    }
    let rows = table_rows(&report, "| 1 | ");
    // 2 sizes × 2 rates × receivers.
    assert_eq!(rows.len(), 4 * receivers.len(), "{report}");
    for size in ["8972 B", "1472 B"] {
        for rx in &receivers {
            assert_contains_all(&report, &[&format!("| {size} | {rx} | ")]);
        }
    }
    // At the lowest quick rate (1 Gb/s of 8972-byte packets, 0.5 Gb/s of 1472-byte
    // ones: about 60 to 120 heaps/s) every receiver keeps up on any machine that runs
    // this suite: nearly every heap (or datagram, for the floors) must arrive.
    for row in rows
        .iter()
        .filter(|r| (r[2] == "8972 B" && r[4] == "1.00") || (r[2] == "1472 B" && r[4] == "0.50"))
    {
        let offered: f64 = row[5].parse().unwrap();
        let loss: f64 = row[7].parse().unwrap();
        assert!(offered > 0.2, "{row:?}\n{report}");
        assert!(loss < 1.0, "{row:?}\n{report}");
    }
    let _ = std::fs::remove_file(&md);
}

#[test]
fn spead_bench_usage_errors() {
    usage_errors(&[
        (
            &["bench", "spead", "--receivers", "nobody"],
            &["possible values", "speaddepay"],
        ),
        (&["bench", "spead", "--sizes", "32"], &[]),
        (
            &["bench", "spead", "--cpu-limit", "0"],
            &["number of cores"],
        ),
    ]);
    // A Python without spead2 is a clear failure, with the command that fixes it.
    let out = run_code(
        &[
            "bench",
            "spead",
            "--quick",
            "--receivers",
            "spead2",
            "--python",
            "/nonexistent/python3",
        ],
        Duration::from_secs(60),
        1,
    );
    assert_contains_all(&out.all(), &["pip install spead2==4.5.1"]);
}

/// The bypass receivers beside the kernel ones: over a veth pair from a private network
/// namespace, fhxdpsrc feeding speaddepay and chunk mode receive the stream whole, and
/// the report adds the whole machine's CPU per GB (needs root, as CI runs).
#[test]
fn veth_link_runs_the_bypass_receivers() {
    let md = temp_path("benchspead-veth.md");
    let (_, report) = run_report(
        &[
            "bench",
            "spead",
            "--link",
            "veth",
            "--quick",
            "--rates",
            "0.3G",
            "--receivers",
            "floor,speaddepay,xdp-speaddepay,xdp-chunk",
        ],
        &md,
        Duration::from_secs(180),
        "",
    );
    assert_contains_all(&report, &["a veth pair (", "| host CPU s/GB |"]);
    let rows = table_rows(&report, "| 1 | 1472 B | ");
    assert_eq!(rows.len(), 4, "{report}");
    for row in &rows {
        let loss: f64 = row[7].parse().unwrap();
        assert!(loss < 1.0, "{row:?}\n{report}");
        // After the 13 step figures (run … throttled periods %).
        let host: f64 = row[14].parse().unwrap();
        assert!(host > 0.0, "{row:?}\n{report}");
    }
    // The namespace is gone.
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains("fhb"),
        "{}",
        String::from_utf8_lossy(&ns.stdout)
    );
    let _ = std::fs::remove_file(&md);
    let _ = std::fs::remove_file(md.with_extension("svg"));
}
