//! The element side every chunk element shares (`fhdepay`, `fhudpchunksrc`,
//! `speaddepay mode=chunks`): a [`ChunkFront`] owns what outlives one run of the engine
//! (its pool, kept for the final `stats` read; the mirror of its counters; the flag that
//! cuts a wait for a pool chunk short), starts the engine, feeds it buffers and turns the
//! chunks it finishes into buffers with their metas. The elements keep their pads, their
//! own properties and where the packets come from.
//!
//! The engine itself stays in the element's state (under the element's streaming lock,
//! beside what else that element keeps there); the front's methods take it as an
//! argument. None of them holds a lock while pushing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use firehose_core::alloc;
use firehose_core::src::DryWarning;
use firehose_core::sync::lock;
use firehose_core::SlotPool;

use crate::{feed_buffer, ChunkAssembler, ChunkHost, FinishedChunk, Flow, StatsMirror};

/// What a chunk element keeps beside its engine (see the module documentation).
#[derive(Debug, Default)]
pub struct ChunkFront {
    /// Kept after stop for the final `stats` read; chunks held downstream keep its
    /// memory alive.
    pool: Mutex<Option<SlotPool>>,
    /// The engine's counters, so `stats` never waits for the streaming thread.
    mirror: StatsMirror,
    /// Set while flushing or stopping: cuts short a wait for a pool chunk
    /// (`when-full=block`).
    flushing: Arc<AtomicBool>,
    /// `readable-metas` of the current run, and whether downstream may read them:
    /// chunks also carry the meta every language reads.
    readable: firehose_core::meta::readable::ReadableOutput,
    /// Says on the bus when the chunk pool runs dry (`when-full=drop`).
    dry: DryWarning,
}

impl ChunkFront {
    /// The flag that cancels a wait for a pool chunk, for
    /// [`crate::settings::ChunkSettings::host`].
    pub fn cancel(&self) -> &Arc<AtomicBool> {
        &self.flushing
    }

    /// Takes a built engine for a new run: keeps its pool, warns (as `element`) when the
    /// pool fell back to normal pages, zeroes the counters and clears the flushing flag;
    /// `readable` is the element's `readable-metas`. Returns the engine and the output
    /// caps for the element's state.
    pub fn start(
        &self,
        element: &gst::Element,
        host: ChunkHost,
        readable: bool,
    ) -> (ChunkAssembler, gst::Caps) {
        self.readable.start(readable);
        let ChunkHost { engine, pool, caps } = host;
        if let Some(reason) = pool.fallback_reason() {
            gst::element_warning!(element, gst::ResourceError::Settings, ("{}", reason));
        }
        self.mirror.reset();
        self.dry.reset();
        self.flushing.store(false, Ordering::Release);
        *lock(&self.pool) = Some(pool);
        (engine, caps)
    }

    /// Downstream's allocation answer for the chunks (`decide_allocation` of a source,
    /// or [`firehose_core::alloc::query_downstream`] once the caps are set): when it
    /// proposes another kind of memory, the engine's chunks are cut from it from now on
    /// (so `fhudpchunksrc` receives straight into it). A provider that cannot make the
    /// pool is an element error.
    pub fn decide_allocation(
        &self,
        element: &gst::Element,
        query: &gst::query::Allocation,
        engine: &mut ChunkAssembler,
    ) -> Result<(), gst::LoggableError> {
        self.readable.decide(element, Some(query));
        let Some(pool) = alloc::decide_pool(element, query, engine.pool())? else {
            return Ok(());
        };
        gst::info!(
            gst::CAT_RUST,
            obj = element,
            "chunks in {} memory, as downstream proposed",
            pool.kind().as_str()
        );
        engine
            .replace_pool(pool.clone())
            .map_err(|e| gst::loggable_error!(gst::CAT_RUST, "{}", e))?;
        *lock(&self.pool) = Some(pool);
        Ok(())
    }

