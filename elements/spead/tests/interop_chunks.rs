//! `speaddepay mode=chunks` against spead2 4.5.1's own chunk stream
//! (`tests/spead2/chunk_recv.py`: `spead2.recv.ChunkRingStream` with a numba place
//! callback): the same SPEAD stream, cut by our `speadpay` with a few heaps and one packet
//! left out, is sent to both; they must give the same chunk ids, the same heap presence
//! (exactly the heaps sent whole) and the same bytes in every present slot, placed by
//! HEAP_CNT and by a timestamp item.

mod common;
mod interop_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{launch, run_to_eos};
use firehose_core::batch::PacketBatchMeta;
use firehose_core::meta::chunk::ChunkMeta;
use firehose_spead::wire::Packet;
use gst::prelude::*;
use gst_check::Harness;
use interop_common::{init, raise_rmem_max, register_depay, temp_dir, Script};

const HEAPS_PER_CHUNK: usize = 4;
const HEAP_BYTES: usize = 32 << 10;
const HEAPS: usize = 26;
/// Data heaps (in sending order) left out, and the one that loses a packet.
const LOST: [usize; 3] = [5, 6, 17];
const CUT: usize = 10;
const TS_ID: u64 = 0x1600;
const TS_STEP: u64 = 2048;

fn pattern(k: usize) -> Vec<u8> {
    (0..HEAP_BYTES)
        .map(|i| (k.wrapping_mul(131).wrapping_add(i * 7) % 251) as u8)
        .collect()
}

/// The stream as `speadpay` cuts it (descriptors in a heap of their own, a timestamp
/// item, the stop heap at the end), one packet per entry.
fn stream() -> Vec<Vec<u8>> {
    let el = gst::ElementFactory::make("speadpay")
        .property_from_str("hugepages", "off")
        .property_from_str("descriptors-separate", "true")
        .property("packet-size", 1472u32)
        .property("timestamp-id", TS_ID)
        .property("timestamp-step", TS_STEP)
        .build()
        .unwrap();
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    h.set_src_caps_str("application/octet-stream");
    h.play();
    let mut packets = Vec::new();
    let mut take = |h: &mut Harness| {
        while let Some(buf) = h.try_pull() {
            let meta = buf.meta::<PacketBatchMeta>().expect("packet batch");
            let map = buf.map_readable().unwrap();
            for p in meta.packets() {
                packets.push(map[p.range()].to_vec());
            }
        }
    };
    for k in 0..HEAPS {
        h.push(gst::Buffer::from_mut_slice(pattern(k))).unwrap();
        take(&mut h);
    }
    assert!(h.push_event(gst::event::Eos::new()));
    take(&mut h);
    packets
}

/// A chunk: its id, presence per slot, and its bytes.
type Chunk = (u64, Vec<bool>, Vec<u8>);

