//! `firehose bench shm`, one short run: the fhshmsink rows (to fhshmsrc and to the
//! Python consumer) and stock shmsink's, side by side, none stalled, with CPU per buffer
//! and the ratio table against shmsink.

mod common;

use std::time::Duration;

use common::run;

/// The cells of the table row that starts with `name` and has `size` in its second
/// column.
fn row<'a>(out: &'a str, name: &str, size: &str, cols: usize) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|c| c.len() == cols + 2 && c[1] == name && c[2] == size)
        .unwrap_or_else(|| panic!("no {name} {size} row of {cols} columns\n{out}"))
}

#[test]
fn a_short_shm_bench_compares_fhshmsink_with_shmsink_and_the_python_consumer() {
    let out = run(
        &[
            "bench",
            "shm",
            "--sizes",
            "65536",
            "--repeats",
            "1",
            "--timeout",
            "30",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    // The stock row needs gstreamer1.0-plugins-bad, the Python row the venv: the bench
    // says so when either is missing, and leaves the row out.
    let mut names = vec!["fhshmsink → fhshmsrc"];
    if !out.stderr.contains("Python rows are left out") {
        names.push("fhshmsink → Python firehose_shm");
    }
    let stock = !out.stderr.contains("stock shmsink is not installed");
    if stock {
        names.push("shmsink → shmsrc");
    }
    for name in names {
        let c = row(&out.stdout, name, "65536", 9);
        assert_eq!(c[9], "0/1", "no stall: {c:?}\n{}", out.all());
        for cell in &c[3..9] {
            let v: f64 = cell.parse().unwrap_or_else(|_| panic!("{c:?}"));
            assert!(v > 0.0, "{c:?}");
        }
    }
    if stock {
        // The ratio table: four ratios, then the row each is taken against.
        let r = row(&out.stdout, "fhshmsink → fhshmsrc", "65536", 7);
        assert!(r[3..7].iter().all(|c| c.ends_with('×')), "{r:?}");
        assert_eq!(r[7], "shmsink → shmsrc");
        // The zero-copy producer (fhtestsrc writing into the segment pool) against the
        // same producer into stock shmsink.
        let z = row(
            &out.stdout,
            "fhtestsrc headers only → fhshmsink, producer writes into the segment pool → fhshmsrc",
            "65536",
            7,
        );
        assert!(z[3..7].iter().all(|c| c.ends_with('×')), "{z:?}");
        assert_eq!(z[7], "fhtestsrc headers only → shmsink → shmsrc");
    }
}
