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

mod encode;
mod imp;
mod props;
mod upstream;

firehose_core::property_enum! {
    /// `format`: what the files hold.
    pub enum Format = "GstFhRecordFormat" {
        /// Nanosecond pcap with synthesized headers.
        #[default]
        Pcap = 0, "pcap", "pcap: nanosecond pcap, one frame per datagram";
        /// pcapng with nanosecond timestamps and interface statistics.
        Pcapng = 1, "pcapng", "pcapng: enhanced packet blocks, interface statistics at the end";
        /// Payloads as they arrive plus an index file.
        Raw = 2, "raw", "raw: payload bytes plus <file>.idx index";
    }
}

firehose_core::property_enum! {
    /// `fsync`: when data is flushed to the device.
    pub enum Fsync = "GstFhRecordFsync" {
        /// Never explicitly.
        #[default]
        None = 0, "none", "none: the kernel decides";
        /// When each file is closed.
        OnRotate = 1, "on-rotate", "on-rotate: when each file is closed";
        /// Every `fsync-bytes` bytes and when each file is closed.
        Bytes = 2, "bytes", "bytes: every fsync-bytes bytes and on close";
    }
}

glib::wrapper! {
    /// The `fhrecordsink` element.
    pub struct RecordSink(ObjectSubclass<imp::RecordSink>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `fhrecordsink` with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<RecordSink>(plugin, "fhrecordsink")
}
