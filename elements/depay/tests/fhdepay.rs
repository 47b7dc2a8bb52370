//! `fhdepay` with the `seq` handler, driven by a harness: loss, chunk boundaries, late
//! and reordered packets, input shapes, errors, and slots coming back at shutdown.

use std::sync::Once;

use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::meta::message;
use firehose_core::stats::{self, names};
use firehose_core::{caps, PacketBatchMeta, PacketInfo};
use gst::prelude::*;
use gst_check::Harness;

/// Payload bytes per packet (and slot size).
const PAYLOAD: usize = 8;
/// Packets per chunk.
const SPC: u64 = 8;
/// Bytes of one chunk, for `pool-size`.
const CHUNK_BYTES: u64 = SPC * PAYLOAD as u64;
const CONFIG: &str = "seq,offset=0,width=4,endianness=big,payload-offset=4";

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        firehose_depay::register_handlers();
        firehose_depay::depay::register(None).unwrap();
    });
}

/// A packet: the 4-byte big-endian counter, then 8 bytes of `seq as u8`.
fn packet(seq: u64) -> Vec<u8> {
    let mut p = (seq as u32).to_be_bytes().to_vec();
    p.extend([seq as u8; PAYLOAD]);
    p
}

/// One batch buffer holding the packets `seqs`.
fn batch(seqs: &[u64]) -> gst::Buffer {
    let mut data = Vec::new();
    let mut infos = Vec::new();
    for &s in seqs {
        let p = packet(s);
        infos.push(PacketInfo {
            offset: data.len() as u32,
            len: p.len() as u32,
            ..Default::default()
        });
        data.extend(p);
    }
    let mut buf = gst::Buffer::from_mut_slice(data);
    PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
    buf
}

fn depay(props: &[(&str, &dyn ToValue)]) -> Harness {
    init();
    let e = gst::ElementFactory::make("fhdepay")
        .property("handler-config", CONFIG)
        .property("heaps-per-chunk", SPC as u32)
        .property("heap-size", PAYLOAD as u32)
        .property("memory", firehose_core::props::Memory::System)
        .property("stats-interval", 0u32)
        .build()
        .unwrap();
    for (name, value) in props {
        e.set_property_from_value(name, &value.to_value());
    }
    let mut h = Harness::with_element(&e, Some("sink"), Some("src"));
    h.play();
    h.set_src_caps_str(caps::PACKETS);
    h
}

fn stat(h: &Harness, name: &str) -> u64 {
    let s = h.element().unwrap().property::<gst::Structure>("stats");
    assert!(s.has_field(name), "stats lack {name}: {s}");
    stats::field(&s, name)
}

/// Every buffer the harness holds now, with its chunk description.
fn drain(h: &mut Harness) -> Vec<(gst::Buffer, ChunkInfo)> {
    let mut v = Vec::new();
    while let Some(b) = h.try_pull() {
        let info = b.meta::<ChunkMeta>().expect("chunk meta").info().clone();
        // Every chunk also carries the generic message meta, in agreement.
        let m = message::read(&b).expect("message meta");
        assert_eq!((m.id, m.complete), (info.chunk_id, info.is_complete()));
        assert_eq!(m.bytes_received, info.bytes);
        v.push((b, info));
    }
    v
}

fn ids(chunks: &[(gst::Buffer, ChunkInfo)]) -> Vec<u64> {
    chunks.iter().map(|(_, i)| i.chunk_id).collect()
}

fn eos(h: &mut Harness) {
    assert!(h.push_event(gst::event::Eos::new()));
}

#[test]
fn injected_loss_shows_exactly_in_the_presence_bitmap() {
    let mut h = depay(&[]);
    let lost = [3u64, 9, 10, 23, 31];
    let seqs: Vec<u64> = (0..32).filter(|s| !lost.contains(s)).collect();
    for part in seqs.chunks(5) {
        h.push(batch(part)).unwrap();
    }
    eos(&mut h);
    let chunks = drain(&mut h);
    assert_eq!(ids(&chunks), [0, 1, 2, 3]);
    let mut missing = Vec::new();
    for (buf, info) in &chunks {
        assert_eq!(buf.size(), (SPC as usize) * PAYLOAD);
        let map = buf.map_readable().unwrap();
        for i in 0..SPC as usize {
            let seq = info.chunk_id * SPC + i as u64;
            if info.is_present(i) {
                assert_eq!(&map[info.slot_range(i)], &[seq as u8; PAYLOAD]);
            } else {
                missing.push(seq);
            }
        }
    }
    assert_eq!(missing, lost);
    assert_eq!(stat(&h, names::PACKETS), seqs.len() as u64);
    assert_eq!(stat(&h, names::CHUNKS), 4);
    assert_eq!(stat(&h, names::CHUNKS_INCOMPLETE), 4);
}

