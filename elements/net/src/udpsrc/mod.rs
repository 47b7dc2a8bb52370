//! `fhudpsrc`: kernel UDP capture with `recvmmsg`, UDP GRO and pooled memory.
//!
//! One `recvmmsg` fills one pool slot; the slot becomes the buffer's memory without a
//! copy and is pushed once per batch as `application/x-firehose-packets` (datagram
//! offsets in a [`firehose_core::PacketBatchMeta`]) to an element that understands
//! batches, or as a `GstBufferList` of one buffer per datagram (sub-memories of the
//! slot) to any other: `output=auto`, see [`firehose_core::src::output`].
//!
//! Payloads received straight into an engine's memory need the socket and the engine in
//! one element: `fhudpchunksrc` (chunks) and `fhspeadsrc` (SPEAD heaps), over
//! [`crate::landsrc`].

use gst::glib;
use gst::prelude::*;

mod imp;

/// What `output` produces (shared by every packet source).
pub use firehose_core::props::Output;

glib::wrapper! {
    /// The `fhudpsrc` element.
    pub struct UdpSrc(ObjectSubclass<imp::UdpSrc>) @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhudpsrc` with `plugin` (or statically with `None`).
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhudpsrc",
        gst::Rank::NONE,
        UdpSrc::static_type(),
    )
}
