//! Writing Ethernet + IPv4/IPv6 + UDP headers: the other direction of [`super`]'s
//! parser. Used where datagrams need frames and no kernel makes them: synthesized
//! headers in capture files (`fhrecordsink`) and frames sent by a DPDK port
//! (`fhdpdksink`). Also the MAC helpers every frame-level element needs.
//!
//! The IPv4 header checksum is computed; the UDP checksum is 0 ("none") over IPv4 —
//! legal, and computing it would read every payload a second time — and computed over
//! IPv6, where 0 is not allowed.

use std::net::{SocketAddrV4, SocketAddrV6};

/// Ethernet II header length.
pub const ETH_LEN: usize = 14;
/// IPv4 header length (no options).
pub const IPV4_LEN: usize = 20;
/// IPv6 header length (no extension headers).
pub const IPV6_LEN: usize = 40;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// Ethernet + IPv4 + UDP.
pub const IPV4_UDP_HEADERS: usize = ETH_LEN + IPV4_LEN + UDP_LEN;
/// Ethernet + IPv6 + UDP, the longest header sequence written here.
pub const IPV6_UDP_HEADERS: usize = ETH_LEN + IPV6_LEN + UDP_LEN;
/// Largest UDP payload an IPv4 datagram can carry.
pub const MAX_PAYLOAD_V4: usize = 65535 - IPV4_LEN - UDP_LEN;
/// Largest UDP payload an IPv6 datagram can carry (without jumbograms).
pub const MAX_PAYLOAD_V6: usize = 65535 - UDP_LEN;

/// The two MAC addresses of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Macs {
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
}

/// Ones' complement sum of `data` as big-endian 16-bit words, added to `sum`.
fn sum_words(mut sum: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        sum += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        sum += u64::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
        i += 2;
    }
    if i < rest.len() {
        sum += u64::from(rest[i]) << 8;
    }
    sum
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum_words(0, data))
}

/// Writes Ethernet + IPv4 + UDP headers for a `payload_len`-byte datagram into
/// `out[..IPV4_UDP_HEADERS]` and returns [`IPV4_UDP_HEADERS`]. `ident` is the IPv4
/// identification field; DF is set.
///
/// # Panics
/// If `out` is shorter than the headers or `payload_len` exceeds [`MAX_PAYLOAD_V4`].
pub fn write_ipv4_udp(
    out: &mut [u8],
    macs: Macs,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload_len: usize,
    ident: u16,
    ttl: u8,
) -> usize {
    assert!(
        payload_len <= MAX_PAYLOAD_V4,
        "a UDP datagram over IPv4 is at most 65507 bytes"
    );
    let out = &mut out[..IPV4_UDP_HEADERS];
    out[0..6].copy_from_slice(&macs.dst);
    out[6..12].copy_from_slice(&macs.src);
    out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let udp_len = (UDP_LEN + payload_len) as u16;
    let ip = &mut out[ETH_LEN..ETH_LEN + IPV4_LEN];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(IPV4_LEN as u16 + udp_len).to_be_bytes());
    ip[4..6].copy_from_slice(&ident.to_be_bytes());
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, no fragments
    ip[8] = ttl;
    ip[9] = 17;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut out[ETH_LEN + IPV4_LEN..];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0); // no checksum: legal over IPv4 and saves a pass
    IPV4_UDP_HEADERS
}

