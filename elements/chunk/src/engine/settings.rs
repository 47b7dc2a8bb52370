//! The chunk engine's element properties, shared by every element that hosts it
//! (`fhdepay`, `fhudpchunksrc`), and the chunk geometry, shared with `speaddepay
//! mode=chunks` too.
//!
//! [`ChunkGeometry`] is the group of properties that say how chunks are laid out and how
//! many are open (`heaps-per-chunk`, `heap-size`, `max-chunks`, `max-heaps`,
//! `packet-presence-size`), declared once for every element with chunks. A "heap" in
//! their names is one placed message whatever the format: the vocabulary is spead2's and
//! `speaddepay`'s, so one idea has one name on every element.
//! [`ChunkSettings`] is the group of the engine elements: the handler, the geometry and
//! the pool; [`ChunkSettings::host`] builds the engine they describe. An element adds
//! its own properties (socket settings, `stats-interval`, …) beside them.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use gst::glib;
use gst::prelude::*;

use super::{ChunkConfig, ChunkHost};
use crate::handler::{self, CONFIG_SLOTS_PER_CHUNK, CONFIG_SLOT_SIZE};
use firehose_core::meta::readable;
use firehose_core::property::Convert;
use firehose_core::props::{self, HugepagesAlias, Memory, WhenFull};

/// How big the chunk pool was asked to be: `pool-size` in bytes, or a chunk count
/// through the deprecated `pool-chunks`; 0 either way: twice `max-chunks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAsk {
    /// `pool-size`: as many chunks as these bytes hold.
    Bytes(u64),
    /// `pool-chunks` (deprecated).
    Chunks(u32),
}

/// Which kind of element a [`ChunkGeometry`] belongs to: what its blurbs say, and which
/// of its properties it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeometryHost {
    /// An element whose output is chunks, with any packet handler (`fhdepay`,
    /// `fhudpchunksrc`): it has `max-heaps`, and the deprecated names it had before
    /// (`slots-per-chunk`, `slot-size`, `max-messages`, `packet-payload-size`).
    ChunkElement,
    /// An element where chunks are one mode of several (`speaddepay mode=chunks`): the
    /// blurbs start with `mode=chunks:`, and its `max-heaps` is its own (a window per
    /// substream that the heap mode has too), so the group leaves it out.
    ChunksMode,
}

/// One unsigned property of the geometry: its spec's name, nick, text and range,
/// written once for the property and its deprecated alias.
struct Dim {
    name: &'static str,
    nick: &'static str,
    blurb: &'static str,
    min: u32,
    max: u32,
    default: u32,
}

/// `heaps-per-chunk`.
const HEAPS_PER_CHUNK: Dim = Dim {
    name: "heaps-per-chunk",
    nick: "Heaps per chunk",
    blurb: "Heaps per chunk, each in its own slot (spead2: heaps_per_chunk)",
    min: 1,
    max: 1 << 24,
    default: 64,
};

/// What a heap is on an element whose handler may be any: said once, in the blurb of
/// `heaps-per-chunk`.
const HEAP_IS: &str =
    ". A heap is one placed message: a SPEAD heap, or one datagram for raw handlers such as seq";

/// `heap-size`.
const HEAP_SIZE: Dim = Dim {
    name: "heap-size",
    nick: "Heap size",
    blurb: "Bytes per heap slot, the largest heap payload; larger heaps are dropped as malformed",
    min: 1,
    max: 1 << 30,
    default: 8192,
};

/// `max-chunks`.
const MAX_CHUNKS: Dim = Dim {
    name: "max-chunks",
    nick: "Maximum chunks",
    blurb:
        "Chunks open at once; heaps for older chunks are dropped as too-old (spead2: max_chunks)",
    min: 1,
    max: 1024,
    default: 4,
};

/// `max-heaps` (chunk elements).
const MAX_HEAPS: Dim = Dim {
    name: "max-heaps",
    nick: "Maximum heaps",
    blurb: "Heaps assembled at once; one more ends the oldest incomplete (spead2: max_heaps)",
    min: 1,
    max: 1 << 20,
    default: 32,
};

