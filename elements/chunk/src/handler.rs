//! Packet handlers: the sPIN model (header / payload / completion) on the host.
//!
//! A depacketizer that places messages (SPEAD heaps, sequence-numbered FPGA packets, …)
//! into chunks is split into a generic engine, which owns memory, windows and statistics,
//! and a [`PacketHandler`], which knows one packet format. The engine calls, for every
//! packet:
//! 1. [`PacketHandler::parse`]: which message the packet belongs to and where its payload
//!    goes in that message (`None`: malformed, counted and dropped);
//! 2. on the first packet seen of a message, [`PacketHandler::header`]: which chunk and
//!    which slot of it the message goes to, or drop, or end the stream;
//! 3. [`PacketHandler::payload`]: copy (or transform) the payload into its place;
//! 4. when the message is complete or evicted, [`PacketHandler::completion`]: whether to
//!    mark it present.
//!
//! Handlers run on the receive path: they must not allocate or make system calls.
//! Handlers are created by name through a process-wide registry ([`register_handler`],
//! [`create_handler`]) from a configuration given as a `gst::Structure`, so a generic
//! element (`fhdepay handler=…`) can host any of them. The engine is
//! [`crate::ChunkAssembler`]; `docs/handlers.md` shows how to write a handler.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{LazyLock, Mutex};

/// What a handler read from one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketFacts {
    /// The message the packet belongs to (heap counter, sequence number, …).
    pub message_id: u64,
    /// The payload's byte range within the packet.
    pub payload: Range<usize>,
    /// Where that payload goes within the message.
    pub message_offset: usize,
    /// The message's total length, when the packet says it.
    pub message_len: Option<usize>,
}

/// Where a message goes, decided on its first packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Into chunk `chunk_id`, at slot `index` (0 ≤ index < slots per chunk).
    Place {
        /// The chunk.
        chunk_id: u64,
        /// The slot within the chunk.
        index: usize,
    },
    /// Not wanted: every packet of the message is dropped and counted.
    Drop,
    /// This packet alone is not data (a control packet anyone could send with any
    /// message id): dropped and counted, and held against no message, so a forged one
    /// cannot condemn the real message that has its id.
    Ignore,
    /// The stream ends with this message (e.g. a SPEAD stop heap): the engine drops it,
    /// emits every open chunk and reports the end, so the host can send EOS.
    End,
}

/// How a message ended, for [`PacketHandler::completion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageEnd {
    /// The message.
    pub message_id: u64,
    /// Where it was placed.
    pub chunk_id: u64,
    /// Its slot.
    pub index: usize,
    /// Payload bytes received.
    pub bytes_received: usize,
    /// Its length, if known.
    pub message_len: Option<usize>,
    /// All of it arrived.
    pub complete: bool,
}

