//! `fhshmsrc`: reads buffers that an `fhshmsink` in another process serves.
//!
//! Connects to `socket-path` (abstract namespace with `abstract=true`), maps each
//! segment the producer announces read-only, and pushes each buffer as a `GstMemory`
//! over the segment's bytes: no copy. When the last reference to that memory is dropped
//! a release message goes back, and the producer may reuse the slot. Caps, timestamps,
//! buffer flags and Firehose's metas (message, packet batch, chunk) are restored; a
//! buffer after some this consumer missed (`on-full=drop` at the producer) is marked
//! DISCONT and the count is in `missed` in stats.
//!
//! `on-full` and `max-held` ask the producer for this consumer's own back-pressure
//! (within the producer's `max-held`).
//!
//! A producer that stops sends end-of-stream; one that dies (its socket closes without
//! it) is an error that says so, never a hang.

use gst::glib;

mod imp;

firehose_core::property_enum! {
    /// `on-full`: the back-pressure this consumer asks its producer for.
    pub enum ConsumerOnFull = "GstFhShmSrcOnFull" {
        /// Whatever the producer's `on-full` says.
        #[default]
        Producer = 0, "producer", "Producer: the fhshmsink's on-full";
        /// The producer waits for this consumer.
        Block = 1, "block", "Block: the producer waits for this consumer";
        /// This consumer misses buffers rather than hold the producer.
        Drop = 2, "drop", "Drop: this consumer misses buffers, the producer never waits";
    }
}

glib::wrapper! {
    /// The `fhshmsrc` element.
    pub struct ShmSrc(ObjectSubclass<imp::ShmSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhshmsrc` with `plugin` (or statically with `None`).
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<ShmSrc>(Some(plugin), "fhshmsrc")
}
