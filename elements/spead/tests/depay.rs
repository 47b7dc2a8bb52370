//! `speaddepay` in a harness: hand-made packets in batches (packet-batch meta), as
//! single buffers and as buffer lists; heaps out with their meta.

// Lists of one range are received ranges here, not misspelt ranges of values.
#![allow(clippy::single_range_in_vec_init)]

use firehose_core::gstmem::buffer_memory_kind;
use firehose_core::meta::message;
use firehose_core::stats::{field, names};
use firehose_core::MemoryKind;
use firehose_spead::heap::{HeapMeta, ItemValue};
use firehose_spead::wire;
use firehose_spead::wire::{ctrl, ids, Flavour};
use gst::prelude::*;
use gst_check::Harness;

mod common;
use common::{batch, bytes_descriptor, error_text, launch, pull_all, stats, warnings};
#[path = "common/spead.rs"]
mod spead;
use spead::*;

const F40: Flavour = Flavour::SPEAD_64_40;
const F48: Flavour = Flavour::SPEAD_64_48;

fn init() {
    firehose_core::testing::register_elements(&[(
        "speaddepay",
        firehose_spead::depay::SpeadDepay::static_type(),
    )]);
}

/// A harness around `speaddepay` with `props` (small heaps, normal pages), playing.
fn harness(props: &[(&str, &str)], batches: bool) -> Harness {
    harness_proposing(props, batches, None)
}

/// [`harness`], whose sink pad proposes memory from `provider` when given (as
/// fhshmsink and fhcudaupload do).
fn harness_proposing(
    props: &[(&str, &str)],
    batches: bool,
    provider: Option<std::sync::Arc<dyn firehose_core::provider::MemoryProvider>>,
) -> Harness {
    init();
    let caps = if batches {
        firehose_core::caps::packets_caps()
    } else {
        gst::Caps::new_empty_simple("application/octet-stream")
    };
    let mut all = vec![("max-heap-size", "1048576")];
    all.extend_from_slice(props);
    common::harness("speaddepay", &all, caps, provider)
}

fn single(packet: &[u8], pts_ms: u64) -> gst::Buffer {
    let mut buf = gst::Buffer::from_slice(packet.to_vec());
    buf.get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_mseconds(pts_ms));
    buf
}

fn items(seed: u64, n: usize) -> Vec<(u64, Val)> {
    vec![
        (0x1600, Val::Imm(seed)),
        (0x1000, Val::Bytes(pattern(seed, n))),
        (0x1001, Val::Bytes(pattern(seed + 1, 33))),
    ]
}

/// The item's bytes in a heap buffer.
fn item(buf: &gst::Buffer, id: u64) -> Vec<u8> {
    let meta = buf.meta::<HeapMeta>().expect("heap meta");
    let map = buf.map_readable().unwrap();
    match meta.info().item(id) {
        Some(ItemValue::Bytes(r)) => map[r.clone()].to_vec(),
        other => panic!("item {id:#x}: {other:?}"),
    }
}

fn check_heap(buf: &gst::Buffer, cnt: u64, n: usize) {
    let meta = buf.meta::<HeapMeta>().expect("heap meta");
    let info = meta.info();
    assert_eq!(info.heap_cnt, cnt);
    assert!(info.complete);
    assert_eq!(info.item(0x1600), Some(&ItemValue::Immediate(cnt)));
    assert_eq!(item(buf, 0x1000), pattern(cnt, n));
    assert_eq!(item(buf, 0x1001), pattern(cnt + 1, 33));
    assert_eq!(buf.size(), n + 33);
    // The generic message meta, readable from C and Python, says the same.
    let m = message::read(buf).expect("message meta");
    assert_eq!((m.id, m.complete), (cnt, true));
    assert_eq!(m.bytes_expected, (n + 33) as u64);
    assert_eq!(m.bytes_received, (n + 33) as u64);
}