/// `packet-presence-size`.
const PACKET_PRESENCE_SIZE: Dim = Dim {
    name: "packet-presence-size",
    nick: "Packet presence size",
    blurb: "Per-packet presence, payload bytes per packet (packet k of a heap at offset k x this); 0 = per-heap presence only (spead2: packet_presence_payload_size)",
    min: 0,
    max: u32::MAX,
    default: 0,
};

/// Default `heaps-per-chunk`.
pub const DEFAULT_HEAPS_PER_CHUNK: u32 = HEAPS_PER_CHUNK.default;
/// Default `heap-size`, in bytes.
pub const DEFAULT_HEAP_SIZE: u32 = HEAP_SIZE.default;
/// Default `max-chunks`.
pub const DEFAULT_MAX_CHUNKS: u32 = MAX_CHUNKS.default;
/// Default `max-heaps` of a chunk element.
pub const DEFAULT_MAX_HEAPS: u32 = MAX_HEAPS.default;

/// The chunk geometry, one group for every element with chunks: `heaps-per-chunk`,
/// `heap-size`, `max-chunks`, `max-heaps` (chunk elements only) and
/// `packet-presence-size`, with the old names as deprecated aliases on the chunk
/// elements ([`GeometryHost`]). Also how many chunks the pool was asked for, which the
/// geometry turns into a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkGeometry {
    /// `heaps-per-chunk`: heap slots per chunk.
    pub heaps_per_chunk: u32,
    /// `heap-size`: bytes per heap slot.
    pub heap_size: u32,
    /// `max-chunks`: chunks open at once.
    pub max_chunks: u32,
    /// `max-heaps`: heaps assembled at once (a [`GeometryHost::ChunksMode`] element
    /// sets the engine's from its own property instead).
    pub max_heaps: u32,
    /// `packet-presence-size`: per-packet presence (0: off).
    pub packet_presence_size: u32,
    /// `pool-size` or `pool-chunks` of a chunk element ([`ChunkSettings`]); an element
    /// with a pool-size of its own passes it to [`ChunkGeometry::chunks_for`].
    pub pool: PoolAsk,
    host: GeometryHost,
}

firehose_core::property_group! {
    ChunkGeometry as s {
        heaps_per_chunk => s.spec(&HEAPS_PER_CHUNK);
        heap_size => s.spec(&HEAP_SIZE);
        max_chunks => s.spec(&MAX_CHUNKS);
        when(s.host == GeometryHost::ChunkElement) max_heaps => s.spec(&MAX_HEAPS);
        packet_presence_size => s.spec(&PACKET_PRESENCE_SIZE);
        when(s.host == GeometryHost::ChunkElement)
            deprecated("heaps-per-chunk") heaps_per_chunk
                => alias(&HEAPS_PER_CHUNK, "slots-per-chunk", "Slots per chunk");
        when(s.host == GeometryHost::ChunkElement)
            deprecated("heap-size") heap_size => alias(&HEAP_SIZE, "slot-size", "Slot size");
        when(s.host == GeometryHost::ChunkElement)
            deprecated("max-heaps") max_heaps
                => alias(&MAX_HEAPS, "max-messages", "Maximum messages");
        when(s.host == GeometryHost::ChunkElement)
            deprecated("packet-presence-size") packet_presence_size
                => alias(&PACKET_PRESENCE_SIZE, "packet-payload-size", "Packet payload size");
    }
}

/// The spec of `d` under the name (and nick) it had on the chunk elements before the
/// one vocabulary: a deprecated alias, with the same range.
fn alias(d: &Dim, name: &str, nick: &str) -> glib::ParamSpec {
    uint(name, nick, &format!("Deprecated: use {}", d.name), d)
}

/// An unsigned spec with `d`'s range, writable in READY and below (read at start).
fn uint(name: &str, nick: &str, blurb: &str, d: &Dim) -> glib::ParamSpec {
    glib::ParamSpecUInt::builder(name)
        .nick(nick)
        .blurb(blurb)
        .minimum(d.min)
        .maximum(d.max)
        .default_value(d.default)
        .mutable_ready()
        .build()
}

