//! Engine tests with a toy handler.

use super::*;
use crate::handler::MessageEnd;
use firehose_core::testing::Xorshift;
use firehose_core::HugepagePolicy;

const SPC: usize = 4;
const SLOT: usize = 16;

/// A toy format: bytes 0..8 message id (LE), 8..10 message length (LE, 0xFFFF = not
/// said), 10..12 offset in the message (LE), then the payload. Message `id` goes to chunk
/// `id / SPC`, slot `id % SPC`; id 900 is dropped by the handler, id 1000 ends the stream.
struct Toy {
    /// Mark incomplete messages present when they got any byte (tests `completion`).
    keep_partial: bool,
}

impl PacketHandler for Toy {
    fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
        if p.len() < 12 {
            return None;
        }
        let id = u64::from_le_bytes(p[..8].try_into().ok()?);
        let len = u16::from_le_bytes([p[8], p[9]]);
        let off = u16::from_le_bytes([p[10], p[11]]);
        Some(PacketFacts {
            message_id: id,
            payload: 12..p.len(),
            message_offset: off.into(),
            message_len: (len != 0xFFFF).then_some(len.into()),
        })
    }

    fn header(&mut self, _: &[u8], f: &PacketFacts) -> Placement {
        match f.message_id {
            900 => Placement::Drop,
            1000 => Placement::End,
            id => Placement::Place {
                chunk_id: id / SPC as u64,
                index: (id % SPC as u64) as usize,
            },
        }
    }

    fn completion(&mut self, end: &MessageEnd) -> bool {
        end.complete || (self.keep_partial && end.bytes_received > 0)
    }
}

fn pkt(id: u64, len: u16, off: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.extend(len.to_le_bytes());
    v.extend(off.to_le_bytes());
    v.extend(payload);
    v
}

/// A piece of message 1 (a whole slot's length, in slot 1 of chunk 0): `payload` at
/// `offset`.
fn part(offset: u16, payload: &[u8]) -> Vec<u8> {
    pkt(1, SLOT as u16, offset, payload)
}

/// A one-packet message whose payload is `SLOT` copies of its id's low byte.
fn whole(id: u64) -> Vec<u8> {
    pkt(id, SLOT as u16, 0, &[id as u8; SLOT])
}

fn engine_with(cfg: ChunkConfig, pool_chunks: usize, keep_partial: bool) -> ChunkAssembler {
    let pool = SlotPool::new(&cfg.pool_config(pool_chunks, HugepagePolicy::Off)).unwrap();
    ChunkAssembler::new(cfg, Box::new(Toy { keep_partial }), pool).unwrap()
}

fn config(max_chunks: usize) -> ChunkConfig {
    ChunkConfig {
        slots_per_chunk: SPC,
        slot_size: SLOT,
        max_chunks,
        max_messages: 8,
        packet_payload_size: 0,
    }
}

fn engine(max_chunks: usize) -> ChunkAssembler {
    engine_with(config(max_chunks), 8, false)
}

/// [`run`] on `e`, which then goes: the chunks, and the counters.
fn run_all(mut e: ChunkAssembler, packets: &[Vec<u8>]) -> (Vec<FinishedChunk>, ChunkStats) {
    let out = run(&mut e, packets);
    (out, e.stats())
}

/// Pushes every packet, then flushes; returns the emitted chunks.
fn run(e: &mut ChunkAssembler, packets: &[Vec<u8>]) -> Vec<FinishedChunk> {
    let mut out = Vec::new();
    for p in packets {
        assert_eq!(e.push(p, &mut out), Flow::Continue);
    }
    e.flush(&mut out);
    out
}

fn ids(out: &[FinishedChunk]) -> Vec<u64> {
    out.iter().map(|c| c.info.chunk_id).collect()
}

fn missing(c: &FinishedChunk) -> Vec<usize> {
    c.info.missing().collect()
}

/// [`run_all`] on an engine of [`config`]`(2)` adjusted by `change`, with a pool of 4
/// chunks.
fn run_changed(
    change: impl FnOnce(&mut ChunkConfig),
    packets: &[Vec<u8>],
) -> (Vec<FinishedChunk>, ChunkStats) {
    let mut cfg = config(2);
    change(&mut cfg);
    run_all(engine_with(cfg, 4, false), packets)
}

/// The one-packet messages of `real`, each followed by those `junk` gives for it (from
/// a random generator seeded with `seed`).
fn with_junk(
    real: std::ops::Range<u64>,
    seed: u64,
    mut junk: impl FnMut(u64, &mut Xorshift) -> Vec<u64>,
) -> Vec<Vec<u8>> {
    let mut rng = Xorshift(seed);
    real.flat_map(|id| std::iter::once(id).chain(junk(id, &mut rng)))
        .map(whole)
        .collect()
}

/// Pushes the one-packet messages `ids` ([`whole`]), in order.
fn push_whole(
    e: &mut ChunkAssembler,
    ids: impl IntoIterator<Item = u64>,
    out: &mut Vec<FinishedChunk>,
) {
    for id in ids {
        e.push(&whole(id), out);
    }
}

fn slot_bytes(c: &FinishedChunk, index: usize) -> &[u8] {
    &c.slot.as_ref()[c.info.slot_range(index)]
}