#[test]
fn batches_of_multi_packet_heaps_in_both_flavours() {
    for f in [F40, F48] {
        let mut h = harness(&[], true);
        let mut packets = Vec::new();
        for cnt in 1..=6u64 {
            packets.extend(heap_packets(
                f,
                cnt,
                &items(cnt, 4000 + 100 * cnt as usize),
                1400,
            ));
        }
        // Batches of 7 packets cut across heap boundaries.
        for (k, chunk) in packets.chunks(7).enumerate() {
            assert_eq!(
                h.push(batch(chunk, 10 * k as u64)),
                Ok(gst::FlowSuccess::Ok)
            );
        }
        let heaps = pull_all(&mut h);
        assert_eq!(heaps.len(), 6, "{f}");
        let mut first_packet = 0;
        for (buf, cnt) in heaps.iter().zip(1u64..) {
            check_heap(buf, cnt, 4000 + 100 * cnt as usize);
            assert_eq!(buf.meta::<HeapMeta>().unwrap().info().flavour, f);
            // PTS: the batch holding the heap's first packet.
            assert_eq!(
                buf.pts(),
                Some(gst::ClockTime::from_mseconds(
                    10 * (first_packet / 7) as u64
                ))
            );
            first_packet += (4000 + 100 * cnt as usize + 33).div_ceil(1400);
            assert_eq!(
                buffer_memory_kind(buf),
                Some(MemoryKind::System),
                "pool memory"
            );
        }
        let caps = h.sinkpad().unwrap().current_caps().unwrap();
        assert_eq!(
            caps.structure(0).unwrap().name(),
            "application/x-spead-heap"
        );
        let s = stats(&h);
        assert_eq!(field(&s, names::PACKETS), packets.len() as u64);
        assert_eq!(field(&s, names::HEAPS), 6);
        assert_eq!(field(&s, names::MALFORMED), 0);
    }
}

#[test]
fn heaps_are_cut_from_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    let shared = std::sync::Arc::new(SharedSegment::new("speaddepay-test"));
    let mut h = harness_proposing(&[], true, Some(shared));
    // Multi-packet heaps (a slot of a size class each) and single-packet ones (the
    // arena): both from the proposed memory.
    let mut packets = Vec::new();
    for cnt in 1..=4u64 {
        let n = if cnt % 2 == 0 { 100 } else { 4000 };
        packets.extend(heap_packets(F48, cnt, &items(cnt, n), 1400));
    }
    h.push(batch(&packets, 0)).unwrap();
    let heaps = pull_all(&mut h);
    assert_eq!(heaps.len(), 4);
    for (buf, cnt) in heaps.iter().zip(1u64..) {
        check_heap(buf, cnt, if cnt % 2 == 0 { 100 } else { 4000 });
        assert_eq!(
            buffer_memory_kind(buf),
            Some(MemoryKind::Shared),
            "heap {cnt}"
        );
    }
    assert_eq!(stats(&h).get::<String>("memory").unwrap(), "shared");
}

#[test]
fn a_16_mib_heap_with_descriptors_passes_at_the_defaults() {
    init();
    let mut h = common::harness(
        "speaddepay",
        &[("max-heaps", "1")],
        firehose_core::caps::packets_caps(),
        None,
    );
    let desc = bytes_descriptor("data", "16 MiB of samples", 16 << 20);
    let data = pattern(1, 16 << 20);
    let items = vec![
        (
            wire::ids::DESCRIPTOR,
            Val::Bytes(firehose_spead::descriptor::encode(&desc, F48)),
        ),
        (0x1000, Val::Bytes(data.clone())),
    ];
    for chunk in heap_packets(F48, 1, &items, 8972).chunks(64) {
        h.push(batch(chunk, 0)).unwrap();
    }
    let heaps = pull_all(&mut h);
    assert_eq!(heaps.len(), 1, "{}", stats(&h));
    assert!(item(&heaps[0], 0x1000) == data);
    assert_eq!(
        heaps[0]
            .meta::<HeapMeta>()
            .unwrap()
            .info()
            .descriptors
            .len(),
        1
    );
    assert_eq!(field(&stats(&h), names::TOO_LARGE), 0);
}

#[test]
fn the_first_heap_refused_for_size_is_said_on_the_bus() {
    let mut h = harness(&[], true);
    let bus = gst::Bus::new();
    h.element().unwrap().set_bus(Some(&bus));
    let big = heap_packets(F48, 1, &[(0x1000, Val::Bytes(pattern(1, 2 << 20)))], 8972);
    h.push(batch(&big, 0)).unwrap();
    h.push(batch(&big, 0)).unwrap();
    assert!(field(&stats(&h), names::TOO_LARGE) > 0);
    let warnings = warnings(&bus);
    assert_eq!(warnings.len(), 1, "once: {warnings:?}");
    assert!(
        warnings[0].contains("max-heap-size (1048576 bytes)"),
        "{warnings:?}"
    );
}

