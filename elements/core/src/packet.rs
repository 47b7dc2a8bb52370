//! One datagram of a batch, as plain data with no GStreamer types: where it sits in the
//! batch's memory ([`PacketInfo`]) and who sent it ([`PacketAddr`]). The batch meta
//! (`crate::batch`), the destination meta and the readable metas (`crate::meta`), the
//! transports and the engines all speak in these.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A compact, `Copy` socket address (IPv4 stored as IPv4-mapped IPv6).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PacketAddr {
    ip: [u8; 16],
    port: u16,
    v4: bool,
}

impl PacketAddr {
    /// The address as 16 bytes (IPv6 in network order; IPv4 as IPv4-mapped) and the
    /// port.
    pub fn octets(&self) -> ([u8; 16], u16) {
        (self.ip, self.port)
    }

    /// The address from its 16 bytes (IPv6 in network order), its port and whether it
    /// is IPv4: `v4` holds only for an IPv4-mapped address (`::ffff:a.b.c.d`), as from
    /// `From<SocketAddr>`; an address that is not mapped is IPv6 whatever `v4` says.
    pub fn from_octets(ip: [u8; 16], port: u16, v4: bool) -> Self {
        let mapped = std::net::Ipv6Addr::from(ip).to_ipv4_mapped().is_some();
        Self {
            ip,
            port,
            v4: v4 && mapped,
        }
    }

    /// Whether the source did not know the sender: port 0 and the unspecified
    /// address (what `PacketAddr::default()` holds).
    pub fn is_unknown(&self) -> bool {
        self.port == 0 && self.to_socket_addr().ip().is_unspecified()
    }

    /// The address as a std socket address.
    pub fn to_socket_addr(&self) -> SocketAddr {
        let v6 = Ipv6Addr::from(self.ip);
        let ip = if self.v4 {
            IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED))
        } else {
            IpAddr::V6(v6)
        };
        SocketAddr::new(ip, self.port)
    }
}

impl From<SocketAddr> for PacketAddr {
    fn from(a: SocketAddr) -> Self {
        match a.ip() {
            IpAddr::V4(v4) => Self {
                ip: v4.to_ipv6_mapped().octets(),
                port: a.port(),
                v4: true,
            },
            IpAddr::V6(v6) => Self {
                ip: v6.octets(),
                port: a.port(),
                v4: false,
            },
        }
    }
}

impl fmt::Debug for PacketAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_socket_addr())
    }
}

/// One datagram inside a batch buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Byte offset of the datagram's payload in the buffer.
    pub offset: u32,
    /// Payload length in bytes.
    pub len: u32,
    /// Receive time, nanoseconds since the Unix epoch (0 if unknown): the kernel's, per
    /// datagram, where the source asks for it (`fhudpsrc timestamps=true`), else the time
    /// the source took the datagram's batch (one clock read per batch).
    pub rx_time_ns: u64,
    /// Who sent it.
    pub src: PacketAddr,
}

impl PacketInfo {
    /// The byte range of the payload in the buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset as usize..self.offset as usize + self.len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_round_trip() {
        for s in ["10.1.2.3:9", "[::1]:7148", "[fe80::1]:1"] {
            let a: SocketAddr = s.parse().unwrap();
            assert_eq!(PacketAddr::from(a).to_socket_addr(), a);
        }
    }

    #[test]
    fn from_octets_agrees_with_from_socket_addr() {
        for s in [
            "10.1.2.3:9",
            "[::1]:7148",
            "[fe80::1]:1",
            "[::ffff:10.0.0.1]:5",
            "0.0.0.0:0",
        ] {
            let a: SocketAddr = s.parse().unwrap();
            let p = PacketAddr::from(a);
            let (ip, port) = p.octets();
            let v4 = a.is_ipv4();
            assert_eq!(PacketAddr::from_octets(ip, port, v4), p, "{s}");
        }
        // A v4 flag on an address that is not IPv4-mapped: IPv6, as via SocketAddr.
        let v6: SocketAddr = "[fe80::1]:1".parse().unwrap();
        let (ip, port) = PacketAddr::from(v6).octets();
        assert_eq!(PacketAddr::from_octets(ip, port, true).to_socket_addr(), v6);
    }
}