    /// Nobody downstream answered the allocation query: someone may read the readable
    /// metas.
    pub fn unanswered(&self, element: &gst::Element) {
        self.readable.decide(element, None);
    }

    /// Makes the engine wait for a pool chunk when all are in use (instead of dropping),
    /// until flushing: `when-full=auto` in an element whose upstream turned out not to
    /// be live (a replay, a file), decided once the caps arrive
    /// ([`firehose_core::props::WhenFull::blocks_for`]).
    pub fn block_when_full(&self, engine: &mut ChunkAssembler) {
        engine.set_blocking(Some(self.flushing.clone()));
    }

    /// Sets or clears the flushing flag; setting it also wakes a streaming thread that
    /// waits for a pool chunk, so that it returns (flush-start, stop, unlock).
    pub fn set_flushing(&self, on: bool) {
        self.flushing.store(on, Ordering::Release);
        if on {
            if let Some(p) = lock(&self.pool).as_ref() {
                p.wake_waiters();
            }
        }
    }

    /// True between [`ChunkFront::set_flushing`] `(true)` and `(false)`.
    pub fn is_flushing(&self) -> bool {
        self.flushing.load(Ordering::Acquire)
    }

    /// Copies the engine's counters to the mirror `stats` reads (once per buffer or
    /// receive, and at stop).
    pub fn update(&self, engine: &ChunkAssembler) {
        self.mirror.update(&engine.stats());
    }

    /// Says on `element`'s bus that the chunk pool ran dry when the engine dropped
    /// packets for want of a chunk since the last look (the first time, then at most
    /// every [`DryWarning::EVERY`]): downstream holds every chunk. Call after feeding or
    /// receiving; cheap when nothing was dropped.
    pub fn warn_if_dry(&self, element: &gst::Element, engine: &ChunkAssembler) {
        self.dry.check(
            element,
            engine.stats().drops_pool,
            "the chunk pool",
            "pool-size (or max-chunks)",
        );
    }

    /// The `stats` structure: the engine's counters, the pool's, and its memory kind.
    pub fn stats(&self) -> gst::Structure {
        let pool = lock(&self.pool).clone();
        self.mirror.structure(pool.as_ref())
    }

    /// A finished chunk as a buffer, with its metas ([`FinishedChunk::into_buffer`]).
    pub fn buffer(&self, chunk: FinishedChunk) -> gst::Buffer {
        chunk.into_buffer(self.readable.wanted())
    }

    /// Feeds `buffers` to `engine` ([`feed_buffer`]) and appends the chunks it finished
    /// to `out` as buffers; then mirrors the counters. [`Flow::End`] when the handler
    /// ended the stream and `stop_at_end` (the rest is left unfed).
    pub fn feed<'a>(
        &self,
        engine: &mut ChunkAssembler,
        buffers: impl IntoIterator<Item = &'a gst::BufferRef>,
        stop_at_end: bool,
        out: &mut Vec<gst::Buffer>,
    ) -> Flow {
        let mut chunks = Vec::new();
        let mut flow = Flow::Continue;
        for buf in buffers {
            flow = feed_buffer(engine, buf, &mut chunks, stop_at_end);
            if flow == Flow::End {
                break;
            }
        }
        out.extend(chunks.into_iter().map(|c| self.buffer(c)));
        self.update(engine);
        flow
    }

    /// End of input: every open chunk leaves the engine, as buffers appended to `out`;
    /// then mirrors the counters.
    pub fn drain(&self, engine: &mut ChunkAssembler, out: &mut Vec<gst::Buffer>) {
        let mut chunks = Vec::new();
        engine.flush(&mut chunks);
        out.extend(chunks.into_iter().map(|c| self.buffer(c)));
        self.update(engine);
    }
}

