//! `speaddepay` settings: the properties and their values.

use std::sync::LazyLock;

use firehose_chunk::landing::Mode as Landing;
use firehose_chunk::ChunkConfig;
use firehose_core::meta::readable;
use firehose_core::props::{self, Memory};
use firehose_core::stats::{self, StatsInterval};
use gst::glib;
use gst::prelude::*;

use super::{IncompletePolicy, Mode};
use crate::reassembly::DEFAULT_MAX_HEAP_SIZE;
use crate::wire::ids;

const DEFAULT_MAX_HEAPS: u32 = 4;
const DEFAULT_SUBSTREAMS: u32 = 1;
/// Windows beyond this would only hide a misconfiguration (and cost memory per class).
const MAX_WINDOW: u32 = 1024;
/// Heaps above 1 GiB are not heaps a receive pipeline should hold in memory.
const MAX_MAX_HEAP_SIZE: u64 = 1 << 30;
const DEFAULT_HEAPS_PER_CHUNK: u32 = 64;
const DEFAULT_HEAP_SIZE: u32 = 8192;
const DEFAULT_MAX_CHUNKS: u32 = 4;

#[derive(Debug, Clone)]
/// What the properties say; read at start.
pub(crate) struct Settings {
    pub max_heaps: u32,
    pub substreams: u32,
    pub allow_out_of_order: bool,
    pub incomplete: IncompletePolicy,
    pub max_heap_size: u64,
    pub stop_is_eos: bool,
    pub max_descriptors: u32,
    pub deliver_descriptor_heaps: bool,
    pub memory: Memory,
    pub pool_size: u64,
    pub stats_interval: StatsInterval,
    pub mode: Mode,
    pub heaps_per_chunk: u32,
    pub heap_size: u32,
    pub max_chunks: u32,
    pub place_item: u64,
    pub place_step: u64,
    pub place_offset: u64,
    pub packet_presence_size: u32,
    pub landing: Landing,
    pub readable_metas: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_heaps: DEFAULT_MAX_HEAPS,
            substreams: DEFAULT_SUBSTREAMS,
            allow_out_of_order: false,
            incomplete: IncompletePolicy::Drop,
            max_heap_size: DEFAULT_MAX_HEAP_SIZE as u64,
            stop_is_eos: true,
            max_descriptors: crate::descset::DEFAULT_MAX_DESCRIPTORS as u32,
            deliver_descriptor_heaps: false,
            memory: Memory::Auto,
            pool_size: 0,
            stats_interval: StatsInterval::default(),
            mode: Mode::Heaps,
            heaps_per_chunk: DEFAULT_HEAPS_PER_CHUNK,
            heap_size: DEFAULT_HEAP_SIZE,
            max_chunks: DEFAULT_MAX_CHUNKS,
            place_item: 0,
            place_step: 1,
            place_offset: 0,
            packet_presence_size: 0,
            landing: Landing::Auto,
            readable_metas: readable::DEFAULT,
        }
    }
}

impl Settings {
    /// Sets property `name` (every property but the read-only `stats`).
    pub fn set(&mut self, name: &str, value: &glib::Value) {
        match name {
            "max-heaps" => self.max_heaps = value.get().unwrap(),
            "substreams" => self.substreams = value.get().unwrap(),
            "allow-out-of-order" => self.allow_out_of_order = value.get().unwrap(),
            "incomplete" => self.incomplete = value.get().unwrap(),
            "max-heap-size" => self.max_heap_size = value.get().unwrap(),
            "stop-is-eos" => self.stop_is_eos = value.get().unwrap(),
            "max-descriptors" => self.max_descriptors = value.get().unwrap(),
            "deliver-descriptor-heaps" => {
                self.deliver_descriptor_heaps = value.get().unwrap();
            }
            "memory" | "hugepages" => {
                props::set_memory(&mut self.memory, name, value);
            }
            "pool-size" => self.pool_size = value.get().unwrap(),
            "mode" => self.mode = value.get().unwrap(),
            "heaps-per-chunk" => self.heaps_per_chunk = value.get().unwrap(),
            "heap-size" => self.heap_size = value.get().unwrap(),
            "max-chunks" => self.max_chunks = value.get().unwrap(),
            "place-item" => self.place_item = value.get().unwrap(),
            "place-step" => self.place_step = value.get().unwrap(),
            "place-offset" => self.place_offset = value.get().unwrap(),
            "packet-presence-size" => self.packet_presence_size = value.get().unwrap(),
            "landing" => self.landing = value.get().unwrap(),
            readable::PROPERTY => self.readable_metas = value.get().unwrap(),
            other => self.stats_interval.set(other, value),
        }
    }

