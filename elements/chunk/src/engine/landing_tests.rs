//! Receiving straight into chunks, checked against the plain engine: the same packets
//! fed through [`ChunkAssembler::plan`] and [`ChunkAssembler::land`] (with a simulated
//! scatter receive) and through [`ChunkAssembler::push`] alone must give the same
//! counters and the same bytes wherever a slot or packet is present.

use super::*;
use crate::landing::receive_simulated;
use crate::landing::LandingEngine;
use firehose_core::testing::Xorshift;
use firehose_core::HugepagePolicy;

const SPC: usize = 4;
const SLOT: usize = 48;
const PAYLOAD: usize = 16;

/// A toy format with a variable header: bytes 0..8 message id, 8..10 message length,
/// 10..12 offset (all LE), 12 = `e`, then `e` bytes of padding, then the payload.
/// Message `id` goes to chunk `id / SPC`, slot `id % SPC`; with `lie`, its prediction
/// says where message `id + 1` goes (a handler breaking the contract).
#[derive(Default)]
struct SplitToy {
    lie: bool,
}

fn place(id: u64) -> Placement {
    Placement::Place {
        chunk_id: id / SPC as u64,
        index: (id % SPC as u64) as usize,
    }
}

fn facts_of(h: &[u8], payload: Range<usize>) -> Option<PacketFacts> {
    if h.len() < 13 || h.len() != 13 + usize::from(h[12]) {
        return None;
    }
    Some(PacketFacts {
        message_id: u64::from_le_bytes(h[..8].try_into().ok()?),
        payload,
        message_offset: u16::from_le_bytes([h[10], h[11]]).into(),
        message_len: Some(u16::from_le_bytes([h[8], h[9]]).into()),
    })
}

impl PacketHandler for SplitToy {
    fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
        let h = 13 + usize::from(*p.get(12)?);
        facts_of(p.get(..h)?, h..p.len())
    }

    fn header(&mut self, _: &[u8], f: &PacketFacts) -> Placement {
        place(f.message_id)
    }

    fn copies_payload_unchanged(&self) -> bool {
        true
    }

    fn parses_header_alone(&self) -> bool {
        true
    }

    fn parse_header(&mut self, header: &[u8], packet_len: usize) -> Option<PacketFacts> {
        facts_of(header, header.len()..packet_len)
    }

    fn predict_placement(&self, id: u64) -> Option<Placement> {
        Some(place(id + u64::from(self.lie)))
    }
}

/// The same format with the default `payload` path only: it cannot be received into
/// chunks.
struct Plain;

impl PacketHandler for Plain {
    fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
        SplitToy::default().parse(p)
    }

    fn header(&mut self, p: &[u8], f: &PacketFacts) -> Placement {
        SplitToy::default().header(p, f)
    }
}

use std::collections::HashMap;
use std::ops::Range;

fn engine(packet_presence: bool) -> ChunkAssembler {
    engine_with(packet_presence, SplitToy::default())
}

fn engine_with(packet_presence: bool, handler: SplitToy) -> ChunkAssembler {
    let cfg = ChunkConfig {
        slots_per_chunk: SPC,
        slot_size: SLOT,
        max_chunks: 3,
        max_messages: 8,
        packet_payload_size: if packet_presence { PAYLOAD } else { 0 },
    };
    // Enough chunks for a whole test's output: receiving into landings holds one more
    // than pushing (the next chunk's, taken ahead), so an exhausted pool would drop
    // differently.
    let pool = SlotPool::new(&cfg.pool_config(40, HugepagePolicy::Off)).unwrap();
    ChunkAssembler::new(cfg, Box::new(handler), pool).unwrap()
}

/// Packet of message `id` (length `len`) at `off`, with `extra` header padding; the
/// payload bytes say where they belong.
fn packet(id: u64, len: usize, off: usize, n: usize, extra: u8) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.extend((len as u16).to_le_bytes());
    v.extend((off as u16).to_le_bytes());
    v.push(extra);
    v.extend(std::iter::repeat_n(0xEE, extra.into()));
    v.extend((off..off + n).map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8)));
    v
}

/// Message `id` of `len` bytes in full packets of `PAYLOAD` (the first with `first_extra`
/// bytes more header, as spead2 sends a heap's items in its first packet).
fn message(id: u64, len: usize, first_extra: u8) -> Vec<Vec<u8>> {
    (0..len)
        .step_by(PAYLOAD)
        .map(|off| {
            let extra = if off == 0 { first_extra } else { 0 };
            packet(id, len, off, PAYLOAD.min(len - off), extra)
        })
        .collect()
}

