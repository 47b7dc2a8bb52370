//! `fhtestsrc`: a source of numbered, verifiable test packets in pooled batches.
//!
//! Each buffer is one pool slot holding `batch-size` packets of `packet-size` bytes back
//! to back ([`crate::pattern`] format, numbered from `first-seq`), described by a
//! `PacketBatchMeta` (send time as `rx_time_ns`), with caps
//! `application/x-firehose-packets`. PTS is the nominal send time when paced (the time
//! since the first batch otherwise); offsets count packets.
//!
//! Properties (read at start): `packet-size` (16..=65507, default 1472), `batch-size`
//! (default 64), `rate` (bits/s of packet bytes, 0 = as fast as possible), `num-packets`
//! (EOS after that many, 0 = unlimited; the last batch may be short), `first-seq`,
//! `fill-payload` (default true; false writes only each packet's header, for benchmarks
//! of what carries the packets), `stats-interval` (ms, 0 = off) and the read-only `stats`
//! (`packets`, `bytes`, `batches`, pool counters).
//!
//! When downstream proposes a Firehose memory provider in the allocation query
//! (`fhshmsink`'s shared segments, `fhcudaupload`'s pinned pages), the pool is cut from
//! it and each batch is generated straight into that memory: no copy.
//!
//! It never drops: when downstream holds every slot it waits for one to come back.
//! `unlock()` ends that wait and any pacing sleep at once, so state changes never hang.
//!
//! ```text
//! gst-launch-1.0 fhtestsrc num-packets=1000000 rate=1000000000 ! fhcheck expected-packets=1000000
//! ```

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `fhtestsrc` element.
    pub struct FhTestSrc(ObjectSubclass<imp::FhTestSrc>)
        @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhtestsrc` with `plugin` (or with the process when `None`, as tests do).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(
        plugin,
        "fhtestsrc",
        gst::Rank::NONE,
        FhTestSrc::static_type(),
    )
}
