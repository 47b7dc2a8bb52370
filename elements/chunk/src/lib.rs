//! Firehose chunk engine: placing the messages of a packet stream by index into large
//! pooled chunks.
//!
//! - [`handler`]: packet handlers (the sPIN model: parse, header, payload, completion)
//!   and the process-wide registry that creates them by name;
//! - the engine ([`ChunkAssembler`] and what it emits, [`FinishedChunk`]), its
//!   configuration and counters, and the element properties of every host
//!   ([`settings`]);
//! - [`front`]: the element side every chunk element shares ([`front::ChunkFront`]:
//!   start, feed, drain, flushing, `stats`), so `fhdepay`, `fhudpchunksrc` and
//!   `speaddepay mode=chunks` are thin front ends over it;
//! - [`landing`]: receiving straight into an engine's memory, the contract between a
//!   receive path (`firehose_net::direct`) and an engine (this one, the SPEAD heap
//!   reassembler), with the helpers and rules they share.
//!
//! The chunk meta ([`ChunkMeta`]) and the generic message meta live in
//! `firehose_core::meta`, so that consumers of chunks need not depend on this crate.
//!
//! Depends on `firehose-core` only; `firehose-net` (the kernel UDP host, `fhudpchunksrc`),
//! `firehose-depay` (`fhdepay`) and `firehose-spead` (its handler, its reassembler's
//! landing, `speaddepay mode=chunks`) depend on it.

pub mod front;
pub mod handler;
pub mod landing;

mod engine;

pub use engine::settings;
pub use engine::{
    feed_buffer, ChunkAssembler, ChunkConfig, ChunkHost, ChunkInfo, ChunkMeta, ChunkStats,
    FinishedChunk, Flow, StatsMirror, LANDING_MAX_CHUNK_BYTES, STREAMING_MIN_CHUNK_BYTES,
    STREAMING_MIN_PAYLOAD_BYTES,
};