/// Writes Ethernet + IPv6 + UDP headers for `payload` into `out[..IPV6_UDP_HEADERS]`,
/// with the UDP checksum over the pseudo-header and `payload`, and returns
/// [`IPV6_UDP_HEADERS`].
///
/// # Panics
/// If `out` is shorter than the headers or `payload` exceeds [`MAX_PAYLOAD_V6`].
pub fn write_ipv6_udp(
    out: &mut [u8],
    macs: Macs,
    src: SocketAddrV6,
    dst: SocketAddrV6,
    payload: &[u8],
    hop_limit: u8,
) -> usize {
    assert!(
        payload.len() <= MAX_PAYLOAD_V6,
        "a UDP datagram over IPv6 is at most 65527 bytes"
    );
    let out = &mut out[..IPV6_UDP_HEADERS];
    out[0..6].copy_from_slice(&macs.dst);
    out[6..12].copy_from_slice(&macs.src);
    out[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let udp_len = (UDP_LEN + payload.len()) as u16;
    let (s6, d6) = (src.ip().octets(), dst.ip().octets());
    let ip = &mut out[ETH_LEN..ETH_LEN + IPV6_LEN];
    ip[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
    ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
    ip[6] = 17;
    ip[7] = hop_limit;
    ip[8..24].copy_from_slice(&s6);
    ip[24..40].copy_from_slice(&d6);
    let u = ETH_LEN + IPV6_LEN;
    out[u..u + 2].copy_from_slice(&src.port().to_be_bytes());
    out[u + 2..u + 4].copy_from_slice(&dst.port().to_be_bytes());
    out[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
    out[u + 6..u + 8].fill(0);
    // Pseudo-header + UDP header + payload; 0 is sent as 0xffff (RFC 8200).
    let mut sum = sum_words(0, &s6);
    sum = sum_words(sum, &d6);
    sum += u64::from(udp_len) + 17;
    sum = sum_words(sum, &out[u..u + UDP_LEN]);
    sum = sum_words(sum, payload);
    let c = match fold(sum) {
        0 => 0xffff,
        c => c,
    };
    out[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
    IPV6_UDP_HEADERS
}

/// The Ethernet multicast MAC of an IPv4 group: `01:00:5e` + the group's low 23 bits.
pub fn multicast_mac(group: std::net::Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// Parses a MAC address written `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff` (surrounding
/// whitespace, e.g. sysfs's newline, is ignored).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split([':', '-']);
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Writes `mac` as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{datagram, LINKTYPE_ETHERNET};
    use std::net::Ipv4Addr;

    const MACS: Macs = Macs {
        src: [2, 0, 0, 0, 0, 2],
        dst: [2, 0, 0, 0, 0, 1],
    };

    #[test]
    fn ipv4_frames_parse_back_with_a_valid_header_checksum() {
        let mut f = vec![0u8; IPV4_UDP_HEADERS + 5];
        let n = write_ipv4_udp(
            &mut f,
            MACS,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:7148".parse().unwrap(),
            5,
            77,
            64,
        );
        f[n..].copy_from_slice(b"hello");
        let d = datagram(LINKTYPE_ETHERNET, &f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.src, "10.0.0.2:5000".parse().unwrap());
        assert_eq!(d.dst, "10.0.0.1:7148".parse().unwrap());
        assert_eq!(checksum(&f[14..34]), 0, "a valid header sums to zero");
        assert_eq!(&f[0..6], &MACS.dst);
        assert_eq!(&f[6..12], &MACS.src);
        assert_eq!(f[22], 64, "ttl");
    }

    #[test]
    fn ipv6_udp_checksum_verifies() {
        let payload = b"odd-length payload";
        let mut f = vec![0u8; IPV6_UDP_HEADERS + payload.len()];
        let n = write_ipv6_udp(
            &mut f,
            MACS,
            "[2001:db8::1]:5000".parse().unwrap(),
            "[2001:db8::2]:7148".parse().unwrap(),
            payload,
            64,
        );
        f[n..].copy_from_slice(payload);
        let d = datagram(LINKTYPE_ETHERNET, &f).unwrap();
        assert_eq!(d.payload, payload);
        // Pseudo-header + UDP header + payload, with the checksum in place, sums to 0.
        let mut sum = sum_words(0, &f[22..54]);
        sum += (UDP_LEN + payload.len()) as u64 + 17;
        sum = sum_words(sum, &f[54..]);
        assert_eq!(fold(sum), 0);
    }

    #[test]
    fn macs_parse_format_and_map_groups() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(
            parse_mac("02-00-0a-ff-00-01\n"),
            Some([2, 0, 10, 255, 0, 1])
        );
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:zz"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:100"), None);
        assert_eq!(
            format_mac(&[0, 0x1b, 0x21, 0xa, 0xff, 1]),
            "00:1b:21:0a:ff:01"
        );
        assert_eq!(
            multicast_mac(Ipv4Addr::new(239, 129, 2, 3)),
            [1, 0, 0x5e, 1, 2, 3]
        );
        assert_eq!(
            multicast_mac(Ipv4Addr::new(224, 255, 255, 255)),
            [1, 0, 0x5e, 0x7f, 0xff, 0xff]
        );
    }
}
