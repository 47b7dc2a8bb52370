//! `fhudpchunksrc`: kernel UDP received straight into chunks.
//!
//! `fhudpsrc ! fhdepay handler=…` has the kernel copy each datagram into a batch slab,
//! and then copies its payload into its chunk. Here the chunk engine predicts where the
//! next payloads belong and `recvmmsg` puts each one there
//! ([`crate::direct::DirectReceiver`]), so the kernel's copy is the only one. A packet
//! that arrives other than predicted (the first of a stream, loss, reordering) is copied
//! once, as `fhdepay` copies every packet; so is every packet when the handler cannot
//! read a packet from its header alone (SPEAD's can: `handler=spead`). The `stats` say
//! which: `packets-landed` and `packets-copied`.
//!
//! Whether payloads land straight in the chunks is `landing`: by default (`auto`) only
//! for chunks of at most 2 MiB ([`firehose_chunk::landing::LANDING_MAX_CHUNK_BYTES`]),
//! which stay in the CPU caches between uses. A larger chunk has left them by the time
//! its memory is filled again, and the kernel's copy then reads every destination line
//! first, where `fhdepay`'s copy into large chunks uses streaming stores that skip that
//! read: on the development VM landing cost as much or more than copying for 4 and 8 MiB
//! chunks and less for 1 and 2 MiB ones (docs/benchmarks.md). `on` and `off` override
//! the size rule.
//!
//! The properties are `fhudpsrc`'s socket ones ([`crate::socket_settings`]), `fhdepay`'s
//! chunk ones ([`firehose_chunk::settings`]), `batch-size` and `landing`, read when
//! the element starts. The output is `fhdepay`'s: `application/x-firehose-chunk` buffers, one
//! pool chunk each (no copy on the way out), with a [`firehose_core::meta::chunk::ChunkMeta`]
//! and as PTS the running time of the receive that opened the chunk.
//!
//! The stream ends (EOS) after the last chunk when the handler ends it (a SPEAD stop
//! heap). An EOS sent by the application (Ctrl-C in `firehose launch`) first takes what
//! the socket had already queued and pushes every chunk still open, so nothing that was
//! received is lost.

use gst::glib;
use gst::prelude::*;

mod imp;

pub use firehose_chunk::landing::Mode as Landing;

glib::wrapper! {
    /// The `fhudpchunksrc` element.
    pub struct UdpChunkSrc(ObjectSubclass<imp::UdpChunkSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhudpchunksrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "fhudpchunksrc",
        gst::Rank::NONE,
        UdpChunkSrc::static_type(),
    )
}
