//! The chunk engine's element properties, shared by every element that hosts it
//! (`fhdepay`, `fhudpchunksrc`).
//!
//! [`ChunkSettings`] holds the properties that say which handler places the messages and
//! how the chunks and their pool are laid out; [`ChunkSettings::properties`] gives their
//! specs, and [`ChunkSettings::host`] builds the engine they describe. An element adds its
//! own properties (the `stats` pair, socket settings, …) beside them.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use gst::glib;
use gst::prelude::*;

use super::{ChunkConfig, ChunkHost};
use crate::handler::{self, CONFIG_SLOTS_PER_CHUNK, CONFIG_SLOT_SIZE};
use firehose_core::meta::readable;
use firehose_core::props::{self, Memory, WhenFull};

/// Default `slots-per-chunk`.
pub const DEFAULT_SLOTS_PER_CHUNK: u32 = 64;
/// Default `slot-size`, in bytes.
pub const DEFAULT_SLOT_SIZE: u32 = 8192;
/// Default `max-chunks`.
pub const DEFAULT_MAX_CHUNKS: u32 = 4;
/// Default `max-messages`.
pub const DEFAULT_MAX_MESSAGES: u32 = 32;

/// How big the chunk pool was asked to be: `pool-size` in bytes, or a chunk count
/// through the deprecated `pool-chunks`; 0 either way: twice `max-chunks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAsk {
    /// `pool-size`: as many chunks as these bytes hold.
    Bytes(u64),
    /// `pool-chunks` (deprecated).
    Chunks(u32),
}

/// The chunk engine's properties: `handler`, `handler-config`, `slots-per-chunk`,
/// `slot-size`, `max-chunks`, `max-messages`, `packet-payload-size`, `memory`,
/// `pool-size`, `when-full` and `readable-metas`, and the deprecated `pool-chunks` and
/// `hugepages`.
#[derive(Clone, Debug)]
pub struct ChunkSettings {
    /// `handler`: the packet handler's name.
    pub handler: Option<String>,
    /// `handler-config`: the handler's settings as a structure (its name may be left out
    /// when `handler` is set).
    pub handler_config: Option<String>,
    /// `slots-per-chunk`.
    pub slots_per_chunk: u32,
    /// `slot-size`, in bytes.
    pub slot_size: u32,
    /// `max-chunks`: chunks open at once.
    pub max_chunks: u32,
    /// `max-messages`: messages assembled at once.
    pub max_messages: u32,
    /// `packet-payload-size`: per-packet presence (0: off).
    pub packet_payload_size: u32,
    /// `pool-size` or `pool-chunks`.
    pub pool: PoolAsk,
    /// `memory` (or the deprecated `hugepages`): what backs the pool.
    pub memory: Memory,
    /// `when-full`: drop or wait when a chunk opens and the pool is empty.
    pub when_full: WhenFull,
    /// `readable-metas`: chunks also carry the meta every language reads.
    pub readable_metas: bool,
}

impl Default for ChunkSettings {
    fn default() -> Self {
        Self {
            handler: None,
            handler_config: None,
            slots_per_chunk: DEFAULT_SLOTS_PER_CHUNK,
            slot_size: DEFAULT_SLOT_SIZE,
            max_chunks: DEFAULT_MAX_CHUNKS,
            max_messages: DEFAULT_MAX_MESSAGES,
            packet_payload_size: 0,
            pool: PoolAsk::Bytes(0),
            memory: Memory::Auto,
            when_full: WhenFull::Auto,
            readable_metas: readable::DEFAULT,
        }
    }
}