#[test]
fn a_slow_application_shows_as_drops_pool_and_a_warning() {
    // A pool of 2 heaps per class; the harness holds every heap pushed (an application
    // that never gives its samples back).
    let mut h = harness(&[("pool-size", "1"), ("max-heaps", "1")], true);
    let bus = gst::Bus::new();
    h.element().unwrap().set_bus(Some(&bus));
    for cnt in 1..=12u64 {
        let packets = heap_packets(
            F48,
            cnt,
            &[(0x1000, Val::Bytes(pattern(cnt, 40_000)))],
            1400,
        );
        h.push(batch(&packets, 0)).unwrap();
    }
    let st = stats(&h);
    assert!(field(&st, names::DROPS_POOL) > 0, "{st}");
    assert_eq!(
        field(&st, names::OUT_OF_ORDER_DROPPED),
        0,
        "the pool's loss, not disorder: {st}"
    );
    let warnings = warnings(&bus);
    assert_eq!(warnings.len(), 1, "rate-limited: {warnings:?}");
    assert!(
        warnings[0].contains("ran dry") && warnings[0].contains("pool-size"),
        "{warnings:?}"
    );
    // What was delivered is intact.
    let heaps = pull_all(&mut h);
    assert!(!heaps.is_empty());
    for buf in &heaps {
        let cnt = buf.meta::<HeapMeta>().unwrap().info().heap_cnt;
        assert!(item(buf, 0x1000) == pattern(cnt, 40_000));
    }
}

#[test]
fn single_buffers_and_buffer_lists() {
    let mut h = harness(&[], false);
    let a = heap_packets(F48, 1, &items(1, 3000), 1000);
    for (k, p) in a.iter().enumerate() {
        h.push(single(p, 100 + k as u64)).unwrap();
    }
    let b = heap_packets(F48, 2, &items(2, 3000), 1000);
    let mut list = gst::BufferList::new();
    for (k, p) in b.iter().enumerate() {
        list.get_mut().unwrap().add(single(p, 200 + k as u64));
    }
    h.srcpad().unwrap().push_list(list).unwrap();
    let heaps = pull_all(&mut h);
    assert_eq!(heaps.len(), 2);
    check_heap(&heaps[0], 1, 3000);
    check_heap(&heaps[1], 2, 3000);
    assert_eq!(heaps[0].pts(), Some(gst::ClockTime::from_mseconds(100)));
    assert_eq!(heaps[1].pts(), Some(gst::ClockTime::from_mseconds(200)));
}

#[test]
fn descriptors_reach_the_meta() {
    let mut h = harness(&[], true);
    let d = bytes_descriptor("samples", "raw samples", 4000);
    let mut heap = items(1, 4000);
    heap.push((
        ids::DESCRIPTOR,
        Val::Bytes(firehose_spead::descriptor::encode(&d, F40)),
    ));
    let packets = heap_packets(F40, 1, &heap, 1400);
    h.push(batch(&packets, 0)).unwrap();
    let buf = h.pull().unwrap();
    check_heap_prefix(&buf);
    let meta = buf.meta::<HeapMeta>().unwrap();
    assert_eq!(meta.info().descriptors.to_vec(), [d]);
    assert_eq!(field(&stats(&h), "descriptors"), 1);
}

#[test]
fn a_heap_of_descriptors_only_is_counted_not_pushed_unless_asked() {
    let d = firehose_spead::descriptor::Descriptor {
        id: 0x1000,
        name: "samples".into(),
        ..Default::default()
    };
    let desc = [(
        ids::DESCRIPTOR,
        Val::Bytes(firehose_spead::descriptor::encode(&d, F40)),
    )];
    for deliver in [false, true] {
        let value = deliver.to_string();
        let mut h = harness(&[("deliver-descriptor-heaps", value.as_str())], true);
        let mut packets = heap_packets(F40, 1, &desc, 1400);
        packets.extend(heap_packets(F40, 2, &items(2, 4000), 1400));
        h.push(batch(&packets, 0)).unwrap();
        let out = pull_all(&mut h);
        let cnts: Vec<u64> = out
            .iter()
            .map(|b| b.meta::<HeapMeta>().unwrap().info().heap_cnt)
            .collect();
        let s = stats(&h);
        if deliver {
            assert_eq!(cnts, [1, 2]);
            assert_eq!(field(&s, "descriptor-heaps"), 0);
        } else {
            assert_eq!(cnts, [2], "the descriptor heap is not pushed");
            assert_eq!(field(&s, "descriptor-heaps"), 1);
        }
        // Either way the data heap carries the descriptor.
        let last = out.last().unwrap().meta::<HeapMeta>().unwrap();
        assert_eq!(last.info().descriptors.to_vec(), std::slice::from_ref(&d));
        assert_eq!(field(&s, names::HEAPS), 1 + u64::from(deliver));
    }
}