impl Default for ChunkGeometry {
    fn default() -> Self {
        Self::new(GeometryHost::ChunkElement)
    }
}

impl ChunkGeometry {
    /// The defaults, for an element of kind `host`.
    pub fn new(host: GeometryHost) -> Self {
        Self {
            heaps_per_chunk: DEFAULT_HEAPS_PER_CHUNK,
            heap_size: DEFAULT_HEAP_SIZE,
            max_chunks: DEFAULT_MAX_CHUNKS,
            max_heaps: DEFAULT_MAX_HEAPS,
            packet_presence_size: 0,
            pool: PoolAsk::Bytes(0),
            host,
        }
    }

    /// The spec of `d` on this element: its blurb as this kind of element says it.
    fn spec(&self, d: &Dim) -> glib::ParamSpec {
        let blurb = match self.host {
            GeometryHost::ChunkElement if d.name == HEAPS_PER_CHUNK.name => {
                format!("{}{HEAP_IS}", d.blurb)
            }
            GeometryHost::ChunkElement => d.blurb.to_string(),
            GeometryHost::ChunksMode => {
                let mut c = d.blurb.chars();
                let first = c.next().map(|f| f.to_lowercase().to_string());
                format!("mode=chunks: {}{}", first.unwrap_or_default(), c.as_str())
            }
        };
        uint(d.name, d.nick, &blurb, d)
    }

    /// The engine's configuration.
    pub fn chunk_config(&self) -> ChunkConfig {
        ChunkConfig {
            slots_per_chunk: self.heaps_per_chunk as usize,
            slot_size: self.heap_size as usize,
            max_chunks: self.max_chunks as usize,
            max_messages: self.max_heaps as usize,
            packet_payload_size: self.packet_presence_size as usize,
        }
    }

    /// Bytes of one chunk.
    fn chunk_bytes(&self) -> u64 {
        u64::from(self.heaps_per_chunk) * u64::from(self.heap_size)
    }

    /// Chunks in a pool asked for as `ask`: as many as its bytes hold (or its count),
    /// or twice the window when 0.
    pub fn chunks_for(&self, ask: PoolAsk) -> usize {
        match ask {
            PoolAsk::Bytes(0) | PoolAsk::Chunks(0) => 2 * self.max_chunks.max(1) as usize,
            PoolAsk::Bytes(b) => {
                usize::try_from(b / self.chunk_bytes().max(1)).unwrap_or(usize::MAX)
            }
            PoolAsk::Chunks(n) => n as usize,
        }
    }

    /// Chunks in the pool [`ChunkGeometry::pool`] asks for.
    pub fn pool_chunks(&self) -> usize {
        self.chunks_for(self.pool)
    }
}

/// `pool-size` over a [`ChunkGeometry`]: bytes asked for, or those of the chunks
/// `pool-chunks` asked for, or 0 for the default.
#[derive(Debug)]
pub struct PoolBytes;

impl Convert<ChunkGeometry> for PoolBytes {
    fn set(field: &mut ChunkGeometry, value: &glib::Value, _: &glib::ParamSpec) {
        field.pool = PoolAsk::Bytes(value.get().expect("GObject checks the type first"));
    }
    fn get(field: &ChunkGeometry, _: &glib::ParamSpec) -> glib::Value {
        match field.pool {
            PoolAsk::Bytes(b) => b,
            PoolAsk::Chunks(n) => u64::from(n) * field.chunk_bytes(),
        }
        .to_value()
    }
}

/// The deprecated `pool-chunks` over a [`ChunkGeometry`]: sets the count itself; reads
/// the count `pool-size` gives (0 for the default).
#[derive(Debug)]
pub struct PoolChunks;

impl Convert<ChunkGeometry> for PoolChunks {
    fn set(field: &mut ChunkGeometry, value: &glib::Value, _: &glib::ParamSpec) {
        field.pool = PoolAsk::Chunks(value.get().expect("GObject checks the type first"));
    }
    fn get(field: &ChunkGeometry, _: &glib::ParamSpec) -> glib::Value {
        match field.pool {
            PoolAsk::Bytes(0) | PoolAsk::Chunks(0) => 0u32,
            _ => u32::try_from(field.pool_chunks()).unwrap_or(u32::MAX),
        }
        .to_value()
    }
}

