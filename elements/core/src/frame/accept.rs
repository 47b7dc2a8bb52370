//! Which received frames a frame-level source delivers: the UDP filter shared by the
//! kernel-bypass sources (`fhxdpsrc`, `fhdpdksrc`, `fhibvsrc`), and the step from a frame
//! to the batch meta's packet entry. No GStreamer types.
//!
//! The NIC, XDP program or flow rule has usually selected the frame already; it is
//! checked again in software because that selection can be wider than the element's
//! settings (a multicast MAC, a shared XSKMAP, a DPDK port that takes all traffic), and
//! a bad frame must be counted, never trusted.

use std::net::IpAddr;

use super::{datagram, Skip, LINKTYPE_ETHERNET};
use crate::batch::{PacketAddr, PacketInfo};
use crate::endpoint::{Endpoint, EndpointTable};
use crate::meta::dest::PacketDest;

/// What a source captures: UDP to one of its endpoints (see [`crate::endpoint`]): an
/// address and port, an address on any port, or any address on a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpFilter {
    table: EndpointTable,
}

impl UdpFilter {
    /// UDP to `port` (0 = any) at `address` (`None` = any).
    pub fn port(port: u16, address: Option<IpAddr>) -> Self {
        let addr = address.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        Self::endpoints(&[Endpoint {
            addr,
            port,
            sources: Vec::new(),
        }])
    }

    /// UDP to any of `list` (an unspecified address: any address on that port).
    pub fn endpoints(list: &[Endpoint]) -> Self {
        Self {
            table: EndpointTable::new(list),
        }
    }

    /// The distinct destination ports kept, sorted; empty: any port.
    pub fn ports(&self) -> Vec<u16> {
        self.table.ports()
    }

    /// The index of the endpoint a datagram to `ip`:`port` belongs to, if it is kept.
    pub fn find(&self, ip: IpAddr, port: u16) -> Option<usize> {
        self.table.find(ip, port)
    }
}

/// Why a frame is not delivered. Each is counted by the element, under the name that
/// fits its situation (a DPDK port sees ARP and other traffic as a matter of course, so
/// it counts `NotUdp` as filtered; behind an XDP program or a flow rule it is malformed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Well-formed, but not UDP over IPv4/IPv6 (ARP, TCP, …).
    NotUdp,
    /// Headers that do not parse.
    Malformed,
    /// Shorter than its headers say, or an IP fragment.
    Truncated,
    /// UDP, but for another address or port.
    Filtered,
    /// A UDP datagram with no payload.
    Empty,
}

/// A delivered datagram inside its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Offset of the UDP payload in the frame.
    pub payload_offset: usize,
    /// Payload length.
    pub len: u32,
    /// Sender.
    pub src: PacketAddr,
    /// Destination.
    pub dst: PacketAddr,
    /// Index of the filter's endpoint it was sent to.
    pub endpoint: usize,
}

/// Decodes the Ethernet frame `frame` and applies `filter`.
pub fn accept(frame: &[u8], filter: &UdpFilter) -> Result<Accepted, Rejected> {
    let d = datagram(LINKTYPE_ETHERNET, frame).map_err(|s| match s {
        Skip::NotUdp => Rejected::NotUdp,
        Skip::Malformed => Rejected::Malformed,
        Skip::Truncated => Rejected::Truncated,
    })?;
    let endpoint = filter
        .find(d.dst.ip(), d.dst.port())
        .ok_or(Rejected::Filtered)?;
    if d.payload.is_empty() {
        return Err(Rejected::Empty);
    }
    Ok(Accepted {
        payload_offset: d.payload_offset(frame).ok_or(Rejected::Malformed)?,
        len: d.payload.len() as u32,
        src: d.src.into(),
        dst: d.dst.into(),
        endpoint,
    })
}

/// [`accept`] for a frame that starts at byte `frame_offset` of the memory pushed
/// downstream: the entry's offset is the payload's offset in that memory.
pub fn packet_entry(
    frame: &[u8],
    frame_offset: usize,
    filter: &UdpFilter,
    rx_time_ns: u64,
) -> Result<PacketInfo, Rejected> {
    packet_entry_dest(frame, frame_offset, filter, rx_time_ns).map(|(p, ..)| p)
}

