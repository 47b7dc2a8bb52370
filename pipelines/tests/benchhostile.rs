//! The hostile-traffic suite in its CI form: `firehose bench hostile --quick --check`.
//! For every class of bad packet and each receiver (fhspeadsrc, fhudpsrc ! speaddepay,
//! fhudpchunksrc handler=spead), a legitimate stream of 1 MiB heaps runs beside the
//! bad packets over loopback; `--check` fails the run when any legitimate heap is lost
//! or arrives with other bytes, or a receiver's RSS grows more than 64 MiB over a run.
//! CPU is measured and reported, not asserted (timings belong to the benchmark).

mod common;

use std::time::Duration;

use common::{assert_contains_all, run_report, table_rows, temp_path};
use firehose_spead::hostile::Class;

#[test]
fn every_legitimate_heap_survives_every_class_of_bad_packet() {
    let (_, report) = run_report(
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
        ],
        &temp_path("benchhostile.md"),
        Duration::from_secs(120),
        "",
    );
    for receiver in ["spead-src", "speaddepay", "direct"] {
        assert_contains_all(&report, &[&format!("### {receiver}\n")]);
    }
    for class in Class::ALL {
        // One row per receiver and class.
        let rows = table_rows(&report, &format!("| {} |", class.name()));
        assert_eq!(rows.len(), 3, "{}: {report}", class.name());
    }
}
