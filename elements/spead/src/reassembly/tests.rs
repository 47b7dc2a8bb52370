// Lists of one range are received ranges here, not misspelt ranges of values.
#![allow(clippy::single_range_in_vec_init)]

use super::*;
use crate::heap::ItemValue;
use crate::wire::{ctrl, ids, Flavour, ItemPointer};
use firehose_core::gstmem::memory_kind;

#[path = "../../tests/common/spead.rs"]
pub(super) mod spead;
use spead::*;

const F40: Flavour = Flavour::SPEAD_64_40;
const F48: Flavour = Flavour::SPEAD_64_48;

fn cfg() -> Config {
    gst::init().unwrap();
    Config {
        max_heap_size: 1 << 20,
        hugepages: HugepagePolicy::Off,
        ..Config::default()
    }
}

fn engine(c: Config) -> Reassembler {
    Reassembler::new(&c).unwrap()
}

fn run(r: &mut Reassembler, packets: &[Vec<u8>]) -> Vec<Heap> {
    let mut out = Vec::new();
    for (k, p) in packets.iter().enumerate() {
        r.push(p, Some(k as u64), &mut |h| out.push(h));
    }
    out
}

/// Runs `check` on an engine in order mode, then on one that allows any order (`ooo`).
fn in_both_modes(mut check: impl FnMut(&mut Reassembler, bool)) {
    for ooo in [false, true] {
        check(
            &mut engine(Config {
                allow_out_of_order: ooo,
                ..cfg()
            }),
            ooo,
        );
    }
}

/// The descriptor of item `id`, `name`: two bytes (u8), described as "d".
fn descriptor(id: u64, name: impl Into<String>) -> crate::descriptor::Descriptor {
    crate::descriptor::Descriptor {
        id,
        name: name.into(),
        description: "d".into(),
        shape: vec![Some(2)],
        format: vec![(b'u', 8)],
        dtype: None,
    }
}

/// The packets `order` names, by index in `packets`.
fn pick(packets: &[Vec<u8>], order: &[usize]) -> Vec<Vec<u8>> {
    order.iter().map(|&i| packets[i].clone()).collect()
}

fn payload(h: &Heap) -> Vec<u8> {
    h.payload.map_readable().unwrap().as_slice().to_vec()
}

fn item_bytes(h: &Heap, id: u64) -> Vec<u8> {
    match h.info.item(id) {
        Some(ItemValue::Bytes(r)) => payload(h)[r.clone()].to_vec(),
        other => panic!("item {id:#x}: {other:?}"),
    }
}

fn items(seed: u64, n: usize) -> Vec<(u64, Val)> {
    vec![
        (0x1600, Val::Imm(seed)),
        (0x1000, Val::Bytes(pattern(seed, n))),
        (0x1001, Val::Bytes(pattern(seed + 1, 10))),
    ]
}

fn check_items(h: &Heap, seed: u64, n: usize) {
    assert!(h.info.complete, "heap {} complete", h.info.heap_cnt);
    assert_eq!(h.info.item(0x1600), Some(&ItemValue::Immediate(seed)));
    assert_eq!(item_bytes(h, 0x1000), pattern(seed, n));
    assert_eq!(item_bytes(h, 0x1001), pattern(seed + 1, 10));
}

#[test]
fn single_packet_heap_skips_the_window() {
    let mut r = engine(cfg());
    let pk = heap_packets(F40, 7, &items(7, 100), 9000);
    assert_eq!(pk.len(), 1);
    let heaps = run(&mut r, &pk);
    assert_eq!(heaps.len(), 1);
    let h = &heaps[0];
    check_items(h, 7, 100);
    assert_eq!(h.info.heap_cnt, 7);
    assert_eq!(h.info.received, vec![0..110]);
    assert_eq!(h.stamp, Some(0));
    assert_eq!(memory_kind(&h.payload), Some(MemoryKind::System));
    assert_eq!(r.in_progress(), 0);
    assert_eq!((r.counts().heaps, r.counts().bytes), (1, 110));
}

#[test]
fn multi_packet_heaps_in_both_flavours() {
    for f in [F40, F48] {
        let mut r = engine(cfg());
        let mut pk = Vec::new();
        for cnt in 1..=5u64 {
            pk.extend(heap_packets(f, cnt, &items(cnt, 5000 + cnt as usize), 1024));
        }
        let heaps = run(&mut r, &pk);
        assert_eq!(heaps.len(), 5, "{f}");
        for (h, cnt) in heaps.iter().zip(1..) {
            assert_eq!(h.info.heap_cnt, cnt);
            assert_eq!(h.info.flavour, f);
            check_items(h, cnt, 5000 + cnt as usize);
            assert_eq!(memory_kind(&h.payload), Some(MemoryKind::System));
        }
        // PTS-like stamps come from each heap's first packet.
        assert_eq!(heaps[1].stamp, Some(5));
        let c = r.counts();
        assert_eq!((c.heaps, c.heaps_incomplete, c.malformed), (5, 0, 0));
    }
}

