//! From a completed receive slot (one raw Ethernet frame) to the batch meta's packet
//! entry, with the shared frame parser [`firehose_core::frame`]. No GStreamer types.

use std::net::IpAddr;

use firehose_core::frame::{self, Skip};
use firehose_core::PacketInfo;

/// What the flow-steering rules should already have selected; checked again in software
/// because a rule may be wider than the element's settings (e.g. multicast MAC only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// UDP destination port.
    pub port: u16,
    /// IP destination, or `None` for any.
    pub address: Option<IpAddr>,
}

/// Why a frame was not delivered (each is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Not UDP over IP, or headers that do not parse (`malformed`).
    Malformed,
    /// Longer than the slot, or an IP fragment (`truncated`).
    Truncated,
    /// UDP, but for another address or port (`filtered`).
    Filtered,
}

/// Decodes the frame the NIC wrote at `slot_offset` of the region (`frame` is those
/// bytes, `byte_len` from the completion). The returned entry's offset is the UDP
/// payload's offset in the region, so the whole region can back the pushed memory.
pub fn parse_frame(
    frame: &[u8],
    slot_offset: usize,
    filter: &Filter,
    rx_time_ns: u64,
) -> Result<PacketInfo, Rejected> {
    let d = frame::datagram(frame::LINKTYPE_ETHERNET, frame).map_err(|s| match s {
        Skip::NotUdp | Skip::Malformed => Rejected::Malformed,
        Skip::Truncated => Rejected::Truncated,
    })?;
    if d.dst.port() != filter.port || filter.address.is_some_and(|a| a != d.dst.ip()) {
        return Err(Rejected::Filtered);
    }
    let off = d.payload_offset(frame).ok_or(Rejected::Malformed)? + slot_offset;
    Ok(PacketInfo {
        offset: u32::try_from(off).map_err(|_| Rejected::Malformed)?,
        len: d.payload.len() as u32,
        rx_time_ns,
        src: d.src.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 + UDP, or Ethernet + IPv6 + UDP, built by hand.
    fn frame(dst: std::net::SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x01, 0x00, 0x5e, 1, 2, 3, 2, 0, 0, 0, 0, 1];
        let udp_len = (8 + payload.len()) as u16;
        match dst.ip() {
            IpAddr::V4(ip) => {
                f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
                f[16..18].copy_from_slice(&(20 + udp_len).to_be_bytes());
                f.extend_from_slice(&[10, 0, 0, 1]);
                f.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
                f.extend_from_slice(&udp_len.to_be_bytes());
                f.extend_from_slice(&[17, 64]);
                f.extend_from_slice(&"fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
                f.extend_from_slice(&ip.octets());
            }
        }
        f.extend_from_slice(&1234u16.to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    const ANY_7148: Filter = Filter {
        port: 7148,
        address: None,
    };

    #[test]
    fn payload_offset_is_relative_to_the_region() {
        let f = frame("239.1.2.3:7148".parse().unwrap(), b"spead!");
        let p = parse_frame(&f, 3 * 2048, &ANY_7148, 99).unwrap();
        assert_eq!(p.offset as usize, 3 * 2048 + 14 + 20 + 8);
        assert_eq!(p.len, 6);
        assert_eq!(p.rx_time_ns, 99);
        assert_eq!(p.src.to_socket_addr(), "10.0.0.1:1234".parse().unwrap());
        let mut region = vec![0u8; 3 * 2048];
        region.extend_from_slice(&f);
        assert_eq!(&region[p.range()], b"spead!");
    }

    #[test]
    fn ipv6_and_address_filter() {
        let f = frame("[ff02::5]:7148".parse().unwrap(), b"x");
        assert_eq!(
            parse_frame(&f, 0, &ANY_7148, 0).unwrap().offset,
            14 + 40 + 8
        );
        let only = Filter {
            port: 7148,
            address: Some("ff02::6".parse().unwrap()),
        };
        assert_eq!(parse_frame(&f, 0, &only, 0), Err(Rejected::Filtered));
    }

    #[test]
    fn wrong_port_short_and_non_udp_frames_are_rejected() {
        let f = frame("239.1.2.3:7149".parse().unwrap(), b"abc");
        assert_eq!(parse_frame(&f, 0, &ANY_7148, 0), Err(Rejected::Filtered));
        let f = frame("239.1.2.3:7148".parse().unwrap(), &[0u8; 64]);
        assert_eq!(
            parse_frame(&f[..60], 0, &ANY_7148, 0),
            Err(Rejected::Truncated)
        );
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse_frame(&arp, 0, &ANY_7148, 0), Err(Rejected::Malformed));
        for cut in 0..f.len() {
            let _ = parse_frame(&f[..cut], 0, &ANY_7148, 0);
        }
    }
}
