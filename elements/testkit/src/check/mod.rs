//! `fhcheck`: a sink that verifies test packets and accounts their sequence numbers.
//!
//! Accepts any caps. A buffer with a `PacketBatchMeta` holds the packets it lists; any
//! other buffer is one packet. Every byte of every packet is checked against the
//! [`crate::pattern`] format and the sequence numbers go through a
//! [`crate::checker::SeqChecker`]. `render_list` checks a whole `GstBufferList` under one
//! lock. `sync` is off by default: a checker measures what arrives.
//!
//! Properties (read at start): `expected-packets` (0 = unknown; those never received by
//! EOS count as lost), `first-seq`, `stats-interval` (ms, 0 = off) and the read-only
//! `stats`: `packets` (distinct valid packets), `bytes` (theirs), `lost`, `duplicated`,
//! `reordered`, `corrupted`, `late` (older than the 65536-packet window, or before
//! `first-seq`). A corrupted packet's number is not trusted, so unless a good copy
//! arrives it is also counted as lost.
//!
//! At EOS the final stats are posted as an element message before the EOS message.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhcheck` element.
    pub struct FhCheck(ObjectSubclass<imp::FhCheck>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhcheck` with `plugin` (or with the process when `None`, as tests do).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(plugin, "fhcheck", gst::Rank::NONE, FhCheck::static_type())
}
