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

mod imp;

firehose_core::property_enum! {
    /// `mode`: where the XDP program runs.
    pub enum XdpMode = "GstFhXdpMode" {
        /// Native if the driver supports it, else generic.
        #[default]
        Auto = 0, "auto", "Auto: native if the driver supports it, else generic";
        /// In the driver (`XDP_FLAGS_DRV_MODE`); fail if the driver cannot.
        Native = 1, "native", "Native: in the driver, or fail";
        /// After the driver, on the skb (`XDP_FLAGS_SKB_MODE`): works everywhere, slower.
        Generic = 2, "generic", "Generic: on the skb, any interface";
    }
}

firehose_core::property_enum! {
    /// `zero-copy`: how the socket binds.
    pub enum ZeroCopy = "GstFhXdpZeroCopy" {
        /// Try `XDP_ZEROCOPY`, fall back to `XDP_COPY`.
        #[default]
        Auto = 0, "auto", "Auto: zero-copy if the driver supports it, else copy";
        /// `XDP_ZEROCOPY` or fail.
        On = 1, "on", "On: zero-copy, or fail";
        /// `XDP_COPY`.
        Off = 2, "off", "Off: the kernel copies each frame into the UMEM";
    }
}

glib::wrapper! {
    /// The `fhxdpsrc` element.
    pub struct XdpSrc(ObjectSubclass<imp::XdpSrc>) @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhxdpsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<XdpSrc>(Some(plugin), "fhxdpsrc")
}