    /// The value of property `name` (every property but `stats`).
    pub fn get(&self, name: &str) -> glib::Value {
        match name {
            "max-heaps" => self.max_heaps.to_value(),
            "substreams" => self.substreams.to_value(),
            "allow-out-of-order" => self.allow_out_of_order.to_value(),
            "incomplete" => self.incomplete.to_value(),
            "max-heap-size" => self.max_heap_size.to_value(),
            "stop-is-eos" => self.stop_is_eos.to_value(),
            "max-descriptors" => self.max_descriptors.to_value(),
            "deliver-descriptor-heaps" => self.deliver_descriptor_heaps.to_value(),
            "memory" | "hugepages" => {
                props::memory_value(self.memory, name).expect("a memory property")
            }
            "pool-size" => self.pool_size.to_value(),
            "mode" => self.mode.to_value(),
            "heaps-per-chunk" => self.heaps_per_chunk.to_value(),
            "heap-size" => self.heap_size.to_value(),
            "max-chunks" => self.max_chunks.to_value(),
            "place-item" => self.place_item.to_value(),
            "place-step" => self.place_step.to_value(),
            "place-offset" => self.place_offset.to_value(),
            "packet-presence-size" => self.packet_presence_size.to_value(),
            "landing" => self.landing.to_value(),
            readable::PROPERTY => self.readable_metas.to_value(),
            other => self.stats_interval.value(other),
        }
    }
}

impl Settings {
    /// The heap reassembler these settings ask for (heaps mode).
    pub fn reassembly_config(&self) -> crate::reassembly::Config {
        crate::reassembly::Config {
            max_heaps: self.max_heaps as usize,
            substreams: self.substreams as usize,
            allow_out_of_order: self.allow_out_of_order,
            incomplete: self.incomplete.into(),
            max_heap_size: self.max_heap_size as usize,
            pool_size: self.pool_size,
            hugepages: self.memory.into(),
            max_descriptors: self.max_descriptors as usize,
            stop_ends: self.stop_is_eos,
            deliver_descriptor_heaps: self.deliver_descriptor_heaps,
        }
    }

    /// The chunk engine's configuration (`mode=chunks`).
    pub fn chunk_config(&self) -> ChunkConfig {
        ChunkConfig {
            slots_per_chunk: self.heaps_per_chunk as usize,
            slot_size: self.heap_size as usize,
            max_chunks: self.max_chunks as usize,
            max_messages: (self.max_heaps as usize).saturating_mul(self.substreams as usize),
            packet_payload_size: self.packet_presence_size as usize,
        }
    }

    /// The `spead` handler's configuration (`mode=chunks`).
    pub fn handler_config(&self) -> gst::Structure {
        let place_item = match self.place_item {
            0 => ids::HEAP_CNT,
            id => id,
        };
        gst::Structure::builder(crate::chunk::NAME)
            .field("place-item", place_item)
            .field("step", self.place_step)
            .field("offset", self.place_offset)
            .field("stop", self.stop_is_eos)
            .build()
    }

    /// Chunks in the pool (`mode=chunks`): as many as fit in `pool-size`, or twice
    /// `max-chunks` when it is 0.
    pub fn pool_chunks(&self) -> usize {
        let chunk = self.chunk_config().chunk_bytes().max(1) as u64;
        match self.pool_size {
            0 => 2 * self.max_chunks.max(1) as usize,
            bytes => usize::try_from(bytes / chunk).unwrap_or(usize::MAX),
        }
    }
}

/// The properties that apply to heaps mode, the ones `fhspeadsrc` has too (`stats`
/// and `stats-interval` excepted).
/// Fresh specs: a GObject class owns the specs it installs, so the two elements cannot
/// share them.
pub(crate) fn heap_properties() -> impl Iterator<Item = glib::ParamSpec> {
    const CHUNKS_ONLY: [&str; 9] = [
        "mode",
        "heaps-per-chunk",
        "heap-size",
        "max-chunks",
        "place-item",
        "place-step",
        "place-offset",
        "packet-presence-size",
        "stats",
    ];
    build_properties()
        .into_iter()
        .filter(|p| !CHUNKS_ONLY.contains(&p.name()) && p.name() != "stats-interval")
}

/// The element's properties.
pub(super) fn properties() -> &'static [glib::ParamSpec] {
    static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(build_properties);
    PROPS.as_ref()
}

