//! Helpers shared by the element tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Once;

use firehose_core::stats;
use firehose_testkit::run;
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
    let packets: Vec<Vec<u8>> = seqs
        .iter()
        .map(|&seq| run::test_packet(seq, size))
        .collect();
    run::batch(&packets)
}

/// One test packet as a plain buffer (no meta).
pub fn packet(seq: u64, size: usize) -> gst::Buffer {
    gst::Buffer::from_mut_slice(run::test_packet(seq, size))
}

/// Reads counter `name` of an element's `stats` property.
pub fn stat(element: &gst::Element, name: &str) -> u64 {
    let s = element.property::<gst::Structure>("stats");
    assert_eq!(s.name(), stats::STRUCTURE_NAME);
    assert!(s.has_field(name), "stats lack {name}: {s}");
    stats::field(&s, name)
}
