//! `fhudpsrc ! speaddepay` and `fhspeadsrc` in real pipelines over loopback, fed by a
//! Rust sender that splits heaps as spead2 does: heaps arrive intact in pool memory,
//! stats messages are posted, and the stop heap ends the pipeline with EOS.
//! `fhspeadsrc` receives large payloads straight into its heaps (`packets-landed`);
//! with `landing=off`, or payloads under 4 KiB, every payload is copied once.

use std::net::UdpSocket;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use firehose_core::gstmem::buffer_memory_kind;
use firehose_core::provider::{MemoryProvider, SharedSegment};
use firehose_core::stats::{field, is_stats_message, names};
use firehose_spead::heap::{HeapMeta, ItemValue};
use firehose_spead::wire;
use firehose_spead::wire::{ids, Flavour};
use gst::prelude::*;

mod common;
use common::{bytes_descriptor, launch, run_to_eos_seeing};
#[path = "common/spead.rs"]
mod spead;
use spead::*;

fn init() {
    firehose_core::testing::register_elements(&[
        ("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type()),
        (
            "speaddepay",
            firehose_spead::depay::SpeadDepay::static_type(),
        ),
        (
            "fhspeadsrc",
            firehose_spead::speadsrc::SpeadSrc::static_type(),
        ),
    ]);
}

const HEAPS: u64 = 20;
const ITEM: usize = 64 << 10;

/// The heap settings both receivers get.
const HEAP_SETTINGS: &str = "max-heap-size=1048576 hugepages=off stats-interval=50";

/// `fhudpsrc ! <middle> ! speaddepay`, the depay named `depay`.
fn udp_depay(middle: &str) -> String {
    format!("fhudpsrc name=src address=127.0.0.1 port=0 hugepages=off {middle} ! speaddepay name=depay {HEAP_SETTINGS}")
}

/// `fhspeadsrc <props>`, named both `src` (its port) and `depay` (its stats).
fn spead_src(props: &str) -> String {
    format!("fhspeadsrc name=depay address=127.0.0.1 port=0 {HEAP_SETTINGS} {props}")
}

/// Runs `<receiver> ! fakesink` over the stream (packets of `chunk` payload bytes);
/// checks every heap and the counts, and returns the stats of the element named `depay`.
fn run(receiver: &str, chunk: usize) -> gst::Structure {
    run_with_junk(receiver, chunk, &[], None)
}

/// [`run`], with the datagrams `junk` sent after every heap: none of them may cost the
/// stream a heap. With `provider`, the sink proposes its memory (as fhshmsink and
/// fhcudaupload do) and every heap must be in it.
fn run_with_junk(
    receiver: &str,
    chunk: usize,
    junk: &[Vec<u8>],
    provider: Option<Arc<dyn MemoryProvider>>,
) -> gst::Structure {
    init();
    let pipeline = launch(&format!(
        "{receiver} ! fakesink name=sink signal-handoffs=true sync=false"
    ));
    let (tx, rx) = mpsc::channel::<gst::Buffer>();
    let sink = pipeline.by_name("sink").unwrap();
    let want_kind = provider.as_ref().map(|p| p.kind());
    if let Some(p) = provider {
        firehose_core::alloc::propose_on(&sink.static_pad("sink").unwrap(), p);
    }
    sink.connect("handoff", false, move |args| {
        let _ = tx.send(args[1].get::<gst::Buffer>().unwrap());
        None
    });
    pipeline.set_state(gst::State::Playing).unwrap();
    let src = pipeline
        .by_name("src")
        .or_else(|| pipeline.by_name("depay"))
        .unwrap();
    let port = src.property::<i32>("port") as u16;
    assert_ne!(port, 0);

    let f = Flavour::SPEAD_64_48;
    let desc = bytes_descriptor("data", "payload", ITEM as u64);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0u64;
    for cnt in 1..=HEAPS {
        let mut items = vec![
            (0x1600, Val::Imm(cnt)),
            (0x1000, Val::Bytes(pattern(cnt, ITEM))),
        ];
        if cnt == 1 {
            let raw = firehose_spead::descriptor::encode(&desc, f);
            items.push((ids::DESCRIPTOR, Val::Bytes(raw)));
        }
        for p in heap_packets(f, cnt, &items, chunk) {
            sock.send_to(&p, ("127.0.0.1", port)).unwrap();
            sent += 1;
        }
        for j in junk {
            sock.send_to(j, ("127.0.0.1", port)).unwrap();
            sent += 1;
        }
        // Paced so the default socket buffer never overflows.
        std::thread::sleep(Duration::from_millis(2));
    }
    sock.send_to(&stop_packet(f, HEAPS + 1), ("127.0.0.1", port))
        .unwrap();
    sent += 1;

    let mut stats_messages = 0;
    run_to_eos_seeing(&pipeline, Duration::from_secs(30), |msg| {
        if is_stats_message(msg) && msg.src().is_some_and(|s| s.name() == "depay") {
            stats_messages += 1;
        }
    })
    .unwrap_or_else(|e| panic!("EOS from the stop heap within 30 s: {e}"));
    let depay = pipeline.by_name("depay").unwrap();
    let stats = depay.property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();

    let heaps: Vec<gst::Buffer> = rx.try_iter().collect();
    assert_eq!(heaps.len() as u64, HEAPS, "stats: {stats}");
    for (buf, cnt) in heaps.iter().zip(1u64..) {
        let meta = buf.meta::<HeapMeta>().expect("heap meta");
        let info = meta.info();
        assert_eq!(info.heap_cnt, cnt);
        assert!(info.complete);
        assert_eq!(info.item(0x1600), Some(&ItemValue::Immediate(cnt)));
        let map = buf.map_readable().unwrap();
        match info.item(0x1000) {
            Some(ItemValue::Bytes(r)) => assert!(map[r.clone()] == pattern(cnt, ITEM)[..]),
            other => panic!("{other:?}"),
        }
        assert_eq!(info.descriptors.to_vec(), std::slice::from_ref(&desc));
        assert!(buf.pts().is_some(), "PTS of the first packet's batch");
        let kind = buffer_memory_kind(buf);
        assert!(kind.is_some(), "pool memory");
        if want_kind.is_some() {
            assert_eq!(kind, want_kind, "heap {cnt} in the proposed memory");
        }
    }
    assert_eq!(field(&stats, names::PACKETS), sent);
    assert_eq!(field(&stats, names::HEAPS), HEAPS);
    // Nothing malformed or oversized but the junk (none in a clean stream).
    assert_eq!(
        field(&stats, names::MALFORMED) + field(&stats, names::TOO_LARGE),
        HEAPS * junk.len() as u64,
        "{stats}"
    );
    assert!(stats_messages > 0, "periodic stats messages");
    stats
}

#[test]
fn udp_source_to_depay_over_loopback() {
    // Every payload is copied once from fhudpsrc's batches, with or without a queue.
    for middle in ["", "! queue"] {
        let stats = run(&udp_depay(middle), 8192);
        assert_eq!(field(&stats, names::PACKETS_LANDED), 0, "{stats}");
    }
}

#[test]
fn spead_source_lands_large_payloads_in_their_heaps() {
    let stats = run(&spead_src(""), 8192);
    // The first receive cannot be predicted and a heap's first packet is copied while
    // the stream's first heaps teach the reassembler its shape; nearly all the rest
    // lands.
    let landed = field(&stats, names::PACKETS_LANDED);
    let copied = field(&stats, names::PACKETS_COPIED);
    assert_eq!(landed + copied, field(&stats, names::PACKETS), "{stats}");
    assert_eq!(
        field(&stats, names::DATAGRAMS),
        field(&stats, names::PACKETS),
        "{stats}"
    );
    assert!(landed * 10 >= copied * 7, "most payloads land: {stats}");
}

#[test]
fn spead_source_lands_payloads_in_the_memory_downstream_proposes() {
    let shared = Arc::new(SharedSegment::new("fhspeadsrc-test"));
    let stats = run_with_junk(&spead_src(""), 8192, &[], Some(shared));
    assert_eq!(stats.get::<String>("memory").unwrap(), "shared", "{stats}");
    assert!(field(&stats, names::PACKETS_LANDED) > 0, "{stats}");
}

/// Every payload was copied, none landed.
fn assert_all_copied(stats: &gst::Structure) {
    assert_eq!(field(stats, names::PACKETS_LANDED), 0, "{stats}");
    assert_eq!(
        field(stats, names::PACKETS_COPIED),
        field(stats, names::PACKETS),
        "{stats}"
    );
}

#[test]
fn spead_source_with_landing_off_copies_every_payload() {
    assert_all_copied(&run(&spead_src("landing=off"), 8192));
}

#[test]
fn spead_source_copies_small_payloads() {
    // Under 4 KiB of payload, landing costs more than it saves.
    assert_all_copied(&run(&spead_src(""), 1400));
}

#[test]
fn spead_source_counts_a_flood_of_lying_packets_and_keeps_every_heap() {
    let f = Flavour::SPEAD_64_48;
    let real = heap_packets(f, 7, &[(0x1000, Val::Bytes(pattern(7, 64)))], 8192).remove(0);
    let mut junk = Vec::new();
    for i in 0..50u64 {
        // Not SPEAD at all.
        junk.push(vec![0xa5u8; 64]);
        // Cut short inside the item pointers.
        junk.push(real[..12].to_vec());
        // A heap far larger than max-heap-size (1 MiB): bounded by the property.
        junk.push(packet(f, 1 << 40 | i, Some(1 << 40), 0, &[0u8; 64], &[]));
        // A payload offset far past its heap's length.
        junk.push(packet(f, 1 << 41 | i, Some(100), 1 << 30, &[0u8; 64], &[]));
    }
    let stats = run_with_junk(&spead_src(""), 8192, &junk, None);
    let bad = field(&stats, names::MALFORMED) + field(&stats, names::TOO_LARGE);
    assert_eq!(
        bad,
        HEAPS * junk.len() as u64,
        "every lying packet counted: {stats}"
    );
    // Most payloads still land in place between the lies.
    assert!(field(&stats, names::PACKETS_LANDED) > 0, "{stats}");
}
