//! The receive path on arbitrary packets: decode, reassembly in every configuration,
//! descriptors in heaps. Nothing may panic, and every heap must be consistent.
//!
//! Input: 4 configuration bytes, then packets, each as a big-endian u16 length and that
//! many bytes (a short last packet is taken as it is).

#![no_main]

use std::sync::Once;

use firehose_core::HugepagePolicy;
use firehose_spead::heap::ItemValue;
use firehose_spead::reassembly::{Config, Heap, Incomplete, Reassembler};
use firehose_spead::wire::ctrl;
use libfuzzer_sys::fuzz_target;

mod framing;

fn config(c: &[u8]) -> Config {
    Config {
        allow_out_of_order: c[0] & 1 != 0,
        incomplete: if c[0] & 2 != 0 {
            Incomplete::Deliver
        } else {
            Incomplete::Drop
        },
        max_heaps: 1 + usize::from(c[1] % 8),
        substreams: 1 + usize::from(c[2] % 4),
        // 1 KiB to 128 KiB: growth, class fallback and the bound are all reachable.
        max_heap_size: 1024 << (c[3] % 8),
        // 1 to 16 descriptors: the bound and its overflow count are reachable.
        max_descriptors: 1 + usize::from(c[3] >> 4),
        // Small pools (2 heaps a class) unless asked: exhaustion is reachable too.
        pool_size: if c[0] & 4 != 0 { 0 } else { 1 },
        hugepages: HugepagePolicy::Off,
        stop_ends: c[0] & 8 == 0,
        // Heaps of descriptors only: learnt and counted, or delivered.
        deliver_descriptor_heaps: c[0] & 16 != 0,
    }
}

/// The engine's promises about one heap.
fn check(h: &Heap, max: usize) {
    let size = h.payload.size();
    let info = &h.info;
    if info.stream_ctrl != Some(ctrl::STOP) {
        assert!(size <= max, "heap of {size} bytes above the bound {max}");
    }
    if info.complete {
        assert_eq!(info.received, std::iter::once(0..size).collect::<Vec<_>>());
    } else {
        let mut end = 0;
        for r in &info.received {
            let ok = r.start >= end && r.start < r.end && r.end <= size;
            assert!(ok, "{:?} of {size}", info.received);
            end = r.end;
        }
    }
    for it in &info.items {
        if let ItemValue::Bytes(r) = &it.value {
            assert!(
                r.start < r.end && r.end <= size,
                "item {:#x} at {r:?} of {size}",
                it.id
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    static INIT: Once = Once::new();
    INIT.call_once(|| gst::init().expect("gst::init"));
    if data.len() < 4 {
        return;
    }
    let cfg = config(&data[..4]);
    let max = cfg.max_heap_size;
    let mut r = Reassembler::new(&cfg).expect("small pools");
    let mut heaps = 0u64;
    let mut emit = |h: Heap| {
        check(&h, max);
        if h.info.stream_ctrl != Some(ctrl::STOP) {
            heaps += 1;
        }
    };
    let mut packets = 0u64;
    for packet in framing::packets(&data[4..]) {
        r.push(packet, Some(packets), &mut emit);
        packets += 1;
    }
    r.flush(&mut emit);
    assert_eq!(r.in_progress(), 0);
    let c = *r.counts();
    assert_eq!(c.packets, packets);
    assert_eq!(c.heaps, heaps);
    // Every heap was dropped by `emit`: only the current arena slot may be in use.
    assert!(r.pool_stats().in_use <= 1, "{:?}", r.pool_stats());
});
