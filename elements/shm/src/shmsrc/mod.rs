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
use gst::prelude::*;

mod imp;

/// `on-full`: the back-pressure this consumer asks its producer for.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhShmSrcOnFull")]
pub enum ConsumerOnFull {
    /// Whatever the producer's `on-full` says.
    #[default]
    #[enum_value(name = "Producer: the fhshmsink's on-full", nick = "producer")]
    Producer = 0,
    /// The producer waits for this consumer.
    #[enum_value(name = "Block: the producer waits for this consumer", nick = "block")]
    Block = 1,
    /// This consumer misses buffers rather than hold the producer.
    #[enum_value(
        name = "Drop: this consumer misses buffers, the producer never waits",
        nick = "drop"
    )]
    Drop = 2,
}

glib::wrapper! {
    /// The `fhshmsrc` element.
    pub struct ShmSrc(ObjectSubclass<imp::ShmSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhshmsrc` with `plugin` (or statically with `None`).
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhshmsrc",
        gst::Rank::NONE,
        ShmSrc::static_type(),
    )
}
