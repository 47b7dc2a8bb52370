//! What an element hosting a [`ChunkAssembler`] shares with every other host (`fhdepay`,
//! `fhudpchunksrc`, `speaddepay mode=chunks`): building the handler, the pool and the engine at start,
//! feeding it the packets of a buffer, and the `stats` structure.

use crate::handler::{self, CONFIG_SLOTS_PER_CHUNK, CONFIG_SLOT_SIZE};
use firehose_core::batch::PacketBatchMeta;
use firehose_core::pool::SlotPool;
use firehose_core::stats::{self, names};
use firehose_core::{caps as fcaps, HugepagePolicy};

use super::{ChunkAssembler, ChunkConfig, ChunkStats, FinishedChunk, Flow};

/// An engine ready to run, with its pool and output caps.
#[derive(Debug)]
pub struct ChunkHost {
    /// The engine.
    pub engine: ChunkAssembler,
    /// Its pool (kept by the host for the `stats` pool counters after stop).
    pub pool: SlotPool,
    /// `application/x-firehose-chunk` with the layout.
    pub caps: gst::Caps,
}

impl ChunkHost {
    /// Builds the handler named by `handler_config` (its structure name; the host's
    /// [`CONFIG_SLOTS_PER_CHUNK`] and [`CONFIG_SLOT_SIZE`] are set here from `cfg`), a pool
    /// of `pool_chunks` chunks and the engine. The error is the element error to post:
    /// a wrong setting (naming it) or memory that could not be had.
    pub fn new(
        cfg: ChunkConfig,
        mut handler_config: gst::Structure,
        pool_chunks: usize,
        hugepages: HugepagePolicy,
    ) -> Result<Self, gst::ErrorMessage> {
        let settings_error = |e: String| gst::error_msg!(gst::LibraryError::Settings, ("{}", e));
        cfg.validate().map_err(settings_error)?;
        let (Ok(spc), Ok(size)) = (
            u32::try_from(cfg.slots_per_chunk),
            u32::try_from(cfg.slot_size),
        ) else {
            return Err(settings_error(
                "slots per chunk and slot size must be below 2^32".into(),
            ));
        };
        handler_config.set(CONFIG_SLOTS_PER_CHUNK, spc);
        handler_config.set(CONFIG_SLOT_SIZE, size);
        let handler = handler::create_handler(handler_config.name(), &handler_config)
            .map_err(settings_error)?;
        if pool_chunks <= cfg.max_chunks {
            // One more than the window: a chunk on its way out still holds its slot while
            // the next one opens (with blocking, waiting on it would never end).
            return Err(settings_error(format!(
                "the pool must hold more chunks ({pool_chunks}) than max-chunks ({}): every open chunk needs one, and one more is on its way out",
                cfg.max_chunks
            )));
        }
        let pool = SlotPool::new(&cfg.pool_config(pool_chunks, hugepages))
            .map_err(|e| gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e)))?;
        let caps = fcaps::chunk_caps(cfg.slots_per_chunk, cfg.slot_size);
        let engine = ChunkAssembler::new(cfg, handler, pool.clone()).map_err(settings_error)?;
        Ok(Self { engine, pool, caps })
    }
}

/// Feeds every packet of `buf` to `engine`: the packets of an
/// `application/x-firehose-packets` batch (its [`PacketBatchMeta`]), or the whole buffer
/// as one packet. Chunks opened get the buffer's PTS. Packets that cannot be read are
/// `malformed`.
///
/// When the handler ends the stream: with `stop_at_end`, the rest of the buffer is left
/// and [`Flow::End`] returned; without, the engine starts afresh (the chunks were already
/// emitted) and the rest of the buffer is fed.
pub fn feed_buffer(
    engine: &mut ChunkAssembler,
    buf: &gst::BufferRef,
    out: &mut Vec<FinishedChunk>,
    stop_at_end: bool,
) -> Flow {
    engine.set_clock(buf.pts().map(gst::ClockTime::nseconds));
    let Ok(map) = buf.map_readable() else {
        engine.count_malformed(1);
        return Flow::Continue;
    };
    let data = map.as_slice();
    let mut push = |engine: &mut ChunkAssembler, packet: &[u8]| {
        let flow = engine.push(packet, out);
        if flow == Flow::End && !stop_at_end {
            engine.reset();
            return Flow::Continue;
        }
        flow
    };
    let Some(meta) = buf.meta::<PacketBatchMeta>() else {
        return push(engine, data);
    };
    for p in meta.packets() {
        let Some(packet) = data.get(p.range()) else {
            engine.count_malformed(1);
            continue;
        };
        if push(engine, packet) == Flow::End {
            return Flow::End;
        }
    }
    Flow::Continue
}

/// Mirrors of an engine's counters, so a host's `stats` property never waits for the
/// streaming thread.
#[derive(Debug, Default)]
pub struct StatsMirror {
    counters: stats::Mirror<{ ChunkStats::COUNT }>,
}

impl StatsMirror {
    /// The fields of [`StatsMirror::structure`], for the description of a host's
    /// `stats` property: the engine's (from [`ChunkStats`]), then the pool's.
    pub fn counters() -> String {
        ChunkStats::describe("pool-*, memory")
    }

    /// Copies the engine's counters (once per buffer).
    pub fn update(&self, s: &ChunkStats) {
        self.counters.update(&s.fields());
    }

    /// Back to zero (at start).
    pub fn reset(&self) {
        self.counters.reset();
    }

    /// The `stats` structure: the engine's counters, then `pool` counters and its
    /// `memory` kind when there is a pool.
    pub fn structure(&self, pool: Option<&SlotPool>) -> gst::Structure {
        let mut fields = self.counters.fields(ChunkStats::NAMES);
        let p = pool.map(|p| p.stats()).unwrap_or_default();
        fields.extend([
            (names::POOL_SLOTS, p.slots as u64),
            (names::POOL_IN_USE, p.in_use as u64),
            (names::POOL_HIGH_WATER, p.high_water as u64),
            (names::POOL_EXHAUSTED, p.exhausted),
        ]);
        let mut s = stats::structure(&fields);
        s.set(
            "memory",
            pool.map_or(stats::NOT_KNOWN, |p| p.kind().as_str()),
        );
        s
    }
}