/// The chunk engine's properties: `handler`, `handler-config`, the [`ChunkGeometry`],
/// `memory`, `pool-size`, `when-full` and `readable-metas`, and the deprecated
/// `pool-chunks` and `hugepages`.
#[derive(Clone, Debug)]
pub struct ChunkSettings {
    /// `handler`: the packet handler's name.
    pub handler: Option<String>,
    /// `handler-config`: the handler's settings as a structure (its name may be left out
    /// when `handler` is set).
    pub handler_config: Option<String>,
    /// The chunk geometry, and the pool asked for (`pool-size`, `pool-chunks`).
    pub geometry: ChunkGeometry,
    /// `memory` (or the deprecated `hugepages`): what backs the pool.
    pub memory: Memory,
    /// `when-full`: drop or wait when a chunk opens and the pool is empty.
    pub when_full: WhenFull,
    /// `readable-metas`: chunks also carry the meta every language reads.
    pub readable_metas: bool,
}

firehose_core::property_group! {
    ChunkSettings as _s {
        handler => glib::ParamSpecString::builder("handler")
            .nick("Handler")
            .blurb(&format!(
                "Packet handler by name (registered: {}); empty = the name of handler-config",
                handler::handler_names().join(", ")
            ))
            .mutable_ready()
            .build();
        handler_config => glib::ParamSpecString::builder("handler-config")
            .nick("Handler configuration")
            .blurb("The handler's settings as a structure, e.g. seq,offset=0,width=4,payload-offset=8 (see docs/handlers.md)")
            .mutable_ready()
            .build();
        group geometry;
        memory => props::memory_spec("chunk pool");
        geometry: PoolBytes => glib::ParamSpecUInt64::builder("pool-size")
            .nick("Pool size")
            .blurb("Bytes of preallocated, pre-faulted chunk memory: as many chunks (heaps-per-chunk x heap-size) as fit, more than max-chunks (0 = twice max-chunks); the count is pool-slots in stats")
            .default_value(0)
            .mutable_ready()
            .build();
        deprecated("pool-size") geometry: PoolChunks => glib::ParamSpecUInt::builder("pool-chunks")
            .nick("Pool chunks")
            .blurb("Deprecated: use pool-size (bytes); sets the number of chunks directly (0 = twice max-chunks)")
            .default_value(0)
            .mutable_ready()
            .build();
        deprecated("memory") memory: HugepagesAlias => props::hugepages_spec();
        when_full => glib::ParamSpecEnum::builder::<WhenFull>("when-full")
            .nick("When full")
            .blurb("When a chunk opens and every pool chunk is in use downstream: drop its packets (count drops-pool) or block; auto blocks when upstream is not live (replay, files) and drops when it is")
            .mutable_ready()
            .build();
        readable_metas => readable::param_spec();
    }
}

impl Default for ChunkSettings {
    fn default() -> Self {
        Self {
            handler: None,
            handler_config: None,
            geometry: ChunkGeometry::default(),
            memory: Memory::Auto,
            when_full: WhenFull::Auto,
            readable_metas: readable::DEFAULT,
        }
    }
}

impl ChunkSettings {
    /// The engine's configuration.
    pub fn chunk_config(&self) -> ChunkConfig {
        self.geometry.chunk_config()
    }

    /// Chunks in the pool: as many as `pool-size` holds (or `pool-chunks`), or twice
    /// the window when 0.
    pub fn pool_chunks(&self) -> usize {
        self.geometry.pool_chunks()
    }

    /// The handler's name and configuration (with the engine's fields set); the error
    /// says which property to set or fix.
    pub fn handler_config(&self) -> Result<(String, gst::Structure), String> {
        let name = self.handler.as_deref().filter(|n| !n.is_empty());
        let text = self
            .handler_config
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let mut config = match (name, text) {
            (None, None) => {
                return Err(format!(
                    "no packet handler chosen: set handler (registered: {})",
                    handler::handler_names().join(", ")
                ))
            }
            (Some(name), None) => gst::Structure::new_empty(name),
            (name, Some(text)) => parse_config(name, text)?,
        };
        config.set(CONFIG_SLOTS_PER_CHUNK, self.geometry.heaps_per_chunk);
        config.set(CONFIG_SLOT_SIZE, self.geometry.heap_size);
        Ok((config.name().to_string(), config))
    }

