//! What the two elements that output heaps share (`speaddepay` in heaps mode, and
//! `fhspeadsrc`): the reassembler built from the settings, its counters mirrored for the
//! `stats` property, and a heap turned into a buffer.

use std::collections::VecDeque;

use firehose_core::alloc;
use firehose_core::meta::message;
use firehose_core::src::DryWarning;
use firehose_core::stats::{names, Mirror};
use firehose_core::RegionError;
use firehose_net::landsrc::SourceEngine;

use crate::heap::HeapMeta;
use crate::reassembly::{Config, Counts, Emitted, Heap, Reassembler};
use crate::wire::ctrl;

/// The counters `stats` lists for heaps, besides the receiver's: the reassembler's
/// (from [`Counts`]), then the pool's and the descriptors known.
pub fn counters() -> String {
    Counts::describe(&HeapExtras::describe("memory"))
}

firehose_core::counters! {
    /// What the heap elements report beside the reassembler's counts: its pool and the
    /// descriptors it knows (gauges, read once per buffer).
    pub struct HeapExtras {
        pool_slots: names::POOL_SLOTS,
        pool_in_use: names::POOL_IN_USE,
        pool_high_water: names::POOL_HIGH_WATER,
        pool_exhausted: names::POOL_EXHAUSTED,
        descriptors: names::DESCRIPTORS,
    }
}

/// The reassembler's counts and pool accounting, mirrored once per buffer or receive for
/// the `stats` property, which may be read from any thread.
#[derive(Debug, Default)]
pub struct HeapCounters {
    counts: Mirror<{ Counts::COUNT }>,
    extras: HeapExtras,
}

impl HeapCounters {
    /// Copies the engine's counts; says so once on `element`'s bus when the first heap
    /// larger than `max-heap-size` was refused (a stream of larger heaps would otherwise
    /// deliver nothing, with only a counter to say why).
    /// Also says on the bus when the payload pools ran dry (`dry`, rate-limited).
    pub fn update_warning(&self, engine: &Reassembler, element: &gst::Element, dry: &DryWarning) {
        let mirrored = Counts::from_values(self.counts.values());
        let first_too_large = mirrored.too_large == 0 && engine.counts().too_large > 0;
        self.update(engine);
        dry.check(
            element,
            engine.counts().drops_pool,
            "the heap payload pool",
            "pool-size (or max-heaps)",
        );
        if first_too_large {
            gst::element_warning!(
                element,
                gst::StreamError::Format,
                (
                    "a heap larger than max-heap-size ({} bytes) was refused (counted in \
                     too-large, with every packet of such heaps): raise max-heap-size if \
                     the stream's heaps are that large",
                    engine.max_heap_size()
                )
            );
        }
    }

    /// Copies the engine's counts.
    pub fn update(&self, engine: &Reassembler) {
        self.counts.update(&engine.counts().fields());
        let p = engine.pool_stats();
        let x = &self.extras;
        x.pool_slots.set(p.slots as u64);
        x.pool_in_use.set(p.in_use as u64);
        x.pool_high_water.set(p.high_water as u64);
        x.pool_exhausted.set(p.exhausted);
        x.descriptors.set(engine.descriptor_count() as u64);
    }

    /// The stats structure; `memory` is the pool's memory kind once started.
    pub fn stats(&self, memory: Option<&str>) -> gst::Structure {
        let mut fields = self.counts.fields(Counts::NAMES);
        fields.extend(self.extras.fields());
        let mut s = firehose_core::stats::structure(&fields);
        s.set("memory", memory.unwrap_or(firehose_core::stats::NOT_KNOWN));
        s
    }
}

/// The reassembler `config` describes (an element's heap settings:
/// `depay::Settings::reassembly_config`), its memory allocated and pre-faulted; an error
/// a user can act on when it cannot be had. A fallback from hugepages is posted as a
/// warning on `element`.
pub fn new_reassembler(
    config: &Config,
    element: &gst::Element,
) -> Result<Reassembler, gst::ErrorMessage> {
    let engine = Reassembler::new(config).map_err(|e| match e {
        // Already says how to reserve hugepages.
        RegionError::NoHugepages { .. } => {
            gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e))
        }
        _ => gst::error_msg!(
            gst::ResourceError::NoSpaceLeft,
            (
                "{}; lower max-heap-size, max-heaps, substreams or pool-size",
                e
            )
        ),
    })?;
    if let Some(reason) = engine.fallback_reason() {
        gst::element_warning!(element, gst::ResourceError::Settings, ("{}", reason));
    }
    Ok(engine)
}

/// Downstream's allocation answer for the heaps (a source's `decide_allocation`, or
/// [`firehose_core::alloc::query_downstream`] once the caps are set): when it proposes
/// another kind of memory, heap payloads are cut from it from now on, and its kind is
/// returned (for `stats`). A provider that cannot make the pools is an element error.
pub fn decide_allocation(
    element: &gst::Element,
    query: &gst::query::Allocation,
    engine: &mut Reassembler,
) -> Result<Option<&'static str>, gst::LoggableError> {
    let Some(provider) = alloc::decide_provider(element, query, engine.memory_kind()) else {
        return Ok(None);
    };
    engine
        .use_provider(&*provider)
        .map_err(|e| alloc::provider_failed(element, &*provider, e))?;
    let kind = engine.memory_kind().as_str();
    gst::info!(
        gst::CAT_RUST,
        obj = element,
        "heaps in {kind} memory, as downstream proposed"
    );
    Ok(Some(kind))
}

/// The heap as a buffer: its payload memory (no copy), the heap meta and the message
/// meta, the first packet's PTS; with `readable`, also the heap meta every language
/// reads ([`crate::readable`], the `readable-metas` property).
pub fn heap_buffer(h: Heap, readable: bool) -> gst::Buffer {
    let mut buf = gst::Buffer::new();
    let b = buf.get_mut().expect("a new buffer is writable");
    b.append_memory(h.payload);
    b.set_pts(h.stamp.map(gst::ClockTime::from_nseconds));
    message::add(b, &crate::heap::message(&h.info, b.size()));
    if readable {
        crate::readable::add(b, &h.info);
    }
    HeapMeta::add(b, h.info);
    buf
}

/// True for the heap that stops the stream (STREAM_CTRL = stop).
pub fn is_stop(h: &Heap) -> bool {
    h.info.stream_ctrl == Some(ctrl::STOP)
}

impl SourceEngine for Reassembler {
    type Item = Heap;

    fn set_clock(&mut self, out: &mut Emitted, now: Option<u64>) {
        out.stamp = now;
    }

    fn take_finished(out: &mut Emitted, pending: &mut VecDeque<Heap>) {
        pending.extend(out.heaps.drain(..));
    }

    fn flush_all(&mut self, out: &mut Emitted) {
        let heaps = &mut out.heaps;
        self.flush(&mut |h| heaps.push(h));
    }

    /// The stop heap is delivered like any other: the element ends the stream at it
    /// (`stop-is-eos`), as after a landing receive.
    fn feed_batch(
        &mut self,
        data: &[u8],
        packets: &[firehose_core::PacketInfo],
        out: &mut Emitted,
    ) -> firehose_chunk::Flow {
        self.push_batch(data, packets, out);
        firehose_chunk::Flow::Continue
    }
}