/// Every item of every heap spead2 wrote, as spead2's own receiver reported it.
#[test]
fn spead2_fixtures_give_what_spead2_receives() {
    for name in FIXTURES {
        let mut r = engine(cfg());
        let heaps = run(&mut r, &split(&fixture(name)));
        let mut got = Vec::new();
        for h in &heaps {
            if h.info.stream_ctrl == Some(ctrl::STOP) {
                continue;
            }
            let cnt = h.info.heap_cnt;
            if h.info.item(ids::DESCRIPTOR).is_some() {
                for d in h.info.descriptors.iter() {
                    got.push(format!("heap {cnt} desc {} {}", d.id, d.name));
                }
            }
            for it in &h.info.items {
                match &it.value {
                    _ if it.id == ids::DESCRIPTOR => {}
                    ItemValue::Immediate(v) => {
                        got.push(format!("heap {cnt} item {} imm {v}", it.id))
                    }
                    ItemValue::Bytes(b) => got.push(format!(
                        "heap {cnt} item {} bytes {}",
                        it.id,
                        hex(&payload(h)[b.clone()])
                    )),
                }
            }
        }
        let mut want = fixture_expect(name);
        // spead2 lists a heap's addressed items by address, then its immediates; we
        // list them in pointer order: compare as sets.
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}");
        let last = heaps.last().unwrap();
        assert_eq!(last.info.stream_ctrl, Some(ctrl::STOP), "{name}");
        assert_eq!(r.descriptors().len(), 5);
        assert_eq!(r.counts().malformed, 0);
    }
}

#[test]
fn a_full_window_evicts_the_oldest_heap() {
    for deliver in [false, true] {
        let mut c = cfg();
        c.max_heaps = 2;
        c.incomplete = if deliver {
            Incomplete::Deliver
        } else {
            Incomplete::Drop
        };
        let mut r = engine(c);
        let a = heap_packets(F40, 1, &items(1, 3000), 1000);
        let b = heap_packets(F40, 2, &items(2, 3000), 1000);
        let d = heap_packets(F40, 3, &items(3, 3000), 1000);
        // Heap 1 loses its second packet; heap 3 arrives while 1 and 2 are open.
        let seq = [&a[..1], &b[..1], &d[..1], &b[1..], &d[1..]].concat();
        let heaps = run(&mut r, &seq);
        let cnts: Vec<u64> = heaps.iter().map(|h| h.info.heap_cnt).collect();
        if deliver {
            assert_eq!(cnts, vec![1, 2, 3]);
            let h = &heaps[0];
            assert!(!h.info.complete);
            assert_eq!(h.info.received, vec![0..1000]);
            assert_eq!(h.payload.size(), 3010);
            let bytes = payload(h);
            assert_eq!(&bytes[..1000], &pattern(1, 3000)[..1000]);
            assert!(bytes[1000..].iter().all(|&x| x == 0), "gaps are zeroed");
        } else {
            assert_eq!(cnts, vec![2, 3]);
            // Dropping incomplete heaps, a heap of one packet is held apart from the
            // window (probation) and lost when pushed out of it or at the end.
            assert_eq!(r.counts().heaps_incomplete, 0);
            assert_eq!(r.in_progress(), 1);
            r.flush(&mut |_| panic!("nothing to deliver"));
        }
        check_items(&heaps[heaps.len() - 1], 3, 3000);
        assert_eq!(r.counts().heaps_incomplete, 1);
    }
}

#[test]
fn substreams_keep_interleaved_senders_apart() {
    // Two senders, cnt even and odd, interleaved packet by packet.
    let mut pk = Vec::new();
    let a = heap_packets(F48, 10, &items(10, 4000), 1000);
    let b = heap_packets(F48, 11, &items(11, 4000), 1000);
    for (x, y) in a.iter().zip(&b) {
        pk.push(x.clone());
        pk.push(y.clone());
    }
    let mut c = cfg();
    c.max_heaps = 1;
    c.substreams = 2;
    let heaps = run(&mut engine(c.clone()), &pk);
    assert_eq!(heaps.len(), 2);
    // One window of one heap cannot hold both: heap 11 evicts heap 10 when it enters
    // the window (at its second packet), and heap 10's later packets are then too late.
    c.substreams = 1;
    let mut r = engine(c);
    let heaps = run(&mut r, &pk);
    assert_eq!(heaps.len(), 1);
    assert_eq!(heaps[0].info.heap_cnt, 11);
    assert_eq!(r.counts().heaps_incomplete, 1);
    assert_eq!(r.counts().out_of_order_dropped, a.len() as u64 - 2);
}

