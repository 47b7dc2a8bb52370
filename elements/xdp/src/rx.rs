//! From one received UMEM frame to the batch meta's packet entry, with the shared frame
//! parser [`firehose_core::frame`]. No GStreamer types.
//!
//! The XDP program already selected the frame; it is checked again here because the
//! program is not the only way into the socket (another program could share the
//! XSKMAP) and a bad frame must be counted, never trusted.

use std::net::IpAddr;

use firehose_core::frame::{self, Skip};
use firehose_core::PacketInfo;

/// What the element captures: UDP to one of `ports`, at `address` if set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// UDP destination ports (a handful; searched linearly).
    pub ports: Vec<u16>,
    /// IP destination, or `None` for any.
    pub address: Option<IpAddr>,
}

/// Why a frame was not delivered (each is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Not UDP over IP, or headers that do not parse (`malformed`).
    Malformed,
    /// Shorter than its headers say, or an IP fragment (`truncated`).
    Truncated,
    /// UDP, but for another address or port (`filtered`).
    Filtered,
    /// A UDP datagram with no payload (`empty`).
    Empty,
}

/// Decodes the Ethernet frame `frame`, which starts at byte `frame_offset` of the
/// UMEM. The entry's offset is the UDP payload's offset in the UMEM.
pub fn parse_frame(
    frame: &[u8],
    frame_offset: usize,
    filter: &Filter,
    rx_time_ns: u64,
) -> Result<PacketInfo, Rejected> {
    let d = frame::datagram(frame::LINKTYPE_ETHERNET, frame).map_err(|s| match s {
        Skip::NotUdp | Skip::Malformed => Rejected::Malformed,
        Skip::Truncated => Rejected::Truncated,
    })?;
    if !filter.ports.contains(&d.dst.port()) || filter.address.is_some_and(|a| a != d.dst.ip()) {
        return Err(Rejected::Filtered);
    }
    if d.payload.is_empty() {
        return Err(Rejected::Empty);
    }
    let off = d.payload_offset(frame).ok_or(Rejected::Malformed)? + frame_offset;
    Ok(PacketInfo {
        offset: u32::try_from(off).map_err(|_| Rejected::Malformed)?,
        len: d.payload.len() as u32,
        rx_time_ns,
        src: d.src.into(),
    })
}

/// Test frames: Ethernet + IPv4 (optionally with options) or IPv6 + UDP.
#[cfg(test)]
pub(crate) mod testframe {
    use std::net::{IpAddr, SocketAddr};

    /// A frame from `src` to `dst` carrying `payload`, with `ip_options` 4-byte words
    /// of IPv4 options (ignored for IPv6).
    pub fn udp(src: SocketAddr, dst: SocketAddr, payload: &[u8], ip_options: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        let udp_len = (8 + payload.len()) as u16;
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ihl = 5 + ip_options;
                let total = (ihl * 4) as u16 + udp_len;
                f.extend_from_slice(&[0x08, 0x00, 0x40 | ihl as u8, 0]);
                f.extend_from_slice(&total.to_be_bytes());
                f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
                f.extend(std::iter::repeat_n(1u8, ip_options * 4)); // NOP options
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
                f.extend_from_slice(&udp_len.to_be_bytes());
                f.extend_from_slice(&[17, 64]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            _ => panic!("mixed address families"),
        }
        f.extend_from_slice(&src.port().to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// An ARP request (not IP at all).
    pub fn arp() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&[0; 20]);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::testframe::udp;
    use super::*;

    fn only(ports: &[u16]) -> Filter {
        Filter {
            ports: ports.to_vec(),
            address: None,
        }
    }

    #[test]
    fn ipv4_payload_offset_is_relative_to_the_umem() {
        let f = udp(
            "10.0.0.1:1234".parse().unwrap(),
            "10.0.0.2:7148".parse().unwrap(),
            b"spead!",
            0,
        );
        let p = parse_frame(&f, 3 * 4096 + 256, &only(&[7148]), 99).unwrap();
        assert_eq!(p.offset as usize, 3 * 4096 + 256 + 14 + 20 + 8);
        assert_eq!(p.len, 6);
        assert_eq!(p.rx_time_ns, 99);
        assert_eq!(p.src.to_socket_addr(), "10.0.0.1:1234".parse().unwrap());
        let mut umem = vec![0u8; 3 * 4096 + 256];
        umem.extend_from_slice(&f);
        assert_eq!(&umem[p.range()], b"spead!");
    }

    #[test]
    fn ip_options_ipv6_ports_and_address_filter() {
        let f = udp(
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:9".parse().unwrap(),
            b"x",
            2,
        );
        assert_eq!(
            parse_frame(&f, 0, &only(&[8, 9]), 0).unwrap().offset,
            14 + 28 + 8
        );
        let f6 = udp(
            "[fe80::1]:1".parse().unwrap(),
            "[ff02::5]:7148".parse().unwrap(),
            b"x",
            0,
        );
        assert_eq!(
            parse_frame(&f6, 0, &only(&[7148]), 0).unwrap().offset,
            14 + 40 + 8
        );
        let other = Filter {
            ports: vec![7148],
            address: Some("ff02::6".parse().unwrap()),
        };
        assert_eq!(parse_frame(&f6, 0, &other, 0), Err(Rejected::Filtered));
        assert_eq!(
            parse_frame(&f, 0, &only(&[7148]), 0),
            Err(Rejected::Filtered)
        );
    }

    #[test]
    fn short_empty_and_non_udp_frames_are_rejected_without_panic() {
        let src = "10.0.0.1:1".parse().unwrap();
        let dst = "10.0.0.2:7148".parse().unwrap();
        let f = udp(src, dst, &[7u8; 64], 0);
        assert_eq!(
            parse_frame(&f[..60], 0, &only(&[7148]), 0),
            Err(Rejected::Truncated)
        );
        assert_eq!(
            parse_frame(&udp(src, dst, b"", 0), 0, &only(&[7148]), 0),
            Err(Rejected::Empty)
        );
        assert_eq!(
            parse_frame(&testframe::arp(), 0, &only(&[7148]), 0),
            Err(Rejected::Malformed)
        );
        for cut in 0..f.len() {
            assert!(parse_frame(&f[..cut], 0, &only(&[7148]), 0).is_err());
        }
    }
}
