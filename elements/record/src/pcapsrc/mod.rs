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
//! `pace=original` reproduces the capture's timing (a batch holds the packets already
//! due, none is sent early), `pace=max` replays as fast as downstream takes it, and
//! `pace=bitrate` paces payload bytes at `bitrate` bits/s. The older `rate` property
//! (`original`, `max` or bits/s with SI suffixes such as `500M`) still works and sets
//! both; it is deprecated. `loop` plays the file that many times (0: forever). The
//! source never drops: it waits for free pool slots. Damaged records are counted
//! (`malformed`, `truncated`) and skipped; a file that cannot be read to its end (cut
//! short, a record longer than the snaplen) is an element error naming the file and the
//! offset, after the datagrams before it; packets that are not UDP or do not match the
//! filter are counted as `filtered`.
//!
//! A record holding several SPEAD packets back to back (a UDP GSO sender captured on
//! loopback, before the kernel cut the send into packets) is cut into its packets by
//! their own lengths (`split=spead`, the default) and replayed as the live receiver got
//! them (`records-split`). The cutting is the splitter firehose-spead registers by name
//! ([`firehose_core::split`]), looked up at start: this crate depends on core only, and a
//! process without it registered fails at start unless `split=none`. A record whose
//! packets cannot all be cut out is counted (`records-unsplit`) and said in a warning
//! (the first, then at most one every 10 s): the packets before the bytes that do not
//! parse go out one by one, the rest as one datagram.
//!
//! ```text
//! firehose launch fhpcapsrc location=capture.pcap port=7148 pace=original ! speaddepay ! fakesink
//! ```

use gst::glib;

mod imp;
mod props;
mod rate;
mod replay;

pub use rate::Rate;

firehose_core::property_enum! {
    /// `pace`: how fast the capture is replayed.
    pub enum Pace = "GstFhPcapPace" {
        /// At the capture's own timing.
        #[default]
        Original = 0, "original", "original: the capture's own timing";
        /// As fast as downstream accepts.
        Max = 1, "max", "max: as fast as downstream takes it";
        /// Payload bytes paced at the `bitrate` property.
        Bitrate = 2, "bitrate", "bitrate: payload bits/s set by the bitrate property";
    }
}

firehose_core::property_enum! {
    /// `split`: how records are cut into datagrams.
    pub enum Split = "GstFhPcapSplit" {
        /// One record, one datagram.
        None = 0, "none", "none: one datagram per record";
        /// Records holding several SPEAD packets back to back are cut into their packets.
        #[default]
        Spead = 1, "spead", "spead: records holding several SPEAD packets (GSO sends) are cut into them";
    }
}

impl Split {
    /// The name of the [`firehose_core::split`] splitter this mode cuts with (its
    /// nick), or `None` when records stay whole.
    pub fn splitter_name(self) -> Option<&'static str> {
        match self {
            Split::None => None,
            Split::Spead => Some("spead"),
        }
    }
}

glib::wrapper! {
    /// The `fhpcapsrc` element.
    pub struct PcapSrc(ObjectSubclass<imp::PcapSrc>)
        @extends firehose_core::src::PacketSrc, gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `fhpcapsrc` with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<PcapSrc>(plugin, "fhpcapsrc")
}
