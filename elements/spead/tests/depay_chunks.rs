//! `speaddepay mode=chunks` in a harness: hand-made SPEAD streams placed into chunks by
//! HEAP_CNT and by a timestamp item, the presence bitmaps naming exactly the heaps (and
//! packets) that were left out of the input, the stop heap as EOS, and the very same
//! output as `fhdepay handler=spead` on the same input.

use std::sync::Once;

use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::stats::{field, names};
use firehose_spead::wire;
use firehose_spead::wire::{ids, Flavour, ItemPointer};
use gst::prelude::*;
use gst_check::Harness;

mod common;
use common::{batch, bytes_descriptor, error_text, pull_all, stats};
#[path = "common/spead.rs"]
mod spead;
use spead::*;

const F: Flavour = Flavour::SPEAD_64_48;
const TS: u64 = 0x1600;
/// Heap payload bytes, sent in packets of `PACKET` payload bytes.
const HEAP: usize = 48;
const PACKET: usize = 16;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        firehose_core::testing::register_elements(&[(
            "speaddepay",
            firehose_spead::depay::SpeadDepay::static_type(),
        )]);
        firehose_depay::depay::register(None).unwrap();
        // fhdepay finds handlers by name, as the plugin registers them.
        firehose_chunk::handler::register_handler(
            firehose_spead::chunk::NAME,
            firehose_spead::chunk::factory,
        );
    });
}

/// A harness around `factory` with `props`, normal pages, playing.
fn harness(factory: &str, props: &[(&str, &str)]) -> Harness {
    harness_proposing(factory, props, None)
}

/// [`harness`], whose sink pad proposes memory from `provider` when given (as
/// fhshmsink and fhcudaupload do).
fn harness_proposing(
    factory: &str,
    props: &[(&str, &str)],
    provider: Option<std::sync::Arc<dyn firehose_core::provider::MemoryProvider>>,
) -> Harness {
    init();
    common::harness(
        factory,
        props,
        firehose_core::caps::packets_caps(),
        provider,
    )
}

/// `speaddepay mode=chunks` with 4 heaps of 64 bytes per chunk, and `props`.
fn depay(props: &[(&str, &str)]) -> Harness {
    let mut all = vec![
        ("mode", "chunks"),
        ("heaps-per-chunk", "4"),
        ("heap-size", "64"),
        ("max-chunks", "2"),
    ];
    all.extend_from_slice(props);
    harness("speaddepay", &all)
}

/// Heap `cnt`: a timestamp immediate and `HEAP` payload bytes (a pattern of `seed`), in
/// packets of `PACKET` bytes.
fn heap(cnt: u64, ts: u64, seed: u64) -> Vec<Vec<u8>> {
    let items = [
        (TS, Val::Imm(ts)),
        (0x1000, Val::Bytes(pattern(seed, HEAP))),
    ];
    heap_packets(F, cnt, &items, PACKET)
}

/// A descriptor heap of its own, as `descriptors-separate` sends it.
fn descriptor_heap(cnt: u64) -> Vec<Vec<u8>> {
    let desc = bytes_descriptor("data", "payload", HEAP as u64);
    let raw = firehose_spead::descriptor::encode(&desc, F);
    heap_packets(F, cnt, &[(ids::DESCRIPTOR, Val::Bytes(raw))], 1024)
}

fn info(buf: &gst::Buffer) -> ChunkInfo {
    buf.meta::<ChunkMeta>().expect("chunk meta").info().clone()
}

fn slot(buf: &gst::Buffer, i: usize) -> Vec<u8> {
    let info = info(buf);
    let map = buf.map_readable().unwrap();
    map[info.slot_range(i)][..HEAP].to_vec()
}

fn stat(h: &Harness, name: &str) -> u64 {
    field(&stats(h), name)
}

/// True once the harness has seen EOS downstream.
fn saw_eos(h: &mut Harness) -> bool {
    std::iter::from_fn(|| h.try_pull_event()).any(|e| e.type_() == gst::EventType::Eos)
}

