//! `fhspeadsrc`: SPEAD heaps from a UDP socket, each payload received straight into its
//! heap.
//!
//! `fhudpsrc ! speaddepay` has the kernel copy each datagram into a batch slab, and then
//! copies its payload into its heap. Here one element owns both the socket and the
//! reassembler: the reassembler predicts where the next payloads belong and `recvmmsg`
//! puts each one there ([`firehose_net::direct::DirectReceiver`],
//! [`firehose_net::landsrc`]), so the kernel's copy is the only one. A packet that
//! arrives other than predicted (a heap's first, loss, reordering, a changed header) is
//! copied once, as `speaddepay` copies every packet; `packets-landed` and
//! `packets-copied` in `stats` say which.
//!
//! Landing pays only for large payloads: under 4 KiB per packet
//! ([`firehose_net::direct::LANDING_MIN_PAYLOAD_BYTES`]) the kernel's two scatter
//! entries per datagram cost more than the copy they save, and every packet is copied
//! once from a cached scratch batch, as `fhudpsrc ! speaddepay` does minus one buffer
//! per batch. `landing=auto` (the default) lands into heaps of at most 2 MiB; `on`,
//! `off` override that; with `allow-out-of-order=true` nothing lands.
//!
//! The properties are `fhudpsrc`'s socket ones (`address`, `port`, `multicast-*`,
//! `buffer-size`, `gro`, `coalesce-time`, …), `batch-size`, and `speaddepay`'s heaps-mode
//! ones (`max-heaps`, `substreams`, `allow-out-of-order`, `incomplete`,
//! `max-heap-size`, `landing`, `stop-is-eos`, `hugepages`, `pool-size`). The output is
//! `speaddepay`'s: `application/x-spead-heap`, one buffer per heap (its pool memory, no
//! copy on the way out) with a [`crate::heap::HeapMeta`], stamped with the running time
//! of the receive that started the heap.
//!
//! A stop heap ends the stream with EOS (with `stop-is-eos=false` it is pushed like any
//! heap). An EOS sent by the application (Ctrl-C in `firehose launch`) first takes what
//! the socket had already queued and pushes every heap under construction through the
//! `incomplete` policy, so nothing that was received is lost.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhspeadsrc` element.
    pub struct SpeadSrc(ObjectSubclass<imp::SpeadSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhspeadsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhspeadsrc",
        gst::Rank::NONE,
        SpeadSrc::static_type(),
    )
}