#[test]
fn in_order_mode_drops_out_of_order_packets() {
    let pk = heap_packets(F40, 1, &items(1, 3000), 1000);
    let swapped = vec![pk[0].clone(), pk[2].clone(), pk[1].clone(), pk[3].clone()];
    let mut r = engine(cfg());
    let mut heaps = run(&mut r, &swapped);
    r.flush(&mut |h| heaps.push(h));
    assert!(heaps.is_empty());
    let c = *r.counts();
    assert_eq!((c.out_of_order_dropped, c.heaps_incomplete), (2, 1));

    // A heap whose first packet is missing never enters the window.
    let mut r = engine(cfg());
    assert!(run(&mut r, &pk[1..]).is_empty());
    assert_eq!(r.counts().out_of_order_dropped, 3);
    assert_eq!(r.in_progress(), 0);
}

#[test]
fn out_of_order_mode_tracks_ranges() {
    let mut c = cfg();
    c.allow_out_of_order = true;
    let mut r = engine(c);
    let mut pk = heap_packets(F40, 1, &items(1, 9000), 1000);
    pk.reverse();
    let heaps = run(&mut r, &pk);
    assert_eq!(heaps.len(), 1);
    check_items(&heaps[0], 1, 9000);
    // The first packet to arrive (the heap's last) gives the stamp.
    assert_eq!(heaps[0].stamp, Some(0));
}

#[test]
fn duplicates_are_counted_and_change_nothing() {
    in_both_modes(|r, ooo| {
        let pk = heap_packets(F40, 1, &items(1, 3000), 1000);
        // The last two after completion: duplicates of a heap recently finished.
        let seq = pick(&pk, &[0, 0, 1, 1, 2, 3, 0, 3]);
        let heaps = run(r, &seq);
        assert_eq!(heaps.len(), 1);
        check_items(&heaps[0], 1, 3000);
        assert_eq!(r.counts().duplicates, 4, "ooo={ooo}");
        assert_eq!(r.in_progress(), 0);
    });
}

#[test]
fn partial_overlaps_are_malformed() {
    in_both_modes(|r, ooo| {
        let body = pattern(5, 3000);
        let hl = Some(3000);
        let seq = vec![
            packet(
                F40,
                5,
                hl,
                0,
                &body[..1000],
                &[ItemPointer::addressed(F40, 0x1000, 0)],
            ),
            // Overlaps [500, 1000) already received and brings [1000, 1500).
            packet(F40, 5, hl, 500, &[0xee; 1000], &[]),
            packet(F40, 5, hl, 1000, &body[1000..2000], &[]),
            packet(F40, 5, hl, 2000, &body[2000..], &[]),
        ];
        let heaps = run(r, &seq);
        assert_eq!(heaps.len(), 1);
        assert_eq!(item_bytes(&heaps[0], 0x1000), body);
        assert_eq!(r.counts().malformed, 1, "ooo={ooo}");
    });
}

#[test]
fn heap_length_bounds() {
    let mut c = cfg();
    c.max_heap_size = 4096;
    let mut r = engine(c);
    let good = heap_packets(F40, 2, &items(2, 1000), 512);
    let mut seq = heap_packets(F40, 1, &items(1, 5000), 512);
    let too_large = seq.len() as u64;
    seq.extend(good.iter().cloned());
    // HEAP_LENGTH changing within a heap.
    let hl_change = heap_packets(F40, 3, &items(3, 1000), 512);
    seq.push(hl_change[0].clone());
    seq.push(packet(F40, 3, Some(2000), 512, &[1; 100], &[]));
    // PAYLOAD_OFFSET + PAYLOAD_LENGTH beyond HEAP_LENGTH (rejected by the parser), and
    // beyond the HEAP_LENGTH of earlier packets (a packet without HEAP_LENGTH).
    seq.push(packet(F40, 3, Some(1010), 1000, &[1; 100], &[]));
    seq.push(packet(F40, 3, None, 1000, &[1; 100], &[]));
    // An item address beyond HEAP_LENGTH.
    seq.push(packet(
        F40,
        3,
        Some(1010),
        512,
        &[1; 10],
        &[ItemPointer::addressed(F40, 0x1002, 2000)],
    ));
    let heaps = run(&mut r, &seq);
    assert_eq!(heaps.len(), 1);
    check_items(&heaps[0], 2, 1000);
    let c = *r.counts();
    assert_eq!(c.too_large, too_large);
    assert_eq!(c.malformed, 4);
    // Heap 3 is still open: the rest of it completes it.
    let heaps = run(&mut r, &hl_change[1..]);
    assert_eq!(heaps.len(), 1);
    check_items(&heaps[0], 3, 1000);
}

