//! `fhdepay`: places the messages of a packet stream into pooled chunks with a packet
//! handler chosen by name.
//!
//! Input: `application/x-firehose-packets` batches (the packets listed by their
//! [`firehose_core::PacketBatchMeta`]) or any other buffer as one packet, pushed singly
//! or in buffer lists. Output: `application/x-firehose-chunk` buffers, one pool slot of
//! `heaps-per-chunk × heap-size` bytes each (no copy on the way out), with a
//! [`firehose_core::meta::chunk::ChunkMeta`] holding the chunk id and the presence bitmap,
//! and as PTS the PTS of the input buffer that opened the chunk.
//!
//! A chunk leaves when a message for a chunk `max-chunks` newer arrives, at EOS, or when
//! the handler ends the stream (a SPEAD stop heap): then `fhdepay` sends EOS itself and
//! refuses further input with `GST_FLOW_EOS`. A flush drops the open chunks.
//!
//! Properties are read when the element goes from READY to PAUSED; a wrong handler name
//! or configuration is an element error at that point, naming what is accepted.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhdepay` element.
    pub struct FhDepay(ObjectSubclass<imp::FhDepay>) @extends gst::Element, gst::Object;
}

/// Registers `fhdepay` with `plugin` (or with the process when `None`, as tests do).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(plugin, "fhdepay", gst::Rank::NONE, FhDepay::static_type())
}
