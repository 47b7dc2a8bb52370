//! Firehose's shared-memory transport between processes.
//!
//! - `fhshmsink` owns (or has upstream cut) a pool of memfd segments, passes each
//!   segment's descriptor once to each consumer over a unix `SOCK_SEQPACKET` socket, and
//!   then sends per buffer only a small message: segment, offset, length, timestamps,
//!   caps when they change, and the metas serialized. It proposes its segments upstream
//!   in the allocation query, so `fhudpsrc` receives straight into shared memory.
//! - `fhshmsrc` maps the segments read-only and wraps each buffer as a `GstMemory`
//!   without a copy; dropping the buffer sends a release message back.
//! - `python/firehose_shm` in the repository reads the same protocol without GStreamer.
//!
//! The engines ([`proto`]: messages; [`wire`]: the socket; [`segments`]: which memory
//! is shared; [`hub`]: consumers, references and back-pressure; [`client`]: the
//! consumer's side) use no GStreamer types; the elements are thin adapters over them.

#![warn(missing_docs)]

use gst::glib;

pub mod client;
pub mod endpoint;
pub mod hub;
pub mod metas;
pub mod proto;
pub mod ring;
pub mod segments;
pub mod shmsink;
pub mod shmsrc;
pub mod wire;

/// Registers `fhshmsink` and `fhshmsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    shmsink::register(plugin)?;
    shmsrc::register(plugin)?;
    Ok(())
}
