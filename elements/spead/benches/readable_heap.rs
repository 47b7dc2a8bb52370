//! What the readable heap meta (`FirehoseHeapMeta`) costs per heap: a heap of three
//! items (two immediates, one addressed) on a stream with two descriptors, as
//! `speaddepay` and `fhspeadsrc` build it: the buffer with the Rust metas, with and
//! without the readable one. Prints the median over several runs of nanoseconds per
//! heap (docs/python.md quotes them).
//!
//! Then the whole `speaddepay` for the worst case, single-packet heaps (1 KiB of
//! payload each): batches of 64 such packets through the element in a harness, heaps
//! out, with `readable-metas` on and off, in heaps per second.
//!
//! Run with `cargo bench -p firehose-spead --bench readable_heap`. Without `--bench`
//! (`cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use firehose_core::batch::{PacketBatchMeta, PacketInfo};
use firehose_core::meta::message;
use firehose_spead::descriptor::Descriptor;
use firehose_spead::descset::DescriptorTable;
use firehose_spead::heap::{self, HeapInfo, HeapItem, HeapMeta, ItemValue};
use firehose_spead::readable;
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use firehose_spead::wire::{ids, ItemPointer, HEADER_LEN, ITEM_LEN};
use gst::prelude::*;
use gst_check::Harness;

mod common;
use common::median_of;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    gst::init().unwrap();
    let (iters, runs) = if full { (100_000, 7) } else { (10, 1) };
    let mut table = DescriptorTable::new(16);
    for (id, name) in [(0x1000, "data"), (0x1600, "timestamp")] {
        table.upsert(Descriptor {
            id,
            name: name.into(),
            description: "bench".into(),
            shape: vec![Some(1024)],
            format: vec![(b'u', 8)],
            dtype: None,
        });
    }
    let info = HeapInfo {
        heap_cnt: 1,
        flavour: Flavour::SPEAD_64_48,
        items: vec![
            HeapItem {
                id: 0x1600,
                value: ItemValue::Immediate(7),
            },
            HeapItem {
                id: 0x1601,
                value: ItemValue::Immediate(8),
            },
            HeapItem {
                id: 0x1000,
                value: ItemValue::Bytes(0..1024),
            },
        ],
        descriptors: table.snapshot(),
        complete: true,
        received: std::iter::once(0..1024).collect(),
        stream_ctrl: None,
    };
    let memory = gst::Memory::with_size(1024);
    for readable in [false, true] {
        let t = median_of(runs, || {
            let t0 = Instant::now();
            for _ in 0..iters {
                // What heapout::heap_buffer does.
                let mut buf = gst::Buffer::new();
                let b = buf.get_mut().unwrap();
                b.append_memory(memory.clone());
                message::add(b, &heap::message(&info, b.size()));
                if readable {
                    readable::add(b, &info);
                }
                HeapMeta::add(b, info.clone());
                black_box(buf);
            }
            t0.elapsed()
        });
        println!(
            "heap buffer (3 items, 2 descriptors), readable-metas={readable}: {:.0} ns per heap",
            t.as_nanos() as f64 / iters as f64
        );
    }
    depay(full);
}

/// Batches of 64 single-packet heaps through `speaddepay`, with and without the readable
/// meta: heaps per second (median).
fn depay(full: bool) {
    const PER_BATCH: usize = 64;
    let batches = if full { 2000 } else { 4 };
    let runs = if full { 7 } else { 1 };
    firehose_core::testing::register_elements(&[(
        "speaddepay",
        firehose_spead::depay::SpeadDepay::static_type(),
    )]);
    let flavour = Flavour::SPEAD_64_48;
    let cfg = PacketConfig::new(flavour, 1500).unwrap();
    let payload = [0x5au8; 1024];
    let items = [Item::immediate(0x1600, 7), Item::bytes(0x1000, &payload)];
    let mut packet = vec![0u8; 1500];
    let len = cfg
        .heap(1, &items)
        .unwrap()
        .write_next(&mut packet)
        .unwrap();
    packet.truncate(len);
    for readable in [false, true] {
        let mut next_cnt = 1u64;
        let el = gst::ElementFactory::make("speaddepay").build().unwrap();
        el.set_property_from_str("hugepages", "off");
        el.set_property("readable-metas", readable);
        let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
        h.set_src_caps(gst::Caps::new_empty_simple(
            "application/x-firehose-packets",
        ));
        h.play();
        let t = median_of(runs, || {
            let mut took = Duration::ZERO;
            for _ in 0..batches {
                let mut slab = Vec::with_capacity(PER_BATCH * len);
                let mut infos = Vec::with_capacity(PER_BATCH);
                for _ in 0..PER_BATCH {
                    let off = slab.len();
                    slab.extend_from_slice(&packet);
                    let ptr = ItemPointer::immediate(flavour, ids::HEAP_CNT, next_cnt).0;
                    next_cnt += 1;
                    slab[off + HEADER_LEN..off + HEADER_LEN + ITEM_LEN]
                        .copy_from_slice(&ptr.to_be_bytes());
                    infos.push(PacketInfo {
                        offset: off as u32,
                        len: len as u32,
                        ..Default::default()
                    });
                }
                let mut buf = gst::Buffer::from_mut_slice(slab);
                PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
                let t0 = Instant::now();
                h.push(buf).unwrap();
                let mut n = 0;
                while let Some(out) = h.try_pull() {
                    black_box(out);
                    n += 1;
                }
                took += t0.elapsed();
                assert_eq!(n, PER_BATCH, "every heap out");
            }
            took
        });
        let heaps = (batches * PER_BATCH) as f64;
        println!(
            "speaddepay, single-packet heaps of 1 KiB, readable-metas={readable}: {:.0} heaps/s ({:.0} ns per heap)",
            heaps / t.as_secs_f64(),
            t.as_nanos() as f64 / heaps
        );
    }
}
