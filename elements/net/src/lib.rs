//! Firehose kernel-socket elements.
//!
//! - `fhudpsrc`: UDP receive with `recvmmsg` into pooled slabs, UDP GRO, multicast (ASM
//!   and SSM), kernel drop and timestamp reporting; one push per batch.
//! - `fhudpchunksrc`: UDP received straight into the chunks of the
//!   [`firehose_chunk`] engine ([`direct`]): the kernel's copy of a payload is the
//!   only one when the packet handler allows it (`handler=spead`).
//! - `fhudpsink`: UDP send with `sendmmsg` and UDP GSO, rate pacing, several destinations.
//!
//! The socket engines ([`recv`], [`direct`], [`landsrc`], [`send`], [`sockaddr`]) use no GStreamer
//! types; the element modules are thin adapters over them, and the two sources share
//! their socket properties ([`socket_settings`]).

use gst::glib;

pub mod direct;
pub mod endpoint_sockets;
pub mod groadapt;
pub mod land_counters;
pub mod landelem;
pub mod landsrc;
pub mod recv;
pub mod send;
pub mod sockaddr;
pub mod socket_settings;
pub mod transport_input;
pub mod udpchunksrc;
pub mod udpsink;
pub mod udpsrc;

/// Registers `fhudpsrc`, `fhudpchunksrc` and `fhudpsink` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    udpsrc::register(plugin)?;
    udpchunksrc::register(plugin)?;
    udpsink::register(plugin)?;
    Ok(())
}
