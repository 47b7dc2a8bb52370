//! `fhdpdksink`: sends UDP datagrams through a DPDK port.
//!
//! Takes `application/x-firehose-packets` batches (one datagram per meta entry) or plain
//! buffers (one datagram each), writes each datagram behind an Ethernet / IPv4 / UDP
//! header ([`frame::Header`]) into an mbuf, and sends them in `rte_eth_tx_burst`s,
//! retried while the device is busy, paced to `rate` with [`firehose_core::pace`].

use gst::glib;
use gst::prelude::*;

pub mod frame;
mod imp;

glib::wrapper! {
    /// The `fhdpdksink` element.
    pub struct DpdkSink(ObjectSubclass<imp::DpdkSink>) @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhdpdksink` with `plugin` (or statically with `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(
        plugin,
        "fhdpdksink",
        gst::Rank::NONE,
        DpdkSink::static_type(),
    )
}
