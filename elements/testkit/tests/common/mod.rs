//! Helpers shared by the element tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::Write;
use std::sync::{mpsc, Once};
use std::time::Duration;

use firehose_core::{stats, PacketBatchMeta, PacketInfo};
use firehose_testkit::pattern;
use gst::prelude::*;

/// Initialises GStreamer and registers the elements with the process, once.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        firehose_testkit::testsrc::register(None).unwrap();
        firehose_testkit::check::register(None).unwrap();
    });
}

/// A batch buffer holding test packets `seqs` (each `size` bytes) with its meta.
pub fn batch(seqs: &[u64], size: usize) -> gst::Buffer {
    let mut data = vec![0u8; seqs.len() * size];
    let mut infos = Vec::new();
    for (i, (&seq, pkt)) in seqs.iter().zip(data.chunks_exact_mut(size)).enumerate() {
        pattern::fill(seq, pkt);
        infos.push(PacketInfo {
            offset: (i * size) as u32,
            len: size as u32,
            ..Default::default()
        });
    }
    let mut buf = gst::Buffer::from_mut_slice(data);
    PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
    buf
}

/// One test packet as a plain buffer (no meta).
pub fn packet(seq: u64, size: usize) -> gst::Buffer {
    let mut data = vec![0u8; size];
    pattern::fill(seq, &mut data);
    gst::Buffer::from_mut_slice(data)
}

/// Reads counter `name` of an element's `stats` property.
pub fn stat(element: &gst::Element, name: &str) -> u64 {
    let s = element.property::<gst::Structure>("stats");
    assert_eq!(s.name(), stats::STRUCTURE_NAME);
    assert!(s.has_field(name), "stats lack {name}: {s}");
    stats::field(&s, name)
}

/// Runs `f` on another thread and returns its result; aborts the test process if it has
/// not finished within `limit`. A hang cannot be unwound from (dropping the element
/// would hang in turn), so it ends the run loudly instead of stalling it.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => {
            // Straight to stderr: the test harness would swallow a captured eprintln!.
            let _ = writeln!(
                std::io::stderr(),
                "HANG: {what} did not finish within {limit:?}"
            );
            std::process::abort();
        }
    }
}
