//! A SPEAD stream reassembles identically through `fhdpdksrc` (net_af_packet PMD on a
//! veth) and through `fhudpsrc` (kernel sockets on the same veth): the same packets,
//! built with firehose_spead's sender engine, go once to each, both into `speaddepay`,
//! and the heaps (meta and bytes) are compared.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use firehose_spead::heap::{HeapInfo, HeapMeta};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use gst::prelude::*;

const HEAPS: u64 = 30;
const ITEM: usize = 64 << 10;

fn item_bytes(cnt: u64) -> Vec<u8> {
    (0..ITEM)
        .map(|i| (cnt as usize * 131 + i * 7 + (i >> 9)) as u8)
        .collect()
}

/// The stream's packets: HEAPS heaps of an immediate and a 64 KiB item, then a stop heap.
fn stream() -> Vec<Vec<u8>> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1472).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1472];
    for cnt in 1..=HEAPS + 1 {
        let data = item_bytes(cnt);
        let items = if cnt <= HEAPS {
            vec![Item::immediate(0x1600, cnt), Item::bytes(0x1000, &data)]
        } else {
            vec![Item::stop()]
        };
        let mut heap = cfg.heap(cnt, &items).unwrap();
        while let Some(n) = heap.write_next(&mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

/// Runs `src ! speaddepay ! fakesink`, sends the stream to `dst`, and returns the heaps
/// once the stop heap has ended the stream.
fn heaps_through(
    src: gst::Element,
    pair: &firehose_testkit::netns::VethPair,
    dst: SocketAddr,
) -> Vec<(HeapInfo, Vec<u8>)> {
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
    pair: &firehose_testkit::netns::VethPair,
    dst: SocketAddr,
) -> (Vec<(HeapInfo, Vec<u8>)>, gst::Structure) {
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
    let bus = pipeline.bus().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = bus
            .timed_pop(gst::ClockTime::from_mseconds(left.as_millis() as u64))
            .expect("EOS from the stop heap within 30 s");
        match msg.view() {
            gst::MessageView::Eos(_) => break,
            gst::MessageView::Error(e) => panic!("{} ({:?})", e.error(), e.debug()),
            _ => {}
        }
    }
    sender.join().unwrap();
    let stats = chain.last().unwrap().property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    (rx.try_iter().collect(), stats)
}

#[test]
fn spead_over_dpdk_reassembles_like_over_kernel_udp() {
    let _g = serial();
    init();
    firehose_core::testing::register_elements(&[
        ("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type()),
        (
            "speaddepay",
            firehose_spead::depay::SpeadDepay::static_type(),
        ),
    ]);
    let pair = veth("sp");

    let udp = gst::ElementFactory::make("fhudpsrc")
        .property("address", pair.host_ip.to_string())
        .property("port", 7150i32)
        .property_from_str("hugepages", "off")
        .build()
        .unwrap();
    let via_kernel = heaps_through(udp, &pair, (pair.host_ip, 7150).into());

    let dpdk = gst::ElementFactory::make("fhdpdksrc")
        .property(
            "eal-args",
            format!(
                "--no-huge --no-pci --vdev=net_af_packet0,iface={},framecnt=4096",
                pair.host_if
            ),
        )
        .property("dpdk-port", "net_af_packet0")
        .property("port", 7151i32)
        .build()
        .unwrap();
    let via_dpdk = heaps_through(dpdk, &pair, (pair.host_ip, 7151).into());

    for (cnt, (k, d)) in (1u64..).zip(via_kernel.iter().zip(&via_dpdk)) {
        assert_eq!(k.0.heap_cnt, cnt);
        assert!(k.0.complete, "heap {cnt} complete via the kernel");
        assert_eq!(k.0, d.0, "heap {cnt} meta");
        assert!(k.1 == d.1, "heap {cnt} bytes differ");
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
    let _g = serial();
    init();
    for (name, t) in [
        ("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type()),
        (
            "speaddepay",
            firehose_spead::depay::SpeadDepay::static_type(),
        ),
        (
            "fhspeadsrc",
            firehose_spead::speadsrc::SpeadSrc::static_type(),
        ),
    ] {
        gst::Element::register(None, name, gst::Rank::NONE, t).unwrap();
    }
    let pair = veth("sc");
    let udp = gst::ElementFactory::make("fhudpsrc")
        .property("address", pair.host_ip.to_string())
        .property("port", 7152i32)
        .property_from_str("hugepages", "off")
        .build()
        .unwrap();
    let via_kernel = heaps_through(udp, &pair, (pair.host_ip, 7152).into());
    let composed = gst::ElementFactory::make("fhspeadsrc")
        .property("max-heap-size", 1u64 << 20)
        .property_from_str("hugepages", "off")
        .property(
            "transport",
            format!(
                "fhdpdksrc eal-args=\"--no-huge --no-pci \
                 --vdev=net_af_packet0,iface={},framecnt=4096\" dpdk-port=net_af_packet0 \
                 port=7153",
                pair.host_if
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
    for (cnt, (k, d)) in (1u64..).zip(via_kernel.iter().zip(&via_dpdk)) {
        assert_eq!(k.0, d.0, "heap {cnt} meta");
        assert!(k.1 == d.1, "heap {cnt} bytes differ");
    }
}