#[test]
fn heaps_without_length_grow_and_end_at_flush() {
    let mut c = cfg();
    c.max_heap_size = 256 << 10;
    let mut r = engine(c);
    // 100 KB crosses the 16 KiB and 64 KiB classes: the heap moves twice.
    let pk = heap_packets_opt(F40, 1, &items(1, 100_000), 8000, false);
    let mut heaps = run(&mut r, &pk);
    assert!(
        heaps.is_empty(),
        "no HEAP_LENGTH: it cannot know it is done"
    );
    r.flush(&mut |h| heaps.push(h));
    assert_eq!(heaps.len(), 1);
    check_items(&heaps[0], 1, 100_000);
    assert_eq!(heaps[0].payload.size(), 100_010);

    // Growing past max-heap-size: given up, its later packets counted too.
    let pk = heap_packets_opt(F40, 2, &items(2, 300_000), 8000, false);
    let n = pk.len() as u64;
    let heaps = run(&mut r, &pk);
    assert!(heaps.is_empty());
    let grown = (256 << 10) / 8000;
    assert_eq!(r.counts().too_large, n - grown as u64);
    let mut heaps = Vec::new();
    r.flush(&mut |h| heaps.push(h));
    assert!(heaps.is_empty());
    assert_eq!(r.counts().heaps_incomplete, 0);
}

#[test]
fn a_gap_in_a_heap_without_length_makes_it_incomplete() {
    let mut c = cfg();
    c.allow_out_of_order = true;
    c.incomplete = Incomplete::Deliver;
    let mut r = engine(c);
    let pk = heap_packets_opt(F40, 1, &items(1, 3000), 1000, false);
    let mut heaps = run(&mut r, &[pk[0].clone(), pk[2].clone()]);
    r.flush(&mut |h| heaps.push(h));
    assert_eq!(heaps.len(), 1);
    assert!(!heaps[0].info.complete);
    assert_eq!(heaps[0].info.received, vec![0..1000, 2000..3000]);
}

#[test]
fn stop_flushes_then_reports_the_stop_heap() {
    let mut c = cfg();
    c.incomplete = Incomplete::Deliver;
    let mut r = engine(c);
    let a = heap_packets(F40, 1, &items(1, 3000), 1000);
    let mut seq = vec![a[0].clone()];
    seq.extend(heap_packets(F40, 2, &items(2, 10), 1000));
    seq.push(stop_packet(F40, 3));
    let heaps = run(&mut r, &seq);
    let got: Vec<(u64, bool, Option<u64>)> = heaps
        .iter()
        .map(|h| (h.info.heap_cnt, h.info.complete, h.info.stream_ctrl))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, true, None),
            (1, false, None),
            (3, true, Some(ctrl::STOP))
        ]
    );
    assert_eq!(r.in_progress(), 0);
    // A restarted sender reuses heap 2: not a duplicate after the stop.
    let heaps = run(&mut r, &heap_packets(F40, 2, &items(2, 10), 1000));
    assert_eq!(heaps.len(), 1);
}

#[test]
fn reset_discards_heaps_under_construction() {
    let mut r = engine(cfg());
    let a = heap_packets(F40, 1, &items(1, 3000), 1000);
    run(&mut r, &a[..2]);
    assert_eq!(r.in_progress(), 1);
    r.reset();
    assert_eq!(r.in_progress(), 0);
    assert_eq!(r.counts().heaps_incomplete, 1);
    assert_eq!(r.pool_stats().in_use, 0);
    assert_eq!(run(&mut r, &a).len(), 1);
}

#[test]
fn a_descriptor_flood_is_bounded_and_costs_the_stream_nothing() {
    let mut r = engine(Config {
        max_descriptors: 16,
        ..cfg()
    });
    let d = |id: u64| descriptor(id, format!("junk{id}"));
    // Heap 1 brings the real descriptor; then 1000 heaps of one new descriptor each,
    // and every tenth a data heap of the real stream.
    let real = crate::descriptor::encode(&d(0x1000), F40);
    let mut pk = heap_packets(F40, 1, &[(ids::DESCRIPTOR, Val::Bytes(real))], 9000);
    let mut data = Vec::new();
    for k in 0..1000u64 {
        let cnt = 2 + k;
        if k % 10 == 0 {
            data.push(cnt);
            pk.extend(heap_packets(
                F40,
                cnt,
                &[(0x1000, Val::Bytes(vec![k as u8, 7]))],
                9000,
            ));
        } else {
            let junk = crate::descriptor::encode(&d(0x2000 + k), F40);
            pk.extend(heap_packets(
                F40,
                cnt,
                &[(ids::DESCRIPTOR, Val::Bytes(junk))],
                9000,
            ));
        }
    }
    let heaps = run(&mut r, &pk);
    let got: Vec<&Heap> = heaps
        .iter()
        .filter(|h| data.contains(&h.info.heap_cnt))
        .collect();
    assert_eq!(got.len(), data.len(), "every data heap delivered");
    for h in &got {
        assert_eq!(item_bytes(h, 0x1000), vec![(h.info.heap_cnt - 2) as u8, 7]);
        assert_eq!(h.info.descriptors.get(0x1000).unwrap().name, "junk4096");
    }
    assert_eq!(r.descriptors().len(), 16, "the table stays at its bound");
    assert_eq!(r.counts().descriptors_dropped, 900 - 15);
    assert_eq!(r.counts().malformed, 0);
}

