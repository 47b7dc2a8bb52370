//! Unpaced send throughput of `fhudpsink` on loopback, GSO on and off, for 1472- and
//! 8192-byte datagrams in batches of 64. Prints the median of several runs that follow
//! a warm-up run. The receiving socket is never read, so the sender's cost alone is
//! measured (the kernel drops what overflows the socket).
//!
//! Run with `cargo bench -p firehose-net --bench udpsink`. Without `--bench` (e.g.
//! `cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use firehose_core::stats::{self, names};
use firehose_core::{PacketBatchMeta, PacketInfo};
use gst::prelude::*;
use gst_check::Harness;

/// Timed runs per measurement; the median is reported, so one descheduled run does not
/// skew it.
const RUNS: usize = 7;
/// Datagrams per buffer.
const BATCH: usize = 64;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    gst::init().unwrap();
    gst::Element::register(
        None,
        "fhudpsink",
        gst::Rank::NONE,
        firehose_net::udpsink::UdpSink::static_type(),
    )
    .unwrap();
    let batches = if full { 4000 } else { 10 };
    let runs = if full { RUNS } else { 1 };
    for size in [1472usize, 8192] {
        for gso in [true, false] {
            let took = median_of(runs, || send_batches(size, gso, batches));
            let pps = (batches * BATCH) as f64 / took.as_secs_f64();
            println!(
                "fhudpsink unpaced, {size} B, gso={gso}, median of {runs}: \
                 {:.0} packets/s, {:.2} Gb/s",
                pps,
                pps * size as f64 * 8e-9
            );
        }
    }
}

/// The median of the times `f` reports over `runs` runs, after one warm-up run.
fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}

/// Pushes `batches` buffers of [`BATCH`] datagrams of `size` bytes through a fresh
/// `fhudpsink` and returns how long the pushes took. Panics unless every datagram
/// was sent.
fn send_batches(size: usize, gso: bool, batches: usize) -> Duration {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let el = gst::ElementFactory::make("fhudpsink")
        .property("host", "127.0.0.1")
        .property("port", i32::from(sink.local_addr().unwrap().port()))
        .property("gso", gso)
        .property("stats-interval", 0u32)
        .build()
        .unwrap();
    let mut h = Harness::with_element(&el, Some("sink"), None);
    h.set_src_caps_str("application/x-firehose-packets");
    h.play();
    let batch = batch_buffer(size);
    let t = Instant::now();
    for _ in 0..batches {
        h.push(batch.clone()).unwrap();
    }
    let took = t.elapsed();
    let s = el.property::<gst::Structure>("stats");
    let sent = stats::field(&s, names::PACKETS_SENT);
    assert_eq!(sent, (batches * BATCH) as u64, "{s}");
    assert_eq!(stats::field(&s, names::SEND_ERRORS), 0, "{s}");
    took
}

/// One buffer of [`BATCH`] datagrams of `size` bytes, described by a PacketBatchMeta.
fn batch_buffer(size: usize) -> gst::Buffer {
    let infos = (0..BATCH)
        .map(|i| PacketInfo {
            offset: (i * size) as u32,
            len: size as u32,
            ..Default::default()
        })
        .collect();
    let data: Vec<u8> = (0..BATCH * size).map(|i| i as u8).collect();
    let mut buf = gst::Buffer::from_mut_slice(data);
    PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
    buf
}