#[test]
fn messages_land_in_their_slots_and_chunks_leave_in_order() {
    let mut e = engine(2);
    let mut out = Vec::new();
    // Message 3 before 2: chunk 0 is emitted when its last slot ends, not before.
    push_whole(&mut e, [0, 1, 3], &mut out);
    assert!(out.is_empty(), "slot 2 of chunk 0 is still empty");
    push_whole(&mut e, 2..8, &mut out);
    assert_eq!(ids(&out), [0, 1], "complete chunks leave at once");
    e.push(&whole(8), &mut out);
    assert_eq!(ids(&out), [0, 1], "chunk 2 waits for its other slots");
    e.flush(&mut out);
    assert_eq!(ids(&out), [0, 1, 2]);
    for (c, chunk) in out.iter().enumerate() {
        assert_eq!(chunk.slot.len(), SPC * SLOT);
        for i in 0..SPC {
            let id = (c * SPC + i) as u64;
            if id <= 8 {
                assert!(chunk.info.is_present(i));
                assert!(slot_bytes(chunk, i).iter().all(|&b| b == id as u8));
            }
        }
    }
    assert!(out[0].info.is_complete() && out[1].info.is_complete());
    assert_eq!(missing(&out[2]), [1, 2, 3]);
    let s = e.stats();
    assert_eq!(
        (s.packets, s.heaps, s.chunks, s.chunks_incomplete),
        (9, 9, 3, 1)
    );
    assert_eq!(s.bytes, 9 * SLOT as u64);
}

#[test]
fn an_emitted_chunk_still_tells_late_packets_apart() {
    let mut e = engine(2);
    let mut out = Vec::new();
    push_whole(&mut e, 0..4, &mut out);
    assert_eq!(ids(&out), [0]);
    // Message 2 again: a duplicate, not a new chunk 0 nor a message in a fresh slot.
    e.push(&whole(2), &mut out);
    // Chunk 1 with message 4 still open (its second half lost): not emitted until
    // it leaves the window (here: the flush).
    e.push(&pkt(4, SLOT as u16, 0, &[4; SLOT / 2]), &mut out);
    push_whole(&mut e, 5..8, &mut out);
    assert_eq!(ids(&out), [0], "message 4 is still open");
    let s = e.stats();
    assert_eq!((s.duplicated, s.chunks), (1, 1));
    e.flush(&mut out);
    assert_eq!(ids(&out), [0, 1]);
    assert_eq!(missing(&out[1]), [0]);
    // Nothing was emitted twice, and every pool slot came back.
    drop(out);
    assert_eq!(e.pool().stats().in_use, 0);
}

#[test]
fn a_chunk_leaves_at_once_when_its_last_open_message_is_ended_early() {
    let mut e = engine(4);
    let mut out = Vec::new();
    let half = |id: u64| pkt(id, SLOT as u16, 0, &[id as u8; SLOT / 2]);
    e.push(&half(0), &mut out);
    push_whole(&mut e, 1..4, &mut out);
    // Messages 4..7 (chunk 1) are in flight beside message 0: 8 = max-messages.
    for id in 4..8 {
        e.push(&half(id), &mut out);
    }
    assert!(out.is_empty());
    // One more ends message 0 incomplete: chunk 0 has nothing open left.
    e.push(&half(8), &mut out);
    assert_eq!(ids(&out), [0]);
    assert_eq!(missing(&out[0]), [0]);
    // Its second half now is too old, not a new message.
    e.push(&pkt(0, SLOT as u16, 8, &[0; SLOT / 2]), &mut out);
    assert_eq!(e.stats().too_old, 1);
    assert_eq!(ids(&out), [0]);
}

#[test]
fn complete_chunks_leave_in_id_order() {
    let mut e = engine(4);
    let mut out = Vec::new();
    // Chunk 0 lacks message 3; chunk 1 is complete but must not overtake it.
    push_whole(&mut e, [0, 1, 2, 4, 5, 6, 7], &mut out);
    assert!(out.is_empty());
    e.push(&whole(3), &mut out);
    assert_eq!(
        ids(&out),
        [0, 1],
        "chunk 1 follows as soon as chunk 0 is done"
    );
    // Chunk 3 completes before chunk 2 has anything: it waits, and chunk 2 is still
    // placed when it comes late.
    push_whole(&mut e, 12..16, &mut out);
    assert_eq!(ids(&out), [0, 1]);
    push_whole(&mut e, 8..12, &mut out);
    assert_eq!(ids(&out), [0, 1, 2, 3]);
    assert_eq!(e.stats().too_old, 0);
}

#[test]
fn lost_messages_show_in_the_presence_bitmap() {
    let lost = [1u64, 6, 7, 9];
    let packets: Vec<_> = (0..12).filter(|i| !lost.contains(i)).map(whole).collect();
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(ids(&out), [0, 1, 2]);
    assert_eq!(missing(&out[0]), [1]);
    assert_eq!(missing(&out[1]), [2, 3]);
    assert_eq!(missing(&out[2]), [1]);
    assert_eq!(out[1].info.slots_present, 2);
    assert_eq!(s.chunks_incomplete, 3);
}

#[test]
fn a_wholly_lost_chunk_is_not_emitted() {
    let (out, _) = run_all(engine(2), &[whole(0), whole(9)]);
    assert_eq!(ids(&out), [0, 2]);
}

