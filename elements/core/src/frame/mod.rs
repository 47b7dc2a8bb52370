//! From a frame to its UDP datagram: link layers tcpdump writes (Ethernet with VLAN
//! tags, Linux cooked v1/v2 from `-i any`, raw IP, BSD loopback), then IPv4 or IPv6
//! (with extension headers), then UDP.
//!
//! Shared by replay (`fhpcapsrc`, frames from capture files) and kernel-bypass sources
//! (`fhibvsrc`, `fhxdpsrc`, `fhdpdksrc`: raw Ethernet frames from the NIC). The writing
//! direction, and MAC helpers, are in [`build`]. No GStreamer types.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub mod accept;
pub mod build;

/// LINKTYPE_NULL (BSD loopback, host-order family).
pub const LINKTYPE_NULL: u16 = 0;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u16 = 1;
/// DLT_RAW as numbered on most systems.
pub const DLT_RAW_12: u16 = 12;
/// DLT_RAW as numbered on OpenBSD.
pub const DLT_RAW_14: u16 = 14;
/// LINKTYPE_RAW (raw IPv4 or IPv6).
pub const LINKTYPE_RAW: u16 = 101;
/// LINKTYPE_LOOP (OpenBSD loopback, network-order family).
pub const LINKTYPE_LOOP: u16 = 108;
/// LINKTYPE_LINUX_SLL (Linux cooked capture v1).
pub const LINKTYPE_LINUX_SLL: u16 = 113;
/// LINKTYPE_IPV4.
pub const LINKTYPE_IPV4: u16 = 228;
/// LINKTYPE_IPV6.
pub const LINKTYPE_IPV6: u16 = 229;
/// LINKTYPE_LINUX_SLL2 (Linux cooked capture v2, tcpdump `-i any`).
pub const LINKTYPE_LINUX_SLL2: u16 = 276;

/// A UDP datagram found in a frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Sender.
    pub src: SocketAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Why a frame gave no datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not UDP over IP (ARP, TCP, ICMP…), or a link type this reader does not know.
    NotUdp,
    /// Headers that contradict themselves or the frame's length.
    Malformed,
    /// The capture kept fewer bytes than the datagram has (snap length), or the
    /// datagram is an IP fragment (not reassembled).
    Truncated,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// True for the link types [`datagram`] decodes: Ethernet (VLAN tags included), Linux
/// cooked captures (SLL, SLL2), raw IP and BSD loopback.
pub fn link_supported(linktype: u16) -> bool {
    matches!(
        linktype,
        LINKTYPE_ETHERNET
            | LINKTYPE_LINUX_SLL
            | LINKTYPE_LINUX_SLL2
            | LINKTYPE_NULL
            | LINKTYPE_LOOP
            | LINKTYPE_RAW
            | DLT_RAW_12
            | DLT_RAW_14
            | LINKTYPE_IPV4
            | LINKTYPE_IPV6
    )
}

/// Decodes the UDP datagram in `frame` of link type `linktype`.
pub fn datagram(linktype: u16, frame: &[u8]) -> Result<Datagram<'_>, Skip> {
    let (ethertype, ip) = match linktype {
        LINKTYPE_ETHERNET => {
            let mut at = 12;
            let mut t = be16(frame, at).ok_or(Skip::Malformed)?;
            // 802.1Q / 802.1ad / old QinQ tags, possibly stacked.
            while matches!(t, 0x8100 | 0x88a8 | 0x9100) {
                at += 4;
                t = be16(frame, at).ok_or(Skip::Malformed)?;
            }
            (t, frame.get(at + 2..).ok_or(Skip::Malformed)?)
        }
        LINKTYPE_LINUX_SLL => (
            be16(frame, 14).ok_or(Skip::Malformed)?,
            frame.get(16..).ok_or(Skip::Malformed)?,
        ),
        LINKTYPE_LINUX_SLL2 => (
            be16(frame, 0).ok_or(Skip::Malformed)?,
            frame.get(20..).ok_or(Skip::Malformed)?,
        ),
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let fam = frame.get(0..4).ok_or(Skip::Malformed)?;
            let fam = u32::from_le_bytes(fam.try_into().expect("4 bytes"));
            // Host order of the capturing machine, whatever it was: accept both.
            let t = match fam.max(fam.swap_bytes()) >> 24 {
                2 => ETHERTYPE_IPV4,
                10 | 24 | 28 | 30 => ETHERTYPE_IPV6,
                _ => match fam.min(fam.swap_bytes()) {
                    2 => ETHERTYPE_IPV4,
                    10 | 24 | 28 | 30 => ETHERTYPE_IPV6,
                    _ => return Err(Skip::NotUdp),
                },
            };
            (t, &frame[4..])
        }
        LINKTYPE_RAW | DLT_RAW_12 | DLT_RAW_14 | LINKTYPE_IPV4 | LINKTYPE_IPV6 => {
            match frame.first().map(|b| b >> 4) {
                Some(4) => (ETHERTYPE_IPV4, frame),
                Some(6) => (ETHERTYPE_IPV6, frame),
                _ => return Err(Skip::Malformed),
            }
        }
        _ => return Err(Skip::NotUdp),
    };
    match ethertype {
        ETHERTYPE_IPV4 => ipv4(ip),
        ETHERTYPE_IPV6 => ipv6(ip),
        _ => Err(Skip::NotUdp),
    }
}

