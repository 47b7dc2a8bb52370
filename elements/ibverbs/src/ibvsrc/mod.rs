//! `fhibvsrc`: UDP capture through an RDMA raw-packet queue pair (ibverbs).
//!
//! Start probes for an RDMA device ([`crate::probe`]) and fails with an element error
//! "no RDMA device …" (cause and fix) when there is none — no libibverbs, a kernel
//! without RDMA (ENOSYS), or zero devices. Caps are those of `fhudpsrc`:
//! `application/x-firehose-packets`, UDP payload offsets in a
//! [`firehose_core::PacketBatchMeta`].
//!
//! With a device, start resolves the interface, RDMA device and port (sysfs), maps the
//! receive region (`hugepages`), opens a raw-packet QP with one flow-steering rule for
//! (destination MAC, IPv4, UDP port), registers the region, posts every slot, moves the
//! QP to RTR and joins the multicast group through a kernel socket. `create` polls
//! completions ([`crate::engine`]) and pushes each run of adjacent slots as one buffer
//! with one memory. IPv4 only. Errors at each verbs step name the call, errno and a
//! fix. Nothing touching a device has run on RDMA hardware yet.

use gst::glib;

mod imp;

glib::wrapper! {
    /// The `fhibvsrc` element.
    pub struct IbvSrc(ObjectSubclass<imp::IbvSrc>) @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhibvsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<IbvSrc>(Some(plugin), "fhibvsrc")
}
