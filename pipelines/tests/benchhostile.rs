//! The hostile-traffic suite in its CI form: `firehose bench hostile --quick --check`.
//! For every class of bad packet and each receiver (fhspeadsrc, fhudpsrc ! speaddepay,
//! fhudpchunksrc handler=spead), a legitimate stream of 1 MiB heaps runs beside the
//! bad packets over loopback; `--check` fails the run when any legitimate heap is lost
//! or arrives with other bytes, or a receiver's RSS grows more than 64 MiB over a run.
//! CPU is measured and reported, not asserted (timings belong to the benchmark).

mod common;

use std::time::Duration;

use common::{run, temp_path};
use firehose_spead::hostile::Class;

#[test]
fn every_legitimate_heap_survives_every_class_of_bad_packet() {
    let md = temp_path("benchhostile.md");
    let out = run(
        &[
            "bench",
            "hostile",
            "--quick",
            "--check",
            "--seconds",
            "0.4",
            "--legit-rate",
            "200M",
            "--rss-bound",
            "64",
            "--out",
            md.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    let report = std::fs::read_to_string(&md).expect("--out file written");
    for receiver in ["spead-src", "speaddepay", "direct"] {
        assert!(report.contains(&format!("### {receiver}\n")), "{report}");
    }
    for class in Class::ALL {
        // One row per receiver and class.
        let rows = report
            .lines()
            .filter(|l| l.starts_with(&format!("| {} |", class.name())))
            .count();
        assert_eq!(rows, 3, "{}: {report}", class.name());
    }
}
