//! SIGKILL in the middle of a recording: the files finished before it are intact and
//! the open one is readable up to its last written block (docs/recording.md, "What
//! survives a crash").
//!
//! The test runs itself again as a child process that records until it is killed.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{read_capture, run_tool, TempDir};
use firehose_testkit::pattern;
use gst::prelude::*;

const CHILD_DIR: &str = "FHRECORD_CRASH_CHILD_DIR";
const BLOCK: u64 = 65536;
const TEST: &str = "sigkill_leaves_finished_files_intact_and_the_open_one_readable";

/// The child: records test packets into 1 MB files until killed.
fn child(dir: &str) -> ! {
    common::init();
    let pipeline = gst::parse::launch(&format!(
        "fhtestsrc packet-size=1000 rate=400000000 ! fhrecordsink location={dir}/c-%04d.pcap \
         max-size=1000000 block-size={BLOCK} when-full=block"
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

#[test]
fn sigkill_leaves_finished_files_intact_and_the_open_one_readable() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(&dir);
    }
    common::require_tool("tcpdump", "tcpdump");
    let dir = TempDir::new("crash");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir.0)
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
    // The open file: whole blocks only (O_DIRECT, no padding, no holes), readable up to
    // its last record that is wholly inside them.
    let path: &Path = &dir.0.join(last);
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