#[test]
fn reordering_within_the_window_is_placed_and_older_is_too_old() {
    // Chunk 2 opens before chunks 0 and 1 (also reordering at the very start).
    let order = [8u64, 0, 4, 9, 1, 5];
    let mut packets: Vec<_> = order.iter().map(|&i| whole(i)).collect();
    packets.push(whole(12)); // chunk 3: chunk 0 leaves
    packets.push(whole(2)); // chunk 0: too old now
    let (out, s) = run_all(engine(3), &packets);
    assert_eq!(ids(&out), [0, 1, 2, 3]);
    assert_eq!(missing(&out[0]), [2, 3], "message 2 came too late");
    assert_eq!(missing(&out[1]), [2, 3]);
    assert_eq!((s.too_old, s.packets), (1, 7));
    assert_eq!(s.packets_seen(), packets.len() as u64);
}

#[test]
fn a_confirmed_big_jump_emits_the_whole_window() {
    let mut e = engine(3);
    let mut out = Vec::new();
    push_whole(&mut e, [0, 4, 8], &mut out);
    // Beyond the whole window: held back until JUMP_CONFIRM messages in a row agree.
    for k in 0..JUMP_CONFIRM as u64 {
        assert!(out.is_empty(), "message {k} of the jump ended chunks");
        e.push(&whole(4000 + k), &mut out);
    }
    assert_eq!(ids(&out), [0, 1, 2]);
    assert_eq!(e.stats().too_far, JUMP_CONFIRM as u64 - 1);
    e.push(&whole(4), &mut out);
    assert_eq!(e.stats().too_old, 1);
}

/// Far ids that agree with each other, many in a row between two packets of the real
/// stream, move nothing while the real stream keeps the window busy (by the clock);
/// once the window has been quiet for JUMP_QUIET_NS, the same run moves it.
#[test]
fn agreeing_far_ids_move_the_window_only_once_the_real_stream_went_quiet() {
    let mut e = engine(3);
    let mut out = Vec::new();
    let ms = 1_000_000u64;
    let mut far = 4000u64;
    // Chunks 0 and 1 whole (they leave at once), chunk 2 half.
    for (t, id) in (0u64..).zip(0u64..10) {
        e.set_clock(Some(t * ms));
        e.push(&whole(id), &mut out);
        // A burst of agreeing far messages after each real one, within the same ms.
        for _ in 0..3 * JUMP_CONFIRM {
            e.push(&whole(far), &mut out);
            far += 1;
        }
    }
    assert_eq!(
        ids(&out),
        [0, 1],
        "only the chunks the real stream completed left"
    );
    assert_eq!(e.stats().too_far, 10 * 3 * JUMP_CONFIRM as u64);
    // The real stream stops; far messages 1 ms later are still held back ...
    e.set_clock(Some(10 * ms));
    for _ in 0..JUMP_CONFIRM {
        e.push(&whole(far), &mut out);
        far += 1;
    }
    assert_eq!(ids(&out), [0, 1]);
    // ... and move the window once it has been quiet long enough.
    e.set_clock(Some(9 * ms + JUMP_QUIET_NS));
    for _ in 0..JUMP_CONFIRM {
        e.push(&whole(far), &mut out);
        far += 1;
    }
    assert_eq!(ids(&out), [0, 1, 2], "the window moved: chunk 2 left");
}

#[test]
fn lying_ids_between_the_real_messages_end_no_chunk() {
    // A random far id, and one just far enough: neither may move the window.
    let packets = with_junk(0..24, 7, |id, rng| {
        vec![
            1000 + rng.next_u64() % (1 << 40),
            (id / SPC as u64 + FAR_CHUNKS) * SPC as u64,
        ]
    });
    let (out, s) = run_all(engine(3), &packets);
    assert_eq!(ids(&out), (0..6).collect::<Vec<_>>());
    assert!(
        out.iter().all(|c| c.info.is_complete()),
        "every real chunk whole"
    );
    assert_eq!(s.too_far, 48);
    assert_eq!(s.packets_seen(), packets.len() as u64);
}

#[test]
fn a_packet_that_cannot_fit_its_slot_touches_no_state() {
    let mut e = engine(2);
    let mut out = Vec::new();
    e.push(&whole(0), &mut out);
    // Chunk 1 (would advance the window), but its payload lies past the slot, or past
    // the message length it gives, or the length exceeds a slot.
    e.push(&pkt(5, SLOT as u16, SLOT as u16 - 2, &[1; 4]), &mut out);
    e.push(&pkt(6, 4, 2, &[1; 4]), &mut out);
    e.push(&pkt(7, SLOT as u16 + 1, 0, &[1; 4]), &mut out);
    assert_eq!(e.stats().malformed, 3);
    // Nothing moved: message 5 is still new, chunk 0 still open.
    e.push(&whole(5), &mut out);
    e.push(&whole(1), &mut out);
    assert!(out.is_empty());
    let out = run(&mut e, &[]);
    assert_eq!(ids(&out), [0, 1]);
    assert_eq!(missing(&out[0]), [2, 3]);
}