#[test]
fn complete_chunks_leave_at_once_others_when_the_window_moves_on() {
    let mut h = depay(&[("max-chunks", &2u32)]);
    h.push(batch(&(0..16).collect::<Vec<_>>())).unwrap();
    let out = drain(&mut h);
    assert_eq!(ids(&out), [0, 1], "complete: no need to wait");
    assert!(out[0].1.is_complete() && out[1].1.is_complete());
    drop(out); // back to the pool of 4 chunks
    h.push(batch(&[16, 24])).unwrap();
    assert!(drain(&mut h).is_empty(), "chunks 2 and 3 fit the window");
    h.push(batch(&[40])).unwrap(); // chunk 5: chunks 2 and 3 leave, oldest first
    assert_eq!(ids(&drain(&mut h)), [2, 3]);
    eos(&mut h);
    assert_eq!(ids(&drain(&mut h)), [5]);
}

#[test]
fn late_packets_are_too_old_and_reordering_within_the_window_is_fine() {
    let mut h = depay(&[("max-chunks", &2u32)]);
    // Chunk 1 before chunk 0: both in the window.
    h.push(batch(&(8..16).collect::<Vec<_>>())).unwrap();
    h.push(batch(&(0..8).rev().collect::<Vec<_>>())).unwrap();
    h.push(batch(&[16])).unwrap(); // chunk 2: chunk 0 leaves
    h.push(batch(&[2, 17])).unwrap(); // 2 is too old now
    eos(&mut h);
    let out = drain(&mut h);
    assert_eq!(ids(&out), [0, 1, 2]);
    assert!(out[0].1.is_complete() && out[1].1.is_complete());
    assert_eq!(out[2].1.slots_present, 2);
    assert_eq!(stat(&h, names::TOO_OLD), 1);
    assert_eq!(stat(&h, names::PACKETS), 18);
}

#[test]
fn single_packet_buffers_and_buffer_lists_are_accepted() {
    let mut h = depay(&[]);
    h.set_src_caps_str("application/x-custom");
    for s in 0..4 {
        h.push(gst::Buffer::from_mut_slice(packet(s))).unwrap();
    }
    let mut list = gst::BufferList::new();
    for s in 4..8 {
        list.get_mut()
            .unwrap()
            .add(gst::Buffer::from_mut_slice(packet(s)));
    }
    list.get_mut().unwrap().add(batch(&[8, 9]));
    assert_eq!(
        h.srcpad().unwrap().push_list(list),
        Ok(gst::FlowSuccess::Ok)
    );
    // Too short for a counter: malformed, not fatal.
    h.push(gst::Buffer::from_slice([1u8, 2])).unwrap();
    eos(&mut h);
    let out = drain(&mut h);
    assert_eq!(ids(&out), [0, 1]);
    assert!(out[0].1.is_complete());
    assert_eq!(stat(&h, names::PACKETS), 10);
    assert_eq!(stat(&h, names::MALFORMED), 1);
    // Downstream's allocation answer (for chunks) is not passed up; the answer only
    // says that fhdepay reads the Rust metas alone.
    let mut q = gst::query::Allocation::new(Some(&gst::Caps::new_any()), true);
    assert!(h.srcpad().unwrap().peer_query(&mut q));
    assert_eq!(q.allocation_pools().len(), 0, "no pool from downstream");
    assert_eq!(
        q.allocation_params().len(),
        0,
        "no allocator from downstream"
    );
    assert!(!firehose_core::meta::readable::downstream_may_read(&q));
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    let s = caps.structure(0).unwrap();
    assert_eq!(s.name(), caps::CHUNK);
    assert_eq!(s.get::<i32>("slots-per-chunk"), Ok(SPC as i32));
    assert_eq!(s.get::<i32>("slot-size"), Ok(PAYLOAD as i32));
}

