//! `when-full=auto` (the default) follows the liveness of what feeds the recorder: a
//! replay is not live, so a recorder whose queue fills waits for the disk instead of
//! dropping, and a replay of 200,000 datagrams at full speed is recorded whole.

mod common;

use std::time::Duration;

use common::{read_capture, record_test_packets, run_pipeline, stat, TempDir};
use firehose_core::stats::names;
use gst::prelude::*;

#[test]
fn a_replay_at_full_speed_is_recorded_whole_by_default() {
    const N: u64 = 200_000;
    let dir = TempDir::new("liveness");
    let original = dir.join("original.pcap");
    let (_, r) = record_test_packets(
        &format!("num-packets={N} packet-size=64 rate=0"),
        &original,
        "when-full=block",
    );
    r.unwrap();
    // A small queue (4 blocks of 64 KiB, a few batches) and buffered writes
    // flushed often: the replay outruns the disk all the time.
    let copy = dir.join("copy.pcap");
    let (pipeline, r) = run_pipeline(
        &format!(
            "fhpcapsrc location={} pace=max ! fhrecordsink name=rec location={} \
             block-size=65536 queue-size=262144 direct=false fsync=bytes fsync-bytes=65536",
            original.display(),
            copy.display()
        ),
        Duration::from_secs(120),
    );
    r.unwrap();
    let rec = pipeline.by_name("rec").unwrap();
    assert_eq!(stat(&rec, names::DROPS_DISK), 0);
    assert_eq!(stat(&rec, names::PACKETS), N);
    assert_eq!(read_capture(&copy).0.len() as u64, N);
}
