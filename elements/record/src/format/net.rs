//! Ethernet, IPv4/IPv6 and UDP headers synthesized for recorded datagrams.
//!
//! A socket hands us UDP payloads, not frames. A capture file needs frames, so each
//! datagram is given the headers it had on the wire, as far as they are known: the
//! source address from the batch meta, the destination from the element's settings, MAC
//! addresses that are fixed and locally administered (the real ones are not known).
//! The IPv4 header checksum is computed; the UDP checksum is 0 ("none") over IPv4, and
//! computed over IPv6, where 0 is not allowed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Ethernet II header length.
pub const ETH_LEN: usize = 14;
/// IPv4 header length (no options).
pub const IPV4_LEN: usize = 20;
/// IPv6 header length (no extension headers).
pub const IPV6_LEN: usize = 40;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// The longest header sequence we write (Ethernet + IPv6 + UDP).
pub const MAX_HEADERS: usize = ETH_LEN + IPV6_LEN + UDP_LEN;
/// Largest UDP payload an IPv4 datagram can carry.
pub const MAX_PAYLOAD_V4: usize = 65535 - IPV4_LEN - UDP_LEN;
/// Largest UDP payload an IPv6 datagram can carry (without jumbograms).
pub const MAX_PAYLOAD_V6: usize = 65535 - UDP_LEN;

/// Source MAC written in every frame (locally administered, unicast).
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Destination MAC written in every frame (locally administered, unicast).
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Where synthesized datagrams are addressed to, for either family of source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destination {
    v4: SocketAddr,
    v6: SocketAddr,
}

impl Destination {
    /// Destinations derived from one address: an IPv4 address is used as is for IPv4
    /// sources and v4-mapped for IPv6 sources; an IPv6 address is used for IPv6 sources,
    /// and its IPv4 form (if v4-mapped) or 127.0.0.1 for IPv4 sources.
    pub fn new(addr: SocketAddr) -> Self {
        let port = addr.port();
        match addr.ip() {
            IpAddr::V4(v4) => Self {
                v4: addr,
                v6: SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port),
            },
            IpAddr::V6(v6) => Self {
                v4: SocketAddr::new(
                    IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::LOCALHOST)),
                    port,
                ),
                v6: addr,
            },
        }
    }

    /// The destination for an IPv4 (`false`) or IPv6 (`true`) source.
    pub fn for_family(&self, v6: bool) -> SocketAddr {
        if v6 {
            self.v6
        } else {
            self.v4
        }
    }
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

/// A source address with no address at all (unknown sender, e.g. a test source) is
/// replaced by the unspecified address of the destination's family, port 0.
fn effective_src(src: SocketAddr, dst: &Destination) -> (SocketAddr, SocketAddr) {
    if src.ip().is_unspecified() && src.port() == 0 {
        let d = dst.v4;
        return (SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0), d);
    }
    match src {
        SocketAddr::V4(_) => (src, dst.v4),
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => (SocketAddr::new(IpAddr::V4(v4), src.port()), dst.v4),
            None => (src, dst.v6),
        },
    }
}

/// The largest payload a datagram from `src` can carry.
pub fn max_payload(src: SocketAddr, dst: &Destination) -> usize {
    match effective_src(src, dst).0 {
        SocketAddr::V4(_) => MAX_PAYLOAD_V4,
        SocketAddr::V6(_) => MAX_PAYLOAD_V6,
    }
}

