//! `fhudpsink`: sends datagrams with `sendmmsg` and UDP GSO, paced to a target rate.
//!
//! Input is any caps. A buffer carrying a [`firehose_core::PacketBatchMeta`] is sent as
//! its datagrams; any other buffer is one datagram; a buffer list is one datagram per
//! buffer, sent in batches. Every datagram goes to `host:port`, or to every entry of
//! `clients` when that is set.
//!
//! `sync` defaults to false: the data rate is set with `rate` (bits/s of UDP payload,
//! all clients together), which paces the sends from the byte count, not from buffer
//! timestamps. Set `sync=true` to follow timestamps as stock `udpsink` does.
//!
//! The socket options (everything but `stats`) are read when the element starts
//! (READY → PAUSED).

use gst::glib;

mod imp;

glib::wrapper! {
    /// The `fhudpsink` element.
    pub struct UdpSink(ObjectSubclass<imp::UdpSink>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhudpsink` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<UdpSink>(Some(plugin), "fhudpsink")
}