impl ChunkSettings {
    /// The specs of these properties, in the order elements list them. All are
    /// writable in READY and below: they are read when the element starts.
    pub fn properties() -> Vec<glib::ParamSpec> {
        let handler_blurb = format!(
            "Packet handler by name (registered: {}); empty = the name of handler-config",
            handler::handler_names().join(", ")
        );
        let [memory, hugepages] = props::memory_properties("chunk pool");
        vec![
            glib::ParamSpecString::builder("handler")
                .nick("Handler")
                .blurb(&handler_blurb)
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("handler-config")
                .nick("Handler configuration")
                .blurb("The handler's settings as a structure, e.g. seq,offset=0,width=4,payload-offset=8 (see docs/handlers.md)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("slots-per-chunk")
                .nick("Slots per chunk")
                .blurb("Messages (heaps, packets) per chunk, each in its own slot (spead2: heaps_per_chunk)")
                .minimum(1)
                .maximum(1 << 24)
                .default_value(DEFAULT_SLOTS_PER_CHUNK)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("slot-size")
                .nick("Slot size")
                .blurb("Bytes per slot: the largest message; longer ones are dropped as malformed")
                .minimum(1)
                .maximum(1 << 30)
                .default_value(DEFAULT_SLOT_SIZE)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-chunks")
                .nick("Maximum chunks")
                .blurb("Chunks open at once; messages for older chunks are dropped as too-old")
                .minimum(1)
                .maximum(1024)
                .default_value(DEFAULT_MAX_CHUNKS)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-messages")
                .nick("Maximum messages")
                .blurb("Messages assembled at once; one more ends the oldest incomplete (spead2: max_heaps)")
                .minimum(1)
                .maximum(1 << 20)
                .default_value(DEFAULT_MAX_MESSAGES)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("packet-payload-size")
                .nick("Packet payload size")
                .blurb("Per-packet presence: payload bytes per packet, packet k of a message at offset k×this (0 = per-slot presence only)")
                .default_value(0)
                .mutable_ready()
                .build(),
            memory,
            glib::ParamSpecUInt64::builder("pool-size")
                .nick("Pool size")
                .blurb("Bytes of preallocated, pre-faulted chunk memory: as many chunks (slots-per-chunk x slot-size) as fit, more than max-chunks (0 = twice max-chunks); the count is pool-slots in stats")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("pool-chunks")
                .nick("Pool chunks")
                .blurb("Deprecated: use pool-size (bytes); sets the number of chunks directly (0 = twice max-chunks)")
                .default_value(0)
                .mutable_ready()
                .build(),
            hugepages,
            glib::ParamSpecEnum::builder::<WhenFull>("when-full")
                .nick("When full")
                .blurb("When a chunk opens and every pool chunk is in use downstream: drop its packets (count drops-pool) or block; auto blocks when upstream is not live (replay, files) and drops when it is")
                .mutable_ready()
                .build(),
            readable::param_spec(),
        ]
    }

    /// Sets property `pspec` when it is one of these; false when it is not (the
    /// element's own).
    pub fn set(&mut self, value: &glib::Value, pspec: &glib::ParamSpec) -> bool {
        match pspec.name() {
            "handler" => self.handler = value.get().unwrap(),
            "handler-config" => self.handler_config = value.get().unwrap(),
            "slots-per-chunk" => self.slots_per_chunk = value.get().unwrap(),
            "slot-size" => self.slot_size = value.get().unwrap(),
            "max-chunks" => self.max_chunks = value.get().unwrap(),
            "max-messages" => self.max_messages = value.get().unwrap(),
            "packet-payload-size" => self.packet_payload_size = value.get().unwrap(),
            "pool-size" => self.pool = PoolAsk::Bytes(value.get().unwrap()),
            "pool-chunks" => self.pool = PoolAsk::Chunks(value.get().unwrap()),
            name @ ("memory" | "hugepages") => {
                props::set_memory(&mut self.memory, name, value);
            }
            "when-full" => self.when_full = value.get().unwrap(),
            readable::PROPERTY => self.readable_metas = value.get().unwrap(),
            _ => return false,
        }
        true
    }

    /// The value of property `pspec` when it is one of these.
    pub fn get(&self, pspec: &glib::ParamSpec) -> Option<glib::Value> {
        Some(match pspec.name() {
            "handler" => self.handler.to_value(),
            "handler-config" => self.handler_config.to_value(),
            "slots-per-chunk" => self.slots_per_chunk.to_value(),
            "slot-size" => self.slot_size.to_value(),
            "max-chunks" => self.max_chunks.to_value(),
            "max-messages" => self.max_messages.to_value(),
            "packet-payload-size" => self.packet_payload_size.to_value(),
            "pool-size" => self.pool_bytes().to_value(),
            "pool-chunks" => match self.pool {
                PoolAsk::Bytes(0) | PoolAsk::Chunks(0) => 0u32,
                _ => u32::try_from(self.pool_chunks()).unwrap_or(u32::MAX),
            }
            .to_value(),
            name @ ("memory" | "hugepages") => props::memory_value(self.memory, name)?,
            "when-full" => self.when_full.to_value(),
            readable::PROPERTY => self.readable_metas.to_value(),
            _ => return None,
        })
    }

    /// The engine's configuration.
    pub fn chunk_config(&self) -> ChunkConfig {
        ChunkConfig {
            slots_per_chunk: self.slots_per_chunk as usize,
            slot_size: self.slot_size as usize,
            max_chunks: self.max_chunks as usize,
            max_messages: self.max_messages as usize,
            packet_payload_size: self.packet_payload_size as usize,
        }
    }

    /// Chunks in the pool: as many as `pool-size` holds (or `pool-chunks`), or twice
    /// the window when 0.
    pub fn pool_chunks(&self) -> usize {
        let chunk = self.chunk_config().chunk_bytes().max(1) as u64;
        match self.pool {
            PoolAsk::Bytes(0) | PoolAsk::Chunks(0) => 2 * self.max_chunks.max(1) as usize,
            PoolAsk::Bytes(b) => usize::try_from(b / chunk).unwrap_or(usize::MAX),
            PoolAsk::Chunks(n) => n as usize,
        }
    }

    /// `pool-size` as read back: the bytes asked for, those of the chunks `pool-chunks`
    /// asked for, or 0 for the default.
    fn pool_bytes(&self) -> u64 {
        match self.pool {
            PoolAsk::Bytes(b) => b,
            PoolAsk::Chunks(0) => 0,
            PoolAsk::Chunks(n) => n as u64 * self.chunk_config().chunk_bytes() as u64,
        }
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
        config.set(CONFIG_SLOTS_PER_CHUNK, self.slots_per_chunk);
        config.set(CONFIG_SLOT_SIZE, self.slot_size);
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
            Ok(DEFAULT_SLOTS_PER_CHUNK)
        );
        assert_eq!(cfg.get::<u32>(CONFIG_SLOT_SIZE), Ok(DEFAULT_SLOT_SIZE));
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

    #[test]
    fn every_property_round_trips_and_others_are_left_alone() {
        gst::init().unwrap();
        let props = ChunkSettings::properties();
        let mut s = ChunkSettings::default();
        let values: Vec<glib::Value> = vec![
            Some("seq").to_value(),
            Some("seq,width=2").to_value(),
            3u32.to_value(),
            100u32.to_value(),
            5u32.to_value(),
            7u32.to_value(),
            10u32.to_value(),
            Memory::System.to_value(),
            2700u64.to_value(),
            9u32.to_value(),
            Hugepages::Off.to_value(),
            WhenFull::Block.to_value(),
            false.to_value(),
        ];
        assert_eq!(props.len(), values.len());
        for (p, v) in props.iter().zip(&values) {
            assert!(s.set(v, p), "{} is a chunk property", p.name());
        }
        for (p, v) in props.iter().zip(&values) {
            let got = s.get(p).unwrap();
            assert_eq!(got.serialize().ok(), v.serialize().ok(), "{}", p.name());
        }
        let cfg = s.chunk_config();
        assert_eq!(
            (cfg.slots_per_chunk, cfg.slot_size, cfg.max_chunks),
            (3, 100, 5)
        );
        assert_eq!((cfg.max_messages, cfg.packet_payload_size), (7, 10));
        assert_eq!(s.pool_chunks(), 9);
        assert_eq!(s.memory, Memory::System);
        // pool-size in bytes: as many 300-byte chunks as fit; the alias reads it back.
        s.set(&3000u64.to_value(), &props[8]);
        assert_eq!(s.pool_chunks(), 10);
        assert_eq!(s.get(&props[9]).unwrap().get::<u32>(), Ok(10));
        s.set(&Hugepages::Require.to_value(), &props[10]);
        assert_eq!(
            s.get(&props[7]).unwrap().get::<Memory>(),
            Ok(Memory::Hugepages)
        );
        s.pool = PoolAsk::Bytes(0);
        assert_eq!(s.pool_chunks(), 10, "0: twice max-chunks");

        let other = glib::ParamSpecUInt::builder("batch-size").build();
        assert!(!s.set(&1u32.to_value(), &other));
        assert!(s.get(&other).is_none());
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