#[test]
fn heaps_placed_by_heap_cnt_with_the_missing_ones_absent() {
    let mut h = depay(&[("packet-presence-size", "16")]);
    let dropped = [2u64, 5, 6, 11];
    // Heap 9 loses its middle packet: absent, with packets 0 and 2 present.
    let mut packets = descriptor_heap(100);
    for cnt in (0..12).filter(|c| !dropped.contains(c)) {
        let mut p = heap(cnt, 0, cnt);
        if cnt == 9 {
            p.remove(1);
        }
        packets.extend(p);
    }
    // Two batches: PTS of the buffer that opened each chunk.
    let (a, b) = packets.split_at(packets.len() / 2);
    assert_eq!(h.push(batch(a, 10)), Ok(gst::FlowSuccess::Ok));
    assert_eq!(h.push(batch(b, 20)), Ok(gst::FlowSuccess::Ok));
    // The stop heap ends the stream: every open chunk out, then EOS.
    assert_eq!(
        h.push(batch(&[stop_packet(F, 200)], 30)),
        Err(gst::FlowError::Eos)
    );
    let chunks = pull_all(&mut h);
    assert!(saw_eos(&mut h), "EOS after the stop heap");
    assert_eq!(
        h.push(batch(&heap(12, 0, 12), 40)),
        Err(gst::FlowError::Eos),
        "input after the stop heap is refused"
    );

    let got: Vec<(u64, Vec<usize>)> = chunks
        .iter()
        .map(|c| (info(c).chunk_id, info(c).missing().collect()))
        .collect();
    assert_eq!(got, [(0, vec![2]), (1, vec![1, 2]), (2, vec![1, 3])]);
    for c in &chunks {
        let i = info(c);
        assert_eq!((i.slots, i.slot_size, i.packets_per_slot), (4, 64, 4));
        assert_eq!(c.size(), 4 * 64);
        for s in 0..4 {
            let cnt = i.chunk_id * 4 + s as u64;
            if i.is_present(s) {
                assert_eq!(slot(c, s), pattern(cnt, HEAP), "heap {cnt}");
                assert!((0..3).all(|k| i.is_packet_present(s, k)), "heap {cnt}");
                assert!(
                    !i.is_packet_present(s, 3),
                    "heap {cnt}: 48 bytes, 3 packets"
                );
            }
        }
    }
    let c2 = info(&chunks[2]);
    assert_eq!(
        (0..4)
            .map(|k| c2.is_packet_present(1, k))
            .collect::<Vec<_>>(),
        [true, false, true, false],
        "heap 9 without its middle packet"
    );
    assert!(!c2.is_packet_present(3, 0), "heap 11 never came");
    assert_eq!(chunks[0].pts(), Some(gst::ClockTime::from_mseconds(10)));
    assert_eq!(chunks[2].pts(), Some(gst::ClockTime::from_mseconds(20)));
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(caps, firehose_core::caps::chunk_caps(4, 64));
    // Stats from the engine.
    assert_eq!(stat(&h, names::CHUNKS), 3);
    assert_eq!(stat(&h, names::CHUNKS_INCOMPLETE), 3);
    assert_eq!(stat(&h, names::HEAPS), 7);
    assert_eq!(stat(&h, names::HEAPS_INCOMPLETE), 1);
    // The descriptor heap and the stop heap (one packet each), and the packet refused
    // after the end.
    assert_eq!(stat(&h, names::DROPS_HANDLER), 2);
    assert_eq!(stat(&h, names::PACKETS), 7 * 3 + 2);
    assert_eq!(stat(&h, names::MALFORMED), 0);
}