/// Feeds `packets` as a host receiving into landings does, `batch` at a time; returns
/// the chunks and how many packets landed without a copy.
fn run_direct(
    e: &mut ChunkAssembler,
    packets: &[Vec<u8>],
    batch: usize,
) -> (Vec<FinishedChunk>, usize) {
    let mut out = Vec::new();
    let mut plan = Vec::new();
    let mut landed = 0;
    for group in packets.chunks(batch) {
        landed += receive_simulated(e, group, &mut plan, &mut out);
    }
    e.flush(&mut out);
    (out, landed)
}

fn run_push(e: &mut ChunkAssembler, packets: &[Vec<u8>]) -> Vec<FinishedChunk> {
    let mut out = Vec::new();
    for p in packets {
        e.push(p, &mut out);
    }
    e.flush(&mut out);
    out
}

/// Same chunks, presence and present bytes (of a slot, the first `len(id)` bytes: past
/// its message's end a slot's bytes are undefined).
fn assert_same(
    direct: &[FinishedChunk],
    plain: &[FinishedChunk],
    per_packet: bool,
    len: impl Fn(u64) -> usize,
) {
    assert_eq!(direct.len(), plain.len());
    for (d, p) in direct.iter().zip(plain) {
        assert_eq!(d.info.chunk_id, p.info.chunk_id);
        assert_eq!(d.info.present, p.info.present, "chunk {}", d.info.chunk_id);
        assert_eq!(d.info.packet_present, p.info.packet_present);
        for i in 0..SPC {
            let r = d.info.slot_range(i);
            let id = d.info.chunk_id * SPC as u64 + i as u64;
            let r = r.start..r.start + len(id);
            if d.info.is_present(i) {
                assert_eq!(
                    &d.slot.as_ref()[r.clone()],
                    &p.slot.as_ref()[r],
                    "chunk {} slot {i}",
                    d.info.chunk_id
                );
            } else if per_packet {
                for k in 0..r.len().div_ceil(PAYLOAD) {
                    if d.info.is_packet_present(i, k) {
                        let at = r.start + k * PAYLOAD..(r.start + (k + 1) * PAYLOAD).min(r.end);
                        assert_eq!(&d.slot.as_ref()[at.clone()], &p.slot.as_ref()[at]);
                    }
                }
            }
        }
    }
}

#[test]
fn an_orderly_stream_lands_without_copies_and_matches_push() {
    let packets: Vec<_> = (0..24).flat_map(|id| message(id, 40, 8)).collect();
    let (direct, landed) = run_direct(&mut engine(false), &packets, 7);
    let plain = run_push(&mut engine(false), &packets);
    assert_same(&direct, &plain, false, |_| 40);
    assert_eq!(direct.len(), 6);
    assert!(direct.iter().all(|c| c.info.is_complete()));
    // Only the first receive cannot be predicted: nothing had been seen.
    assert_eq!(landed, packets.len() - 7);
}

#[test]
fn a_message_length_that_is_not_a_multiple_of_the_payload_still_lands() {
    // 40 = 16 + 16 + 8: the short last packet lands where predicted.
    let packets: Vec<_> = (0..8).flat_map(|id| message(id, 40, 0)).collect();
    let mut e = engine(false);
    let (out, landed) = run_direct(&mut e, &packets, 4);
    assert_eq!(landed, packets.len() - 4);
    assert_eq!(e.stats().heaps, 8);
    assert!(out.iter().all(|c| c.info.is_complete()));
}

/// Loss, duplicates (when `dups`), swaps, odd headers and jumps: every wrong guess must
/// be caught.
fn perturbed(seed: u64, dups: bool) -> (Vec<Vec<u8>>, HashMap<u64, usize>) {
    let mut rng = Xorshift(seed);
    let mut packets = Vec::new();
    let mut lens = HashMap::new();
    let mut id = 0;
    for _ in 0..60 {
        let extra = if rng.chance(30) { 8 } else { 0 };
        let len = if rng.chance(10) { 24 } else { 40 };
        lens.insert(id, len);
        for mut p in message(id, len, extra) {
            if rng.chance(5) {
                continue;
            }
            if rng.chance(5) {
                // A longer header mid-message: the guessed header length is wrong.
                let off = u16::from_le_bytes([p[10], p[11]]).into();
                p = packet(id, len, off, p.len() - 13 - usize::from(p[12]), 4);
            }
            if dups && rng.chance(5) {
                packets.push(p.clone());
            }
            packets.push(p);
        }
        id += if rng.chance(8) {
            1 + rng.next_u64() % 6
        } else {
            1
        };
    }
    for i in 1..packets.len() {
        if rng.chance(6) {
            packets.swap(i - 1, i);
        }
    }
    (packets, lens)
}