/// One packet format, plugged into a chunk-placing engine.
pub trait PacketHandler: Send + 'static {
    /// Reads one packet; `None` if it is malformed.
    fn parse(&mut self, packet: &[u8]) -> Option<PacketFacts>;

    /// Places the message whose first packet (as seen) this is.
    fn header(&mut self, packet: &[u8], facts: &PacketFacts) -> Placement;

    /// Writes the payload into `dest` (exactly `facts.payload.len()` bytes, at the
    /// message's offset within its slot). The default copies it unchanged.
    fn payload(&mut self, packet: &[u8], facts: &PacketFacts, dest: &mut [u8]) {
        dest.copy_from_slice(&packet[facts.payload.clone()]);
    }

    /// True when this handler keeps the default [`Self::payload`], an unchanged copy. The
    /// engine may then copy whole 64-byte lines itself with streaming stores, for chunks
    /// too large to stay in cache (`payload` is not called for those packets). The
    /// default, false, always calls `payload`: leave it so if you override `payload`.
    fn copies_payload_unchanged(&self) -> bool {
        false
    }

    /// True when [`Self::parse_header`] reads packets from their header alone and
    /// [`Self::header`] places from it. A host that receives straight into chunk memory
    /// (`fhudpchunksrc`) then has the kernel put each header into scratch and each
    /// payload where the engine predicts it goes, and copies nothing when it was right.
    /// It also needs [`Self::copies_payload_unchanged`]. The default, false, keeps every
    /// packet whole and calls [`Self::parse`].
    fn parses_header_alone(&self) -> bool {
        false
    }

    /// Reads a packet from its first bytes, `header`, the packet being `packet_len` bytes
    /// long. Returns `None` when the packet's payload does not start exactly at
    /// `header.len()` (the host guessed the header's length wrong), or when the header is
    /// malformed: either way the host gathers the whole packet and calls
    /// [`Self::parse`], which decides. The facts' payload range must be
    /// `header.len()..packet_len`. Only called when [`Self::parses_header_alone`]; the
    /// following [`Self::header`] call, if any, is then given the header bytes alone.
    fn parse_header(&mut self, header: &[u8], packet_len: usize) -> Option<PacketFacts> {
        let _ = (header, packet_len);
        None
    }

    /// The placement [`Self::header`] would give message `message_id`, when it follows
    /// from the id alone (SPEAD placed by HEAP_CNT, numbered packets); `None` (the
    /// default) when it depends on the packet. Lets a host predict where the first packet
    /// of the next message lands; it must never differ from what `header` then says for
    /// a message of that id that is placed at all.
    fn predict_placement(&self, message_id: u64) -> Option<Placement> {
        let _ = message_id;
        None
    }

    /// Decides whether an ended message is marked present. The default: when complete.
    fn completion(&mut self, end: &MessageEnd) -> bool {
        end.complete
    }
}

/// Field a host sets in every handler configuration before calling the factory: the
/// engine's slots per chunk (`u32`), which a handler needs to turn a message number
/// into (chunk, index). Hosts overwrite any value the user gave, so the two agree.
pub const CONFIG_SLOTS_PER_CHUNK: &str = "slots-per-chunk";
/// Field a host sets in every handler configuration: the engine's bytes per slot (`u32`).
pub const CONFIG_SLOT_SIZE: &str = "slot-size";

/// Builds a handler from its configuration (the handler's own fields in a structure,
/// plus [`CONFIG_SLOTS_PER_CHUNK`] and [`CONFIG_SLOT_SIZE`] set by the host).
pub type HandlerFactory = fn(&gst::StructureRef) -> Result<Box<dyn PacketHandler>, String>;

static REGISTRY: LazyLock<Mutex<HashMap<&'static str, HandlerFactory>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Makes a handler available under `name` (idempotent: the last registration wins).
pub fn register_handler(name: &'static str, factory: HandlerFactory) {
    firehose_core::sync::lock(&REGISTRY).insert(name, factory);
}

/// Creates the handler registered as `name` with `config`.
pub fn create_handler(
    name: &str,
    config: &gst::StructureRef,
) -> Result<Box<dyn PacketHandler>, String> {
    // Look up in its own statement: the error path lists the names, which locks again.
    let factory = firehose_core::sync::lock(&REGISTRY).get(name).copied();
    let factory = factory.ok_or_else(|| {
        format!(
            "no packet handler named '{name}' (registered: {})",
            handler_names().join(", ")
        )
    })?;
    factory(config)
}

/// The names of the registered handlers, sorted.
pub fn handler_names() -> Vec<&'static str> {
    let mut v: Vec<_> = firehose_core::sync::lock(&REGISTRY)
        .keys()
        .copied()
        .collect();
    v.sort_unstable();
    v
}