/// Writes the Ethernet, IP and UDP headers of a datagram carrying `payload` from `src`
/// to `dst` into `out`; returns their length. `payload` must not exceed
/// [`max_payload`]; `ident` is the IPv4 identification field.
pub fn write_headers(
    out: &mut [u8; MAX_HEADERS],
    src: SocketAddr,
    dst: &Destination,
    payload: &[u8],
    ident: u16,
) -> usize {
    let (src, dst) = effective_src(src, dst);
    out[0..6].copy_from_slice(&DST_MAC);
    out[6..12].copy_from_slice(&SRC_MAC);
    let udp_len = (UDP_LEN + payload.len()) as u16;
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip = &mut out[ETH_LEN..ETH_LEN + IPV4_LEN];
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&(IPV4_LEN as u16 + udp_len).to_be_bytes());
            ip[4..6].copy_from_slice(&ident.to_be_bytes());
            ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, no fragments
            ip[8] = 64;
            ip[9] = 17;
            ip[10..12].fill(0);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let c = checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let udp = &mut out[ETH_LEN + IPV4_LEN..ETH_LEN + IPV4_LEN + UDP_LEN];
            udp[0..2].copy_from_slice(&src.port().to_be_bytes());
            udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
            udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            udp[6..8].fill(0); // no checksum: legal over IPv4 and saves a pass
            ETH_LEN + IPV4_LEN + UDP_LEN
        }
        (s, d) => {
            let s6 = to_v6(s);
            let d6 = to_v6(d);
            out[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut out[ETH_LEN..ETH_LEN + IPV6_LEN];
            ip[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s6.octets());
            ip[24..40].copy_from_slice(&d6.octets());
            let u = ETH_LEN + IPV6_LEN;
            out[u..u + 2].copy_from_slice(&src.port().to_be_bytes());
            out[u + 2..u + 4].copy_from_slice(&dst.port().to_be_bytes());
            out[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
            out[u + 6..u + 8].fill(0);
            // Pseudo-header + UDP header + payload; 0 is sent as 0xffff (RFC 8200).
            let mut sum = sum_words(0, &s6.octets());
            sum = sum_words(sum, &d6.octets());
            sum += u64::from(udp_len) + 17;
            sum = sum_words(sum, &out[u..u + UDP_LEN]);
            sum = sum_words(sum, payload);
            let c = match fold(sum) {
                0 => 0xffff,
                c => c,
            };
            out[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
            u + UDP_LEN
        }
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_headers_have_a_valid_checksum_and_lengths() {
        let dst = Destination::new("10.0.0.2:7148".parse().unwrap());
        let mut out = [0u8; MAX_HEADERS];
        let n = write_headers(
            &mut out,
            "10.0.0.1:5000".parse().unwrap(),
            &dst,
            b"hello",
            7,
        );
        assert_eq!(n, 42);
        assert_eq!(checksum(&out[14..34]), 0, "a valid header sums to zero");
        assert_eq!(u16::from_be_bytes([out[16], out[17]]), 20 + 8 + 5);
        assert_eq!(&out[26..30], &[10, 0, 0, 1]);
        assert_eq!(u16::from_be_bytes([out[36], out[37]]), 7148);
        assert_eq!(u16::from_be_bytes([out[38], out[39]]), 13);
    }

    #[test]
    fn ipv6_udp_checksum_verifies() {
        let dst = Destination::new("[::1]:9".parse().unwrap());
        let mut out = [0u8; MAX_HEADERS];
        let payload = b"odd-length payload!";
        let n = write_headers(
            &mut out,
            "[fe80::1]:4000".parse().unwrap(),
            &dst,
            payload,
            0,
        );
        assert_eq!(n, 62);
        let mut sum = sum_words(0, &out[22..38]);
        sum = sum_words(sum, &out[38..54]);
        sum += (8 + payload.len()) as u64 + 17;
        sum = sum_words(sum, &out[54..62]);
        sum = sum_words(sum, payload);
        assert_eq!(fold(sum), 0);
    }

    #[test]
    fn unknown_and_mapped_sources_use_ipv4() {
        let dst = Destination::new("127.0.0.1:7148".parse().unwrap());
        let mut out = [0u8; MAX_HEADERS];
        let unknown: SocketAddr = "[::]:0".parse().unwrap();
        assert_eq!(write_headers(&mut out, unknown, &dst, b"x", 0), 42);
        let mapped: SocketAddr = "[::ffff:1.2.3.4]:5".parse().unwrap();
        assert_eq!(write_headers(&mut out, mapped, &dst, b"x", 0), 42);
        assert_eq!(&out[26..30], &[1, 2, 3, 4]);
        assert_eq!(max_payload(mapped, &dst), MAX_PAYLOAD_V4);
        let v6dst = Destination::new("[::1]:1".parse().unwrap());
        assert_eq!(v6dst.for_family(false), "127.0.0.1:1".parse().unwrap());
    }
}
