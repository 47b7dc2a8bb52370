//! What the readable heap meta (`FirehoseHeapMeta`) costs per heap: a heap of three
//! items (two immediates, one addressed) on a stream with two descriptors, as
//! `speaddepay` and `fhspeadsrc` build it: the buffer with the Rust metas, with and
//! without the readable one. Prints the median over several runs of nanoseconds per
//! heap (docs/python.md quotes them).
//!
//! Run with `cargo bench -p firehose-spead --bench readable_heap`. Without `--bench`
//! (`cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use firehose_core::meta::message;
use firehose_spead::descriptor::Descriptor;
use firehose_spead::descset::DescriptorTable;
use firehose_spead::heap::{self, HeapInfo, HeapItem, HeapMeta, ItemValue};
use firehose_spead::readable;
use firehose_spead::wire::Flavour;

fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut t: Vec<Duration> = (0..runs).map(|_| f()).collect();
    t.sort();
    t[t.len() / 2]
}

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
}