#[test]
fn chunk_pts_is_the_pts_of_the_buffer_that_opened_it() {
    let mut h = depay(&[]);
    let mut b = batch(&[0, 1]);
    b.get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_mseconds(5));
    h.push(b).unwrap();
    let mut b = batch(&[2, 8]);
    b.get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_mseconds(7));
    h.push(b).unwrap();
    eos(&mut h);
    let out = drain(&mut h);
    let pts: Vec<_> = out.iter().map(|(b, _)| b.pts()).collect();
    assert_eq!(
        pts,
        [
            Some(gst::ClockTime::from_mseconds(5)),
            Some(gst::ClockTime::from_mseconds(7))
        ]
    );
}

#[test]
fn shutdown_with_buffers_in_flight_returns_every_slot() {
    let mut h = depay(&[("max-chunks", &2u32), ("pool-size", &(4 * CHUNK_BYTES))]);
    // Chunks 0..=3 placed: 0 and 1 emitted (held here), 2 and 3 open in the element.
    h.push(batch(&[0, 8, 16, 24])).unwrap();
    let held = drain(&mut h);
    assert_eq!(ids(&held), [0, 1]);
    assert_eq!(stat(&h, names::POOL_IN_USE), 4);
    let e = h.element().unwrap();
    e.set_state(gst::State::Null).unwrap();
    assert_eq!(stat(&h, names::POOL_IN_USE), 2, "open chunks went back");
    drop(held);
    assert_eq!(stat(&h, names::POOL_IN_USE), 0);
    assert_eq!(stat(&h, names::POOL_SLOTS), 4);
}

#[test]
fn an_exhausted_pool_drops_and_counts() {
    let mut h = depay(&[("max-chunks", &1u32), ("pool-size", &(2 * CHUNK_BYTES))]);
    h.push(batch(&[0, 8])).unwrap();
    let held = drain(&mut h); // chunk 0, held: chunk 1 has the other slot
    h.push(batch(&[16, 17])).unwrap(); // chunk 2: chunk 1 leaves, no slot for chunk 2
    assert_eq!(stat(&h, names::DROPS_POOL), 2);
    assert_eq!(stat(&h, names::POOL_EXHAUSTED), 1);
    drop(held);
    eos(&mut h);
    assert_eq!(ids(&drain(&mut h)), [1]);
}

#[test]
fn block_waits_for_a_chunk_and_a_flush_releases_it() {
    let mut h = depay(&[
        ("max-chunks", &1u32),
        ("pool-size", &(2 * CHUNK_BYTES)),
        ("when-full", &firehose_core::props::WhenFull::Block),
    ]);
    h.push(batch(&[0, 8])).unwrap();
    let held = drain(&mut h);
    let sink = h.element().unwrap().static_pad("sink").unwrap();
    let pusher = std::thread::spawn(move || sink.chain(batch(&[16])));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!pusher.is_finished(), "waits for a free chunk");
    drop(held);
    assert_eq!(pusher.join().unwrap(), Ok(gst::FlowSuccess::Ok));
    assert_eq!(stat(&h, names::DROPS_POOL), 0);
    // Now wait again, and flush instead of freeing.
    let held = drain(&mut h);
    let sink = h.element().unwrap().static_pad("sink").unwrap();
    let pusher = std::thread::spawn(move || sink.chain(batch(&[24])));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert_eq!(pusher.join().unwrap(), Err(gst::FlowError::Flushing));
    drop(held);
}

#[test]
fn the_old_geometry_names_still_set_the_new_properties() {
    init();
    let e = gst::ElementFactory::make("fhdepay").build().unwrap();
    for (old, new, v) in [
        ("slots-per-chunk", "heaps-per-chunk", 16u32),
        ("slot-size", "heap-size", 1500),
        ("max-messages", "max-heaps", 9),
        ("packet-payload-size", "packet-presence-size", 500),
    ] {
        e.set_property(old, v);
        assert_eq!(e.property::<u32>(new), v, "{old} sets {new}");
        assert_eq!(e.property::<u32>(old), v, "{old} reads {new}");
    }
    e.set_property("pool-chunks", 3u32);
    assert_eq!(e.property::<u64>("pool-size"), 3 * 16 * 1500);
}

