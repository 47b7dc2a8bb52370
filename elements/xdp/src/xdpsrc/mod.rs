//! `fhxdpsrc`: UDP capture through an AF_XDP socket on one interface queue.
//!
//! At start the element generates and loads its own XDP program ([`crate::prog`]) that
//! redirects UDP to the chosen destination port(s) into an XSKMAP and passes all other
//! traffic to the kernel, binds an AF_XDP socket whose UMEM is a (hugepage-capable)
//! [`firehose_core::MemoryRegion`], and attaches the program through a BPF link, so it
//! is detached when the element stops, fails or the process dies. Received frames are
//! lent downstream without a copy: one buffer per batch, one `gst::Memory` over the
//! batch's UMEM frames ([`firehose_core::ring::lend_batch`]) with a
//! [`firehose_core::PacketBatchMeta`] pointing at each UDP payload; the frames go back
//! to the fill ring when downstream drops the buffer. Caps are those of `fhudpsrc`:
//! `application/x-firehose-packets`.

use gst::glib;
use gst::prelude::*;

mod imp;

/// `mode`: where the XDP program runs.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhXdpMode")]
pub enum XdpMode {
    /// Native if the driver supports it, else generic.
    #[default]
    #[enum_value(
        name = "Auto: native if the driver supports it, else generic",
        nick = "auto"
    )]
    Auto = 0,
    /// In the driver (`XDP_FLAGS_DRV_MODE`); fail if the driver cannot.
    #[enum_value(name = "Native: in the driver, or fail", nick = "native")]
    Native = 1,
    /// After the driver, on the skb (`XDP_FLAGS_SKB_MODE`): works everywhere, slower.
    #[enum_value(name = "Generic: on the skb, any interface", nick = "generic")]
    Generic = 2,
}

/// `zero-copy`: how the socket binds.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhXdpZeroCopy")]
pub enum ZeroCopy {
    /// Try `XDP_ZEROCOPY`, fall back to `XDP_COPY`.
    #[default]
    #[enum_value(
        name = "Auto: zero-copy if the driver supports it, else copy",
        nick = "auto"
    )]
    Auto = 0,
    /// `XDP_ZEROCOPY` or fail.
    #[enum_value(name = "On: zero-copy, or fail", nick = "on")]
    On = 1,
    /// `XDP_COPY`.
    #[enum_value(name = "Off: the kernel copies each frame into the UMEM", nick = "off")]
    Off = 2,
}

glib::wrapper! {
    /// The `fhxdpsrc` element.
    pub struct XdpSrc(ObjectSubclass<imp::XdpSrc>) @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhxdpsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhxdpsrc",
        gst::Rank::NONE,
        XdpSrc::static_type(),
    )
}
