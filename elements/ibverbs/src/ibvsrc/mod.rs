//! `fhibvsrc`: UDP capture through an RDMA raw-packet queue pair (ibverbs).
//!
//! Start probes for an RDMA device ([`crate::probe`]) and fails with an element error
//! "no RDMA device …" (cause and fix) when there is none — no libibverbs, a kernel
//! without RDMA (ENOSYS), or zero devices. Caps are those of `fhudpsrc`:
//! `application/x-firehose-packets`, UDP payload offsets in a
//! [`firehose_core::PacketBatchMeta`].
//!
//! Not yet implemented: the receive path itself (raw-packet QP, one flow-steering rule
//! per destination MAC/IP/UDP port, multicast join through a kernel socket, a hugepage
//! region registered as one MR and cut into [`firehose_core::ring`] slots, batched completion
//! polling). With a device present, start fails saying so. Nothing here has run on RDMA
//! hardware.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhibvsrc` element.
    pub struct IbvSrc(ObjectSubclass<imp::IbvSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhibvsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhibvsrc",
        gst::Rank::NONE,
        IbvSrc::static_type(),
    )
}
