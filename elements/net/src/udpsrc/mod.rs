//! `fhudpsrc`: kernel UDP capture with `recvmmsg`, UDP GRO and pooled memory.
//!
//! One `recvmmsg` fills one pool slot; the slot becomes the buffer's memory without a
//! copy and is pushed once per batch as `application/x-firehose-packets` (datagram
//! offsets in a [`firehose_core::PacketBatchMeta`]), or, with `output=list`, as a
//! `GstBufferList` of one buffer per datagram for stock elements.
//!
//! Payloads received straight into an engine's memory need the socket and the engine in
//! one element: `fhudpchunksrc` (chunks) and `fhspeadsrc` (SPEAD heaps), over
//! [`crate::landsrc`].

use gst::glib;
use gst::prelude::*;

mod imp;

/// What `output` produces.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhUdpSrcOutput")]
pub enum Output {
    /// One buffer per batch with a packet-batch meta.
    #[default]
    #[enum_value(
        name = "Batch: one buffer per recvmmsg, application/x-firehose-packets",
        nick = "batch"
    )]
    Batch = 0,
    /// A buffer list with one buffer per datagram (sub-memories, no copy).
    #[enum_value(name = "List: one buffer per datagram in a buffer list", nick = "list")]
    List = 1,
}

glib::wrapper! {
    /// The `fhudpsrc` element.
    pub struct UdpSrc(ObjectSubclass<imp::UdpSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
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