#[test]
fn descriptors_accumulate_and_garbage_is_counted() {
    // Heap 2 carries only descriptors: delivered only when asked for.
    let mut r = engine(Config {
        deliver_descriptor_heaps: true,
        ..cfg()
    });
    let raw1 = crate::descriptor::encode(&descriptor(0x1000, "a"), F40);
    let raw2 = crate::descriptor::encode(&descriptor(0x1001, "b"), F40);
    let heap1 = vec![
        (ids::DESCRIPTOR, Val::Bytes(raw1.clone())),
        (ids::DESCRIPTOR, Val::Bytes(b"this is no packet".to_vec())),
        (0x1000, Val::Bytes(vec![1, 2])),
    ];
    let heap2 = vec![
        (ids::DESCRIPTOR, Val::Bytes(raw1)),
        (ids::DESCRIPTOR, Val::Bytes(raw2)),
    ];
    let mut pk = heap_packets(F40, 1, &heap1, 40);
    pk.extend(heap_packets(F40, 2, &heap2, 9000));
    pk.extend(heap_packets(
        F40,
        3,
        &[(0x1000, Val::Bytes(vec![3, 4]))],
        9000,
    ));
    let heaps = run(&mut r, &pk);
    assert_eq!(heaps.len(), 3);
    assert_eq!(heaps[0].info.descriptors.len(), 1);
    assert_eq!(item_bytes(&heaps[0], 0x1000), vec![1, 2]);
    assert_eq!(heaps[1].info.descriptors.len(), 2);
    assert_eq!(heaps[2].info.descriptors.iter().nth(1).unwrap().name, "b");
    assert!(
        heaps[1]
            .info
            .descriptors
            .same_as(&heaps[2].info.descriptors),
        "a snapshot is shared, not copied per heap"
    );
    assert_eq!(r.counts().malformed, 1);
    assert_eq!(r.counts().descriptor_heaps, 0);
}

/// `descs` heaps of counters from `cnt`, each of `per` descriptors (of ids from
/// `first`) and nothing else, in packets of `chunk` bytes.
fn descriptor_heaps(cnt: u64, first: u64, descs: u64, per: u64, chunk: usize) -> Vec<Vec<u8>> {
    let d = |id: u64| descriptor(id, format!("n{id}"));
    let mut pk = Vec::new();
    for k in 0..descs {
        let heap: Vec<(u64, Val)> = (0..per)
            .map(|j| {
                let raw = crate::descriptor::encode(&d(first + k * per + j), F40);
                (ids::DESCRIPTOR, Val::Bytes(raw))
            })
            .collect();
        pk.extend(heap_packets(F40, cnt + k, &heap, chunk));
    }
    pk
}

#[test]
fn heaps_of_descriptors_only_are_learnt_counted_and_not_delivered() {
    for deliver in [false, true] {
        let mut r = engine(Config {
            deliver_descriptor_heaps: deliver,
            max_descriptors: 8,
            ..cfg()
        });
        // Three single-packet descriptor heaps, one of several packets (four
        // descriptors in 100-byte packets), then a data heap, then a heap that mixes
        // a descriptor with data, and a stop heap (item-less but for STREAM_CTRL).
        let mut pk = descriptor_heaps(100, 0x1000, 3, 1, 9000);
        pk.extend(descriptor_heaps(110, 0x2000, 1, 4, 100));
        let n_packets_multi = pk.len() - 3;
        assert!(
            n_packets_multi > 2,
            "the last descriptor heap spans packets"
        );
        pk.extend(heap_packets(
            F40,
            1,
            &[(0x1000, Val::Bytes(vec![5, 6]))],
            9000,
        ));
        let raw = crate::descriptor::encode(
            &crate::descriptor::Descriptor {
                id: 0x3000,
                name: "mixed".into(),
                ..Default::default()
            },
            F40,
        );
        pk.extend(heap_packets(
            F40,
            2,
            &[(ids::DESCRIPTOR, Val::Bytes(raw)), (0x3000, Val::Imm(9))],
            9000,
        ));
        pk.push(stop_packet(F40, 3));
        let heaps = run(&mut r, &pk);
        let cnts: Vec<u64> = heaps.iter().map(|h| h.info.heap_cnt).collect();
        if deliver {
            assert_eq!(cnts, [100, 101, 102, 110, 1, 2, 3]);
            assert_eq!(r.counts().descriptor_heaps, 0);
        } else {
            assert_eq!(cnts, [1, 2, 3], "only heaps with data (and the stop heap)");
            assert_eq!(r.counts().descriptor_heaps, 4);
        }
        // The data heap reads every descriptor learnt before it, either way; the
        // table's bound holds (7 learnt, the mixed heap's the 8th).
        let data = heaps.iter().find(|h| h.info.heap_cnt == 1).unwrap();
        assert_eq!(data.info.descriptors.len(), 7);
        assert_eq!(data.info.descriptors.get(0x2003).unwrap().name, "n8195");
        assert_eq!(r.descriptors().len(), 8);
        assert_eq!(r.counts().descriptors_dropped, 0);
    }
}

