//! A SPEAD stream reassembles identically through `fhdpdksrc` (net_af_packet PMD on a
//! veth) and through `fhudpsrc` (kernel sockets on the same veth): the same packets,
//! built with firehose_spead's sender engine, go once to each, both into `speaddepay`,
//! and the heaps (meta and bytes) are compared.

mod common;

use std::net::SocketAddr;
use std::sync::{mpsc, MutexGuard};
use std::time::Duration;

use common::*;
use firehose_net::udpsrc::UdpSrc;
use firehose_spead::depay::SpeadDepay;
use firehose_spead::heap::{HeapInfo, HeapMeta};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::speadsrc::SpeadSrc;
use firehose_spead::wire::Flavour;
use firehose_testkit::netns::VethPair;
use firehose_testkit::run;
use gst::prelude::*;

const HEAPS: u64 = 30;

/// Heaps as they reached the sink: meta and bytes.
type Heaps = Vec<(HeapInfo, Vec<u8>)>;
const ITEM: usize = 64 << 10;

fn item_bytes(cnt: u64) -> Vec<u8> {
    (0..ITEM)
        .map(|i| (cnt as usize * 131 + i * 7 + (i >> 9)) as u8)
        .collect()
}

/// The stream's packets: HEAPS heaps of an immediate and a 64 KiB item, then a stop heap.
fn stream() -> Vec<Vec<u8>> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1472).unwrap();
    let heap = |cnt, items: &[Item]| {
        let mut heap = cfg.heap(cnt, items).unwrap();
        let mut buf = vec![0u8; cfg.packet_size()];
        std::iter::from_fn(move || heap.write_next(&mut buf).map(|n| buf[..n].to_vec()))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for cnt in 1..=HEAPS {
        let data = item_bytes(cnt);
        out.extend(heap(
            cnt,
            &[Item::immediate(0x1600, cnt), Item::bytes(0x1000, &data)],
        ));
    }
    out.extend(heap(HEAPS + 1, &[Item::stop()]));
    out
}

/// Runs `src ! speaddepay ! fakesink`, sends the stream to `dst`, and returns the heaps
/// once the stop heap has ended the stream.
fn heaps_through(src: gst::Element, pair: &VethPair, dst: SocketAddr) -> Heaps {
    let depay = gst::ElementFactory::make("speaddepay")
        .property("max-heap-size", 1u64 << 20)
        .property_from_str("hugepages", "off")
        .build()
        .unwrap();
    let (heaps, stats) = pushed_heaps(&[src, depay], pair, dst);
    assert_eq!(heaps.len() as u64, HEAPS, "depay stats {stats}");
    heaps
}

/// Runs `chain ! fakesink` (the last element pushes heaps), sends the stream to `dst`,
/// and returns the heaps once the stop heap has ended the stream, with the last
/// element's stats.
fn pushed_heaps(
    chain: &[gst::Element],
    pair: &VethPair,
    dst: SocketAddr,
) -> (Heaps, gst::Structure) {
    let pipeline = gst::Pipeline::new();
    let sink = gst::ElementFactory::make("fakesink")
        .property("signal-handoffs", true)
        .property("sync", false)
        .build()
        .unwrap();
    let all: Vec<&gst::Element> = chain.iter().chain([&sink]).collect();
    pipeline.add_many(all.iter().copied()).unwrap();
    gst::Element::link_many(all.iter().copied()).unwrap();
    let (tx, rx) = mpsc::channel::<(HeapInfo, Vec<u8>)>();
    sink.connect("handoff", false, move |args| {
        let buf = args[1].get::<gst::Buffer>().unwrap();
        let info = buf.meta::<HeapMeta>().expect("heap meta").info().clone();
        let bytes = buf.map_readable().unwrap().to_vec();
        let _ = tx.send((info, bytes));
        None
    });
    pipeline.set_state(gst::State::Playing).unwrap();
    // Let the source reach PLAYING (ports up) before the first packet.
    let _ = pipeline.state(gst::ClockTime::from_seconds(5));
    let sender = send_packets(pair, dst, stream(), 20_000);
    run::wait_end(&pipeline.bus().unwrap(), Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("before the stop heap's EOS: {e}"));
    sender.join().unwrap();
    let stats = chain.last().unwrap().property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    (rx.try_iter().collect(), stats)
}