fn build_properties() -> Vec<glib::ParamSpec> {
    let [memory, hugepages] = props::memory_properties("heap (or chunk) memory");
    let mut v = vec![
            glib::ParamSpecUInt::builder("max-heaps")
                .nick("Maximum heaps")
                .blurb("Heaps under construction per substream (spead2's max_heaps); with incomplete=drop a heap enters once a second packet continues it (first packets wait apart), and a full window evicts a one-packet heap first, else the one touched longest ago")
                .minimum(1)
                .maximum(MAX_WINDOW)
                .default_value(DEFAULT_MAX_HEAPS)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("substreams")
                .nick("Substreams")
                .blurb("Separate windows, one per heap cnt mod N (N interleaved senders)")
                .minimum(1)
                .maximum(MAX_WINDOW)
                .default_value(DEFAULT_SUBSTREAMS)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("allow-out-of-order")
                .nick("Allow out of order")
                .blurb("Accept a heap's packets in any order (else a packet not at the next offset is dropped: out-of-order-dropped)")
                .default_value(false)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<IncompletePolicy>("incomplete")
                .nick("Incomplete heaps")
                .blurb("drop (count heaps-incomplete) or deliver (complete=false and the ranges received in the meta)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("max-heap-size")
                .nick("Maximum heap size")
                .blurb("Largest heap payload in bytes; packets of larger heaps are dropped (too-large). Sets the largest pool size class")
                .minimum(1)
                .maximum(MAX_MAX_HEAP_SIZE)
                .default_value(DEFAULT_MAX_HEAP_SIZE as u64)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<Landing>("landing")
                .nick("Landing")
                .blurb("fhspeadsrc (packets in order): receive payloads straight into heap memory. auto: heaps of at most 2 MiB; on; off. speaddepay: no effect (kept so older pipelines still parse; use fhspeadsrc for it)")
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("stop-is-eos")
                .nick("Stop is EOS")
                .blurb("A stop heap (STREAM_CTRL=2) ends the stream with EOS; false pushes it as a heap and keeps going. Anyone who can send to the port can send one: on a network you do not control, set false and end the capture yourself")
                .default_value(true)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-descriptors")
                .nick("Maximum descriptors")
                .blurb("Descriptors kept for the stream, each change of one counting again; more are refused and counted (descriptors-dropped), so a flood of descriptors costs a bounded amount of memory and time")
                .minimum(1)
                .maximum(1 << 20)
                .default_value(crate::descset::DEFAULT_MAX_DESCRIPTORS as u32)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("deliver-descriptor-heaps")
                .nick("Deliver descriptor heaps")
                .blurb("Push heaps that carry only descriptors as buffers (spead2 yields them). false (default): their descriptors are learnt, reach downstream with the next heap's descriptors, and the heap is counted (descriptor-heaps), so a flood of them costs a lookup each, not a buffer")
                .default_value(false)
                .mutable_ready()
                .build(),
            memory,
            hugepages,
            glib::ParamSpecUInt64::builder("pool-size")
                .nick("Pool size")
                .blurb("Bytes of preallocated heap memory: an eighth (up to 8 MiB) for single-packet heaps, the rest split so every size class (16 KiB x4 ... max-heap-size) holds as many heaps (at least 2); 0 = max-heaps x substreams + 4 heaps per class, plus 8 MiB. mode=chunks: as many chunks as fit (more than max-chunks); 0 = twice max-chunks")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<Mode>("mode")
                .nick("Mode")
                .blurb("heaps: one buffer per heap (application/x-spead-heap); chunks: heaps placed into chunks (application/x-firehose-chunk), as spead2's chunk stream")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("heaps-per-chunk")
                .nick("Heaps per chunk")
                .blurb("mode=chunks: heap slots per chunk (spead2: heaps_per_chunk)")
                .minimum(1)
                .maximum(1 << 24)
                .default_value(DEFAULT_HEAPS_PER_CHUNK)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("heap-size")
                .nick("Heap size")
                .blurb("mode=chunks: bytes per heap slot, the largest heap payload; larger heaps are dropped as malformed")
                .minimum(1)
                .maximum(1 << 30)
                .default_value(DEFAULT_HEAP_SIZE)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-chunks")
                .nick("Maximum chunks")
                .blurb("mode=chunks: chunks open at once; heaps for older chunks are dropped as too-old (spead2: max_chunks)")
                .minimum(1)
                .maximum(MAX_WINDOW)
                .default_value(DEFAULT_MAX_CHUNKS)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("place-item")
                .nick("Placement item")
                .blurb("mode=chunks: 0 places heaps by HEAP_CNT, else the id of an immediate item whose value places them (e.g. a timestamp, 0x1600)")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("place-step")
                .nick("Placement step")
                .blurb("mode=chunks: value increment from one heap to the next (heap n = (value - place-offset) / place-step)")
                .minimum(1)
                .default_value(1)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("place-offset")
                .nick("Placement offset")
                .blurb("mode=chunks: value of slot 0 of chunk 0; smaller values are dropped")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("packet-presence-size")
                .nick("Packet presence size")
                .blurb("mode=chunks: per-packet presence, payload bytes per packet (packet k of a heap at offset k x this); 0 = per-heap presence only (spead2: packet_presence_payload_size)")
                .default_value(0)
                .mutable_ready()
                .build(),
            readable::param_spec(),
        ];
    v.extend(stats::properties(&stats_description()));
    v
}

/// The `stats` keys of both modes, from the engines' own definitions: the heap
/// engine's, then those only the chunk engine has.
fn stats_description() -> String {
    let heaps = crate::heapout::counters();
    let chunk_only: Vec<&str> = firehose_chunk::ChunkStats::NAMES
        .iter()
        .copied()
        .filter(|n| !heaps.split(", ").any(|h| h == *n))
        .collect();
    format!(
        "{heaps}, {}; the same keys in both modes, those of the other mode reading 0",
        chunk_only.join(", ")
    )
}
