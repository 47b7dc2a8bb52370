//! Packet handlers: the sPIN model (header / payload / completion) on the host.
//!
//! A depacketizer that places messages (SPEAD heaps, sequence-numbered FPGA packets, …)
//! into chunks is split into a generic engine, which owns memory, windows and statistics,
//! and a [`PacketHandler`], which knows one packet format. The engine calls, for every
//! packet:
//! 1. [`PacketHandler::parse`]: which message the packet belongs to and where its payload
//!    goes in that message (`None`: malformed, counted and dropped);
//! 2. on the first packet seen of a message, [`PacketHandler::header`]: which chunk and
//!    which slot of it the message goes to, or drop;
//! 3. [`PacketHandler::payload`]: copy (or transform) the payload into its place;
//! 4. when the message is complete or evicted, [`PacketHandler::completion`]: whether to
//!    mark it present.
//!
//! Handlers run on the receive path: they must not allocate or make system calls.
//! Handlers are created by name through a process-wide registry ([`register_handler`],
//! [`create_handler`]) from a configuration given as a `gst::Structure`, so a generic
//! element (`fhdepay handler=…`) can host any of them.

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

    /// Decides whether an ended message is marked present. The default: when complete.
    fn completion(&mut self, end: &MessageEnd) -> bool {
        end.complete
    }
}

/// Builds a handler from its configuration (the handler's own fields in a structure).
pub type HandlerFactory = fn(&gst::StructureRef) -> Result<Box<dyn PacketHandler>, String>;

static REGISTRY: LazyLock<Mutex<HashMap<&'static str, HandlerFactory>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Makes a handler available under `name` (idempotent: the last registration wins).
pub fn register_handler(name: &'static str, factory: HandlerFactory) {
    REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name, factory);
}

/// Creates the handler registered as `name` with `config`.
pub fn create_handler(
    name: &str,
    config: &gst::StructureRef,
) -> Result<Box<dyn PacketHandler>, String> {
    // Look up in its own statement: the error path lists the names, which locks again.
    let factory = REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .copied();
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
    let mut v: Vec<_> = REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .copied()
        .collect();
    v.sort_unstable();
    v
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
}
