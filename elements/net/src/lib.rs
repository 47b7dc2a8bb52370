//! Firehose kernel-socket elements.
//!
//! - `fhudpsrc`: UDP receive with `recvmmsg` into pooled slabs, UDP GRO, multicast (ASM
//!   and SSM), kernel drop and timestamp reporting; one push per batch.
//! - `fhudpsink`: UDP send with `sendmmsg` and UDP GSO, rate pacing, several destinations.
//!
//! The socket engines ([`recv`], [`send`], [`sockaddr`]) use no GStreamer types; the
//! element modules are thin adapters over them.

use gst::glib;

pub mod recv;
pub mod send;
pub mod sockaddr;
pub mod udpsink;
pub mod udpsrc;

/// Registers `fhudpsrc` and `fhudpsink` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    udpsrc::register(plugin)?;
    udpsink::register(plugin)?;
    Ok(())
}
