//! Receiving straight into heaps against `push` alone: a simulated scatter receive (the
//! "kernel" puts each expected packet's header into scratch and its payload where the
//! plan says) must give the same heaps, bytes and counts as pushing every packet, on
//! orderly and on perturbed streams, and must never account a payload that is not where
//! it belongs.

use firehose_chunk::landing::{receive_simulated, Landed, Landing, LandingEngine};
use firehose_core::testing::Xorshift;

use super::*;
use crate::heap::ItemValue;
use crate::wire::{Flavour, ItemPointer};

use super::tests::spead::*;

const F: Flavour = Flavour::SPEAD_64_40;
/// Payload bytes per packet.
const CHUNK: usize = 512;

fn engine(incomplete: Incomplete) -> Reassembler {
    gst::init().unwrap();
    let mut r = Reassembler::new(&Config {
        max_heap_size: 1 << 20,
        hugepages: HugepagePolicy::Off,
        incomplete,
        ..Config::default()
    })
    .unwrap();
    r.set_landing(Some(usize::MAX));
    r
}

fn items(cnt: u64, n: usize) -> Vec<(u64, Val)> {
    vec![
        (0x1600, Val::Imm(cnt)),
        (0x1000, Val::Bytes(pattern(cnt, n))),
    ]
}

/// Feeds `packets` as a host receiving into landings does, `batch` at a time (the
/// batch's index is the stamp); returns the heaps and how many packets landed.
fn run_direct(e: &mut Reassembler, packets: &[Vec<u8>], batch: usize) -> (Vec<Heap>, usize) {
    let mut out = Emitted::default();
    let mut plan = Vec::new();
    let mut landed = 0;
    for (g, group) in packets.chunks(batch).enumerate() {
        out.stamp = Some(g as u64);
        landed += receive_simulated(e, group, &mut plan, &mut out);
    }
    e.flush(&mut |h| out.heaps.push(h));
    (out.heaps, landed)
}

fn run_push(e: &mut Reassembler, packets: &[Vec<u8>], batch: usize) -> Vec<Heap> {
    let mut out = Vec::new();
    for (g, group) in packets.chunks(batch).enumerate() {
        for p in group {
            e.push(p, Some(g as u64), &mut |h| out.push(h));
        }
    }
    e.flush(&mut |h| out.push(h));
    out
}

fn bytes(h: &Heap) -> Vec<u8> {
    h.payload.map_readable().unwrap().as_slice().to_vec()
}

/// The same heaps: cnt, completeness, ranges received, items, stamps and every byte
/// (an incomplete heap's gaps are zeroed, so all of it compares).
fn assert_same(direct: &[Heap], plain: &[Heap], what: &str) {
    let key = |h: &Heap| (h.info.heap_cnt, h.info.complete, h.info.received.clone());
    assert_eq!(
        direct.iter().map(key).collect::<Vec<_>>(),
        plain.iter().map(key).collect::<Vec<_>>(),
        "{what}"
    );
    for (d, p) in direct.iter().zip(plain) {
        assert_eq!(d.stamp, p.stamp, "{what}: heap {}", d.info.heap_cnt);
        assert_eq!(
            d.info.items, p.info.items,
            "{what}: heap {}",
            d.info.heap_cnt
        );
        assert!(
            bytes(d) == bytes(p),
            "{what}: heap {} bytes",
            d.info.heap_cnt
        );
    }
}

#[test]
fn an_orderly_stream_lands_without_copies_and_matches_push() {
    // 5000 + 0 bytes: ten packets, the last one short; the first carries the heap's
    // pointers (a longer header), as spead2 sends it.
    let packets: Vec<_> = (1..=24)
        .flat_map(|cnt| heap_packets(F, cnt, &items(cnt, 5000), CHUNK))
        .collect();
    let (direct, landed) = run_direct(&mut engine(Incomplete::Drop), &packets, 7);
    let plain = run_push(&mut engine(Incomplete::Drop), &packets, 7);
    assert_same(&direct, &plain, "orderly");
    assert_eq!(direct.len(), 24);
    assert!(direct.iter().all(|h| h.info.complete));
    // Only the first receive cannot be predicted: nothing had been seen.
    assert_eq!(landed, packets.len() - 7);
    let first = &direct[0];
    assert_eq!(
        first.info.item(0x1000),
        Some(&ItemValue::Bytes(0..5000)),
        "items parsed from the landed heap"
    );
}

/// Loss, duplicates, swaps, odd headers mid-heap, other heap lengths, cnt jumps,
/// single-packet heaps and a stop heap: every wrong guess must be caught.
fn perturbed(seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Xorshift(seed);
    let mut packets = Vec::new();
    let mut cnt = 1;
    for _ in 0..40 {
        if rng.chance(10) {
            // A heap whole in one packet (a descriptor heap, say).
            packets.extend(heap_packets(F, cnt, &items(cnt, 100), CHUNK));
            cnt += 1;
            continue;
        }
        let n = if rng.chance(15) { 3000 } else { 5000 };
        for mut p in heap_packets(F, cnt, &items(cnt, n), CHUNK) {
            if rng.chance(5) {
                continue;
            }
            if rng.chance(4) {
                // One item pointer more mid-heap: the guessed header length is wrong.
                let q = Packet::parse(&p).unwrap();
                if q.payload_offset > 0 {
                    let extra = [ItemPointer::immediate(F, 0x1700, 9)];
                    p = packet(F, cnt, q.heap_length, q.payload_offset, q.payload, &extra);
                }
            }
            if rng.chance(4) {
                packets.push(p.clone());
            }
            packets.push(p);
        }
        cnt += if rng.chance(8) {
            1 + rng.next_u64() % 5
        } else {
            1
        };
    }
    for i in 1..packets.len() {
        if rng.chance(5) {
            packets.swap(i - 1, i);
        }
    }
    packets.push(stop_packet(F, cnt));
    packets
}