#[test]
fn a_restarted_sender_resyncs_after_a_window_of_too_old_messages() {
    let mut packets: Vec<_> = (100..108).map(whole).collect(); // chunks 25, 26
    packets.extend((0..12).map(whole)); // the sender starts again from 0
    let (out, s) = run_all(engine(2), &packets);
    // Messages 0..7 are too old; the 8th too-old one (a window: 2 × 4) restarts.
    assert_eq!(ids(&out), [25, 26, 1, 2]);
    assert_eq!(missing(&out[2]), [0, 1, 2]);
    assert!(out[3].info.is_complete());
    assert_eq!((s.too_old, s.resyncs, s.packets), (7, 1, 13));
}

/// Old ids spread over everything behind the stream, however many between two of its
/// packets, never restart the window; a restarted sender (ids near each other) still
/// does, after a window's worth.
#[test]
fn a_flood_of_scattered_old_ids_causes_no_resync() {
    // Forty old messages, each for a chunk anywhere behind the window.
    let packets = with_junk(400..416, 11, |_, rng| {
        (0..40).map(|_| rng.next_u64() % 380).collect()
    });
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(ids(&out), [100, 101, 102, 103], "every real chunk, whole");
    assert!(out.iter().all(|c| c.info.is_complete()));
    assert_eq!((s.resyncs, s.too_old), (0, 16 * 40));
}

#[test]
fn multi_packet_messages_complete_or_end_incomplete() {
    let packets = [
        // Message 0: two halves, out of order.
        pkt(0, 16, 8, b"BBBBBBBB"),
        pkt(0, 16, 0, b"AAAAAAAA"),
        // Message 1: only the first half.
        part(0, b"CCCCCCCC"),
        // Message 2: length never said; ends only with its chunk.
        pkt(2, 0xFFFF, 0, b"DDDD"),
    ];
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(ids(&out), [0]);
    assert_eq!(slot_bytes(&out[0], 0), b"AAAAAAAABBBBBBBB");
    assert_eq!(missing(&out[0]), [1, 2, 3]);
    assert_eq!((s.heaps, s.heaps_incomplete, s.packets), (1, 2, 4));
}

#[test]
fn completion_decides_presence() {
    let (out, s) = run_all(engine_with(config(2), 4, true), &[part(0, b"half")]);
    assert!(
        out[0].info.is_present(1),
        "the handler keeps partial messages"
    );
    assert_eq!(s.heaps_incomplete, 1);
}

#[test]
fn overflowing_payloads_are_malformed_and_never_written() {
    let packets = [
        whole(1),
        // 8 bytes at offset 12 of a 16-byte slot would spill into slot 1.
        pkt(0, 0xFFFF, 12, b"XXXXXXXX"),
        // Beyond the message's own length.
        pkt(2, 8, 4, b"YYYYYYYY"),
        // A message longer than a slot.
        pkt(3, 17, 0, b"Z"),
        // Too short to parse.
        vec![1, 2, 3],
    ];
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(slot_bytes(&out[0], 1), &[1u8; SLOT], "slot 1 untouched");
    assert!(!slot_bytes(&out[0], 0).contains(&b'X'));
    assert_eq!((s.malformed, s.packets), (4, 1));
}

#[test]
fn handler_drops_and_duplicates_are_counted() {
    let packets = [
        pkt(900, 16, 0, b"dropped"),
        pkt(900, 16, 7, b"again"),
        whole(0),
        whole(0),
        pkt(1, 4, 0, b"ab"),
        pkt(1, 4, 0, b"ab"),
        pkt(1, 4, 2, b"cd"),
    ];
    let (out, s) = run_all(engine(2), &packets);
    // Even without per-packet presence "ab" twice is a duplicate (it covers no new
    // byte): the message completes with "cd", not early with a hole.
    assert_eq!(&slot_bytes(&out[0], 1)[..4], b"abcd");
    assert!(out[0].info.is_present(1));
    assert_eq!((s.drops_handler, s.duplicated, s.packets), (2, 2, 3));
    assert_eq!(s.packets_seen(), packets.len() as u64);
    assert_eq!(s.heaps, 2);
}

#[test]
fn packet_presence_catches_a_repeated_packet() {
    let repeated = pkt(1, 4, 0, b"ab");
    let packets = [repeated.clone(), repeated, pkt(1, 4, 2, b"cd")];
    let (out, s) = run_changed(|c| c.packet_payload_size = 2, &packets);
    assert_eq!(&slot_bytes(&out[0], 1)[..4], b"abcd");
    assert!(out[0].info.is_present(1));
    assert_eq!((s.duplicated, s.packets, s.heaps), (1, 2, 1));
}

#[test]
fn slot_collisions_and_bad_indices_are_malformed() {
    struct Colliding;
    impl PacketHandler for Colliding {
        fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
            Some(PacketFacts {
                message_id: p[0].into(),
                payload: 1..p.len(),
                message_offset: 0,
                message_len: Some(p.len() - 1),
            })
        }
        fn header(&mut self, p: &[u8], _: &PacketFacts) -> Placement {
            // Every message to slot p[0] % 2, or to slot 99 for id 7.
            let index = if p[0] == 7 { 99 } else { usize::from(p[0] % 2) };
            Placement::Place { chunk_id: 0, index }
        }
    }
    let cfg = config(2);
    let pool = SlotPool::new(&cfg.pool_config(2, HugepagePolicy::Off)).unwrap();
    let mut e = ChunkAssembler::new(cfg, Box::new(Colliding), pool).unwrap();
    let out = run(&mut e, &[vec![0, 1], vec![2, 2], vec![7, 7], vec![1, 3]]);
    assert_eq!(
        &slot_bytes(&out[0], 0)[..1],
        &[1],
        "the first message keeps slot 0"
    );
    let s = e.stats();
    assert_eq!((s.malformed, s.packets), (2, 2));
}