/// Reads a non-negative integer field of a handler configuration, whatever type the
/// structure parser gave it (`offset=8`, `place-item=0x1600`, `step=(guint64)…`, or a
/// quoted `"0x…"`); `Ok(None)` when the field is absent.
pub fn config_u64(config: &gst::StructureRef, key: &str) -> Result<Option<u64>, String> {
    let Ok(v) = config.value(key) else {
        return Ok(None);
    };
    let bad = || {
        format!(
            "{}: {key} must be a non-negative integer, not {v:?}",
            config.name()
        )
    };
    let n = if let Ok(x) = v.get::<i32>() {
        u64::try_from(x).ok()
    } else if let Ok(x) = v.get::<u32>() {
        Some(x.into())
    } else if let Ok(x) = v.get::<i64>() {
        u64::try_from(x).ok()
    } else if let Ok(x) = v.get::<u64>() {
        Some(x)
    } else if let Ok(x) = v.get::<f64>() {
        // Integers too large for an int are parsed as doubles (hex included).
        (x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(53)).then_some(x as u64)
    } else if let Ok(s) = v.get::<String>() {
        let s = s.trim();
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    } else {
        None
    };
    n.map(Some).ok_or_else(bad)
}

/// Fails, naming the field and the accepted ones, when `config` has a field not in
/// `allowed` (a misspelt key must not be silently ignored). The host's
/// [`CONFIG_SLOTS_PER_CHUNK`] and [`CONFIG_SLOT_SIZE`] are always allowed.
pub fn check_fields(config: &gst::StructureRef, allowed: &[&str]) -> Result<(), String> {
    for field in config.fields() {
        let field = field.as_str();
        if field != CONFIG_SLOTS_PER_CHUNK && field != CONFIG_SLOT_SIZE && !allowed.contains(&field)
        {
            return Err(format!(
                "{}: unknown field '{field}' (accepted: {})",
                config.name(),
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy format: byte 0 = message id, rest = payload; one packet per message.
    struct Toy;

    impl PacketHandler for Toy {
        fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
            let (&id, rest) = p.split_first()?;
            Some(PacketFacts {
                message_id: id.into(),
                payload: 1..1 + rest.len(),
                message_offset: 0,
                message_len: Some(rest.len()),
            })
        }

        fn header(&mut self, _: &[u8], f: &PacketFacts) -> Placement {
            Placement::Place {
                chunk_id: f.message_id / 4,
                index: (f.message_id % 4) as usize,
            }
        }
    }

    #[test]
    fn registry_creates_by_name_and_lists_names() {
        gst::init().unwrap();
        register_handler("toy-test", |_| Ok(Box::new(Toy)));
        let cfg = gst::Structure::new_empty("toy-test");
        let mut h = create_handler("toy-test", &cfg).unwrap();
        let f = h.parse(&[6, 1, 2]).unwrap();
        assert_eq!(
            h.header(&[6, 1, 2], &f),
            Placement::Place {
                chunk_id: 1,
                index: 2
            }
        );
        let mut dest = [0u8; 2];
        h.payload(&[6, 1, 2], &f, &mut dest);
        assert_eq!(dest, [1, 2]);
        assert!(handler_names().contains(&"toy-test"));
        let err = create_handler("nope", &cfg).err().unwrap();
        assert!(err.contains("toy-test"), "{err}");
    }

    #[test]
    fn config_integers_in_every_spelling() {
        gst::init().unwrap();
        let s: gst::Structure =
            "x,a=8,b=0x1600,c=(guint64)18446744073709551615,d=(string)\"0xff\",e=0x100000000,f=-1,g=abc"
                .parse()
                .unwrap();
        assert_eq!(config_u64(&s, "a"), Ok(Some(8)));
        assert_eq!(config_u64(&s, "b"), Ok(Some(0x1600)));
        assert_eq!(config_u64(&s, "c"), Ok(Some(u64::MAX)));
        assert_eq!(config_u64(&s, "d"), Ok(Some(255)));
        assert_eq!(config_u64(&s, "e"), Ok(Some(1 << 32)));
        assert_eq!(config_u64(&s, "zz"), Ok(None));
        assert!(config_u64(&s, "f").unwrap_err().contains("f must be"));
        assert!(config_u64(&s, "g").is_err());
        assert!(check_fields(&s, &["a", "b", "c", "d", "e", "f", "g"]).is_ok());
        let err = check_fields(&s, &["a"]).unwrap_err();
        assert!(err.contains("unknown field 'b'"), "{err}");
    }
}
