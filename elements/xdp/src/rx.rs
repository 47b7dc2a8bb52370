//! Hand-made test frames for the XDP program's tests (IPv4 with options, IPv6, ARP).
//! Frame parsing and filtering are the shared [`firehose_core::frame::accept`].

/// Test frames: Ethernet + IPv4 (optionally with options) or IPv6 + UDP.
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
