//! Reading capture files: records from pcap or pcapng ([`container`]) and the UDP
//! datagram inside each frame ([`link`]). No GStreamer types.

pub mod container;
pub mod link;