#[test]
fn end_flushes_and_stops() {
    let mut e = engine(2);
    let mut out = Vec::new();
    e.push(&whole(0), &mut out);
    e.push(&whole(5), &mut out);
    assert_eq!(e.push(&pkt(1000, 1, 0, &[0]), &mut out), Flow::End);
    assert_eq!(ids(&out), [0, 1]);
    assert_eq!(e.push(&whole(6), &mut out), Flow::End);
    assert_eq!(e.stats().packets, 2);
    assert_eq!(
        e.stats().drops_handler,
        2,
        "the end packet and the one after"
    );
    e.reset();
    assert_eq!(e.push(&whole(6), &mut out), Flow::Continue);
}

#[test]
fn an_empty_pool_drops_the_chunk_and_counts_every_packet() {
    let mut e = engine_with(config(2), 1, false);
    let mut out = Vec::new();
    e.push(&whole(0), &mut out);
    push_whole(&mut e, [4, 5, 6], &mut out);
    assert_eq!(e.stats().drops_pool, 3);
    e.flush(&mut out);
    assert_eq!(ids(&out), [0]);
    drop(out);
    // The slot is back: the next chunk gets memory.
    let out = run(&mut e, &[whole(8)]);
    assert_eq!(ids(&out), [2]);
    assert_eq!(
        e.pool().stats().exhausted,
        1,
        "one lock per chunk, not per packet"
    );
}

#[test]
fn too_many_messages_in_flight_end_the_oldest() {
    let packets = [
        pkt(0, 16, 0, b"a"),
        part(0, b"b"),
        pkt(2, 16, 0, b"c"), // message 0 ends incomplete here
        pkt(0, 16, 1, b"a"), // too late for it
        part(1, b"b"),
    ];
    let (out, s) = run_changed(|c| c.max_messages = 2, &packets);
    assert_eq!((s.heaps_incomplete, s.too_old, s.packets), (3, 1, 4));
    assert_eq!(&slot_bytes(&out[0], 1)[..2], b"bb");
}

#[test]
fn packet_presence_marks_each_packet() {
    let packets = [
        pkt(0, 16, 0, b"0000"),
        pkt(0, 16, 8, b"2222"),
        pkt(0, 16, 12, b"3333"),
        pkt(3, 8, 4, b"1111"),
    ];
    // 4 packets per 16-byte slot
    let (out, _) = run_changed(|c| c.packet_payload_size = 4, &packets);
    let info = &out[0].info;
    assert_eq!(info.packets_per_slot, 4);
    let got: Vec<(usize, usize)> = (0..SPC)
        .flat_map(|i| (0..4).map(move |k| (i, k)))
        .filter(|&(i, k)| info.is_packet_present(i, k))
        .collect();
    assert_eq!(got, [(0, 0), (0, 2), (0, 3), (3, 1)]);
    assert!(!info.is_present(0) && !info.is_present(3));
}

#[test]
fn reset_and_drop_return_every_slot() {
    let mut e = engine(3);
    let mut out = Vec::new();
    push_whole(&mut e, [0, 4, 8, 12], &mut out);
    let pool = e.pool().clone();
    assert_eq!(pool.stats().in_use, 4, "3 open, 1 emitted");
    e.reset();
    assert_eq!(pool.stats().in_use, 1);
    drop(out);
    e.push(&whole(0), &mut Vec::new());
    drop(e);
    assert_eq!(pool.stats().in_use, 0);
}

#[test]
fn bad_configs_are_refused() {
    let pool = SlotPool::new(&config(2).pool_config(1, HugepagePolicy::Off)).unwrap();
    let mut big = config(2);
    big.slot_size = 1 << 20;
    let err = ChunkAssembler::new(
        big,
        Box::new(Toy {
            keep_partial: false,
        }),
        pool,
    )
    .unwrap_err();
    assert!(err.contains("cannot hold"), "{err}");
    let mut zero = config(2);
    zero.max_chunks = 0;
    assert!(zero.validate().is_err());
}