#[test]
fn heaps_placed_by_a_timestamp_item() {
    let mut h = depay(&[
        ("place-item", "0x1600"),
        ("place-step", "2048"),
        ("place-offset", "4096"),
    ]);
    // Heap counters unrelated to the placement; n = 3 and 6 never sent; one heap off the
    // timestamp grid and one before the offset are dropped by the handler.
    let mut packets = Vec::new();
    let mut cnt = 1001;
    for n in [0u64, 1, 2, 4, 5, 7] {
        packets.extend(heap(cnt, 4096 + 2048 * n, n));
        cnt += 2;
    }
    packets.extend(heap(cnt, 4096 + 2048 * 8 + 1, 99));
    packets.extend(heap(cnt + 2, 2048, 98));
    h.push(batch(&packets, 5)).unwrap();
    assert!(h.push_event(gst::event::Eos::new()));
    let chunks = pull_all(&mut h);
    let got: Vec<(u64, Vec<usize>)> = chunks
        .iter()
        .map(|c| (info(c).chunk_id, info(c).missing().collect()))
        .collect();
    assert_eq!(got, [(0, vec![3]), (1, vec![2])]);
    for c in &chunks {
        let i = info(c);
        for s in (0..4).filter(|&s| i.is_present(s)) {
            let n = i.chunk_id * 4 + s as u64;
            assert_eq!(slot(c, s), pattern(n, HEAP), "heap n={n}");
        }
    }
    assert!(saw_eos(&mut h));
    assert_eq!(stat(&h, names::HEAPS), 6);
    assert_eq!(
        stat(&h, names::DROPS_HANDLER),
        6,
        "two heaps of three packets"
    );
}

#[test]
fn without_stop_is_eos_the_stream_goes_on() {
    let mut h = depay(&[("stop-is-eos", "false")]);
    let mut packets = heap(0, 0, 0);
    packets.push(stop_packet(F, 1));
    packets.extend(heap(5, 0, 5));
    assert_eq!(h.push(batch(&packets, 1)), Ok(gst::FlowSuccess::Ok));
    assert!(h.push_event(gst::event::Eos::new()));
    let chunks = pull_all(&mut h);
    let ids: Vec<u64> = chunks.iter().map(|c| info(c).chunk_id).collect();
    assert_eq!(ids, [0, 1], "chunk 0 at the stop heap, chunk 1 at EOS");
    assert_eq!(slot(&chunks[1], 1), pattern(5, HEAP));
}

#[test]
fn a_pool_too_small_for_the_window_is_an_error_at_start() {
    init();
    let e = gst::ElementFactory::make("speaddepay")
        .property_from_str("mode", "chunks")
        .property_from_str("hugepages", "off")
        .property("heaps-per-chunk", 4u32)
        .property("heap-size", 64u32)
        .property("max-chunks", 2u32)
        .property("pool-size", 2u64 * 256)
        .build()
        .unwrap();
    let pipeline = gst::Pipeline::new();
    pipeline.add(&e).unwrap();
    assert!(pipeline.set_state(gst::State::Paused).is_err());
    let text = error_text(&pipeline.bus().unwrap());
    assert!(text.contains("max-chunks (2)"), "{text}");
    pipeline.set_state(gst::State::Null).unwrap();
}

/// A shuffled, lossy stream with timestamps, descriptors, spilled heaps and junk.
fn messy_stream() -> Vec<gst::Buffer> {
    init();
    let mut packets = descriptor_heap(1);
    for cnt in 2..40u64 {
        if cnt % 7 == 3 {
            continue;
        }
        let mut p = heap(cnt, 0, cnt);
        if cnt % 5 == 0 {
            p.reverse();
        }
        if cnt % 11 == 0 {
            p.remove(0);
        }
        if cnt % 13 == 0 {
            p.push(p[1].clone());
        }
        packets.extend(p);
    }
    // Too old once the window has moved on, then junk, then a packet off the heap.
    packets.extend(heap(2, 0, 2));
    packets.push(b"not spead".to_vec());
    packets.push(spead::packet(
        F,
        41,
        Some(HEAP as u64),
        HEAP as u64,
        &[1; 16],
        &[ItemPointer::immediate(F, TS, 0)],
    ));
    packets.push(stop_packet(F, 50));
    packets
        .chunks(9)
        .enumerate()
        .map(|(i, c)| batch(c, i as u64))
        .collect()
}