/// [`packet_entry`] with the datagram's destination, the length of the frame's
/// headers before its payload (the entry of a
/// [`PacketDestMeta`](crate::meta::dest::PacketDestMeta), for a source whose memory
/// pushed downstream holds the whole frame), and the index of the filter's endpoint it
/// was sent to (for the per-endpoint counters).
pub fn packet_entry_dest(
    frame: &[u8],
    frame_offset: usize,
    filter: &UdpFilter,
    rx_time_ns: u64,
) -> Result<(PacketInfo, PacketDest, usize), Rejected> {
    let a = accept(frame, filter)?;
    let info = PacketInfo {
        offset: u32::try_from(a.payload_offset + frame_offset).map_err(|_| Rejected::Malformed)?,
        len: a.len,
        rx_time_ns,
        src: a.src,
    };
    let dest = PacketDest {
        dst: a.dst,
        header_len: u16::try_from(a.payload_offset).unwrap_or(0),
    };
    Ok((info, dest, a.endpoint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::build::{
        write_ipv4_udp, write_ipv6_udp, Macs, IPV4_UDP_HEADERS, IPV6_UDP_HEADERS,
    };
    use std::net::SocketAddr;

    const MACS: Macs = Macs {
        src: [2, 0, 0, 0, 0, 2],
        dst: [2, 0, 0, 0, 0, 1],
    };

    fn udp(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut f = vec![0u8; IPV6_UDP_HEADERS + payload.len()];
        let n = match (src, dst) {
            (SocketAddr::V4(s), SocketAddr::V4(d)) => {
                write_ipv4_udp(&mut f, MACS, s, d, payload.len(), 1, 64)
            }
            (SocketAddr::V6(s), SocketAddr::V6(d)) => {
                write_ipv6_udp(&mut f, MACS, s, d, payload, 64)
            }
            _ => panic!("mixed families"),
        };
        f.truncate(n);
        f.extend_from_slice(payload);
        f
    }

    fn only(ports: &[u16]) -> UdpFilter {
        let any = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        let list: Vec<Endpoint> = ports
            .iter()
            .map(|&port| Endpoint {
                addr: any,
                port,
                sources: vec![],
            })
            .collect();
        UdpFilter::endpoints(&list)
    }

    #[test]
    fn payload_offset_is_relative_to_the_pushed_memory() {
        let f = udp("10.0.0.1:1234", "10.0.0.2:7148", b"spead!");
        let p = packet_entry(&f, 3 * 4096 + 256, &only(&[7148]), 99).unwrap();
        assert_eq!(p.offset as usize, 3 * 4096 + 256 + IPV4_UDP_HEADERS);
        assert_eq!(p.len, 6);
        assert_eq!(p.rx_time_ns, 99);
        assert_eq!(p.src.to_socket_addr(), "10.0.0.1:1234".parse().unwrap());
        let mut mem = vec![0u8; 3 * 4096 + 256];
        mem.extend_from_slice(&f);
        assert_eq!(&mem[p.range()], b"spead!");
    }

    #[test]
    fn ports_any_port_ipv6_and_address_filter() {
        let f = udp("10.0.0.1:1", "10.0.0.2:9", b"x");
        assert!(accept(&f, &only(&[8, 9])).is_ok());
        assert_eq!(accept(&f, &only(&[7148])), Err(Rejected::Filtered));
        assert!(
            accept(&f, &UdpFilter::port(0, None)).is_ok(),
            "port 0 = any"
        );
        let f6 = udp("[fe80::1]:1", "[ff02::5]:7148", b"x");
        assert_eq!(
            accept(&f6, &only(&[7148])).unwrap().payload_offset,
            IPV6_UDP_HEADERS
        );
        let other = UdpFilter::port(7148, Some("ff02::6".parse().unwrap()));
        assert_eq!(accept(&f6, &other), Err(Rejected::Filtered));
        let same = UdpFilter::port(7148, Some("ff02::5".parse().unwrap()));
        assert!(accept(&f6, &same).is_ok());
    }

    #[test]
    fn short_empty_and_non_udp_frames_are_rejected_without_panic() {
        let f = udp("10.0.0.1:1", "10.0.0.2:7148", &[7u8; 64]);
        assert_eq!(accept(&f[..60], &only(&[7148])), Err(Rejected::Truncated));
        assert_eq!(
            accept(&udp("10.0.0.1:1", "10.0.0.2:7148", b""), &only(&[7148])),
            Err(Rejected::Empty)
        );
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(accept(&arp, &only(&[7148])), Err(Rejected::NotUdp));
        for cut in 0..f.len() {
            assert!(accept(&f[..cut], &only(&[7148])).is_err());
        }
    }
}
