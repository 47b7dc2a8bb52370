//! `fhpcapsrc`: replays the UDP datagrams of a pcap or pcapng file as packet batches.
//!
//! Reads classic pcap (microsecond and nanosecond, either byte order) and pcapng
//! (any timestamp resolution, several interfaces and sections), with Ethernet (VLAN
//! tags too), Linux cooked (`tcpdump -i any`, SLL and SLL2), raw IP and BSD loopback
//! link layers: files from tcpdump, Wireshark or `fhrecordsink`. Each UDP datagram whose
//! destination matches `port` and `address` (when set) is copied into a pool slot; one
//! buffer per batch carries a [`firehose_core::PacketBatchMeta`] with each payload's
//! offset, the sender's address and the original capture time (`rx_time_ns`).
//!
//! `rate=original` reproduces the capture's timing (a batch holds the packets already
//! due, none is sent early), `rate=max` replays as fast as downstream takes it, and
//! `rate=<bits/s>` (SI suffixes: `500M`, `2G`) paces payload bytes. `loop` plays the
//! file that many times (0: forever). The source never drops: it waits for free pool
//! slots. Damaged frames are counted (`malformed`, `truncated`) and skipped; a file
//! that cannot be read to its end (cut short, a record longer than the snaplen) is an
//! element error naming the file and the offset, after the datagrams before it; packets
//! that are not UDP or do not match the filter are counted as `filtered`.
//!
//! ```text
//! firehose launch fhpcapsrc location=capture.pcap port=7148 rate=original ! speaddepay ! fakesink
//! ```

use gst::glib;
use gst::prelude::*;

mod imp;
mod rate;
mod replay;

pub use rate::Rate;

glib::wrapper! {
    /// The `fhpcapsrc` element.
    pub struct PcapSrc(ObjectSubclass<imp::PcapSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhpcapsrc` with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(plugin, "fhpcapsrc", gst::Rank::NONE, PcapSrc::static_type())
}