#[test]
fn perturbed_streams_give_what_push_gives() {
    for per_packet in [false, true] {
        for seed in 1..40 {
            // Without per-packet presence a duplicate counts towards its message, which
            // can then be complete with a gap of undefined bytes: compared only with it.
            let (packets, lens) = perturbed(seed * 7919, per_packet);
            for batch in [1, 5, 16] {
                let mut d = engine(per_packet);
                let (direct, landed) = run_direct(&mut d, &packets, batch);
                let mut p = engine(per_packet);
                let plain = run_push(&mut p, &packets);
                assert_eq!(d.stats(), p.stats(), "seed {seed} batch {batch}");
                assert_same(&direct, &plain, per_packet, |id| {
                    lens.get(&id).copied().unwrap_or(0)
                });
                // The landing path is exercised (the orderly tests count it exactly).
                assert!(landed > 0, "seed {seed} batch {batch}: nothing landed");
            }
        }
    }
}

#[test]
fn nothing_is_planned_before_the_stream_is_seen_or_for_other_handlers() {
    let mut e = engine(false);
    let mut plan = Vec::new();
    e.plan(8, &mut plan);
    assert!(plan.is_empty(), "no packet seen yet");
    let mut out = Vec::new();
    e.push(&message(0, 40, 0)[0], &mut out);
    e.plan(8, &mut plan);
    assert!(!plan.is_empty());
    assert!(plan.iter().all(|l| l.header_len == 13));
    // A handler that copies its own way never gets landings.
    let cfg = e.config().clone();
    let pool = SlotPool::new(&cfg.pool_config(8, HugepagePolicy::Off)).unwrap();
    let mut c = ChunkAssembler::new(cfg, Box::new(Plain), pool).unwrap();
    assert!(!c.lands_directly());
    c.push(&message(0, 40, 0)[0], &mut out);
    c.plan(8, &mut plan);
    assert!(plan.is_empty());
}

#[test]
fn a_payload_landed_in_the_wrong_slot_is_moved_not_accounted_there() {
    // Each message's first packet is predicted into the next message's slot: it is
    // the right (message, offset), so it passes the header check, but its chunk
    // memory is not where the message was then placed.
    let packets: Vec<_> = (0..24).flat_map(|id| message(id, 40, 0)).collect();
    let (direct, landed) = run_direct(&mut engine_with(false, SplitToy { lie: true }), &packets, 7);
    let plain = run_push(&mut engine(false), &packets);
    assert_same(&direct, &plain, false, |_| 40);
    assert!(direct.iter().all(|c| c.info.is_complete()));
    // Every packet of a message predicted into the wrong slot was gathered; only the
    // continuations of the message open when a receive was planned landed.
    assert!(landed > 0 && landed < packets.len() / 2, "{landed}");
}

#[test]
fn chunks_too_large_to_stay_in_cache_are_not_landed_in_unless_asked() {
    let big = ChunkConfig {
        slots_per_chunk: 8,
        slot_size: 1 << 20,
        max_chunks: 2,
        max_messages: 8,
        packet_payload_size: 0,
    };
    assert!(big.chunk_bytes() > LANDING_MAX_CHUNK_BYTES);
    let pool = SlotPool::new(&big.pool_config(3, HugepagePolicy::Off)).unwrap();
    let mut e = ChunkAssembler::new(big, Box::new(SplitToy::default()), pool).unwrap();
    assert!(e.can_land() && !e.lands_directly());
    let mut out = Vec::new();
    let mut plan = Vec::new();
    e.push(&message(0, 40, 0)[0], &mut out);
    e.plan(4, &mut plan);
    assert!(plan.is_empty());
    e.set_landing(true);
    assert!(e.lands_directly());
    e.push(&message(0, 40, 0)[1], &mut out);
    e.plan(4, &mut plan);
    assert!(!plan.is_empty());
    e.set_landing(false);
    e.plan(4, &mut plan);
    assert!(plan.is_empty());
    // A handler that does not allow it stays off.
    let small = ChunkConfig {
        slots_per_chunk: SPC,
        slot_size: SLOT,
        ..ChunkConfig::default()
    };
    let pool = SlotPool::new(&small.pool_config(8, HugepagePolicy::Off)).unwrap();
    let mut c = ChunkAssembler::new(small, Box::new(Plain), pool).unwrap();
    c.set_landing(true);
    assert!(!c.can_land() && !c.lands_directly());
}
