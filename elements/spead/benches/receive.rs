//! Receive-engine throughput without a network: the packets of one 1 MiB heap (as
//! `speadpay` and spead2 cut it, 1472- and 8972-byte packets) are pushed again and again,
//! with a new HEAP_CNT each time, through the [`Reassembler`] (speaddepay) and through
//! the chunk engine with the `spead` handler (chunk mode, 8 heaps per chunk). Prints the
//! median of several runs that follow a warm-up run, in packets/s and GB/s of payload.
//!
//! The packets stay in cache (about 1 MiB), as a receive batch does when the engine
//! reads it right after the kernel wrote it, so this measures the engine's own cost:
//! parsing, bookkeeping and the copy into heap or chunk memory.
//!
//! Run with `cargo bench -p firehose-spead --bench receive`. Without `--bench` (e.g.
//! `cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::time::{Duration, Instant};

use firehose_chunk::{ChunkAssembler, ChunkConfig};
use firehose_core::{HugepagePolicy, SlotPool};
use firehose_spead::reassembly::{Config, Reassembler};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::{ids, Flavour, ItemPointer, HEADER_LEN, ITEM_LEN};

mod common;
use common::median_of;

/// Timed runs per measurement; the median is reported.
const RUNS: usize = 7;
/// Bytes of one heap's payload (the `firehose bench spead` default).
const HEAP: usize = 1 << 20;
/// Bytes of a small heap's payload: two 8972-byte packets.
const SMALL_HEAP: usize = 16 << 10;
/// Heaps per chunk in chunk mode (as `firehose bench spead`).
const HEAPS_PER_CHUNK: usize = 8;
const FLAVOUR: Flavour = Flavour::SPEAD_64_40;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    gst::init().unwrap();
    let heaps = if full { 2000 } else { 16 };
    let runs = if full { RUNS } else { 1 };
    for size in [1472usize, 8972] {
        let mut stream = Stream::new(size, HEAP);
        for (what, run) in [
            (
                "speaddepay engine",
                reassemble as fn(&mut Stream, usize) -> Duration,
            ),
            ("chunk engine", place_in_chunks),
        ] {
            let took = median_of(runs, || run(&mut stream, heaps));
            report(what, size, HEAP, runs, heaps, &stream, took);
        }
    }
    // Small heaps (two packets each): where the copies of a heap's first packet
    // (probation) weigh most.
    let mut stream = Stream::new(8972, SMALL_HEAP);
    let small = heaps * (HEAP / SMALL_HEAP);
    let took = median_of(runs, || reassemble(&mut stream, small));
    report(
        "speaddepay engine",
        8972,
        SMALL_HEAP,
        runs,
        small,
        &stream,
        took,
    );
}

/// Prints one measurement.
fn report(
    what: &str,
    size: usize,
    heap: usize,
    runs: usize,
    heaps: usize,
    stream: &Stream,
    took: Duration,
) {
    let secs = took.as_secs_f64();
    let packets = (heaps * stream.offsets.len()) as f64;
    println!(
        "{what}, {size} B packets, {} KiB heaps, median of {runs}: {:.2} M packets/s, \
         {:.2} GB/s of payload",
        heap >> 10,
        packets / secs / 1e6,
        (heaps * heap) as f64 / secs / 1e9,
    );
}

/// The packets of one heap, renumbered before each use.
struct Stream {
    bytes: Vec<u8>,
    offsets: Vec<(usize, usize)>,
    next_cnt: u64,
}

impl Stream {
    fn new(packet_size: usize, heap: usize) -> Self {
        let payload = vec![0x5au8; heap];
        let items = [Item::immediate(0x1600, 7), Item::bytes(0x1700, &payload)];
        let cfg = PacketConfig::new(FLAVOUR, packet_size).unwrap();
        let mut hp = cfg.heap(1, &items).unwrap();
        let mut bytes = vec![0u8; hp.remaining().1];
        let mut offsets = Vec::new();
        let used = hp.fill(&mut bytes, |off, len| offsets.push((off, len)));
        assert!(hp.is_done() && used == bytes.len());
        Self {
            bytes,
            offsets,
            next_cnt: 1,
        }
    }

    /// Gives every packet the next HEAP_CNT (the first item pointer of each packet).
    fn renumber(&mut self) {
        let ptr = ItemPointer::immediate(FLAVOUR, ids::HEAP_CNT, self.next_cnt).0;
        self.next_cnt += 1;
        for &(off, _) in &self.offsets {
            self.bytes[off + HEADER_LEN..off + HEADER_LEN + ITEM_LEN]
                .copy_from_slice(&ptr.to_be_bytes());
        }
    }
}

/// `heaps` heaps through a fresh [`Reassembler`]; panics unless all come out whole.
fn reassemble(s: &mut Stream, heaps: usize) -> Duration {
    let mut r = Reassembler::new(&Config {
        hugepages: HugepagePolicy::Off,
        ..Config::default()
    })
    .unwrap();
    let mut done = 0;
    let mut took = Duration::ZERO;
    for _ in 0..heaps {
        s.renumber();
        let t = Instant::now();
        for &(off, len) in &s.offsets {
            r.push(&s.bytes[off..off + len], None, &mut |h| {
                done += usize::from(h.info.complete);
            });
        }
        took += t.elapsed();
    }
    assert_eq!(done, heaps, "{:?}", r.counts());
    took
}

/// `heaps` heaps through a fresh chunk engine with the `spead` handler; panics unless
/// every heap was placed.
fn place_in_chunks(s: &mut Stream, heaps: usize) -> Duration {
    let cfg = ChunkConfig {
        slots_per_chunk: HEAPS_PER_CHUNK,
        slot_size: HEAP,
        max_chunks: 2,
        ..Default::default()
    };
    let pool = SlotPool::new(&cfg.pool_config(4, HugepagePolicy::Off)).unwrap();
    let config: gst::Structure = format!("spead,place-offset=1,slots-per-chunk={HEAPS_PER_CHUNK}")
        .parse()
        .unwrap();
    let handler = firehose_spead::chunk::factory(&config).unwrap();
    let mut e = ChunkAssembler::new(cfg, handler, pool).unwrap();
    let mut out = Vec::new();
    let mut took = Duration::ZERO;
    for _ in 0..heaps {
        s.renumber();
        let t = Instant::now();
        for &(off, len) in &s.offsets {
            e.push(&s.bytes[off..off + len], &mut out);
        }
        // Emitted chunks go back to the pool, as after a sink.
        out.clear();
        took += t.elapsed();
    }
    assert_eq!(e.stats().heaps as usize, heaps, "{:?}", e.stats());
    took
}
