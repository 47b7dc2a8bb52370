//! `firehose bench record --quick`: fio (libaio, as is and with fresh data),
//! fhrecordsink (raw, pcap) and filesink all run on one filesystem, and the report has
//! their rows with medians, ranges and ratios, and says that a quick run is no disk
//! measurement.

mod common;

use std::time::Duration;

use common::{assert_contains_all, run_code, run_report, temp_path, usage_errors};

#[test]
fn quick_record_bench_produces_a_table() {
    let dir = temp_path("bench-record");
    std::fs::create_dir_all(&dir).unwrap();
    let md = dir.join("report.md");
    let (_, report) = run_report(
        &[
            "bench",
            "record",
            "--quick",
            "--size",
            "64M",
            "--dir",
            dir.to_str().unwrap(),
        ],
        &md,
        Duration::from_secs(300),
        "(fio missing? apt-get install -y fio, or scripts/setup)",
    );
    assert_contains_all(
        &report,
        &[
            "- command: `",
            "bench record --quick",
            "--ioengine=libaio --iodepth=4",
            "**--quick: not a disk measurement.**",
            "format=raw: ",
            "target ≥ 0.95×: not judged",
        ],
    );
    for writer in [
        "fio libaio",
        "fio libaio --refill_buffers",
        "fhrecordsink format=raw",
        "fhrecordsink format=pcap",
        "filesink (reference)",
    ] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {writer} |")))
            .unwrap_or_else(|| panic!("no {writer} row\n{report}"));
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cols[2], "64", "{row}");
        assert_eq!(cols[3], "1", "one round: {row}");
        let gbps: f64 = cols[4].parse().unwrap();
        assert!(gbps > 0.0, "{row}");
        assert!(
            cols[6].ends_with(')') && cols[6].contains('×'),
            "vs fio: {row}"
        );
    }
    // The chart of the writers' GB/s sits beside the report and is linked from it.
    let svg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "svg"))
        .expect("chart written beside the report");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert_contains_all(&chart, &["fhrecordsink format=raw", "GB/s"]);
    let link = format!("]({})", svg.file_name().unwrap().to_string_lossy());
    assert_contains_all(&report, &[&link]);
    // Every file the bench wrote is gone: only the report and its chart are left.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 2, "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writers_chooses_the_rows_and_their_turns() {
    let dir = temp_path("bench-record-writers");
    std::fs::create_dir_all(&dir).unwrap();
    let out = run_code(
        &[
            "bench",
            "record",
            "--quick",
            "--size",
            "16M",
            "--writers",
            "pcap,fio,raw",
            "--dir",
            dir.to_str().unwrap(),
        ],
        Duration::from_secs(300),
        0,
    );
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| writer"))
        .map(|l| l.split('|').nth(1).unwrap().trim())
        .collect();
    assert_eq!(
        rows,
        [
            "fhrecordsink format=pcap",
            "fio libaio",
            "fhrecordsink format=raw"
        ],
        "{}",
        out.all()
    );
    // pcap took its turn before fio, and is still compared with it and with raw.
    let pcap = out.stderr.find("round 1: fhrecordsink format=pcap");
    let fio = out.stderr.find("round 1: fio libaio");
    assert!(pcap.is_some() && pcap < fio, "{}", out.all());
    out.assert_stdout(&[
        "fhrecordsink format=pcap against fhrecordsink format=raw in the same round",
    ]);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "files cleaned up"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_bench_usage_errors() {
    usage_errors(&[
        (
            &["bench", "record", "--block-size", "1000"],
            &["multiple of 4096"],
        ),
        (&["bench", "record", "--frobnicate"], &[]),
        (
            &["bench", "record", "--writers", "fio,tape"],
            &["unknown writer 'tape'"],
        ),
    ]);
}
