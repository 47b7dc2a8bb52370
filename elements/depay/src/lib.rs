//! Firehose generic depacketizer: `fhdepay` hosts any registered packet handler (the
//! sPIN model of [`firehose_chunk::handler`]) on the [`firehose_chunk`] engine, and
//! this crate brings the [`seq`] handler for sequence-numbered custom packets.
//!
//! `fhdepay handler=seq handler-config="seq,offset=0,width=4,payload-offset=8"` turns a
//! stream of `application/x-firehose-packets` batches (or one packet per buffer) into
//! `application/x-firehose-chunk` buffers: many messages placed by index into one pooled
//! chunk, with a presence bitmap in a [`firehose_core::meta::chunk::ChunkMeta`]. Rust users add
//! their own formats with [`firehose_chunk::handler::register_handler`]; see
//! `docs/handlers.md` and `examples/custom_handler.rs`.

#![warn(missing_docs)]

use gst::glib;

pub mod depay;
pub mod seq;

/// Registers `fhdepay` with `plugin`, and the `seq` handler.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    register_handlers();
    depay::register(Some(plugin))
}

/// Registers this crate's packet handlers (`seq`) with the process (idempotent).
pub fn register_handlers() {
    firehose_chunk::handler::register_handler(seq::NAME, seq::factory);
}
