//! `fhdpdksrc`: receives UDP from a DPDK port with no copy.
//!
//! Each `rte_eth_rx_burst` becomes one `application/x-firehose-packets` buffer, as from
//! `fhudpsrc`: the frames are parsed in software (Ethernet, IPv4/IPv6, UDP), filtered on
//! the UDP destination port and address, and the accepted mbufs are lent downstream as
//! one `gst::Memory` over the range of the pool they lie in, with the payloads' offsets
//! in a [`firehose_core::PacketBatchMeta`]. The mbufs go back to DPDK, in one
//! `rte_pktmbuf_free_bulk`, when the last reference to the memory goes.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhdpdksrc` element.
    pub struct DpdkSrc(ObjectSubclass<imp::DpdkSrc>) @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhdpdksrc` with `plugin` (or statically with `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(plugin, "fhdpdksrc", gst::Rank::NONE, DpdkSrc::static_type())
}
