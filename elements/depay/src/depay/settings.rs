//! `fhdepay`'s properties and how they become an engine configuration and a handler.

use std::sync::LazyLock;

use firehose_core::chunk::ChunkConfig;
use firehose_core::handler::{self, CONFIG_SLOTS_PER_CHUNK, CONFIG_SLOT_SIZE};
use firehose_core::props::{Hugepages, WhenFull};
use firehose_core::stats;
use gst::glib;
use gst::prelude::*;

pub(super) const DEFAULT_SLOTS_PER_CHUNK: u32 = 64;
pub(super) const DEFAULT_SLOT_SIZE: u32 = 8192;
pub(super) const DEFAULT_MAX_CHUNKS: u32 = 4;
pub(super) const DEFAULT_MAX_MESSAGES: u32 = 32;

#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub handler: Option<String>,
    pub handler_config: Option<String>,
    pub slots_per_chunk: u32,
    pub slot_size: u32,
    pub max_chunks: u32,
    pub max_messages: u32,
    pub packet_payload_size: u32,
    pub pool_chunks: u32,
    pub hugepages: Hugepages,
    pub when_full: WhenFull,
    pub stats_interval: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            handler: None,
            handler_config: None,
            slots_per_chunk: DEFAULT_SLOTS_PER_CHUNK,
            slot_size: DEFAULT_SLOT_SIZE,
            max_chunks: DEFAULT_MAX_CHUNKS,
            max_messages: DEFAULT_MAX_MESSAGES,
            packet_payload_size: 0,
            pool_chunks: 0,
            hugepages: Hugepages::Auto,
            when_full: WhenFull::Drop,
            stats_interval: stats::DEFAULT_INTERVAL_MS,
        }
    }
}

impl Settings {
    pub fn chunk_config(&self) -> ChunkConfig {
        ChunkConfig {
            slots_per_chunk: self.slots_per_chunk as usize,
            slot_size: self.slot_size as usize,
            max_chunks: self.max_chunks as usize,
            max_messages: self.max_messages as usize,
            packet_payload_size: self.packet_payload_size as usize,
        }
    }

    /// Chunks in the pool: `pool-chunks`, or twice the window when 0.
    pub fn pool_chunks(&self) -> usize {
        match self.pool_chunks {
            0 => 2 * self.max_chunks.max(1) as usize,
            n => n as usize,
        }
    }

    /// The handler's name and configuration (with the engine's fields set).
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

pub(super) fn properties() -> &'static [glib::ParamSpec] {
    static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
        let handler_blurb = format!(
            "Packet handler by name (registered: {}); empty = the name of handler-config",
            handler::handler_names().join(", ")
        );
        let mut props = vec![
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
            glib::ParamSpecUInt::builder("pool-chunks")
                .nick("Pool chunks")
                .blurb("Chunks of preallocated, pre-faulted pool memory, more than max-chunks (0 = twice max-chunks, at least 2)")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
                .nick("Hugepages")
                .blurb("Chunk memory in hugepages: auto (fall back with a warning), require, off")
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<WhenFull>("when-full")
                .nick("When full")
                .blurb("When a chunk opens and every pool chunk is in use downstream: drop its packets (count drops-pool) or block")
                .mutable_ready()
                .build(),
        ];
        props.extend(stats::properties(
            "packets, bytes, chunks, chunks-incomplete, heaps, heaps-incomplete, malformed, too-old, duplicated, drops-handler, drops-pool, resyncs, pool-*",
        ));
        props
    });
    PROPS.as_ref()
}

impl Settings {
    pub fn set(&mut self, value: &glib::Value, pspec: &glib::ParamSpec) {
        match pspec.name() {
            "handler" => self.handler = value.get().unwrap(),
            "handler-config" => self.handler_config = value.get().unwrap(),
            "slots-per-chunk" => self.slots_per_chunk = value.get().unwrap(),
            "slot-size" => self.slot_size = value.get().unwrap(),
            "max-chunks" => self.max_chunks = value.get().unwrap(),
            "max-messages" => self.max_messages = value.get().unwrap(),
            "packet-payload-size" => self.packet_payload_size = value.get().unwrap(),
            "pool-chunks" => self.pool_chunks = value.get().unwrap(),
            "hugepages" => self.hugepages = value.get().unwrap(),
            "when-full" => self.when_full = value.get().unwrap(),
            "stats-interval" => self.stats_interval = value.get().unwrap(),
            other => unreachable!("unknown property {other}"),
        }
    }

    pub fn get(&self, pspec: &glib::ParamSpec) -> glib::Value {
        match pspec.name() {
            "handler" => self.handler.to_value(),
            "handler-config" => self.handler_config.to_value(),
            "slots-per-chunk" => self.slots_per_chunk.to_value(),
            "slot-size" => self.slot_size.to_value(),
            "max-chunks" => self.max_chunks.to_value(),
            "max-messages" => self.max_messages.to_value(),
            "packet-payload-size" => self.packet_payload_size.to_value(),
            "pool-chunks" => self.pool_chunks.to_value(),
            "hugepages" => self.hugepages.to_value(),
            "when-full" => self.when_full.to_value(),
            "stats-interval" => self.stats_interval.to_value(),
            other => unreachable!("unknown property {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(handler: Option<&str>, config: Option<&str>) -> Settings {
        gst::init().unwrap();
        Settings {
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
}
