//! `speaddepay` settings: the properties and their values. The heap-mode ones are a
//! group of their own ([`HeapSettings`]), which `fhspeadsrc` has too; the chunk geometry
//! is the chunk engine's shared group ([`ChunkGeometry`]).

use firehose_chunk::landing::Mode as Landing;
use firehose_chunk::settings::{ChunkGeometry, GeometryHost, PoolAsk};
use firehose_chunk::ChunkConfig;
use firehose_core::meta::readable;
use firehose_core::props::{self, HugepagesAlias, Memory};
use firehose_core::stats::StatsInterval;
use gst::glib;
use gst::prelude::*;

use super::{IncompletePolicy, Mode};
use crate::chunk::{PLACE_OFFSET, PLACE_STEP};
use crate::reassembly::DEFAULT_MAX_HEAP_SIZE;
use crate::wire::ids;

const DEFAULT_MAX_HEAPS: u32 = 4;
const DEFAULT_SUBSTREAMS: u32 = 1;
/// Windows beyond this would only hide a misconfiguration (and cost memory per class).
const MAX_WINDOW: u32 = 1024;
/// Heaps above 1 GiB are not heaps a receive pipeline should hold in memory.
const MAX_MAX_HEAP_SIZE: u64 = 1 << 30;

/// The heap reassembler's properties: those of `speaddepay`'s heaps mode, which
/// `fhspeadsrc` has too. Read at start.
#[derive(Debug, Clone)]
pub struct HeapSettings {
    /// `max-heaps`: heaps under construction per substream (in chunks mode too, times
    /// `substreams`).
    pub max_heaps: u32,
    /// `substreams`.
    pub substreams: u32,
    /// `allow-out-of-order`.
    pub allow_out_of_order: bool,
    /// `incomplete`.
    pub incomplete: IncompletePolicy,
    /// `max-heap-size`.
    pub max_heap_size: u64,
    /// `landing` (`fhspeadsrc`).
    pub landing: Landing,
    /// `stop-is-eos`.
    pub stop_is_eos: bool,
    /// `max-descriptors`.
    pub max_descriptors: u32,
    /// `deliver-descriptor-heaps`.
    pub deliver_descriptor_heaps: bool,
    /// `memory` (or the deprecated `hugepages`).
    pub memory: Memory,
    /// `pool-size` in bytes (0: from the window).
    pub pool_size: u64,
    /// `readable-metas`.
    pub readable_metas: bool,
}

impl Default for HeapSettings {
    fn default() -> Self {
        Self {
            max_heaps: DEFAULT_MAX_HEAPS,
            substreams: DEFAULT_SUBSTREAMS,
            allow_out_of_order: false,
            incomplete: IncompletePolicy::Drop,
            max_heap_size: DEFAULT_MAX_HEAP_SIZE as u64,
            landing: Landing::Auto,
            stop_is_eos: true,
            max_descriptors: crate::descset::DEFAULT_MAX_DESCRIPTORS as u32,
            deliver_descriptor_heaps: false,
            memory: Memory::Auto,
            pool_size: 0,
            readable_metas: readable::DEFAULT,
        }
    }
}

