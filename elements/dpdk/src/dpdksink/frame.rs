//! Ethernet + IPv4 + UDP headers for datagrams sent without a kernel. No DPDK or
//! GStreamer types, so the bytes are tested alone (and parsed back with
//! [`firehose_core::frame`]).

use std::net::Ipv4Addr;

/// Bytes of Ethernet (14), IPv4 (20) and UDP (8) headers.
pub const HEADER_LEN: usize = 42;

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

/// The Ethernet multicast MAC of an IPv4 group (01:00:5e + the low 23 bits).
pub fn multicast_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.trim().split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *m = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

impl Header {
    /// Writes the headers for a `payload_len`-byte datagram with IP id `id` into
    /// `out[..HEADER_LEN]`. The UDP checksum is left 0 ("none", allowed over IPv4): the
    /// Ethernet CRC covers the wire, and computing it would read every payload twice.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`] or the datagram exceeds 65507 bytes.
    pub fn write(&self, out: &mut [u8], payload_len: usize, id: u16) {
        assert!(
            payload_len <= 65507,
            "a UDP datagram over IPv4 is at most 65507 bytes"
        );
        let h = &mut out[..HEADER_LEN];
        h[0..6].copy_from_slice(&self.dst_mac);
        h[6..12].copy_from_slice(&self.src_mac);
        h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut h[14..34];
        let total = (20 + 8 + payload_len) as u16;
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
        ip[8] = self.ttl;
        ip[9] = 17;
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&self.src_ip.octets());
        ip[16..20].copy_from_slice(&self.dst_ip.octets());
        let sum = ipv4_checksum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let udp = &mut h[34..42];
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
    }
}

/// The one's-complement checksum of an IPv4 header (its checksum field zero).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
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
        assert_eq!(ipv4_checksum(&f[14..34]), 0);
        assert_eq!(&f[0..6], &h.dst_mac);
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02-00-0a-ff-00-01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:zz"), None);
        assert_eq!(
            multicast_mac(Ipv4Addr::new(239, 129, 2, 3)),
            [1, 0, 0x5e, 1, 2, 3]
        );
    }
}