#[test]
fn a_repeated_or_refused_descriptor_costs_no_parse_and_is_counted() {
    let mut r = engine(Config {
        max_descriptors: 2,
        ..cfg()
    });
    // Two descriptors fill the table; the same two again (other heaps) are repeats;
    // a third id is refused.
    let mut pk = descriptor_heaps(10, 1, 2, 1, 9000);
    pk.extend(descriptor_heaps(20, 1, 2, 1, 9000));
    pk.extend(descriptor_heaps(30, 7, 1, 1, 9000));
    run(&mut r, &pk);
    let c = *r.counts();
    assert_eq!((c.descriptor_heaps, c.descriptors_dropped), (5, 1));
    assert_eq!(r.descriptors().len(), 2);
    // While there is room, garbage is parsed and counted malformed.
    let mut r = engine(Config {
        max_descriptors: 3,
        ..cfg()
    });
    let mut pk = descriptor_heaps(10, 1, 1, 1, 9000);
    pk.extend(heap_packets(
        F40,
        50,
        &[(ids::DESCRIPTOR, Val::Bytes(vec![0x53; 40]))],
        9000,
    ));
    run(&mut r, &pk);
    assert_eq!((r.counts().malformed, r.descriptors().len()), (1, 1));
}

#[test]
fn pool_exhaustion_drops_and_counts() {
    let mut c = cfg();
    c.max_heap_size = 16 << 10;
    c.pool_size = 1;
    let mut r = engine(c);
    // Two slots of 16 KiB: a third heap held at once finds no memory.
    let mut held = Vec::new();
    for cnt in 1..=3u64 {
        let pk = heap_packets(F40, cnt, &items(cnt, 3000), 1000);
        held.extend(run(&mut r, &pk));
    }
    assert_eq!(held.len(), 2);
    assert!(r.counts().drops_pool >= 1);
    drop(held);
    let pk = heap_packets(F40, 4, &items(4, 3000), 1000);
    assert_eq!(run(&mut r, &pk).len(), 1);
}

/// Each bad input of the issue, interleaved with good heaps: each is counted, none
/// panics, and every good heap arrives intact.
#[test]
fn bad_input_is_counted_and_good_heaps_survive() {
    let mut c = cfg();
    c.max_heap_size = 64 << 10;
    let mut r = engine(c);
    let good = |cnt: u64| heap_packets(F40, cnt, &items(cnt, 2500), 1000);
    let g = good(100);
    let mut bad: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut b = g[0].clone();
    b[0] = 0x54;
    bad.push(("wrong magic", b));
    let mut b = g[0].clone();
    b[1] = 3;
    bad.push(("wrong version", b));
    bad.push(("truncated header", g[0][..6].to_vec()));
    let mut b = g[0].clone();
    b[6] = 0xff;
    b[7] = 0xff;
    bad.push(("absurd item count", b));
    let mut b = g[0].clone();
    b[7] += 1;
    bad.push(("one item more than it holds", b));
    let mut b = g[0].clone();
    b.push(0);
    bad.push(("length mismatch", b));
    bad.push((
        "offset + length beyond HEAP_LENGTH",
        packet(F40, 200, Some(100), 50, &[0; 60], &[]),
    ));
    bad.push((
        "HEAP_LENGTH above max-heap-size",
        packet(F40, 201, Some((1 << 40) - 1), 0, &[0; 60], &[]),
    ));
    bad.push((
        "no HEAP_LENGTH, offset past max-heap-size",
        packet(F40, 202, None, 1 << 39, &[0; 60], &[]),
    ));
    bad.push((
        "descriptor whose packet is garbage",
        heap_packets(
            F40,
            203,
            &[(ids::DESCRIPTOR, Val::Bytes(vec![0x53; 40]))],
            9000,
        )
        .remove(0),
    ));
    bad.push(("empty", Vec::new()));
    let mut stream = Vec::new();
    for (k, (_, b)) in bad.iter().enumerate() {
        let gp = good(k as u64 + 1);
        stream.push(gp[0].clone());
        stream.push(b.clone());
        stream.extend(gp[1..].iter().cloned());
    }
    let heaps = run(&mut r, &stream);
    let cnts: Vec<u64> = heaps.iter().map(|h| h.info.heap_cnt).collect();
    // The descriptor heap is a good heap with a bad descriptor and nothing else: its
    // descriptor counted, the heap absorbed (not delivered).
    let want: Vec<u64> = (1..=bad.len() as u64).collect();
    assert_eq!(cnts, want);
    assert_eq!(r.counts().descriptor_heaps, 1);
    for h in heaps.iter().filter(|h| h.info.heap_cnt != 203) {
        check_items(h, h.info.heap_cnt, 2500);
    }
    let c = *r.counts();
    assert_eq!(c.too_large, 2);
    assert_eq!(c.malformed, bad.len() as u64 - 2);
    assert_eq!(c.heaps_incomplete, 0);
}