firehose_core::property_group! {
    HeapSettings as _s {
        max_heaps => glib::ParamSpecUInt::builder("max-heaps")
            .nick("Maximum heaps")
            .blurb("Heaps under construction per substream (spead2's max_heaps); with incomplete=drop a heap enters once a second packet continues it (first packets wait apart), and a full window evicts a one-packet heap first, else the one touched longest ago")
            .minimum(1)
            .maximum(MAX_WINDOW)
            .default_value(DEFAULT_MAX_HEAPS)
            .mutable_ready()
            .build();
        substreams => glib::ParamSpecUInt::builder("substreams")
            .nick("Substreams")
            .blurb("Separate windows, one per heap cnt mod N (N interleaved senders)")
            .minimum(1)
            .maximum(MAX_WINDOW)
            .default_value(DEFAULT_SUBSTREAMS)
            .mutable_ready()
            .build();
        allow_out_of_order => glib::ParamSpecBoolean::builder("allow-out-of-order")
            .nick("Allow out of order")
            .blurb("Accept a heap's packets in any order (else a packet not at the next offset is dropped: out-of-order-dropped)")
            .default_value(false)
            .mutable_ready()
            .build();
        incomplete => glib::ParamSpecEnum::builder::<IncompletePolicy>("incomplete")
            .nick("Incomplete heaps")
            .blurb("drop (count heaps-incomplete) or deliver (complete=false and the ranges received in the meta)")
            .mutable_ready()
            .build();
        max_heap_size => glib::ParamSpecUInt64::builder("max-heap-size")
            .nick("Maximum heap size")
            .blurb("Largest heap payload in bytes; packets of larger heaps are dropped (too-large). Sets the largest pool size class")
            .minimum(1)
            .maximum(MAX_MAX_HEAP_SIZE)
            .default_value(DEFAULT_MAX_HEAP_SIZE as u64)
            .mutable_ready()
            .build();
        landing => glib::ParamSpecEnum::builder::<Landing>("landing")
            .nick("Landing")
            .blurb("fhspeadsrc (packets in order): receive payloads straight into heap memory. auto: heaps of at most 2 MiB; on; off. speaddepay: no effect (kept so older pipelines still parse; use fhspeadsrc for it)")
            .mutable_ready()
            .build();
        stop_is_eos => glib::ParamSpecBoolean::builder("stop-is-eos")
            .nick("Stop is EOS")
            .blurb("A stop heap (STREAM_CTRL=2) ends the stream with EOS; false pushes it as a heap and keeps going. Anyone who can send to the port can send one: on a network you do not control, set false and end the capture yourself")
            .default_value(true)
            .mutable_ready()
            .build();
        max_descriptors => glib::ParamSpecUInt::builder("max-descriptors")
            .nick("Maximum descriptors")
            .blurb("Descriptors kept for the stream, each change of one counting again; more are refused and counted (descriptors-dropped), so a flood of descriptors costs a bounded amount of memory and time")
            .minimum(1)
            .maximum(1 << 20)
            .default_value(crate::descset::DEFAULT_MAX_DESCRIPTORS as u32)
            .mutable_ready()
            .build();
        deliver_descriptor_heaps => glib::ParamSpecBoolean::builder("deliver-descriptor-heaps")
            .nick("Deliver descriptor heaps")
            .blurb("Push heaps that carry only descriptors as buffers (spead2 yields them). false (default): their descriptors are learnt, reach downstream with the next heap's descriptors, and the heap is counted (descriptor-heaps), so a flood of them costs a lookup each, not a buffer")
            .default_value(false)
            .mutable_ready()
            .build();
        memory => props::memory_spec("heap (or chunk) memory");
        deprecated("memory") memory: HugepagesAlias => props::hugepages_spec();
        pool_size => glib::ParamSpecUInt64::builder("pool-size")
            .nick("Pool size")
            .blurb("Bytes of preallocated heap memory: an eighth (up to 8 MiB) for single-packet heaps, the rest split so every size class (16 KiB x4 ... max-heap-size) holds as many heaps (at least 2); 0 = max-heaps x substreams + 4 heaps per class, plus 8 MiB. mode=chunks: as many chunks as fit (more than max-chunks); 0 = twice max-chunks")
            .default_value(0)
            .mutable_ready()
            .build();
        readable_metas => readable::param_spec();
    }
}

/// What `speaddepay`'s properties say; read at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The heap reassembler's properties (the heaps mode's, and `max-heaps`,
    /// `substreams`, `stop-is-eos`, `memory`, `pool-size` and `readable-metas` of
    /// chunks mode too).
    pub heaps: HeapSettings,
    /// `mode`.
    pub mode: Mode,
    /// `heaps-per-chunk`, `heap-size`, `max-chunks`, `packet-presence-size` (chunks mode).
    pub geometry: ChunkGeometry,
    /// `place-item` (chunks mode; 0: HEAP_CNT).
    pub place_item: u64,
    /// `place-step` (chunks mode).
    pub place_step: u64,
    /// `place-offset` (chunks mode).
    pub place_offset: u64,
    /// `stats-interval`.
    pub stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            heaps: HeapSettings::default(),
            mode: Mode::Heaps,
            geometry: ChunkGeometry::new(GeometryHost::ChunksMode),
            place_item: 0,
            place_step: 1,
            place_offset: 0,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group heaps;
        mode => glib::ParamSpecEnum::builder::<Mode>("mode")
            .nick("Mode")
            .blurb("heaps: one buffer per heap (application/x-spead-heap); chunks: heaps placed into chunks (application/x-firehose-chunk), as spead2's chunk stream")
            .mutable_ready()
            .build();
        group geometry;
        place_item => glib::ParamSpecUInt64::builder("place-item")
            .nick("Placement item")
            .blurb("mode=chunks: 0 places heaps by HEAP_CNT, else the id of an immediate item whose value places them (e.g. a timestamp, 0x1600)")
            .default_value(0)
            .mutable_ready()
            .build();
        place_step => glib::ParamSpecUInt64::builder("place-step")
            .nick("Placement step")
            .blurb("mode=chunks: value increment from one heap to the next (heap n = (value - place-offset) / place-step)")
            .minimum(1)
            .default_value(1)
            .mutable_ready()
            .build();
        place_offset => glib::ParamSpecUInt64::builder("place-offset")
            .nick("Placement offset")
            .blurb("mode=chunks: value of slot 0 of chunk 0; smaller values are dropped")
            .default_value(0)
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

