//! Rotation by size and by duration, the ring of files, and raw + index files that
//! agree with each other.

mod common;

use common::{read_capture, record_test_packets, TempDir};
use firehose_record::index::{self, Kind};
use firehose_testkit::pattern;
use gst::prelude::*;

/// Verifies a run of test packets across files: every packet intact, numbered from
/// `first` with no gap.
fn check_sequence(payloads: impl Iterator<Item = Vec<u8>>, first: u64) -> u64 {
    let mut next = first;
    for p in payloads {
        let seq = pattern::verify(&p).unwrap_or_else(|e| panic!("packet {next}: {e}"));
        assert_eq!(seq, next, "packets out of sequence");
        next += 1;
    }
    next - first
}

/// Records test packets (`src`: fhtestsrc's properties) into the numbered files `pattern`
/// of a fresh directory, with `sink` fhrecordsink's properties; fails unless the
/// recording ends cleanly. Returns the directory, the names of its files and the
/// pipeline.
fn record_files(pattern: &str, src: &str, sink: &str) -> (TempDir, Vec<String>, gst::Pipeline) {
    let dir = TempDir::new("rotation");
    let (pipeline, r) = record_test_packets(src, &dir.join(pattern), sink);
    r.unwrap();
    let files = dir.files();
    (dir, files, pipeline)
}

/// [`record_files`] of 20000 test packets of 1000 bytes (21.2 MB as pcap) in blocks of
/// 64 KiB, waiting for the disk, with `sink` besides.
fn record_20000_packets(pattern: &str, sink: &str) -> (TempDir, Vec<String>, gst::Pipeline) {
    record_files(
        pattern,
        "num-packets=20000 packet-size=1000",
        &format!("{sink} block-size=65536 when-full=block"),
    )
}

#[test]
fn size_rotation_keeps_every_file_under_the_limit_and_every_packet() {
    let (dir, files, pipeline) = record_20000_packets("cap-%03d.pcap", "max-size=2000000");
    // 20000 x (1000 + 58) bytes ≈ 21.2 MB in ≤ 2 MB files.
    assert_eq!(files.len(), 11, "{files:?}");
    assert_eq!(files[0], "cap-000.pcap");
    let mut total = 0;
    for f in &files {
        let path = dir.0.join(f);
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 2_000_000, "{f}: {size}");
        let (read, counts) = read_capture(&path);
        assert_eq!(counts, Default::default(), "{f}");
        total += check_sequence(read.into_iter().map(|r| r.payload), total);
    }
    assert_eq!(total, 20000);
    let rec = pipeline.by_name("rec").unwrap();
    assert_eq!(common::stat(&rec, "files"), 11);
}

#[test]
fn ring_keeps_the_newest_files_only() {
    let (dir, files, _) = record_20000_packets(
        "ring-%05d.pcapng",
        "format=pcapng max-size=1000000 max-files=3",
    );
    assert_eq!(files.len(), 3, "{files:?}");
    let numbers: Vec<u32> = files.iter().map(|f| f[5..10].parse().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{files:?}");
    assert!(numbers[0] >= 18, "the oldest files went: {files:?}");
    // The surviving files continue one another and end with the last packet.
    let mut payloads = Vec::new();
    for f in &files {
        let (read, _) = read_capture(&dir.0.join(f));
        payloads.extend(read.into_iter().map(|r| r.payload));
    }
    let first = pattern::verify(&payloads[0]).unwrap();
    let n = check_sequence(payloads.into_iter(), first);
    assert_eq!(first + n, 20000);
}

#[test]
fn duration_rotation_starts_new_files_as_time_passes() {
    // 1 Mbit/s of 125-byte packets for about 1.2 s, files of 300 ms of the wall clock:
    // 4 to 6, or one more per 300 ms that a loaded machine stretched the run by.
    let t0 = std::time::Instant::now();
    let (dir, files, _) = record_files(
        "t-%d.pcap",
        "num-packets=1200 packet-size=125 batch-size=10 rate=1000000",
        "max-duration=300000000 when-full=block",
    );
    let most = 6.max((t0.elapsed().as_secs_f64() / 0.3).ceil() as usize + 1);
    assert!((4..=most).contains(&files.len()), "{files:?}");
    let mut total = 0;
    for i in 0..files.len() {
        let (read, _) = read_capture(&dir.join(&format!("t-{i}.pcap")));
        total += check_sequence(read.into_iter().map(|r| r.payload), total);
    }
    assert_eq!(total, 1200);
}

#[test]
fn raw_files_and_their_index_agree() {
    let (dir, files, _) = record_files(
        "chunks-%02d.raw",
        "num-packets=5000 packet-size=3000",
        "format=raw max-size=4000000 block-size=65536 when-full=block",
    );
    assert_eq!(files.len(), 8, "4 data files and their indexes: {files:?}");
    let mut id = 0;
    for n in 0..4 {
        let data_path = dir.join(&format!("chunks-{n:02}.raw"));
        let data = std::fs::read(&data_path).unwrap();
        let mut idx_path = data_path.into_os_string();
        idx_path.push(".idx");
        let entries = index::read(std::path::Path::new(&idx_path), data.len() as u64).unwrap();
        assert!(!entries.is_empty());
        let mut end = 0;
        for e in &entries {
            assert_eq!(e.kind, Some(Kind::Packet));
            assert!(e.complete);
            assert_eq!(e.id, id, "packet numbers continue across files");
            assert_eq!(e.offset, end, "records are back to back");
            assert!(e.time_ns > 0);
            let rec = &data[e.range().start as usize..e.range().end as usize];
            assert_eq!(
                pattern::verify(rec).unwrap(),
                id,
                "index points at packet {id}"
            );
            end = e.range().end;
            id += 1;
        }
        assert_eq!(end, data.len() as u64, "the index covers the whole file");
        assert!(data.len() <= 4_000_000);
    }
    assert_eq!(id, 5000);
}
