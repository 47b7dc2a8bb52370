//! Ethernet, IPv4/IPv6 and UDP headers synthesized for recorded datagrams.
//!
//! A socket hands us UDP payloads, not frames. A capture file needs frames, so each
//! datagram is given the headers it had on the wire, as far as they are known: the
//! source address from the batch meta, the destination from the element's settings, MAC
//! addresses that are fixed and locally administered (the real ones are not known).
//! This module decides those addresses; the bytes are written by the shared
//! [`firehose_core::frame::build`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use firehose_core::frame::build::{self, Macs};
pub use firehose_core::frame::build::{
    ETH_LEN, IPV6_UDP_HEADERS as MAX_HEADERS, MAX_PAYLOAD_V4, MAX_PAYLOAD_V6,
};

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
    const MACS: Macs = Macs {
        src: SRC_MAC,
        dst: DST_MAC,
    };
    match effective_src(src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            build::write_ipv4_udp(out, MACS, s, d, payload.len(), ident, 64)
        }
        (s, d) => {
            let v6 = |a: SocketAddr| std::net::SocketAddrV6::new(to_v6(a.ip()), a.port(), 0, 0);
            build::write_ipv6_udp(out, MACS, v6(s), v6(d), payload, 64)
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
        assert_eq!(
            build::checksum(&out[14..34]),
            0,
            "a valid header sums to zero"
        );
        assert_eq!(u16::from_be_bytes([out[16], out[17]]), 20 + 8 + 5);
        assert_eq!(&out[26..30], &[10, 0, 0, 1]);
        assert_eq!(u16::from_be_bytes([out[36], out[37]]), 7148);
        assert_eq!(u16::from_be_bytes([out[38], out[39]]), 13);
    }

    #[test]
    fn ipv6_sources_get_ipv6_headers() {
        let dst = Destination::new("[::1]:9".parse().unwrap());
        let mut out = [0u8; MAX_HEADERS];
        let n = write_headers(&mut out, "[fe80::1]:4000".parse().unwrap(), &dst, b"x", 0);
        assert_eq!(n, 62);
        assert_eq!(&out[12..14], &[0x86, 0xdd]);
        assert_eq!(&out[38..54], &Ipv6Addr::LOCALHOST.octets());
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