fn check_heap_prefix(buf: &gst::Buffer) {
    assert_eq!(item(buf, 0x1000), pattern(1, 4000));
}

#[test]
fn stop_heap_becomes_eos() {
    let mut h = harness(&[("incomplete", "deliver")], true);
    let mut packets = heap_packets(F40, 1, &items(1, 3000), 1000);
    let partial = heap_packets(F40, 2, &items(2, 3000), 1000);
    packets.push(partial[0].clone());
    packets.push(stop_packet(F40, 3));
    packets.extend(heap_packets(F40, 4, &items(4, 10), 1000));
    assert_eq!(h.push(batch(&packets, 0)), Err(gst::FlowError::Eos));
    let heaps = pull_all(&mut h);
    let cnts: Vec<(u64, bool)> = heaps
        .iter()
        .map(|b| {
            let i = b.meta::<HeapMeta>().unwrap();
            (i.info().heap_cnt, i.info().complete)
        })
        .collect();
    // Heap 2 flushed incomplete by the stop; nothing after the stop.
    assert_eq!(cnts, vec![(1, true), (2, false)]);
    loop {
        let ev = h.pull_event().unwrap();
        if ev.type_() == gst::EventType::Eos {
            break;
        }
    }
    assert_eq!(h.push(batch(&packets[..1], 1)), Err(gst::FlowError::Eos));
    // Upstream's own EOS is not sent a second time.
    assert!(h.push_event(gst::event::Eos::new()));
    assert!(h.try_pull_event().is_none());
}

#[test]
fn stop_heap_is_pushed_when_stop_is_not_eos() {
    let mut h = harness(&[("stop-is-eos", "false")], false);
    h.push(single(&stop_packet(F48, 9), 5)).unwrap();
    for p in heap_packets(F48, 10, &items(10, 100), 1000) {
        h.push(single(&p, 6)).unwrap();
    }
    let heaps = pull_all(&mut h);
    assert_eq!(heaps.len(), 2);
    let stop = heaps[0].meta::<HeapMeta>().unwrap();
    assert_eq!(stop.info().stream_ctrl, Some(ctrl::STOP));
    check_heap(&heaps[1], 10, 100);
}

#[test]
fn eos_flushes_heaps_under_construction() {
    for deliver in [false, true] {
        let policy = if deliver { "deliver" } else { "drop" };
        let mut h = harness(&[("incomplete", policy)], true);
        let packets = heap_packets(F40, 1, &items(1, 3000), 1000);
        h.push(batch(&packets[..2], 0)).unwrap();
        assert!(h.try_pull().is_none());
        h.push_event(gst::event::Eos::new());
        let heaps = pull_all(&mut h);
        if deliver {
            assert_eq!(heaps.len(), 1);
            let m = heaps[0].meta::<HeapMeta>().unwrap();
            assert!(!m.info().complete);
            assert_eq!(m.info().received, vec![0..2000]);
        } else {
            assert!(heaps.is_empty());
        }
        assert_eq!(field(&stats(&h), names::HEAPS_INCOMPLETE), 1);
    }
}

#[test]
fn flush_discards_heaps_under_construction() {
    let mut h = harness(&[], true);
    let packets = heap_packets(F40, 1, &items(1, 3000), 1000);
    h.push(batch(&packets[..2], 0)).unwrap();
    h.push_event(gst::event::FlushStart::new());
    h.push_event(gst::event::FlushStop::new(true));
    h.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
        gst::ClockTime,
    >::new()));
    h.push(batch(&packets[2..], 1)).unwrap();
    assert!(h.try_pull().is_none());
    let s = stats(&h);
    assert_eq!(field(&s, names::HEAPS_INCOMPLETE), 1);
    assert_eq!(field(&s, names::OUT_OF_ORDER_DROPPED), 2);
    // The whole heap again comes through.
    h.push(batch(&packets, 2)).unwrap();
    check_heap(&h.pull().unwrap(), 1, 3000);
}

