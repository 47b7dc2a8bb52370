//! `fhshmsink`: serves buffers to other processes through shared memory.
//!
//! Listens on a unix `SOCK_SEQPACKET` socket (`socket-path`, or a name in the abstract
//! namespace with `abstract=true`; the socket file gets `socket-mode`, 0600 by default).
//! A connecting process whose uid (`SO_PEERCRED`) is neither this process's nor root's
//! (nor `allow-uid`) is refused and counted.
//!
//! It proposes memfd segments upstream in the allocation query, so a source that owns a
//! pool (`fhudpsrc`, `fhtestsrc`) cuts it from shared memory and receives (or generates)
//! straight into it; a buffer
//! whose memory lies in such a segment goes to consumers as (segment, offset, length),
//! without a copy. Any other buffer is copied once into the sink's own segments
//! (`bytes-copied` in stats).
//!
//! Each consumer gets every buffer, unless it holds `max-held` buffers already: with
//! `on-full=block` the sink waits for it; with `on-full=drop` that consumer misses the
//! buffer (counted, and told in its next buffer message) and nobody waits. A buffer's
//! memory is kept until every consumer it went to released it. A consumer that dies has
//! its references dropped at once (`consumers-lost`).

use gst::glib;

use crate::proto::OnFull;

mod imp;

firehose_core::property_enum! {
    /// `on-full`: what the sink does when a consumer holds `max-held` buffers.
    pub enum OnFullMode = "GstFhShmSinkOnFull" {
        /// Wait for the consumer (never lose a buffer; a stuck consumer stalls the pipeline).
        #[default]
        Block = 0, "block", "Block: wait until the consumer releases a buffer";
        /// Skip that consumer for this buffer, count it missed, never wait.
        Drop = 1, "drop", "Drop: the consumer misses the buffer (counted, and told)";
    }
}

impl From<OnFullMode> for OnFull {
    fn from(m: OnFullMode) -> Self {
        match m {
            OnFullMode::Block => OnFull::Block,
            OnFullMode::Drop => OnFull::Drop,
        }
    }
}

glib::wrapper! {
    /// The `fhshmsink` element.
    pub struct ShmSink(ObjectSubclass<imp::ShmSink>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhshmsink` with `plugin` (or statically with `None`).
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<ShmSink>(Some(plugin), "fhshmsink")
}
