//! What the chunk fuzz targets share: the input (its packets framed by `framing.rs`), an
//! engine with small pools, and the engine's promises checked on every chunk and at the end.
//!
//! Input: 4 configuration bytes (the first two for the engine, the rest for the
//! handler), then packets, each a big-endian u16 length and that many bytes (a short
//! last packet is taken as it is).

use firehose_chunk::handler::PacketHandler;
use firehose_chunk::{ChunkAssembler, ChunkConfig, FinishedChunk, Flow};
use firehose_core::pool::SlotPool;
use firehose_core::HugepagePolicy;

#[path = "framing.rs"]
mod framing;

/// A small engine: windows, slots and per-packet presence chosen by `c`.
pub fn engine(
    c: &[u8],
    handler: Box<dyn PacketHandler>,
    slots_per_chunk: usize,
    slot_size: usize,
) -> ChunkAssembler {
    let cfg = ChunkConfig {
        slots_per_chunk,
        slot_size,
        max_chunks: 1 + usize::from(c[0] % 4),
        max_messages: 1 + usize::from(c[1] % 8),
        packet_payload_size: if c[0] & 0x80 != 0 { 16 } else { 0 },
    };
    // Few pool chunks: exhaustion (drops-pool) is reachable.
    let pool = SlotPool::new(&cfg.pool_config(2 + usize::from(c[1] >> 6), HugepagePolicy::Off))
        .expect("small pool");
    ChunkAssembler::new(cfg, handler, pool).expect("valid config")
}

/// The engine's promises about one chunk.
fn check(ch: &FinishedChunk) {
    let i = &ch.info;
    let present = (0..i.slots).filter(|&k| i.is_present(k)).count();
    assert_eq!(present, i.slots_present, "{i:?}");
    assert!(i.slots_present <= i.slots);
    assert!(i.bytes <= (i.slots * i.slot_size) as u64, "{i:?}");
}

/// Pushes every packet of `data`, then flushes; checks chunks and counters.
pub fn run(mut e: ChunkAssembler, data: &[u8]) {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| gst::init().expect("gst::init"));
    let mut out = Vec::new();
    let mut pushed = 0u64;
    let mut ended = false;
    for packet in framing::packets(data) {
        if matches!(e.push(packet, &mut out), Flow::End) {
            ended = true;
        }
        pushed += 1;
        out.drain(..).for_each(|c| check(&c));
    }
    e.flush(&mut out);
    out.drain(..).for_each(|c| check(&c));
    let s = e.stats();
    assert!(s.heaps_incomplete + s.heaps <= pushed + 1 || ended, "{s:?}");
    // Every packet is written or counted by one reason: none vanishes.
    assert!(
        s.packets_seen() + s.too_far >= pushed || ended,
        "{s:?} of {pushed}"
    );
}