#[test]
fn bad_input_is_counted_and_the_stream_continues() {
    let mut h = harness(&[("max-heap-size", "65536")], true);
    let mut stream: Vec<Vec<u8>> = Vec::new();
    let good = |cnt| heap_packets(F40, cnt, &items(cnt, 2000), 700);
    let g = good(1);
    let mut bad = Vec::new();
    let mut b = g[0].clone();
    b[0] = 0;
    bad.push(b);
    bad.push(g[0][..7].to_vec());
    let mut b = g[0].clone();
    b[6] = 0x40;
    bad.push(b);
    bad.push(packet(F40, 50, Some(1 << 30), 0, &[1; 8], &[]));
    let d = good(51);
    bad.push(d[0].clone());
    bad.push(d[0].clone()); // a duplicate
    let mut b = g[0].clone();
    b.truncate(b.len() - 1);
    bad.push(b);
    for (k, b) in bad.iter().enumerate() {
        let gp = good(k as u64 + 1);
        stream.push(gp[0].clone());
        stream.push(b.clone());
        stream.extend(gp[1..].iter().cloned());
    }
    for (k, chunk) in stream.chunks(5).enumerate() {
        h.push(batch(chunk, k as u64)).unwrap();
    }
    let heaps = pull_all(&mut h);
    assert_eq!(heaps.len(), bad.len());
    for (buf, cnt) in heaps.iter().zip(1u64..) {
        check_heap(buf, cnt, 2000);
    }
    let s = stats(&h);
    assert_eq!(field(&s, names::MALFORMED), 4);
    assert_eq!(field(&s, names::TOO_LARGE), 1);
    assert_eq!(field(&s, names::DUPLICATED), 1);
    // Heap 51 never got its other packets: still under construction.
    assert_eq!(field(&s, names::HEAPS_INCOMPLETE), 0);
}

/// spead2's own packets (see tests/data) through the element: every heap and the stop.
#[test]
fn spead2_stream_through_the_element() {
    for name in FIXTURES {
        let mut h = harness(&[], true);
        let packets = split(&fixture(name));
        let res = h.push(batch(&packets, 0));
        assert_eq!(
            res,
            Err(gst::FlowError::Eos),
            "{name}: the stop heap ends it"
        );
        let heaps = pull_all(&mut h);
        assert_eq!(heaps.len(), 2, "{name}");
        let expect = fixture_expect(name);
        for buf in &heaps {
            let meta = buf.meta::<HeapMeta>().unwrap();
            let info = meta.info();
            let map = buf.map_readable().unwrap();
            for it in info.items.iter().filter(|i| i.id >= 0x1000) {
                let line = match &it.value {
                    ItemValue::Immediate(v) => {
                        format!("heap {} item {} imm {v}", info.heap_cnt, it.id)
                    }
                    ItemValue::Bytes(r) => format!(
                        "heap {} item {} bytes {}",
                        info.heap_cnt,
                        it.id,
                        hex(&map[r.clone()])
                    ),
                };
                assert!(expect.contains(&line), "{name}: {line}");
            }
            assert_eq!(info.descriptors.len(), 5);
        }
    }
}

/// `hugepages=require`: payload memory in hugepages, or a start-up error that says how
/// to reserve them (which one depends on the machine, and both are checked).
#[test]
fn hugepages_are_required_or_start_fails_clearly() {
    init();
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .map_or(0, |v| v.trim().parse::<u64>().unwrap());
    let pipeline = launch(
        "fakesrc num-buffers=0 ! speaddepay name=d hugepages=require \
         max-heap-size=65536 pool-size=1 ! fakesink",
    );
    let res = pipeline.set_state(gst::State::Paused);
    let bus = pipeline.bus().unwrap();
    // Three pools (16 KiB, 64 KiB, arena) of at most 2 hugepages each.
    if free >= 6 {
        assert!(res.is_ok());
        let d = pipeline.by_name("d").unwrap();
        let s = d.property::<gst::Structure>("stats");
        assert_eq!(s.get::<&str>("memory").unwrap(), "hugepage");
    } else {
        assert!(res.is_err(), "no hugepages reserved: start must fail");
        let text = error_text(&bus);
        assert!(text.contains("nr_hugepages"), "{text}");
    }
    pipeline.set_state(gst::State::Null).unwrap();
}