fn ipv4(ip: &[u8]) -> Result<Datagram<'_>, Skip> {
    let b0 = *ip.first().ok_or(Skip::Malformed)?;
    let ihl = usize::from(b0 & 0x0f) * 4;
    if b0 >> 4 != 4 || ihl < 20 || ip.len() < ihl {
        return Err(Skip::Malformed);
    }
    let total = usize::from(be16(ip, 2).ok_or(Skip::Malformed)?);
    if total < ihl {
        return Err(Skip::Malformed);
    }
    if ip[9] != 17 {
        return Err(Skip::NotUdp);
    }
    let frag = be16(ip, 6).ok_or(Skip::Malformed)?;
    if frag & 0x3fff != 0 {
        return Err(Skip::Truncated);
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    // Frames shorter than the Ethernet minimum are padded: the IP length bounds the data.
    let end = total.min(ip.len());
    udp(IpAddr::V4(src), IpAddr::V4(dst), &ip[ihl..end], total - ihl)
}

fn ipv6(ip: &[u8]) -> Result<Datagram<'_>, Skip> {
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return Err(Skip::Malformed);
    }
    let payload_len = usize::from(be16(ip, 4).ok_or(Skip::Malformed)?);
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).expect("16 bytes"));
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).expect("16 bytes"));
    let end = (40 + payload_len).min(ip.len());
    let mut next = ip[6];
    let mut at = 40;
    let mut wire_left = payload_len;
    loop {
        match next {
            17 => break,
            0 | 43 | 60 => {
                let h = ip.get(at..at + 2).ok_or(Skip::Truncated)?;
                let len = (usize::from(h[1]) + 1) * 8;
                next = h[0];
                at += len;
                wire_left = wire_left.checked_sub(len).ok_or(Skip::Malformed)?;
            }
            44 => return Err(Skip::Truncated),
            _ => return Err(Skip::NotUdp),
        }
    }
    let rest = ip.get(at..end.max(at)).ok_or(Skip::Truncated)?;
    udp(IpAddr::V6(src), IpAddr::V6(dst), rest, wire_left)
}

/// `seg` is the UDP segment as captured; `wire_len` its length per the IP header.
fn udp(src: IpAddr, dst: IpAddr, seg: &[u8], wire_len: usize) -> Result<Datagram<'_>, Skip> {
    if wire_len < 8 {
        return Err(Skip::Malformed);
    }
    if seg.len() < 8 {
        return Err(Skip::Truncated);
    }
    let len = usize::from(be16(seg, 4).ok_or(Skip::Malformed)?);
    if len < 8 || len > wire_len {
        return Err(Skip::Malformed);
    }
    if len > seg.len() {
        return Err(Skip::Truncated);
    }
    Ok(Datagram {
        src: SocketAddr::new(src, be16(seg, 0).ok_or(Skip::Malformed)?),
        dst: SocketAddr::new(dst, be16(seg, 2).ok_or(Skip::Malformed)?),
        payload: &seg[8..len],
    })
}

impl Datagram<'_> {
    /// Where the UDP payload starts in `frame`, the frame this datagram was decoded from
    /// (`None` if it was decoded from another buffer).
    pub fn payload_offset(&self, frame: &[u8]) -> Option<usize> {
        let off = (self.payload.as_ptr() as usize).checked_sub(frame.as_ptr() as usize)?;
        (off + self.payload.len() <= frame.len()).then_some(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal Ethernet + IPv4 + UDP frame built by hand (checksums zero).
    fn eth_v4(dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + 8 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[10, 0, 0, 1, 239, 1, 2, 3]);
        f.extend_from_slice(&5000u16.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_ipv4_udp_and_payload_offset() {
        let f = eth_v4(7148, b"hello");
        let d = datagram(LINKTYPE_ETHERNET, &f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.dst, "239.1.2.3:7148".parse().unwrap());
        assert_eq!(d.src, "10.0.0.1:5000".parse().unwrap());
        assert_eq!(d.payload_offset(&f), Some(14 + 20 + 8));
        assert_eq!(d.payload_offset(&f[..10]), None);
    }
}
