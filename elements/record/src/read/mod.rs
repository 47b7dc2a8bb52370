//! Reading capture files: records from pcap or pcapng ([`container`]), the UDP
//! datagram inside each frame ([`link`]), and where a crashed recording's whole records
//! end ([`salvage`], for `firehose record check` and `repair`). No GStreamer types.

pub mod container;
pub mod link;
pub mod salvage;