#[test]
fn a_finished_chunk_becomes_a_buffer_with_its_meta() {
    gst::init().unwrap();
    let mut e = engine(2);
    e.set_clock(Some(42));
    let mut out = run(&mut e, &[whole(0), whole(2)]);
    let chunk = out.pop().unwrap();
    let ptr = chunk.slot.as_ref().as_ptr();
    let buf = chunk.into_buffer(true);
    assert_eq!(buf.pts(), Some(gst::ClockTime::from_nseconds(42)));
    assert_eq!(buf.size(), SPC * SLOT);
    assert_eq!(buf.map_readable().unwrap().as_ptr(), ptr, "no copy");
    let copy = buf.copy();
    let info = copy.meta::<ChunkMeta>().unwrap().info().clone();
    assert_eq!(missing_of(&info), [1, 3]);
    assert_eq!(info.packets, 2);
    // The meta every language reads says the same, with the bytes of each slot.
    let s = firehose_core::meta::readable::chunk(&copy).unwrap();
    assert_eq!(s.get::<u64>("chunk-id"), Ok(info.chunk_id));
    let present = s.get::<gst::glib::Bytes>("present").unwrap();
    assert_eq!(&present[..], &[1, 0, 1, 0][..SPC]);
    let bytes: Vec<u64> = s
        .get::<gst::glib::Bytes>("bytes-present")
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(bytes.len(), SPC);
    assert!(bytes[0] > 0 && bytes[2] > 0 && bytes[1] == 0, "{bytes:?}");
    assert_eq!(bytes.iter().sum::<u64>(), info.bytes);
    // Without readable metas: the Rust ones only.
    let mut e = engine(2);
    let chunk = run(&mut e, &[whole(0), whole(2)]).pop().unwrap();
    let buf = chunk.into_buffer(false);
    assert!(buf.meta::<ChunkMeta>().is_some());
    assert!(firehose_core::meta::readable::chunk(&buf).is_none());
}

fn missing_of(info: &ChunkInfo) -> Vec<usize> {
    info.missing().collect()
}

/// Toy's format in chunks larger than [`STREAMING_MIN_CHUNK_BYTES`]: payloads copied
/// unchanged (streaming stores allowed) or, with `add`, each byte plus `add` by the
/// handler's own `payload`.
struct Large {
    add: u8,
}

impl PacketHandler for Large {
    fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
        Toy {
            keep_partial: false,
        }
        .parse(p)
    }

    fn header(&mut self, _: &[u8], f: &PacketFacts) -> Placement {
        Placement::Place {
            chunk_id: f.message_id / 2,
            index: (f.message_id % 2) as usize,
        }
    }

    fn payload(&mut self, p: &[u8], f: &PacketFacts, dest: &mut [u8]) {
        for (d, s) in dest.iter_mut().zip(&p[f.payload.clone()]) {
            *d = s.wrapping_add(self.add);
        }
    }

    fn copies_payload_unchanged(&self) -> bool {
        self.add == 0
    }
}

#[test]
fn large_chunks_get_every_byte_whether_streamed_or_handed_to_payload() {
    const SLOT_BYTES: usize = 4 << 20;
    let cfg = ChunkConfig {
        slots_per_chunk: 2,
        slot_size: SLOT_BYTES,
        max_chunks: 1,
        max_messages: 8,
        packet_payload_size: 0,
    };
    assert!(cfg.chunk_bytes() > STREAMING_MIN_CHUNK_BYTES);
    let fill = |seed: u8, n: usize| -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    };
    // Whole aligned lines (streamed where the CPU can), then a ragged tail and a
    // misaligned packet (always copied by `payload`); the other slot too.
    let parts = [
        (0u64, 0u16, fill(1, 4096)),
        (0, 4096, fill(2, 4096)),
        (0, 8192, fill(3, 100)),
        (0, 8292, fill(4, 640)),
        (1, 0, fill(5, 8192)),
    ];
    for add in [0u8, 1] {
        let pool = SlotPool::new(&cfg.pool_config(2, HugepagePolicy::Off)).unwrap();
        let mut e = ChunkAssembler::new(cfg.clone(), Box::new(Large { add }), pool).unwrap();
        let packets: Vec<Vec<u8>> = parts
            .iter()
            .map(|(id, off, data)| pkt(*id, 0xFFFF, *off, data))
            .collect();
        let out = run(&mut e, &packets);
        assert_eq!(ids(&out), [0]);
        for (id, off, data) in &parts {
            let slot = slot_bytes(&out[0], *id as usize);
            let at = usize::from(*off);
            let want: Vec<u8> = data.iter().map(|b| b.wrapping_add(add)).collect();
            assert_eq!(
                &slot[at..at + data.len()],
                &want[..],
                "id {id} offset {off} add {add}"
            );
        }
        assert_eq!(e.stats().bytes, 4096 * 2 + 100 + 640 + 8192);
    }
}

/// A replayed packet of a message still being received must not count towards its
/// length: before, two copies of one packet completed a message with a hole in it (the
/// hostile-traffic suite's `duplicates` class lost every heap in chunk mode).
#[test]
fn replayed_packets_of_an_open_message_do_not_complete_it() {
    let mut e = engine(2);
    let packets = [
        part(0, b"abcd"),
        part(0, b"abcd"),
        part(4, b"efgh"),
        part(4, b"efgh"),
        part(0, b"abcd"),
    ];
    let mut out = Vec::new();
    for p in &packets {
        e.push(p, &mut out);
    }
    let s = e.stats();
    assert_eq!((s.duplicated, s.packets, s.heaps), (3, 2, 0), "still open");
    // The rest arrives: now it is complete, every byte its own.
    e.push(&part(8, b"ijklmnop"), &mut out);
    e.flush(&mut out);
    assert_eq!(slot_bytes(&out[0], 1), b"abcdefghijklmnop");
    assert!(out[0].info.is_present(1));
    assert_eq!(e.stats().heaps, 1);
}