/// Runs `fhudpsrc ! speaddepay mode=chunks …` and spead2's chunk stream, sends `packets`
/// to both, and returns (ours, spead2's).
fn receive_both(packets: &[Vec<u8>], place: &[(&str, String)]) -> (Vec<Chunk>, Vec<Chunk>) {
    register_depay();
    raise_rmem_max();
    let dir = temp_dir(&format!("chunks-{}", place.len()));
    let mut args: Vec<String> = vec![
        "--out-dir".into(),
        dir.to_str().unwrap().into(),
        "--heaps-per-chunk".into(),
        HEAPS_PER_CHUNK.to_string(),
        "--heap-size".into(),
        HEAP_BYTES.to_string(),
        "--max-chunks".into(),
        "4".into(),
    ];
    let mut props = String::new();
    for (k, v) in place {
        args.push(format!("--{k}"));
        args.push(v.clone());
        props.push_str(&format!(" {k}={v}"));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut spead2 = Script::spawn("chunk_recv.py", &argv);
    let port2: u16 = spead2.expect("ready", Duration::from_secs(60))["port"]
        .parse()
        .unwrap();

    let pipeline = launch(&format!(
        "fhudpsrc name=src address=127.0.0.1 port=0 hugepages=off buffer-size=33554432 \
         ! speaddepay mode=chunks hugepages=off heaps-per-chunk={HEAPS_PER_CHUNK} \
           heap-size={HEAP_BYTES} max-chunks=4{props} \
         ! fakesink name=sink signal-handoffs=true sync=false"
    ));
    let ours = Arc::new(Mutex::new(Vec::<Chunk>::new()));
    let sink_ours = ours.clone();
    pipeline
        .by_name("sink")
        .unwrap()
        .connect("handoff", false, move |args| {
            let buf = args[1].get::<gst::Buffer>().unwrap();
            let info = buf.meta::<ChunkMeta>().expect("chunk meta").info().clone();
            let map = buf.map_readable().unwrap();
            let present = (0..info.slots).map(|i| info.is_present(i)).collect();
            sink_ours
                .lock()
                .unwrap()
                .push((info.chunk_id, present, map.to_vec()));
            None
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    let port1 = pipeline.by_name("src").unwrap().property::<i32>("port") as u16;

    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (i, p) in packets.iter().enumerate() {
        sock.send_to(p, ("127.0.0.1", port1)).unwrap();
        sock.send_to(p, ("127.0.0.1", port2)).unwrap();
        if i % 32 == 31 {
            // Paced so neither receiver's socket buffer overflows.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let eos = run_to_eos(&pipeline, Duration::from_secs(30));
    pipeline.set_state(gst::State::Null).unwrap();
    eos.unwrap();

    let mut theirs = Vec::new();
    loop {
        let Some(line) = spead2.line(Duration::from_secs(30)) else {
            panic!("spead2 did not end\n{}", spead2.transcript());
        };
        let kv = interop_common::kv(&line);
        match line.split_whitespace().next() {
            Some("chunk") => {
                let present: Vec<bool> = kv["present"].chars().map(|c| c == '1').collect();
                let data = std::fs::read(&kv["file"]).unwrap();
                // spead2 opens every chunk the window passes; ours only chunks that got
                // a heap (a wholly lost chunk is a missing id).
                if present.iter().any(|&p| p) {
                    theirs.push((kv["id"].parse().unwrap(), present, data));
                }
            }
            Some("end") => break,
            Some("timeout") => panic!("spead2 saw no stop heap\n{}", spead2.transcript()),
            _ => {}
        }
    }
    assert_eq!(spead2.finish(Duration::from_secs(10)), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
    let ours = std::mem::take(&mut *ours.lock().unwrap());
    (ours, theirs)
}

/// Sends the stream less the lost heaps and packet, placed by `place`, and compares.
/// `n_of` gives a data heap's placement number from its HEAP_CNT and timestamp (`None`:
/// not placed).
fn compare(place: &[(&str, String)], n_of: impl Fn(u64, u64) -> Option<u64>) {
    interop_common::require_chunk_modules();
    init();
    let all = stream();
    // Data heaps in sending order, by HEAP_CNT.
    let mut order: Vec<u64> = Vec::new();
    let mut packets = Vec::new();
    let mut cut_packets = 0;
    for p in &all {
        let parsed = Packet::parse(p).expect("speadpay's packets parse");
        if parsed.heap_length != Some(HEAP_BYTES as u64) {
            packets.push(p.clone());
            continue;
        }
        let k = match order.iter().position(|&c| c == parsed.heap_cnt) {
            Some(k) => k,
            None => {
                order.push(parsed.heap_cnt);
                order.len() - 1
            }
        };
        if LOST.contains(&k) {
            continue;
        }
        if k == CUT {
            cut_packets += 1;
            if cut_packets == 2 {
                continue;
            }
        }
        packets.push(p.clone());
    }
    assert_eq!(order.len(), HEAPS);
    // Heap k's placement number: from its HEAP_CNT and its timestamp (k × step).
    let expect: BTreeMap<u64, usize> = (0..HEAPS)
        .filter(|k| !LOST.contains(k) && *k != CUT)
        .filter_map(|k| Some((n_of(order[k], k as u64 * TS_STEP)?, k)))
        .collect();

    let (ours, theirs) = receive_both(&packets, place);
    let ids = |c: &[Chunk]| c.iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(ids(&ours), ids(&theirs), "chunk ids");
    assert!(ours.len() >= HEAPS / HEAPS_PER_CHUNK, "{:?}", ids(&ours));
    let mut seen = BTreeSet::new();
    for ((id, p1, d1), (_, p2, d2)) in ours.iter().zip(&theirs) {
        assert_eq!(p1, p2, "presence of chunk {id}");
        for (i, _) in p1.iter().enumerate().filter(|(_, &p)| p) {
            let r = i * HEAP_BYTES..(i + 1) * HEAP_BYTES;
            assert!(d1[r.clone()] == d2[r.clone()], "chunk {id} slot {i}");
            let n = id * HEAPS_PER_CHUNK as u64 + i as u64;
            let k = *expect
                .get(&n)
                .unwrap_or_else(|| panic!("chunk {id} slot {i}: no heap was sent whole there"));
            assert!(d1[r] == pattern(k)[..], "chunk {id} slot {i}: heap {k}");
            seen.insert(n);
        }
    }
    assert_eq!(
        seen,
        expect.keys().copied().collect(),
        "present = exactly the heaps sent whole"
    );
}

#[test]
fn placed_by_heap_cnt_as_spead2_places_them() {
    compare(&[], |cnt, _| Some(cnt));
}

#[test]
fn placed_by_a_timestamp_as_spead2_places_them() {
    compare(
        &[
            ("place-item", format!("{TS_ID:#x}")),
            ("place-step", TS_STEP.to_string()),
            ("place-offset", (3 * TS_STEP).to_string()),
        ],
        // Heaps 0, 1 and 2 come before the offset: dropped by both.
        |_, ts| Some(ts.checked_sub(3 * TS_STEP)? / TS_STEP),
    );
}
