//! Ethernet + IPv4 + UDP headers for datagrams sent without a kernel. No DPDK or
//! GStreamer types, so the bytes are tested alone (and parsed back with
//! [`firehose_core::frame`]).

use std::net::{Ipv4Addr, SocketAddrV4};

use firehose_core::frame::build::{self, Macs};

/// Bytes of Ethernet (14), IPv4 (20) and UDP (8) headers.
pub const HEADER_LEN: usize = build::IPV4_UDP_HEADERS;

/// The fixed part of every frame a sink sends; only lengths, the IP id and checksum
/// change per datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// IP time to live.
    pub ttl: u8,
}

impl Header {
    /// Writes the headers for a `payload_len`-byte datagram with IP id `id` into
    /// `out[..HEADER_LEN]`. The UDP checksum is left 0 ("none", allowed over IPv4): the
    /// Ethernet CRC covers the wire, and computing it would read every payload twice.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`] or the datagram exceeds 65507 bytes.
    pub fn write(&self, out: &mut [u8], payload_len: usize, id: u16) {
        build::write_ipv4_udp(
            out,
            Macs {
                src: self.src_mac,
                dst: self.dst_mac,
            },
            SocketAddrV4::new(self.src_ip, self.src_port),
            SocketAddrV4::new(self.dst_ip, self.dst_port),
            payload_len,
            id,
            self.ttl,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::frame::{datagram, LINKTYPE_ETHERNET};

    #[test]
    fn frame_parses_back_with_a_valid_checksum() {
        let h = Header {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 2),
            dst_ip: Ipv4Addr::new(10, 0, 0, 1),
            src_port: 5000,
            dst_port: 7148,
            ttl: 64,
        };
        let mut f = vec![0u8; HEADER_LEN + 5];
        h.write(&mut f, 5, 77);
        f[HEADER_LEN..].copy_from_slice(b"hello");
        let d = datagram(LINKTYPE_ETHERNET, &f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.src, "10.0.0.2:5000".parse().unwrap());
        assert_eq!(d.dst, "10.0.0.1:7148".parse().unwrap());
        // A header with its checksum sums to 0xffff.
        assert_eq!(build::checksum(&f[14..34]), 0);
        assert_eq!(&f[0..6], &h.dst_mac);
    }
}