#[test]
fn perturbed_streams_give_what_push_gives() {
    let mut landed_any = 0;
    for incomplete in [Incomplete::Drop, Incomplete::Deliver] {
        for seed in 1..40 {
            let packets = perturbed(seed * 7919);
            for batch in [1, 5, 16] {
                let what = format!("seed {seed} batch {batch} {incomplete:?}");
                let mut d = engine(incomplete);
                let (direct, landed) = run_direct(&mut d, &packets, batch);
                let mut p = engine(incomplete);
                let plain = run_push(&mut p, &packets, batch);
                assert_eq!(d.counts(), p.counts(), "{what}");
                assert_same(&direct, &plain, &what);
                landed_any += landed;
            }
        }
    }
    // The landing path is exercised (the orderly test counts it exactly).
    assert!(landed_any > 10_000, "{landed_any} landed");
}

#[test]
fn a_payload_that_landed_elsewhere_is_missed_and_changes_nothing() {
    let packets = heap_packets(F, 1, &items(1, 5000), CHUNK);
    let mut e = engine(Incomplete::Drop);
    let mut out = Emitted::default();
    for p in &packets[..3] {
        LandingEngine::push(&mut e, p, &mut out);
    }
    let mut plan = Vec::new();
    e.plan(4, &mut plan);
    assert_eq!(plan.len(), 4);
    let l = plan[0];
    assert_eq!((l.message_id, l.message_offset), (1, 3 * CHUNK));
    let p = &packets[3];
    let h = l.header_len;
    let facts = e
        .predicted(&p[..h], p.len(), &l)
        .expect("the predicted packet");
    // The receive put the payload somewhere else than the landing said.
    let mut elsewhere = p[h..].to_vec();
    let wrong = Landing {
        dest: elsewhere.as_mut_ptr(),
        ..l
    };
    let before = *e.counts();
    assert_eq!(e.land(&p[..h], &facts, &wrong, &mut out), Landed::Missed);
    assert_eq!(*e.counts(), before, "nothing counted");
    // Pushed instead, the heap still completes with the right bytes.
    for p in &packets[3..] {
        LandingEngine::push(&mut e, p, &mut out);
    }
    assert_eq!(out.heaps.len(), 1);
    assert!(out.heaps[0].info.complete);
    assert_eq!(bytes(&out.heaps[0]), pattern(1, 5000));
    // Another packet's facts are not accounted at this landing either.
    assert!(e
        .predicted(&packets[4][..h], packets[4].len(), &l)
        .is_none());
}

#[test]
fn nothing_is_planned_off_out_of_order_or_before_the_stream_is_seen() {
    let packets = heap_packets(F, 1, &items(1, 5000), CHUNK);
    let mut plan = Vec::new();
    let mut e = engine(Incomplete::Drop);
    e.plan(8, &mut plan);
    assert!(plan.is_empty(), "nothing seen yet");
    assert_eq!(e.expected_payload(), None);
    e.push(&packets[0], None, &mut |_| {});
    e.push(&packets[1], None, &mut |_| {});
    assert_eq!(e.expected_payload(), Some(CHUNK));
    e.plan(8, &mut plan);
    assert_eq!(plan.len(), 8);
    // The rest of heap 1 (8 packets: the last one short), then heap 2.
    let ids: Vec<_> = plan
        .iter()
        .map(|l| (l.message_id, l.message_offset))
        .collect();
    assert_eq!(ids[0], (1, 2 * CHUNK));
    assert_eq!(ids[7], (1, 9 * CHUNK));
    assert!(plan[7].short && plan[7].len == 5000 - 9 * CHUNK);
    e.plan(12, &mut plan);
    assert_eq!(
        plan[8..]
            .iter()
            .map(|l| (l.message_id, l.message_offset))
            .collect::<Vec<_>>(),
        vec![(2, 0), (2, CHUNK), (2, 2 * CHUNK), (2, 3 * CHUNK)]
    );
    assert!(
        plan[8].header_len > plan[9].header_len,
        "a first packet's header"
    );
    assert!(e.heaps_fit_landing());
    e.set_landing(Some(4999));
    e.plan(8, &mut plan);
    assert!(plan.is_empty(), "heaps larger than asked");
    assert!(!e.heaps_fit_landing());
    e.set_landing(Some(5000));
    e.plan(8, &mut plan);
    assert_eq!(plan.len(), 8, "heaps of the size asked");
    assert!(e.heaps_fit_landing());
    e.set_landing(None);
    e.plan(8, &mut plan);
    assert!(plan.is_empty(), "off");
    let mut o = Reassembler::new(&Config {
        max_heap_size: 1 << 20,
        hugepages: HugepagePolicy::Off,
        allow_out_of_order: true,
        ..Config::default()
    })
    .unwrap();
    o.set_landing(Some(usize::MAX));
    assert!(!o.lands_directly(), "never out of order");
    o.push(&packets[0], None, &mut |_| {});
    o.push(&packets[1], None, &mut |_| {});
    o.plan(8, &mut plan);
    assert!(plan.is_empty());
}