/// Packets overlapping what arrived count only the bytes they add.
#[test]
fn overlapping_packets_count_only_new_bytes() {
    let packets = [
        part(0, b"abcdef"),
        part(4, b"efghij"),
        part(2, b"cdefghij"),
        part(10, b"klmnop"),
    ];
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(slot_bytes(&out[0], 1), b"abcdefghijklmnop");
    assert!(out[0].info.is_present(1));
    assert_eq!((s.duplicated, s.packets, s.heaps), (1, 3, 1));
}

/// A message in more pieces at once than are tracked: the packet that would start one
/// more is dropped, so the message ends incomplete, never complete with a hole; packets
/// that extend a piece are still taken.
#[test]
fn messages_in_too_many_pieces_end_incomplete_not_corrupt() {
    // Even bytes first: RANGES disjoint pieces, then one too many; then the odd bytes.
    let mut packets: Vec<Vec<u8>> = (0..8u16)
        .map(|k| part(2 * k, &[b'a' + 2 * k as u8]))
        .collect();
    packets.extend((0..8u16).map(|k| part(2 * k + 1, &[b'a' + 2 * k as u8 + 1])));
    let (out, s) = run_all(engine(2), &packets);
    assert!(!out[0].info.is_present(1), "incomplete, not present");
    assert_eq!((s.heaps, s.heaps_incomplete), (0, 1));
    assert!(s.malformed > 0, "{s:?}");
}

/// Replays of packets from ahead in a message (an attacker's, or a duplicating
/// network's) cannot make it complete early, however many.
#[test]
fn replays_from_ahead_in_a_message_cannot_complete_it_early() {
    let mut packets = Vec::new();
    for k in 0..8u16 {
        packets.push(part(2 * k, &[b'a' + 2 * k as u8; 2]));
        // Replays of every later packet, out of order.
        for j in (k + 1..8).rev() {
            packets.push(part(2 * j, &[b'a' + 2 * j as u8; 2]));
        }
    }
    let (out, _) = run_all(engine(2), &packets);
    assert!(out[0].info.is_present(1));
    let want: Vec<u8> = (0..8u8).flat_map(|k| [b'a' + 2 * k; 2]).collect();
    assert_eq!(slot_bytes(&out[0], 1), &want[..]);
}

#[test]
fn ranges_merge_and_count() {
    let mut r = Ranges::EMPTY;
    assert_eq!(r.fresh(0, 8), 8);
    r.add(0, 8);
    r.add(16, 24);
    assert_eq!(r.fresh(4, 20), 8);
    r.add(8, 16);
    assert_eq!((r.n, r.r[0]), (1, (0, 24)));
    assert_eq!(r.fresh(0, 24), 0);
    for k in 0..RANGES - 2 {
        assert!(r.room(100 + 10 * k, 105 + 10 * k));
        r.add(100 + 10 * k, 105 + 10 * k);
    }
    assert_eq!(usize::from(r.n), RANGES - 1);
    assert!(!r.room(200, 208), "the last place is the start's");
    assert!(
        r.room(24, 30) && r.room(90, 100),
        "extending a piece is always possible"
    );
    let mut ahead = Ranges::EMPTY;
    for k in 1..RANGES {
        ahead.add(100 * k, 100 * k + 8);
    }
    assert!(
        ahead.room(0, 8),
        "the message's first packet always has a place"
    );
}

/// Too-old ids between the packets of a message still being received are not a
/// restarted sender: the window does not start again (before, a window's worth of them
/// between two placements did, and the real stream lost its open chunks).
#[test]
fn stale_ids_between_the_packets_of_a_live_message_cause_no_resync() {
    let mut packets = vec![pkt(20, 16, 0, b"abcd")];
    for (k, part) in [b"efgh", b"ijkl", b"mnop"].iter().enumerate() {
        // Six ids of chunks 0..2, long gone (the window holds chunks 4 and 5).
        packets.extend((0..6).map(|i| whole(6 * k as u64 + i)));
        packets.push(pkt(20, 16, 4 * (k as u16 + 1), &part[..]));
    }
    let (out, s) = run_all(engine(2), &packets);
    assert_eq!(s.resyncs, 0, "{s:?}");
    let c = out.iter().find(|c| c.info.chunk_id == 5).expect("chunk 5");
    assert!(c.info.is_present(0));
    assert_eq!(slot_bytes(c, 0), b"abcdefghijklmnop");
}

/// Message `id` (a whole slot) in two packets of half a slot each.
fn halves(id: u64) -> [Vec<u8>; 2] {
    let h = SLOT as u16 / 2;
    [
        pkt(id, SLOT as u16, 0, &[id as u8; SLOT / 2]),
        pkt(id, SLOT as u16, h, &[id as u8; SLOT / 2]),
    ]
}

