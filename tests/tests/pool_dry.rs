//! A slow application that holds every chunk: the chunk elements (`fhdepay`,
//! `speaddepay mode=chunks`, `fhudpchunksrc`) say on the bus that their pool ran dry,
//! naming the pool and the property to raise, and count it (`drops-pool`,
//! `pool-exhausted`), as `fhudpsrc` and `speaddepay mode=heaps` do.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use firehose_core::{PacketBatchMeta, PacketInfo};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use gst::prelude::*;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// The SPEAD packets of heaps 1..=n, 256-byte payloads.
fn spead_packets(n: u64) -> Vec<Vec<u8>> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_40, 1024).unwrap();
    let mut out = Vec::new();
    for cnt in 1..=n {
        let payload = vec![cnt as u8; 256];
        let items = [Item::bytes(0x1000, &payload)];
        let mut packets = cfg.heap(cnt, &items).unwrap();
        let mut buf = vec![0u8; 1024];
        while let Some(len) = packets.write_next(&mut buf) {
            out.push(buf[..len].to_vec());
        }
    }
    out
}

/// One batch buffer per packet.
fn batch(p: &[u8]) -> gst::Buffer {
    let mut buf = gst::Buffer::from_mut_slice(p.to_vec());
    PacketBatchMeta::add(
        buf.get_mut().unwrap(),
        vec![PacketInfo {
            offset: 0,
            len: p.len() as u32,
            ..Default::default()
        }],
    );
    buf
}

/// Waits for a warning from `element` (by name) on the bus; its text.
fn warning_from(pipeline: &gst::Pipeline, element: &str, timeout: Duration) -> Option<String> {
    let bus = pipeline.bus().unwrap();
    let deadline = Instant::now() + timeout;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Some(msg) = bus.timed_pop_filtered(
            gst::ClockTime::from_nseconds(left.as_nanos() as u64),
            &[gst::MessageType::Warning, gst::MessageType::Error],
        ) else {
            break;
        };
        match msg.view() {
            gst::MessageView::Warning(w) if msg.src().is_some_and(|s| s.name() == element) => {
                return Some(w.error().to_string())
            }
            gst::MessageView::Error(e) => panic!("{} ({:?})", e.error(), e.debug()),
            _ => {}
        }
    }
    None
}

fn stat(el: &gst::Element, name: &str) -> u64 {
    el.property::<gst::Structure>("stats")
        .get::<u64>(name)
        .unwrap()
}

/// `appsrc ! <depay> ! appsink` where the appsink keeps every sample (nobody pulls):
/// the depacketizer's chunk pool runs dry.
fn held_downstream(depay: &str) {
    init();
    let pipeline = firehose_testkit::run::launch(&format!(
        "appsrc name=src format=time caps=application/x-firehose-packets ! {depay} name=d \
         max-chunks=2 memory=system ! appsink name=app sync=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let src = pipeline.by_name("src").unwrap();
    for p in spead_packets(40) {
        let r = src.emit_by_name::<gst::FlowReturn>("push-buffer", &[&batch(&p)]);
        assert_eq!(r, gst::FlowReturn::Ok);
    }
    let warning = warning_from(&pipeline, "d", Duration::from_secs(10)).unwrap_or_else(|| {
        let d = pipeline.by_name("d").unwrap();
        panic!(
            "{depay}: no warning; {}",
            d.property::<gst::Structure>("stats")
        )
    });
    let d = pipeline.by_name("d").unwrap();
    let (drops, exhausted) = (stat(&d, "drops-pool"), stat(&d, "pool-exhausted"));
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(
        warning.contains("the chunk pool ran dry")
            && warning.contains("pool-size")
            && warning.contains("leaky"),
        "{depay}: {warning}"
    );
    assert!(drops > 0, "{depay}: drops-pool");
    assert!(exhausted > 0, "{depay}: pool-exhausted");
    let s = d.property::<gst::Structure>("stats");
    assert_eq!(
        s.get::<u64>("out-of-order-dropped").unwrap_or(0),
        0,
        "{depay}: counted as a pool drop, not out of order"
    );
}

#[test]
fn fhdepay_says_its_pool_ran_dry() {
    // Fed by a non-live appsrc, fhdepay would wait for a chunk (when-full=auto).
    held_downstream("fhdepay handler=spead heaps-per-chunk=1 heap-size=256 when-full=drop");
}

#[test]
fn speaddepay_chunks_says_its_pool_ran_dry() {
    // speaddepay has no when-full: its chunk pool always drops when dry.
    held_downstream("speaddepay mode=chunks heaps-per-chunk=1 heap-size=256");
}

#[test]
fn fhudpchunksrc_says_its_pool_ran_dry() {
    init();
    let pipeline = firehose_testkit::run::launch(
        "fhudpchunksrc name=d address=127.0.0.1 port=0 handler=spead heaps-per-chunk=1 \
         heap-size=256 max-chunks=2 memory=system when-full=drop ! appsink name=app sync=false",
    );
    pipeline.set_state(gst::State::Playing).unwrap();
    let d = pipeline.by_name("d").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        let p = d.property::<i32>("port");
        if p > 0 {
            break p as u16;
        }
        assert!(Instant::now() < deadline, "fhudpchunksrc did not bind");
        std::thread::sleep(Duration::from_millis(10));
    };
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for p in spead_packets(40) {
        tx.send_to(&p, ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let warning = warning_from(&pipeline, "d", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no warning; {}", d.property::<gst::Structure>("stats")));
    let (drops, exhausted) = (stat(&d, "drops-pool"), stat(&d, "pool-exhausted"));
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(
        warning.contains("the chunk pool ran dry") && warning.contains("pool-size"),
        "{warning}"
    );
    assert!(
        drops > 0 && exhausted > 0,
        "drops-pool {drops}, pool-exhausted {exhausted}"
    );
}