    /// Builds the handler, the pool and the engine these settings describe
    /// ([`ChunkHost::new`]), for `element` to start with. The error is the element error
    /// to post, naming the setting to fix ([`crate::front::ChunkFront::start`] warns of a
    /// pool that fell back to normal pages). With `when-full=block` the engine waits for a free pool chunk
    /// until `cancel` is set (the element's unlock).
    pub fn host(
        &self,
        element: &gst::Element,
        cat: gst::DebugCategory,
        cancel: &Arc<AtomicBool>,
    ) -> Result<ChunkHost, gst::ErrorMessage> {
        let cfg = self.chunk_config();
        let (_, config) = self
            .handler_config()
            .map_err(|e| gst::error_msg!(gst::LibraryError::Settings, ("{}", e)))?;
        let (slots, slot_size) = (cfg.slots_per_chunk, cfg.slot_size);
        let chunks = self.pool_chunks();
        let mut host = ChunkHost::new(cfg, config.clone(), chunks, self.memory.into())?;
        gst::info!(
            cat,
            obj = element,
            "handler {config}; {} chunks of {} × {} B ({})",
            chunks,
            slots,
            slot_size,
            host.pool.kind().as_str()
        );
        // `auto` is decided once upstream says whether it is live
        // ([`crate::front::ChunkFront::decide_blocking`]); a live source of its own
        // (fhudpchunksrc) leaves it dropping.
        if self.when_full == WhenFull::Block {
            host.engine.set_blocking(Some(cancel.clone()));
        }
        Ok(host)
    }
}