/// Random damage to valid streams: nothing panics, and the books balance.
#[test]
fn random_damage_never_panics() {
    let mut rng = firehose_core::testing::Xorshift(0x2545_f491_4f6c_dd1d);
    let mut rnd = move || rng.next_u64();
    for round in 0..40 {
        let mut c = cfg();
        c.max_heap_size = 32 << 10;
        c.allow_out_of_order = round % 2 == 0;
        c.incomplete = if round % 3 == 0 {
            Incomplete::Deliver
        } else {
            Incomplete::Drop
        };
        c.max_heaps = 1 + round % 4;
        let mut r = engine(c);
        let mut stream = Vec::new();
        for cnt in 0..20u64 {
            let f = if cnt % 2 == 0 { F40 } else { F48 };
            let n = (rnd() % 20_000) as usize;
            stream.extend(heap_packets(
                f,
                cnt % 7,
                &items(cnt, n),
                200 + (rnd() % 2000) as usize,
            ));
        }
        for p in &mut stream {
            match rnd() % 8 {
                0 => {
                    let i = (rnd() as usize) % p.len();
                    p[i] ^= 1 << (rnd() % 8);
                }
                1 => p.truncate((rnd() as usize) % (p.len() + 1)),
                _ => {}
            }
        }
        for k in 0..stream.len() {
            let j = (rnd() as usize) % stream.len();
            if rnd() % 4 == 0 {
                stream.swap(k, j);
            }
        }
        let mut n = 0;
        let mut count = |h: Heap| {
            assert!(h.payload.size() <= 32 << 10);
            if h.info.stream_ctrl != Some(ctrl::STOP) {
                n += 1;
            }
        };
        for p in &stream {
            r.push(p, None, &mut count);
        }
        r.flush(&mut count);
        assert_eq!(r.counts().heaps, n);
        assert_eq!(r.counts().packets, stream.len() as u64);
        assert_eq!(r.in_progress(), 0);
    }
}

/// Heaps with `heaps` counters from `first`, each of its first packet only (a flood of
/// partial heaps, as `hostile::Class::HugeIds` sends), of `size` bytes in packets of
/// `chunk`.
fn first_packets(first: u64, heaps: u64, size: usize, chunk: usize) -> Vec<Vec<u8>> {
    (first..first + heaps)
        .map(|cnt| heap_packets(F40, cnt, &items(cnt, size), chunk).swap_remove(0))
        .collect()
}

#[test]
fn a_flood_of_first_packets_costs_no_heap_its_place() {
    // Between every two packets of the real heaps, more partial heaps than the window
    // holds (and than the pool has slots for): they are held apart, push out only each
    // other, and take no pool memory.
    let mut r = engine(cfg());
    let mut flood = first_packets(1 << 30, 7000, 3000, 1000).into_iter();
    let mut seq = Vec::new();
    for cnt in 1..=6 {
        for p in heap_packets(F40, cnt, &items(cnt, 20_000), 1000) {
            seq.push(p);
            seq.extend(flood.by_ref().take(50));
        }
    }
    let heaps = run(&mut r, &seq);
    let cnts: Vec<u64> = heaps.iter().map(|h| h.info.heap_cnt).collect();
    assert_eq!(cnts, (1..=6).collect::<Vec<_>>());
    for h in &heaps {
        check_items(h, h.info.heap_cnt, 20_000);
    }
    // Pool memory went to the six real heaps (kept here) alone, none to the flood.
    assert_eq!(r.pool_stats().high_water, 6, "{:?}", r.pool_stats());
    // As many as the ring's bytes hold are held; the rest were pushed out, lost.
    let held = r.in_progress();
    assert!(held > 1000 && held < 2100, "{held}");
    let lost = r.counts().heaps_incomplete;
    assert_eq!(lost, 6300 - held as u64);
    r.flush(&mut |_| panic!("partial heaps are dropped"));
    assert_eq!(r.counts().heaps_incomplete, 6300);
}

#[test]
fn a_heap_is_lost_only_when_probation_overflows_before_its_second_packet() {
    let real = heap_packets(F40, 7, &items(7, 3000), 1000);
    // Other heaps' first packets between the real heap's first two: the ring's bytes
    // bound large ones, its places small ones.
    let large = first_packets(1000, 1, 3000, 1000)[0].len();
    let by_bytes = (PROBATION_BYTES - real[0].len()) / large;
    let by_places = PROBATION_PLACES - 1;
    for (between, size, chunk) in [(by_bytes, 3000, 1000), (by_places, 8, 4)] {
        for n in [between, between + 1] {
            let mut r = engine(cfg());
            let mut seq = vec![real[0].clone()];
            seq.extend(first_packets(1000, n as u64, size, chunk));
            seq.extend(real[1..].iter().cloned());
            let heaps = run(&mut r, &seq);
            let survived = heaps.iter().any(|h| h.info.heap_cnt == 7);
            assert_eq!(survived, n == between, "{n} heaps of {size} bytes between");
            if !survived {
                // Its later packets are counted, not taken for the start of a heap.
                assert_eq!(r.counts().out_of_order_dropped, real.len() as u64 - 1);
            }
        }
    }
}