/// The window opens at the first packet seen; when that is a bad one (a flood already
/// running as the capture starts), a window no message completed in is unproven, and
/// the real stream's messages, dropped as too old but each continuing in later packets
/// where the bad single packets do not, move it back after JUMP_CONFIRM of them.
#[test]
fn a_window_opened_by_a_bad_packet_follows_the_stream_after_jump_confirm_messages() {
    let mut e = engine(3);
    let mut out = Vec::new();
    let mut rng = Xorshift(11);
    // Half of a message far away: the window opens at chunk 1000.
    e.push(&halves(4000)[0], &mut out);
    for id in 0..20u64 {
        for p in halves(id) {
            e.push(&p, &mut out);
            // A lying single packet after each real one, anywhere (never message 1000).
            let bad = 2000 + rng.next_u64() % 100_000;
            e.push(&halves(bad)[(bad % 2) as usize], &mut out);
        }
    }
    e.flush(&mut out);
    let s = e.stats();
    assert_eq!(s.resyncs, 1, "{s:?}");
    // The bad chunk left at the move; the stream's messages 0..JUMP_CONFIRM-1 were lost
    // waiting for it, the JUMP_CONFIRM-th lost its first half; from chunk 2 on all came.
    let real: Vec<&FinishedChunk> = out.iter().filter(|c| c.info.chunk_id < 5).collect();
    assert_eq!(
        real.iter().map(|c| c.info.chunk_id).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    for c in &real[1..] {
        assert!(
            missing(c).is_empty(),
            "chunk {}: {:?}",
            c.info.chunk_id,
            missing(c)
        );
    }
}

/// While the real stream flows in its window (messages complete there: proven, and by
/// the clock never quiet), later packets of dropped messages elsewhere — replayed or
/// far messages of several packets, agreeing with each other — move nothing; once the
/// stream has gone quiet, the same run moves the window.
#[test]
fn replayed_messages_elsewhere_never_move_a_window_the_stream_flows_in() {
    let mut e = engine(3);
    let mut out = Vec::new();
    // Chunks seen (id, whole), the buffers dropped at once so their pool slots return.
    let mut seen = Vec::new();
    let mut take = |out: &mut Vec<FinishedChunk>| {
        seen.extend(
            out.drain(..)
                .map(|c| (c.info.chunk_id, missing(&c).is_empty())),
        );
    };
    let ms = 1_000_000u64;
    let mut far = 4000u64;
    for id in 0..40u64 {
        e.set_clock(Some(id * ms));
        for p in halves(id) {
            e.push(&p, &mut out);
        }
        // Two whole far messages of two packets each, near each other, per real one.
        for _ in 0..2 {
            for p in halves(far) {
                e.push(&p, &mut out);
            }
            far += 1;
        }
        take(&mut out);
    }
    assert_eq!(e.stats().resyncs, 0, "{:?}", e.stats());
    // The far messages' first packets wait for a jump (too-far), their second packets
    // are the later packets of dropped messages: counted too-far, and no more.
    assert_eq!(e.stats().too_far, 40 * 2 * 2);
    // The stream stops: after JUMP_QUIET_NS the far messages move the window (a jump,
    // by the count of first packets, before the later-packet rule needs to).
    e.set_clock(Some(39 * ms + JUMP_QUIET_NS));
    for _ in 0..JUMP_CONFIRM {
        for p in halves(far) {
            e.push(&p, &mut out);
        }
        far += 1;
    }
    take(&mut out);
    assert_eq!(
        seen,
        (0..10).map(|id| (id, true)).collect::<Vec<_>>(),
        "every chunk of the stream whole"
    );
    let before = e.stats().too_old;
    e.push(&halves(40)[0], &mut out);
    assert_eq!(
        e.stats().too_old,
        before + 1,
        "the window moved to the far messages"
    );
}

/// Later packets of just two dropped messages, alternating (what a flood can replay),
/// are two messages, not one per change of id: they never reach JUMP_CONFIRM and never
/// move an unproven window.
#[test]
fn two_dropped_messages_alternating_do_not_count_as_many() {
    let mut e = engine(3);
    let mut out = Vec::new();
    // Half of a message far away: the window opens at chunk 1000, unproven.
    e.push(&halves(4000)[0], &mut out);
    let (a, b) = (halves(0), halves(4));
    e.push(&a[0], &mut out);
    e.push(&b[0], &mut out);
    for _ in 0..4 * JUMP_CONFIRM {
        e.push(&a[1], &mut out);
        e.push(&b[1], &mut out);
    }
    assert_eq!(e.stats().resyncs, 0, "{:?}", e.stats());
}

/// A stream whose messages carry no length never completes one, yet it proves its
/// window by putting messages together from several packets: late packets of old
/// messages, however many, then move nothing.
#[test]
fn a_stream_without_message_lengths_keeps_its_window_against_late_old_messages() {
    let mut e = engine(3);
    let mut out = Vec::new();
    let h = SLOT as u16 / 2;
    let half = |id: u64, k: u16| pkt(id, 0xFFFF, k * h, &[id as u8; SLOT / 2]);
    for id in 100..120u64 {
        e.push(&half(id, 0), &mut out);
        e.push(&half(id, 1), &mut out);
        out.clear();
    }
    // Old messages, both halves each, long after their chunks left, between the
    // stream's own (which go on, so this is no restarted sender).
    for id in 0..3 * JUMP_CONFIRM as u64 {
        e.push(&half(id, 0), &mut out);
        e.push(&half(id, 1), &mut out);
        e.push(&half(120 + id, 0), &mut out);
        e.push(&half(120 + id, 1), &mut out);
        out.clear();
    }
    assert_eq!(e.stats().resyncs, 0, "{:?}", e.stats());
}
