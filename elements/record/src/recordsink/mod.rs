//! `fhrecordsink`: records buffers to disk as pcap, pcapng or raw payload plus index.
//!
//! - `format=pcap` / `pcapng`: every datagram of an `application/x-firehose-packets`
//!   batch becomes one frame: its own headers where a frame source left them in the
//!   buffer ([`firehose_core::meta::dest::PacketDestMeta`]), else synthesized
//!   Ethernet/IPv4-or-IPv6/UDP headers (source from the batch meta, destination from the
//!   destination meta, else `destination` or the upstream source's address and port),
//!   timestamped with its receive time in nanoseconds. Any other
//!   buffer is one datagram. pcapng files end with an Interface Statistics Block holding
//!   the drop counters (see docs/recording.md).
//! - `format=raw`: the payload bytes as they arrive (each datagram of a batch, or each
//!   buffer whole), plus `<file>.idx` ([`crate::index`]) giving each record's id,
//!   offset, length, completeness and times.
//!
//! Writes are whole blocks of `block-size` from an aligned pool, made by a writer thread
//! with `O_DIRECT` (buffered, with a warning, where the filesystem refuses it). When the
//! disk falls behind and the pool is empty, `when-full=drop` drops whole buffers and
//! counts their packets in `drops-disk`; `when-full=block` waits. Files rotate by
//! `max-size` and/or `max-duration`, named from the `location` template, optionally in a
//! ring of `max-files`. EOS (and stopping) writes the last block and truncates each file
//! to its real size.
//!
//! ```text
//! firehose launch fhudpsrc port=7148 ! fhrecordsink location=cap-%05d.pcap max-size=1000000000
//! ```

use gst::glib;
use gst::prelude::*;

mod encode;
mod imp;
mod props;
mod upstream;

/// `format`: what the files hold.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhRecordFormat")]
pub enum Format {
    /// Nanosecond pcap with synthesized headers.
    #[default]
    #[enum_value(name = "pcap: nanosecond pcap, one frame per datagram", nick = "pcap")]
    Pcap = 0,
    /// pcapng with nanosecond timestamps and interface statistics.
    #[enum_value(
        name = "pcapng: enhanced packet blocks, interface statistics at the end",
        nick = "pcapng"
    )]
    Pcapng = 1,
    /// Payloads as they arrive plus an index file.
    #[enum_value(name = "raw: payload bytes plus <file>.idx index", nick = "raw")]
    Raw = 2,
}

/// `fsync`: when data is flushed to the device.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFhRecordFsync")]
pub enum Fsync {
    /// Never explicitly.
    #[default]
    #[enum_value(name = "none: the kernel decides", nick = "none")]
    None = 0,
    /// When each file is closed.
    #[enum_value(name = "on-rotate: when each file is closed", nick = "on-rotate")]
    OnRotate = 1,
    /// Every `fsync-bytes` bytes and when each file is closed.
    #[enum_value(name = "bytes: every fsync-bytes bytes and on close", nick = "bytes")]
    Bytes = 2,
}

glib::wrapper! {
    /// The `fhrecordsink` element.
    pub struct RecordSink(ObjectSubclass<imp::RecordSink>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhrecordsink` with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(
        plugin,
        "fhrecordsink",
        gst::Rank::NONE,
        RecordSink::static_type(),
    )
}