/// Runs `input` through `h`; the chunks are copied out as they come, so their pool
/// memory goes back (the harness would otherwise hold every pool chunk).
fn run(h: &mut Harness, input: &[gst::Buffer]) -> Vec<gst::Buffer> {
    let mut out = Vec::new();
    let mut copy = |h: &mut Harness| {
        for b in pull_all(h) {
            out.push(b.copy_deep().unwrap());
        }
    };
    for b in input {
        let res = h.push(b.clone());
        copy(h);
        if res.is_err() {
            break;
        }
    }
    h.push_event(gst::event::Eos::new());
    copy(h);
    out
}

#[test]
fn chunks_are_cut_from_the_memory_downstream_proposes() {
    use firehose_core::gstmem::buffer_memory_kind;
    use firehose_core::provider::SharedSegment;
    use firehose_core::MemoryKind;
    // One vocabulary: the chunk geometry has the same names on both elements.
    let fhdepay = [
        ("handler", "spead"),
        ("heaps-per-chunk", "4"),
        ("heap-size", "64"),
        ("packet-presence-size", "16"),
    ];
    let chunks = [
        ("mode", "chunks"),
        ("heaps-per-chunk", "4"),
        ("heap-size", "64"),
    ];
    for (factory, props) in [("speaddepay", &chunks[..]), ("fhdepay", &fhdepay[..])] {
        let shared = std::sync::Arc::new(SharedSegment::new("depay-test"));
        let mut h = harness_proposing(factory, props, Some(shared));
        let packets: Vec<Vec<u8>> = (0..8).flat_map(|cnt| heap(cnt, 0, cnt)).collect();
        assert_eq!(h.push(batch(&packets, 0)), Ok(gst::FlowSuccess::Ok));
        assert!(h.push_event(gst::event::Eos::new()));
        let out = pull_all(&mut h);
        assert_eq!(out.len(), 2, "{factory}");
        for c in &out {
            assert_eq!(buffer_memory_kind(c), Some(MemoryKind::Shared), "{factory}");
            for s in 0..4 {
                let cnt = info(c).chunk_id * 4 + s as u64;
                assert_eq!(slot(c, s), pattern(cnt, HEAP), "{factory}: heap {cnt}");
            }
        }
        let st = stats(&h);
        assert_eq!(
            st.get::<String>("memory").unwrap(),
            "shared",
            "{factory}: {st}"
        );
    }
}

#[test]
fn the_same_chunks_as_fhdepay_handler_spead() {
    let input = messy_stream();
    let mut ours = depay(&[("packet-presence-size", "16"), ("max-heaps", "3")]);
    let mut theirs = harness(
        "fhdepay",
        &[
            ("handler", "spead"),
            ("heaps-per-chunk", "4"),
            ("heap-size", "64"),
            ("max-chunks", "2"),
            ("max-heaps", "3"),
            ("packet-presence-size", "16"),
        ],
    );
    let a = run(&mut ours, &input);
    let b = run(&mut theirs, &input);
    let ids: Vec<u64> = a.iter().map(|c| info(c).chunk_id).collect();
    let st = stats(&ours);
    assert!(a.len() >= 8, "{ids:?} {st}");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(info(x), info(y));
        assert_eq!(x.pts(), y.pts());
        let (mx, my) = (x.map_readable().unwrap(), y.map_readable().unwrap());
        assert!(mx.as_slice() == my.as_slice(), "chunk {}", info(x).chunk_id);
    }
    let (sa, sb) = (stats(&ours), stats(&theirs));
    for (name, _) in firehose_chunk::ChunkStats::default().fields() {
        assert_eq!(field(&sa, name), field(&sb, name), "{name}: {sa} vs {sb}");
    }
    assert!(field(&sa, names::TOO_OLD) > 0 && field(&sa, names::DUPLICATED) > 0);
    assert!(field(&sa, names::MALFORMED) > 0 && field(&sa, names::HEAPS_INCOMPLETE) > 0);
}