/// The pad templates of an element that turns packets into chunks: a sink for anything
/// (packet batches or single packets) and a source for `src_caps`.
pub fn pad_templates(src_caps: &gst::Caps) -> Vec<gst::PadTemplate> {
    vec![
        firehose_core::element::sink_template(&gst::Caps::new_any()),
        firehose_core::src::src_template(src_caps),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::ChunkSettings;
    use gst::prelude::*;

    /// Starts `front` on an engine with the test handler: chunks of two 8-byte slots.
    fn start(front: &ChunkFront) -> ChunkAssembler {
        gst::init().unwrap();
        crate::handler::register_handler("front-test", |_| Ok(Box::new(Seq)));
        let mut s = ChunkSettings {
            handler: Some("front-test".into()),
            memory: firehose_core::props::Memory::System,
            ..Default::default()
        };
        s.geometry.heaps_per_chunk = 2;
        s.geometry.heap_size = 8;
        let element = gst::Bin::new().upcast::<gst::Element>();
        let host = s.host(&element, *gst::CAT_DEFAULT, front.cancel()).unwrap();
        let (engine, caps) = front.start(&element, host, true);
        let name = caps.structure(0).unwrap().name();
        assert_eq!(name.as_str(), firehose_core::caps::CHUNK);
        engine
    }

    /// One message per packet: an 8-byte id, placed two to a chunk.
    struct Seq;

    impl crate::handler::PacketHandler for Seq {
        fn parse(&mut self, p: &[u8]) -> Option<crate::handler::PacketFacts> {
            let id = u64::from_be_bytes(p.get(..8)?.try_into().ok()?);
            Some(crate::handler::PacketFacts {
                message_id: id,
                payload: 8..p.len(),
                message_offset: 0,
                message_len: Some(p.len() - 8),
            })
        }

        fn header(
            &mut self,
            _p: &[u8],
            f: &crate::handler::PacketFacts,
        ) -> crate::handler::Placement {
            crate::handler::Placement::Place {
                chunk_id: f.message_id / 2,
                index: (f.message_id % 2) as usize,
            }
        }
    }

    fn packet(id: u64) -> gst::Buffer {
        let mut v = id.to_be_bytes().to_vec();
        v.extend_from_slice(&[id as u8; 4]);
        gst::Buffer::from_mut_slice(v)
    }

    #[test]
    fn fed_packets_come_out_as_chunk_buffers_with_both_metas_and_stats() {
        let front = ChunkFront::default();
        let mut engine = start(&front);
        let input: Vec<gst::Buffer> = (0..4).map(packet).collect();
        let mut out = Vec::new();
        let flow = front.feed(
            &mut engine,
            input.iter().map(|b| b.as_ref()),
            true,
            &mut out,
        );
        assert_eq!(flow, Flow::Continue);
        front.drain(&mut engine, &mut out);
        assert_eq!(out.len(), 2);
        for (i, b) in out.iter().enumerate() {
            let info = b.meta::<crate::ChunkMeta>().unwrap().info().clone();
            assert_eq!(info.chunk_id, i as u64);
            assert!(info.is_complete());
            let m = firehose_core::meta::message::read(b).unwrap();
            assert_eq!((m.id, m.complete, m.bytes_received), (i as u64, true, 8));
        }
        let s = front.stats();
        assert_eq!(s.get::<u64>("packets"), Ok(4));
        assert_eq!(s.get::<u64>("chunks"), Ok(2));
        assert!(s.get::<u64>("pool-slots").unwrap() > 0);
    }

    #[test]
    fn flushing_is_set_and_cleared_and_a_new_start_clears_it() {
        let front = ChunkFront::default();
        let engine = start(&front);
        front.set_flushing(true);
        assert!(front.is_flushing());
        assert!(front.cancel().load(Ordering::Acquire));
        front.set_flushing(false);
        assert!(!front.is_flushing());
        front.set_flushing(true);
        drop(engine);
        let _engine = start(&front);
        assert!(!front.is_flushing());
    }
}
