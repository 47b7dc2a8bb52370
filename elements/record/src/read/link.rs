//! From a captured frame to its UDP datagram: the shared parser now lives in
//! [`firehose_core::frame`] (kernel-bypass sources decode raw Ethernet frames with it
//! too); re-exported here so replay code keeps its paths.

pub use firehose_core::frame::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::net::{write_headers, Destination, ETH_LEN, MAX_HEADERS};

    fn frame(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
        let mut h = [0u8; MAX_HEADERS];
        let n = write_headers(
            &mut h,
            src.parse().unwrap(),
            &Destination::new(dst.parse().unwrap()),
            payload,
            1,
        );
        let mut f = h[..n].to_vec();
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_v4_and_v6_round_trip_with_what_we_write() {
        for (src, dst) in [
            ("10.0.0.1:5", "10.0.0.2:7148"),
            ("[fe80::1]:5", "[ff02::1]:7148"),
        ] {
            let f = frame(src, dst, b"payload");
            let d = datagram(LINKTYPE_ETHERNET, &f).unwrap();
            assert_eq!(d.payload, b"payload");
            assert_eq!(d.src, src.parse().unwrap());
            assert_eq!(d.dst, dst.parse().unwrap());
        }
    }

    #[test]
    fn cooked_raw_vlan_and_padding() {
        let eth = frame("1.2.3.4:1", "5.6.7.8:2", b"xy");
        let ip = &eth[ETH_LEN..];
        // SLL: 14 bytes of addresses, then the protocol.
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(ip);
        assert_eq!(datagram(LINKTYPE_LINUX_SLL, &sll).unwrap().payload, b"xy");
        let mut sll2 = 0x0800u16.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(ip);
        assert_eq!(datagram(LINKTYPE_LINUX_SLL2, &sll2).unwrap().payload, b"xy");
        assert_eq!(datagram(LINKTYPE_RAW, ip).unwrap().payload, b"xy");
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(ip);
        assert_eq!(datagram(LINKTYPE_NULL, &null).unwrap().payload, b"xy");
        let mut vlan = eth[..12].to_vec();
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        vlan.extend_from_slice(&eth[12..]);
        vlan.extend_from_slice(&[0; 20]); // Ethernet padding
        assert_eq!(datagram(LINKTYPE_ETHERNET, &vlan).unwrap().payload, b"xy");
    }

    #[test]
    fn damage_is_classified_never_panics() {
        let f = frame("1.2.3.4:1", "5.6.7.8:2", &[7u8; 100]);
        assert_eq!(datagram(LINKTYPE_ETHERNET, &f[..60]), Err(Skip::Truncated));
        let mut tcp = f.clone();
        tcp[ETH_LEN + 9] = 6;
        assert_eq!(datagram(LINKTYPE_ETHERNET, &tcp), Err(Skip::NotUdp));
        let mut frag = f.clone();
        frag[ETH_LEN + 6] = 0x20; // more fragments
        assert_eq!(datagram(LINKTYPE_ETHERNET, &frag), Err(Skip::Truncated));
        let mut bad = f.clone();
        bad[38] = 0; // UDP length: 3, shorter than its own header
        bad[39] = 3;
        assert_eq!(datagram(LINKTYPE_ETHERNET, &bad), Err(Skip::Malformed));
        assert_eq!(datagram(999, &f), Err(Skip::NotUdp));
        for cut in 0..f.len() {
            let _ = datagram(LINKTYPE_ETHERNET, &f[..cut]);
            let _ = datagram(LINKTYPE_RAW, &f[ETH_LEN.min(cut)..cut]);
            let _ = datagram(LINKTYPE_LINUX_SLL2, &f[..cut]);
        }
        let v6 = frame("[::2]:1", "[::1]:2", &[1u8; 30]);
        for cut in 0..v6.len() {
            let _ = datagram(LINKTYPE_ETHERNET, &v6[..cut]);
        }
    }
}