impl HeapSettings {
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
}

impl Settings {
    /// The chunk engine's configuration (`mode=chunks`): the geometry, with as many
    /// heaps assembled at once as the heap windows hold.
    pub fn chunk_config(&self) -> ChunkConfig {
        ChunkConfig {
            max_messages: (self.heaps.max_heaps as usize)
                .saturating_mul(self.heaps.substreams as usize),
            ..self.geometry.chunk_config()
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
            .field(PLACE_STEP, self.place_step)
            .field(PLACE_OFFSET, self.place_offset)
            .field("stop", self.heaps.stop_is_eos)
            .build()
    }

    /// Chunks in the pool (`mode=chunks`): as many as fit in `pool-size`, or twice
    /// `max-chunks` when it is 0.
    pub fn pool_chunks(&self) -> usize {
        self.geometry
            .chunks_for(PoolAsk::Bytes(self.heaps.pool_size))
    }
}

/// The `stats` keys of both modes, from the engines' own definitions: the heap
/// engine's, then those only the chunk engine has.
pub(super) fn stats_description() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::SpeadChunkConfig;
    use firehose_core::property::assert_round_trips;
    use firehose_core::property::PropertyGroup;
    use firehose_core::props::Hugepages;

    #[test]
    fn every_heap_property_round_trips() {
        let names = assert_round_trips(&mut HeapSettings::default());
        assert_eq!(names.first().map(String::as_str), Some("max-heaps"));
        assert!(names.iter().any(|n| n == "hugepages"));
        assert!(!names.iter().any(|n| n == "mode" || n == "stats-interval"));
    }

    #[test]
    fn every_property_round_trips_and_the_geometry_is_the_shared_one() {
        let mut s = Settings::default();
        let names = assert_round_trips(&mut s);
        for name in [
            "heaps-per-chunk",
            "heap-size",
            "max-chunks",
            "packet-presence-size",
            "place-step",
            "place-offset",
            "stats-interval",
        ] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        // max-heaps is the heap window's (once), and chunks mode never had old names.
        assert_eq!(names.iter().filter(|n| *n == "max-heaps").count(), 1);
        for old in [
            "slots-per-chunk",
            "slot-size",
            "max-messages",
            "packet-payload-size",
        ] {
            assert!(!names.iter().any(|n| n == old), "{old}");
        }
        let blurb = s.find("heap-size").unwrap().1.blurb().unwrap().to_string();
        assert!(blurb.starts_with("mode=chunks: "), "{blurb}");
        // The values assert_round_trips set reach the engine's configuration.
        let cfg = s.chunk_config();
        let g = s.geometry;
        assert_eq!(
            (cfg.slots_per_chunk, cfg.slot_size, cfg.max_chunks),
            (
                g.heaps_per_chunk as usize,
                g.heap_size as usize,
                g.max_chunks as usize
            )
        );
        assert_eq!(
            cfg.max_messages,
            (s.heaps.max_heaps * s.heaps.substreams) as usize
        );
        assert_eq!(cfg.packet_payload_size, g.packet_presence_size as usize);
    }

    #[test]
    fn hugepages_still_sets_memory() {
        gst::init().unwrap();
        let mut s = Settings::default();
        assert!(s.set_named("hugepages", &Hugepages::Off.to_value()));
        assert_eq!(s.heaps.memory, Memory::System);
        let memory = s.get_named("memory").unwrap().get::<Memory>();
        assert_eq!(memory, Ok(Memory::System));
    }

    #[test]
    fn the_handler_gets_the_placement_under_its_new_keys() {
        gst::init().unwrap();
        let s = Settings {
            place_item: 0x1600,
            place_step: 2048,
            place_offset: 7,
            ..Default::default()
        };
        let cfg = s.handler_config();
        assert!(cfg.has_field(PLACE_STEP) && !cfg.has_field("step"));
        let c = SpeadChunkConfig::from_structure(&cfg).unwrap();
        assert_eq!((c.place_item, c.step, c.offset), (0x1600, 2048, 7));
    }

    #[test]
    fn the_pool_holds_what_pool_size_asks_for_in_chunks_mode() {
        let mut s = Settings::default();
        assert_eq!(s.pool_chunks(), 2 * s.geometry.max_chunks as usize);
        s.geometry.heaps_per_chunk = 2;
        s.geometry.heap_size = 1000;
        s.heaps.pool_size = 10_500;
        assert_eq!(s.pool_chunks(), 5);
    }
}