/// Parses `handler-config`; its structure name may be left out when `handler` is set.
fn parse_config(handler: Option<&str>, text: &str) -> Result<gst::Structure, String> {
    let parsed = text.parse::<gst::Structure>().ok().or_else(|| {
        let name = handler?;
        format!("{name},{text}").parse::<gst::Structure>().ok()
    });
    let Some(config) = parsed else {
        return Err(format!(
            "handler-config '{text}' is not a structure (write it as name,key=value,…)"
        ));
    };
    match handler {
        Some(name) if config.name() != name => Err(format!(
            "handler-config is for '{}' but handler is '{name}'",
            config.name()
        )),
        _ => Ok(config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::property::PropertyGroup;
    use firehose_core::props::Hugepages;

    fn settings(handler: Option<&str>, config: Option<&str>) -> ChunkSettings {
        gst::init().unwrap();
        ChunkSettings {
            handler: handler.map(Into::into),
            handler_config: config.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn the_handler_comes_from_either_property() {
        let (name, cfg) = settings(Some("seq"), None).handler_config().unwrap();
        assert_eq!(name, "seq");
        assert_eq!(
            cfg.get::<u32>(CONFIG_SLOTS_PER_CHUNK),
            Ok(DEFAULT_HEAPS_PER_CHUNK)
        );
        assert_eq!(cfg.get::<u32>(CONFIG_SLOT_SIZE), Ok(DEFAULT_HEAP_SIZE));
        let (name, cfg) = settings(None, Some("seq,width=2"))
            .handler_config()
            .unwrap();
        assert_eq!((name.as_str(), cfg.get::<i32>("width")), ("seq", Ok(2)));
        // The name may be left out when handler is set.
        let (name, cfg) = settings(Some("seq"), Some("width=2,offset=4"))
            .handler_config()
            .unwrap();
        assert_eq!((name.as_str(), cfg.get::<i32>("offset")), ("seq", Ok(4)));
    }

    #[test]
    fn conflicts_and_gaps_are_explained() {
        let err = settings(Some("seq"), Some("spead,step=2"))
            .handler_config()
            .unwrap_err();
        assert!(err.contains("handler is 'seq'"), "{err}");
        let err = settings(None, None).handler_config().unwrap_err();
        assert!(err.contains("set handler"), "{err}");
        let err = settings(None, Some("=,")).handler_config().unwrap_err();
        assert!(err.contains("not a structure"), "{err}");
    }

    /// The value of property `name` of `s`.
    fn get<T: for<'a> glib::value::FromValue<'a>>(s: &impl PropertyGroup, name: &str) -> T {
        s.get_named(name).unwrap().get::<T>().unwrap()
    }

    #[test]
    fn every_property_round_trips_and_past_the_end_is_none() {
        gst::init().unwrap();
        let mut s = ChunkSettings::default();
        let specs = s.spec_vec();
        // A value unlike the default for each property, by name (the aliases are
        // checked below, where what they read back is their own).
        let values: Vec<(&str, glib::Value)> = vec![
            ("handler", Some("seq").to_value()),
            ("handler-config", Some("seq,width=2").to_value()),
            ("heaps-per-chunk", 3u32.to_value()),
            ("heap-size", 100u32.to_value()),
            ("max-chunks", 5u32.to_value()),
            ("max-heaps", 7u32.to_value()),
            ("packet-presence-size", 10u32.to_value()),
            ("memory", Memory::System.to_value()),
            ("pool-size", 2700u64.to_value()),
            ("when-full", WhenFull::Block.to_value()),
            ("readable-metas", false.to_value()),
        ];
        for (name, v) in &values {
            let (i, p) = s
                .find(name)
                .unwrap_or_else(|| panic!("{name} is a chunk property"));
            assert!(s.set(i, v, &p), "{name}");
        }
        for (name, v) in &values {
            let got = s.get_named(name).unwrap();
            assert_eq!(got.serialize().ok(), v.serialize().ok(), "{name}");
        }
        let cfg = s.chunk_config();
        assert_eq!(
            (cfg.slots_per_chunk, cfg.slot_size, cfg.max_chunks),
            (3, 100, 5)
        );
        assert_eq!((cfg.max_messages, cfg.packet_payload_size), (7, 10));
        assert_eq!(s.pool_chunks(), 9, "2700 bytes of 300-byte chunks");
        let names: Vec<String> = specs.iter().map(|p| p.name().to_string()).collect();
        for name in names.iter().filter(|n| !values.iter().any(|(v, _)| v == n)) {
            let blurb = s
                .find(name)
                .unwrap()
                .1
                .blurb()
                .unwrap_or_default()
                .to_string();
            assert!(
                blurb.starts_with("Deprecated: use "),
                "{name} has no test value"
            );
        }
        let n = PropertyGroup::count(&s);
        assert_eq!(n, specs.len());
        assert!(!s.set(n, &1u32.to_value(), &specs[0]), "past the group");
        assert!(s.get(n, &specs[0]).is_none());
    }

    #[test]
    fn the_old_names_set_the_new_fields() {
        gst::init().unwrap();
        let mut s = ChunkSettings::default();
        for (old, new, v) in [
            ("slots-per-chunk", "heaps-per-chunk", 3u32),
            ("slot-size", "heap-size", 100),
            ("max-messages", "max-heaps", 7),
            ("packet-payload-size", "packet-presence-size", 10),
        ] {
            assert!(s.set_named(old, &v.to_value()), "{old}");
            assert_eq!(get::<u32>(&s, new), v, "{old} sets {new}");
            assert_eq!(get::<u32>(&s, old), v, "{old} reads {new}");
            let blurb = s.find(old).unwrap().1.blurb().unwrap().to_string();
            assert_eq!(blurb, format!("Deprecated: use {new}"));
        }
        let g = s.geometry;
        assert_eq!(
            (
                g.heaps_per_chunk,
                g.heap_size,
                g.max_heaps,
                g.packet_presence_size
            ),
            (3, 100, 7, 10)
        );
        // pool-chunks sets a count; pool-size reads back its bytes, and the other way.
        assert!(s.set_named("pool-chunks", &9u32.to_value()));
        assert_eq!(s.pool_chunks(), 9);
        assert_eq!(get::<u64>(&s, "pool-size"), 2700);
        assert!(s.set_named("pool-size", &3000u64.to_value()));
        assert_eq!(s.pool_chunks(), 10);
        assert_eq!(get::<u32>(&s, "pool-chunks"), 10);
        assert!(s.set_named("hugepages", &Hugepages::Require.to_value()));
        assert_eq!(s.memory, Memory::Hugepages);
        assert_eq!(get::<Memory>(&s, "memory"), Memory::Hugepages);
        s.geometry.pool = PoolAsk::Bytes(0);
        assert_eq!(
            s.pool_chunks(),
            2 * DEFAULT_MAX_CHUNKS as usize,
            "0: twice max-chunks"
        );
        assert_eq!(get::<u32>(&s, "pool-chunks"), 0);
    }

    #[test]
    fn a_chunks_mode_has_the_geometry_without_max_heaps_or_old_names() {
        gst::init().unwrap();
        let mut g = ChunkGeometry::new(GeometryHost::ChunksMode);
        let specs = g.spec_vec();
        let names: Vec<&str> = specs.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "heaps-per-chunk",
                "heap-size",
                "max-chunks",
                "packet-presence-size"
            ]
        );
        for p in &specs {
            let blurb = p.blurb().unwrap();
            assert!(blurb.starts_with("mode=chunks: "), "{}: {blurb}", p.name());
            assert!(!blurb.contains("raw handlers"), "{}", p.name());
        }
        for (i, (p, v)) in specs.iter().zip([3u32, 100, 5, 10]).enumerate() {
            assert!(g.set(i, &v.to_value(), p), "{}", p.name());
            assert_eq!(g.get(i, p).unwrap().get::<u32>(), Ok(v), "{}", p.name());
        }
        assert!(!g.set(specs.len(), &1u32.to_value(), &specs[0]));
        assert_eq!(g.max_heaps, DEFAULT_MAX_HEAPS, "not a property here");
        // The same ranges and defaults as on a chunk element, whose heaps-per-chunk
        // says what a heap is.
        let engine = ChunkGeometry::default();
        for p in &specs {
            let (_, q) = engine.find(p.name()).unwrap();
            assert_eq!(
                p.default_value().get::<u32>(),
                q.default_value().get::<u32>()
            );
            let (p, q) = (
                p.downcast_ref::<glib::ParamSpecUInt>().unwrap(),
                q.downcast_ref::<glib::ParamSpecUInt>().unwrap(),
            );
            assert_eq!((p.minimum(), p.maximum()), (q.minimum(), q.maximum()));
        }
        let (_, p) = engine.find("heaps-per-chunk").unwrap();
        assert!(p.blurb().unwrap().contains("one datagram for raw handlers"));
    }

    #[test]
    fn the_pool_count_follows_the_geometry() {
        let mut g = ChunkGeometry {
            heaps_per_chunk: 4,
            heap_size: 1000,
            max_chunks: 3,
            ..Default::default()
        };
        assert_eq!(g.chunks_for(PoolAsk::Bytes(0)), 6);
        assert_eq!(g.chunks_for(PoolAsk::Chunks(0)), 6);
        assert_eq!(g.chunks_for(PoolAsk::Bytes(40_999)), 10);
        assert_eq!(g.chunks_for(PoolAsk::Chunks(7)), 7);
        g.pool = PoolAsk::Bytes(8000);
        assert_eq!(g.pool_chunks(), 2);
    }

    #[test]
    fn host_errors_name_the_setting() {
        gst::init().unwrap();
        let element = gst::Bin::new().upcast::<gst::Element>();
        let cat =
            gst::DebugCategory::new("chunk-settings-test", gst::DebugColorFlags::empty(), None);
        let cancel = Arc::new(AtomicBool::new(false));
        let s = ChunkSettings {
            handler: Some("no-such-handler".into()),
            memory: Memory::System,
            ..Default::default()
        };
        let err = s.host(&element, cat, &cancel).unwrap_err().to_string();
        assert!(
            err.contains("no packet handler named 'no-such-handler'"),
            "{err}"
        );
        let s = ChunkSettings { handler: None, ..s };
        let err = s.host(&element, cat, &cancel).unwrap_err().to_string();
        assert!(err.contains("set handler"), "{err}");
    }
}