#[test]
fn a_held_heap_keeps_its_stamp_and_is_checked_like_any_other() {
    let mut r = engine(cfg());
    let pk = heap_packets(F40, 3, &items(3, 3000), 1000);
    // After the first, a repeat, another HEAP_LENGTH, a gap (in order mode): none
    // admits the heap.
    let mut seq = pick(&pk, &[0, 0]);
    seq.push(packet(F40, 3, Some(99_999), 1000, &[0; 1000], &[]));
    seq.extend(pick(&pk, &[2, 1, 2, 3]));
    let heaps = run(&mut r, &seq);
    assert_eq!(heaps.len(), 1);
    check_items(&heaps[0], 3, 3000);
    assert_eq!(heaps[0].stamp, Some(0), "the first packet's stamp");
    let c = *r.counts();
    assert_eq!(
        (c.duplicates, c.malformed, c.out_of_order_dropped),
        (1, 1, 1)
    );
}

/// Heaps under construction in the window (not in probation).
fn in_window(r: &Reassembler) -> usize {
    r.in_progress() - r.probation.len()
}

#[test]
fn an_in_order_streams_next_heap_skips_probation() {
    let mut r = engine(cfg());
    let mut heaps = Vec::new();
    for cnt in 1..=6u64 {
        for (k, p) in heap_packets(F40, cnt, &items(cnt, 20_000), 1000)
            .iter()
            .enumerate()
        {
            r.push(p, None, &mut |h| heaps.push(h));
            if k == 0 {
                // The first heap waits for its second packet; every later one follows
                // the heap before it, which proved itself, and enters at once.
                assert_eq!(r.probation.len(), usize::from(cnt == 1), "heap {cnt}");
                assert_eq!(in_window(&r), usize::from(cnt > 1), "heap {cnt}");
            }
        }
    }
    assert_eq!(heaps.len(), 6);
    for h in &heaps {
        check_items(h, h.info.heap_cnt, 20_000);
    }
    // The step is the stream's: heaps 10, 20, 30 … skip probation from the third on.
    let mut r = engine(cfg());
    let mut held = Vec::new();
    for cnt in (10..=50u64).step_by(10) {
        for (k, p) in heap_packets(F40, cnt, &items(cnt, 3000), 1000)
            .iter()
            .enumerate()
        {
            r.push(p, None, &mut |_| {});
            if k == 0 {
                held.push(r.probation.len());
            }
        }
    }
    assert_eq!(held, [1, 1, 0, 0, 0]);
}

#[test]
fn only_the_expected_counter_skips_probation_and_it_keeps_its_place() {
    let mut r = engine(cfg());
    let mut heaps = Vec::new();
    for p in heap_packets(F40, 1, &items(1, 3000), 1000) {
        r.push(&p, None, &mut |h| heaps.push(h));
    }
    // An attacker sends the first packets of heaps 2 to 40 (guessing the next
    // counters): only heap 2, the one expected, enters the window.
    let fakes = first_packets(2, 39, 3000, 1000);
    run(&mut r, &fakes);
    assert_eq!((in_window(&r), r.probation.len()), (1, 38));
    // The stream's heap 2 after the fake one is a repeat (as with any spoofed packet
    // of a guessed counter); heap 41 then follows with a flood of first packets
    // without HEAP_LENGTH between its first two (they enter the window at once and
    // evict one-packet heaps): the expected heap keeps its place.
    let real = heap_packets(F40, 41, &items(41, 3000), 1000);
    let mut r = engine(cfg());
    for cnt in 39..=40 {
        for p in heap_packets(F40, cnt, &items(cnt, 3000), 1000) {
            r.push(&p, None, &mut |h| heaps.push(h));
        }
    }
    r.push(&real[0], None, &mut |h| heaps.push(h));
    assert_eq!(r.probation.len(), 0, "heap 41 is expected");
    for cnt in 1000..1020u64 {
        let p = heap_packets_opt(F40, cnt, &items(cnt, 3000), 1000, false).swap_remove(0);
        r.push(&p, None, &mut |h| heaps.push(h));
    }
    for p in &real[1..] {
        r.push(p, None, &mut |h| heaps.push(h));
    }
    let got: Vec<u64> = heaps.iter().map(|h| h.info.heap_cnt).collect();
    assert_eq!(got, [1, 39, 40, 41]);
    check_items(&heaps[3], 41, 3000);
}