/// Registers the elements of both paths (besides fhdpdksrc), once.
fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    init();
    ONCE.call_once(|| {
        firehose_core::testing::register_elements(&[
            ("fhudpsrc", UdpSrc::static_type()),
            ("speaddepay", SpeadDepay::static_type()),
            ("fhspeadsrc", SpeadSrc::static_type()),
        ])
    });
}

/// What each test compares with: the test's turn ([`serial`]), the elements registered, a
/// fresh veth pair `tag`, and the heaps of the stream sent to `port` on its host end
/// through the kernel (`fhudpsrc ! speaddepay`).
fn kernel_reference(tag: &str, port: u16) -> (MutexGuard<'static, ()>, VethPair, Heaps) {
    let turn = serial();
    register();
    let pair = veth(tag);
    let udp = gst::ElementFactory::make("fhudpsrc")
        .property("address", pair.host_ip.to_string())
        .property("port", i32::from(port))
        .property_from_str("hugepages", "off")
        .build()
        .unwrap();
    let heaps = heaps_through(udp, &pair, (pair.host_ip, port).into());
    (turn, pair, heaps)
}

/// Checks that `other` holds the heaps that came through the kernel: the same meta and
/// bytes, heap for heap.
fn assert_same_heaps(kernel: &[(HeapInfo, Vec<u8>)], other: &[(HeapInfo, Vec<u8>)]) {
    assert_eq!(other.len(), kernel.len());
    for (cnt, (k, d)) in (1u64..).zip(kernel.iter().zip(other)) {
        assert_eq!(k.0, d.0, "heap {cnt} meta");
        assert!(k.1 == d.1, "heap {cnt} bytes differ");
    }
}

#[test]
fn spead_over_dpdk_reassembles_like_over_kernel_udp() {
    let (_turn, pair, via_kernel) = kernel_reference("sp", 7150);

    let dpdk = gst::ElementFactory::make("fhdpdksrc")
        .property("eal-args", af_packet_eal(&pair))
        .property("dpdk-port", "net_af_packet0")
        .property("port", 7151i32)
        .build()
        .unwrap();
    let via_dpdk = heaps_through(dpdk, &pair, (pair.host_ip, 7151).into());

    assert_same_heaps(&via_kernel, &via_dpdk);
    for (cnt, k) in (1u64..).zip(&via_kernel) {
        assert_eq!(k.0.heap_cnt, cnt);
        assert!(k.0.complete, "heap {cnt} complete via the kernel");
        match k.0.item(0x1000) {
            Some(firehose_spead::heap::ItemValue::Bytes(r)) => {
                assert!(k.1[r.clone()] == item_bytes(cnt)[..], "heap {cnt} payload")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The heap engine composed with DPDK in one element (`fhspeadsrc transport="fhdpdksrc
/// …"`): the reassembler takes each burst where the NIC wrote it in the mbufs. The heaps
/// are those of `fhudpsrc ! speaddepay`, every payload copied once, none landed.
#[test]
fn fhspeadsrc_over_dpdk_reassembles_like_over_kernel_udp() {
    let (_turn, pair, via_kernel) = kernel_reference("sc", 7152);
    let composed = gst::ElementFactory::make("fhspeadsrc")
        .property("max-heap-size", 1u64 << 20)
        .property_from_str("hugepages", "off")
        .property(
            "transport",
            format!(
                "fhdpdksrc eal-args=\"{}\" dpdk-port=net_af_packet0 port=7153",
                af_packet_eal(&pair)
            ),
        )
        .build()
        .unwrap();
    let (via_dpdk, stats) = pushed_heaps(&[composed], &pair, (pair.host_ip, 7153).into());
    let datagrams = stream().len() as u64;
    let field = |k| firehose_core::stats::field(&stats, k);
    assert_eq!(field("datagrams"), datagrams, "{stats}");
    assert_eq!(field("packets-copied"), datagrams, "{stats}");
    assert_eq!(field("packets-landed"), 0, "{stats}");
    assert_eq!(field("malformed"), 0, "{stats}");
    assert_eq!(via_dpdk.len() as u64, HEAPS, "{stats}");
    assert_same_heaps(&via_kernel, &via_dpdk);
}