#[test]
fn a_wrong_handler_fails_at_start_and_names_the_choices() {
    init();
    for (props, want) in [
        (vec![("handler", "nope")], "registered: "),
        (vec![("handler-config", "seq,width=12")], "width"),
        (vec![], "set handler"),
    ] {
        let pipeline = gst::Pipeline::new();
        let e = gst::ElementFactory::make("fhdepay").build().unwrap();
        for &(k, v) in &props {
            e.set_property(k, v);
        }
        pipeline.add(&e).unwrap();
        assert!(pipeline.set_state(gst::State::Paused).is_err());
        let bus = pipeline.bus().unwrap();
        let msg = bus
            .pop_filtered(&[gst::MessageType::Error])
            .expect("an error message");
        let gst::MessageView::Error(err) = msg.view() else {
            unreachable!()
        };
        let text = err.error().to_string();
        assert!(text.contains(want), "{props:?}: {text}");
        if want == "registered: " {
            assert!(text.contains("seq"), "{text}");
        }
        pipeline.set_state(gst::State::Null).unwrap();
    }
}

#[test]
fn every_packet_is_accounted_for() {
    let mut h = depay(&[("max-chunks", &2u32)]);
    let seqs = [0u64, 1, 1, 5, 9, 30, 2, 31, 40, 41, 3];
    h.push(batch(&seqs)).unwrap();
    h.push(gst::Buffer::from_slice([0u8; 3])).unwrap();
    eos(&mut h);
    let counted: u64 = [
        names::PACKETS,
        names::MALFORMED,
        names::TOO_OLD,
        names::DUPLICATED,
        names::DROPS_HANDLER,
        names::DROPS_POOL,
    ]
    .iter()
    .map(|n| stat(&h, n))
    .sum();
    assert_eq!(counted, seqs.len() as u64 + 1);
    assert_eq!(stat(&h, names::DUPLICATED), 1);
    assert_eq!(stat(&h, names::TOO_OLD), 2, "2 and 3, after chunk 3 opened");
}

/// A handler whose packet `[0xFF]` ends the stream; any other packet `[n, payload…]` is
/// message `n` at chunk `n / 8`, slot `n % 8`.
struct Ending;

impl firehose_chunk::handler::PacketHandler for Ending {
    fn parse(&mut self, p: &[u8]) -> Option<firehose_chunk::handler::PacketFacts> {
        let (&n, rest) = p.split_first()?;
        Some(firehose_chunk::handler::PacketFacts {
            message_id: n.into(),
            payload: 1..1 + rest.len(),
            message_offset: 0,
            message_len: Some(rest.len()),
        })
    }

    fn header(
        &mut self,
        _: &[u8],
        f: &firehose_chunk::handler::PacketFacts,
    ) -> firehose_chunk::handler::Placement {
        use firehose_chunk::handler::Placement;
        match f.message_id {
            0xFF => Placement::End,
            n => Placement::Place {
                chunk_id: n / SPC,
                index: (n % SPC) as usize,
            },
        }
    }
}

#[test]
fn a_handler_can_end_the_stream() {
    init();
    firehose_chunk::handler::register_handler("ending-test", |_| Ok(Box::new(Ending)));
    let mut h = depay(&[("handler-config", &"ending-test")]);
    for n in [0u8, 1, 9] {
        h.push(gst::Buffer::from_slice([n, n])).unwrap();
    }
    assert_eq!(
        h.push(gst::Buffer::from_slice([0xFFu8])),
        Err(gst::FlowError::Eos)
    );
    assert_eq!(ids(&drain(&mut h)), [0, 1], "open chunks were emitted");
    let mut got_eos = 0;
    while let Some(e) = h.try_pull_event() {
        got_eos += usize::from(e.type_() == gst::EventType::Eos);
    }
    assert_eq!(got_eos, 1);
    assert_eq!(
        h.push(gst::Buffer::from_slice([2u8, 2])),
        Err(gst::FlowError::Eos)
    );
    // Upstream's own EOS afterwards is not sent a second time.
    eos(&mut h);
    assert!(h.try_pull_event().is_none());
    assert_eq!(stat(&h, names::DROPS_HANDLER), 1);
}
