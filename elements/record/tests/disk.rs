//! The disk misbehaving: full (a small tmpfs), refusing O_DIRECT (ramfs), too slow
//! (drops counted, never silent), not there (a bad location).

mod common;

use std::time::Duration;

use common::{read_capture, record_test_packets, stat, Mount, TempDir};
use firehose_core::stats::names;
use firehose_testkit::pattern;
use gst::prelude::*;

#[test]
fn a_full_disk_is_an_error_naming_the_path_and_what_was_written_stays_readable() {
    let mnt = Mount::new("tmpfs", "size=2m", "full");
    let loc = mnt.join("full-%d.pcap");
    let (pipeline, r) = record_test_packets(
        "num-packets=100000 packet-size=1000",
        &loc,
        "block-size=65536 when-full=block",
    );
    let e = r.expect_err("recording 100 MB into 2 MB must fail");
    let path = mnt.join("full-0.pcap");
    assert!(
        e.contains(path.to_str().unwrap()),
        "the error names the file: {e}"
    );
    assert!(e.contains("Disk full") && e.contains("Free space"), "{e}");
    let written = stat(&pipeline.by_name("rec").unwrap(), names::BYTES_WRITTEN);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, written, "bytes-written counts what is in the file");
    assert!(size > 1_500_000, "the filesystem was filled: {size}");
    let (read, counts) = read_capture(&path);
    assert_eq!(counts.malformed, 0);
    assert!(counts.truncated <= 1, "at most the last record is cut");
    for (i, r) in read.iter().enumerate() {
        assert_eq!(pattern::verify(&r.payload), Ok(i as u64), "record {i}");
    }
    assert!(read.len() > 1400, "{} records", read.len());
}

#[test]
fn ramfs_refuses_o_direct_and_the_recording_falls_back_with_a_warning() {
    let mnt = Mount::new("ramfs", "mode=755", "ramfs");
    let path = mnt.join("r.pcap");
    let pipeline = common::launch(&format!(
        "fhtestsrc num-packets=3000 packet-size=500 ! fhrecordsink location={} \
         when-full=block block-size=65536",
        path.display()
    ));
    let (r, warnings) = common::play_collecting_warnings(&pipeline, Duration::from_secs(30));
    r.unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("refuses O_DIRECT") && w.contains("r.pcap")),
        "{warnings:?}"
    );
    let (read, counts) = read_capture(&path);
    assert_eq!(counts, Default::default());
    assert_eq!(read.len(), 3000);
    assert_eq!(pattern::verify(&read[2999].payload), Ok(2999));
}

#[test]
fn a_disk_that_falls_behind_drops_whole_buffers_and_counts_every_packet() {
    let dir = TempDir::new("slow");
    let path = dir.join("slow.pcapng");
    // Buffered writes flushed to the device after every 64 KiB block: far slower than
    // a source running flat out, with a queue of only four blocks.
    let (pipeline, r) = record_test_packets(
        "name=src num-packets=200000 packet-size=1472",
        &path,
        "format=pcapng block-size=65536 queue-size=262144 direct=false fsync=bytes \
         fsync-bytes=1 when-full=drop",
    );
    r.unwrap();
    let rec = pipeline.by_name("rec").unwrap();
    let (packets, drops) = (stat(&rec, names::PACKETS), stat(&rec, names::DROPS_DISK));
    assert!(
        drops > 0,
        "the disk kept up after all: nothing shows the drop path"
    );
    assert_eq!(
        packets + drops,
        200000,
        "every packet is recorded or counted"
    );
    let (read, counts) = read_capture(&path);
    assert_eq!(counts, Default::default());
    assert_eq!(read.len() as u64, packets);
    // Whole buffers were dropped: what remains is intact and in order.
    let mut last = None;
    for r in &read {
        let seq = pattern::verify(&r.payload).unwrap();
        assert!(last.is_none_or(|l| seq > l));
        last = Some(seq);
    }
    let isb = common::isb_counters(&path);
    assert_eq!(
        isb,
        (200000, 0, drops, packets),
        "(ifrecv, ifdrop, osdrop, usrdeliv)"
    );
}

#[test]
fn a_bad_location_fails_at_start_with_the_path() {
    let (_, r) = record_test_packets(
        "num-packets=10",
        std::path::Path::new("/nonexistent-dir/x.pcap"),
        "",
    );
    let e = r.unwrap_err();
    assert!(
        e.contains("/nonexistent-dir/x.pcap") && e.contains("directory exists"),
        "{e}"
    );
    let (_, r) = record_test_packets(
        "num-packets=10",
        std::path::Path::new("/tmp/no-number.pcap"),
        "max-size=1000000",
    );
    let e = r.unwrap_err();
    assert!(e.contains("has no %d"), "{e}");
}
