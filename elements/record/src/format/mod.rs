//! What goes into recorded files: synthesized network headers ([`net`]), pcap and pcapng
//! encoding ([`pcap`]) and the raw-format index ([`index`]). No GStreamer types and no
//! I/O, so formats are unit-tested alone.

pub mod index;
pub mod net;
pub mod pcap;
