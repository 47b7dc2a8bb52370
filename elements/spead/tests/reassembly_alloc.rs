//! The reassembly engine allocates nothing per packet: only per heap (its description)
//! and at start. Checked with an allocator that counts this thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use firehose_core::HugepagePolicy;
use firehose_spead::reassembly::{Config, Heap, Incomplete, Reassembler};
use firehose_spead::wire;
use firehose_spead::wire::{Flavour, ItemPointer};

#[path = "common/spead.rs"]
mod spead;
use spead::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised
// thread-local without destructor, so touching it cannot allocate or recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// Allocations made by `f`.
fn count(f: impl FnOnce()) -> u64 {
    let before = allocs();
    f();
    allocs() - before
}

fn engine(ooo: bool) -> Reassembler {
    gst::init().unwrap();
    Reassembler::new(&Config {
        max_heap_size: 4 << 20,
        allow_out_of_order: ooo,
        incomplete: Incomplete::Deliver,
        hugepages: HugepagePolicy::Off,
        ..Config::default()
    })
    .unwrap()
}

#[test]
fn continuation_packets_allocate_nothing() {
    let f = Flavour::SPEAD_64_40;
    for ooo in [false, true] {
        let mut r = engine(ooo);
        let mut heaps: Vec<Heap> = Vec::with_capacity(16);
        let mut emit = |h: Heap| heaps.push(h);
        for cnt in 1..=4u64 {
            let items = [(0x1000, Val::Bytes(pattern(cnt, 1 << 20)))];
            let mut packets = heap_packets(f, cnt, &items, 8192);
            if ooo {
                // Everything but the first and last packet, reversed.
                let n = packets.len();
                packets[1..n - 1].reverse();
            }
            let (first, rest) = packets.split_first().unwrap();
            let (last, middle) = rest.split_last().unwrap();
            r.push(first, None, &mut emit);
            // Also a duplicate, a malformed packet and an out-of-order one: dropping
            // allocates nothing either.
            let dup = middle[0].clone();
            let bad = packet(f, cnt, Some(5), 0, &[0; 8], &[]);
            let late = packet(f, cnt + 100, Some(100), 50, &[0; 8], &[]);
            let n = count(|| {
                for p in middle {
                    r.push(p, None, &mut emit);
                }
                r.push(&dup, None, &mut emit);
                r.push(&bad, None, &mut emit);
                if !ooo {
                    r.push(&late, None, &mut emit);
                }
            });
            assert_eq!(n, 0, "{} packets of heap {cnt} (ooo={ooo})", middle.len());
            r.push(last, None, &mut emit);
        }
        assert_eq!(heaps.len(), 4);
        assert!(heaps.iter().all(|h| h.info.complete));
    }
}

#[test]
fn repeated_pointers_allocate_nothing_after_the_first_packet() {
    // "Repeat pointers": every packet carries the heap's pointers again.
    let f = Flavour::SPEAD_64_48;
    let mut r = engine(false);
    let mut heaps = Vec::new();
    let mut emit = |h: Heap| heaps.push(h);
    let ptrs: Vec<ItemPointer> = (0..40)
        .map(|k| ItemPointer::addressed(f, 0x1000 + k, k * 1000))
        .collect();
    let body = pattern(1, 40_000);
    let packets: Vec<Vec<u8>> = body
        .chunks(4000)
        .enumerate()
        .map(|(k, c)| packet(f, 1, Some(40_000), k as u64 * 4000, c, &ptrs))
        .collect();
    r.push(&packets[0], None, &mut emit);
    let n = count(|| {
        for p in &packets[1..packets.len() - 1] {
            r.push(p, None, &mut emit);
        }
    });
    assert_eq!(n, 0);
    r.push(packets.last().unwrap(), None, &mut emit);
    assert_eq!(heaps.len(), 1);
    assert_eq!(heaps[0].info.items.len(), 40);
}
