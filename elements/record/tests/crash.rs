//! SIGKILL in the middle of a recording: the files finished before it are intact and
//! the open one is readable up to its last written block (docs/recording.md, "What
//! survives a crash"), exactly with `io-depth=1`, and up to the writes that were in
//! flight with several (the default).
//!
//! Each test runs itself again as a child process that records until it is killed.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{read_capture, run_tool, TempDir};
use firehose_record::read::container::CaptureReader;
use firehose_record::read::link;
use firehose_testkit::pattern;
use gst::prelude::*;

const CHILD_DIR: &str = "FHRECORD_CRASH_CHILD_DIR";
const CHILD_DEPTH: &str = "FHRECORD_CRASH_CHILD_DEPTH";
const BLOCK: u64 = 65536;
/// Bytes of one record in the file: pcap record header, Ethernet, IPv4, UDP, payload.
const RECORD: u64 = 16 + 14 + 20 + 8 + 1000;

/// The child: records test packets into 1 MB files until killed.
fn child(dir: &str, depth: &str) -> ! {
    common::init();
    let pipeline = gst::parse::launch(&format!(
        "fhtestsrc packet-size=1000 rate=400000000 ! fhrecordsink location={dir}/c-%04d.pcap \
         max-size=1000000 block-size={BLOCK} when-full=block io-depth={depth}"
    ))
    .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn number(name: &str) -> u32 {
    name[2..6].parse().unwrap()
}

/// Runs the child (this test binary running `test` again) until it has finished several
/// files and is well into the next, kills it, and returns the finished files' names
/// (checked: complete, in sequence, tcpdump reads them), the open file's name and the
/// next packet number after the finished files.
fn record_and_kill(test: &str, depth: u32) -> (TempDir, String, u64) {
    common::require_tool("tcpdump", "tcpdump");
    let dir = TempDir::new("crash");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir.0)
        .env(CHILD_DEPTH, depth.to_string())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Kill it once several files are done and the next is well under way.
    loop {
        let files = dir.files();
        let open_bytes = files
            .last()
            .and_then(|f| std::fs::metadata(dir.0.join(f)).ok())
            .map_or(0, |m| m.len());
        if files.len() >= 5 && open_bytes >= 2 * BLOCK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the child recorded too little: {files:?}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill() on our own child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    child.wait().unwrap();

    let files = dir.files();
    assert!(files.len() >= 5, "{files:?}");
    for w in files.windows(2) {
        assert_eq!(number(&w[1]), number(&w[0]) + 1, "{files:?}");
    }
    let (last, finished) = files.split_last().unwrap();
    let mut next = 0u64;
    for f in finished {
        let path = dir.0.join(f);
        // tcpdump reads the whole file without complaint.
        run_tool("tcpdump", &["-r", path.to_str().unwrap(), "-nn", "-q"]);
        let (read, counts) = read_capture(&path);
        assert_eq!(counts, Default::default(), "{f} is complete");
        for r in read {
            assert_eq!(pattern::verify(&r.payload), Ok(next), "{f}");
            next += 1;
        }
    }
    let last = last.clone();
    (dir, last, next)
}

fn child_if_asked() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(
            &dir,
            &std::env::var(CHILD_DEPTH).unwrap_or_else(|_| "1".into()),
        );
    }
}

#[test]
fn sigkill_leaves_finished_files_intact_and_the_open_one_readable() {
    child_if_asked();
    let (dir, last, mut next) = record_and_kill(
        "sigkill_leaves_finished_files_intact_and_the_open_one_readable",
        1,
    );
    // The open file: whole blocks only (O_DIRECT, no padding, no holes), readable up to
    // its last record that is wholly inside them.
    let path: &Path = &dir.0.join(&last);
    let size = std::fs::metadata(path).unwrap().len();
    assert!(size > 0, "{last} is empty");
    let (read, counts) = read_capture(path);
    // (Unless the kill fell in the microseconds between closing a file and opening the
    // next: then the last file is simply complete.)
    assert!(
        size.is_multiple_of(BLOCK) || counts == Default::default(),
        "{last}: {size} bytes is not whole blocks, yet the file is incomplete"
    );
    assert_eq!(counts.malformed, 0, "{last}");
    assert!(counts.truncated <= 1, "{last}");
    assert!(
        read.len() as u64 >= (size - 24) / 1100,
        "{last}: {} records",
        read.len()
    );
    for r in read {
        assert_eq!(pattern::verify(&r.payload), Ok(next), "{last}");
        next += 1;
    }
}

#[test]
fn sigkill_with_writes_in_flight_loses_at_most_the_blocks_in_flight() {
    child_if_asked();
    const DEPTH: u64 = 4;
    let (dir, last, mut next) = record_and_kill(
        "sigkill_with_writes_in_flight_loses_at_most_the_blocks_in_flight",
        DEPTH as u32,
    );
    // The open file: whole blocks; its records are the stream's, in order, up to the
    // first block that was in flight and not written (zeros, where the reader stops), and
    // that lies within the last 2 x io-depth blocks (the size runs that far ahead).
    let path: &Path = &dir.0.join(&last);
    let size = std::fs::metadata(path).unwrap().len();
    assert!(size > 0, "{last} is empty");
    let f = std::fs::File::open(path).unwrap();
    let mut r = CaptureReader::new(f).unwrap();
    let mut good = 0u64;
    while let Some(rec) = r.next_record().unwrap() {
        // A record cut by a block that was not written has zeros for its end.
        let intact = link::datagram(rec.linktype, rec.data)
            .ok()
            .is_some_and(|d| pattern::verify(d.payload) == Ok(next));
        if !intact {
            break;
        }
        good += 1;
        next += 1;
    }
    assert!(
        size.is_multiple_of(BLOCK) || r.counts() == Default::default(),
        "{last}: {size} bytes is not whole blocks, yet the file is incomplete"
    );
    let covered = 24 + good * RECORD;
    assert!(
        covered + (2 * DEPTH + 1) * BLOCK >= size,
        "{last}: {good} good records ({covered} bytes) of {size}"
    );
}
