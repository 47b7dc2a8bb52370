//! The flow-steering rules for a list of UDP endpoints, one each, as spead2's
//! `create_flow` builds them (`src/common_ibv.cpp`): an `ibv_flow_attr` followed by an
//! Ethernet, an IPv4 and a UDP spec. Pure data, no device: tested byte for byte here and against the C
//! structs in `tests/layout.rs`.

use std::net::{IpAddr, Ipv4Addr};

use firehose_core::endpoint::{Endpoint, MAX_ENDPOINTS};
use firehose_core::frame::build::multicast_mac;

use crate::sys::{
    ibv_flow_attr, ibv_flow_eth_filter, ibv_flow_ipv4_filter, ibv_flow_spec_eth,
    ibv_flow_spec_ipv4, ibv_flow_spec_tcp_udp, ibv_flow_tcp_udp_filter, IBV_FLOW_ATTR_NORMAL,
    IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_UDP,
};

/// One rule: what `ibv_create_flow` receives. Every byte is a named field (the C
/// padding is spelled out in [`crate::sys`]), so [`FlowRule::as_bytes`] is fully
/// initialised.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowRule {
    /// The header: type, total size, number of specs, port.
    pub attr: ibv_flow_attr,
    /// Destination MAC match.
    pub eth: ibv_flow_spec_eth,
    /// Destination IPv4 match.
    pub ip: ibv_flow_spec_ipv4,
    /// Destination UDP port match.
    pub udp: ibv_flow_spec_tcp_udp,
}

impl FlowRule {
    /// The rule's bytes, as the library reads them.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: FlowRule is repr(C) over integer fields and arrays only, with every
        // padding byte an explicit field (sizes checked in tests), so all
        // size_of::<FlowRule>() bytes are initialised; the slice borrows `self`.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// The rule steering UDP datagrams for `dst:port` arriving on `ib_port` to the QP.
///
/// As in spead2: for a specific address the rule matches the destination MAC — the
/// group's MAC for multicast, `interface_mac` for unicast (ConnectX-3 needs an
/// Ethernet match) — and the destination IP; for `0.0.0.0` only the UDP port is
/// matched (the Ethernet and IP specs are present with all-zero masks). Multi-byte
/// values are in network byte order, as the specs require.
pub fn flow_rule(dst: Ipv4Addr, port: u16, interface_mac: [u8; 6], ib_port: u8) -> FlowRule {
    let mut r = FlowRule {
        attr: ibv_flow_attr {
            type_: IBV_FLOW_ATTR_NORMAL,
            size: std::mem::size_of::<FlowRule>() as u16,
            priority: 0,
            num_of_specs: 3,
            port: ib_port,
            ..Default::default()
        },
        eth: ibv_flow_spec_eth {
            type_: IBV_FLOW_SPEC_ETH,
            size: std::mem::size_of::<ibv_flow_spec_eth>() as u16,
            ..Default::default()
        },
        ip: ibv_flow_spec_ipv4 {
            type_: IBV_FLOW_SPEC_IPV4,
            size: std::mem::size_of::<ibv_flow_spec_ipv4>() as u16,
            ..Default::default()
        },
        udp: ibv_flow_spec_tcp_udp {
            type_: IBV_FLOW_SPEC_UDP,
            size: std::mem::size_of::<ibv_flow_spec_tcp_udp>() as u16,
            val: ibv_flow_tcp_udp_filter {
                dst_port: port.to_be(),
                src_port: 0,
            },
            mask: ibv_flow_tcp_udp_filter {
                dst_port: 0xffff,
                src_port: 0,
            },
            _pad0: 0,
        },
    };
    if !dst.is_unspecified() {
        let mac = if dst.is_multicast() {
            multicast_mac(dst)
        } else {
            interface_mac
        };
        r.eth.val = ibv_flow_eth_filter {
            dst_mac: mac,
            ..Default::default()
        };
        r.eth.mask = ibv_flow_eth_filter {
            dst_mac: [0xff; 6],
            ..Default::default()
        };
        // `dst_ip` holds the address's bytes in wire order.
        r.ip.val = ibv_flow_ipv4_filter {
            src_ip: 0,
            dst_ip: u32::from_ne_bytes(dst.octets()),
        };
        r.ip.mask = ibv_flow_ipv4_filter {
            src_ip: 0,
            dst_ip: u32::MAX,
        };
    }
    r
}

/// The IPv4 address of each endpoint of `list`, checked for what a flow rule can steer:
/// IPv4 only (as spead2's ibverbs receiver), a port on every endpoint, no SSM sources
/// (a rule cannot match the sender, and the group is joined without them), at most
/// [`MAX_ENDPOINTS`]. The error says which endpoint and what to do instead.
pub fn endpoint_addresses(list: &[Endpoint]) -> Result<Vec<(Ipv4Addr, u16)>, String> {
    if list.is_empty() || list.len() > MAX_ENDPOINTS {
        return Err(format!(
            "{} endpoints: fhibvsrc steers 1 to {MAX_ENDPOINTS}",
            list.len()
        ));
    }
    list.iter()
        .map(|e| {
            let IpAddr::V4(addr) = e.addr else {
                return Err(format!(
                    "endpoint {e} is IPv6, but fhibvsrc steers IPv4 only (as spead2's \
                     ibverbs receiver); use fhudpsrc for IPv6"
                ));
            };
            if e.port == 0 {
                return Err(format!(
                    "endpoint {e} has no port: a flow rule steers one UDP port; set port \
                     or give the endpoint its port (ADDRESS:PORT)"
                ));
            }
            if !e.sources.is_empty() {
                return Err(format!(
                    "endpoint {e} names SSM sources, which fhibvsrc cannot match or join \
                     (its rules and joins are any-source); leave the sources out, or use \
                     fhudpsrc for source-specific multicast"
                ));
            }
            Ok((addr, e.port))
        })
        .collect()
}

/// One rule per endpoint of `list` ([`flow_rule`]), in list order; `list` as
/// [`endpoint_addresses`] checks it.
pub fn endpoint_rules(
    list: &[Endpoint],
    interface_mac: [u8; 6],
    ib_port: u8,
) -> Result<Vec<FlowRule>, String> {
    Ok(endpoint_addresses(list)?
        .into_iter()
        .map(|(addr, port)| flow_rule(addr, port, interface_mac, ib_port))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IF_MAC: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];

    /// The exact bytes for a multicast endpoint: offsets 0 (attr, 20 bytes), 20 (eth,
    /// 40), 60 (ipv4, 24), 84 (udp, 16); 100 in all.
    #[test]
    fn multicast_rule_bytes() {
        let r = flow_rule("239.10.11.12".parse().unwrap(), 7148, IF_MAC, 1);
        let b = r.as_bytes();
        assert_eq!(b.len(), 100);
        let mut want = [0u8; 100];
        // attr: comp_mask 0, type NORMAL 0, size 100, priority 0, 3 specs, port 1.
        want[8..10].copy_from_slice(&100u16.to_ne_bytes());
        want[12] = 3;
        want[13] = 1;
        // eth: type 0x20, size 40, val.dst_mac = 01:00:5e:0a:0b:0c, mask.dst_mac = ff…
        want[20..24].copy_from_slice(&0x20u32.to_ne_bytes());
        want[24..26].copy_from_slice(&40u16.to_ne_bytes());
        want[26..32].copy_from_slice(&[0x01, 0x00, 0x5e, 10, 11, 12]);
        want[42..48].copy_from_slice(&[0xff; 6]);
        // ipv4: type 0x30, size 24, val.dst_ip at +12, mask.dst_ip at +20.
        want[60..64].copy_from_slice(&0x30u32.to_ne_bytes());
        want[64..66].copy_from_slice(&24u16.to_ne_bytes());
        want[72..76].copy_from_slice(&[239, 10, 11, 12]);
        want[80..84].copy_from_slice(&[0xff; 4]);
        // udp: type 0x41, size 16, val.dst_port big-endian at +6, mask at +10.
        want[84..88].copy_from_slice(&0x41u32.to_ne_bytes());
        want[88..90].copy_from_slice(&16u16.to_ne_bytes());
        want[90..92].copy_from_slice(&7148u16.to_be_bytes());
        want[94..96].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(b, &want[..]);
    }

    #[test]
    fn unicast_rule_matches_the_interface_mac() {
        let r = flow_rule("10.0.0.5".parse().unwrap(), 9000, IF_MAC, 2);
        assert_eq!(r.eth.val.dst_mac, IF_MAC);
        assert_eq!(r.eth.mask.dst_mac, [0xff; 6]);
        assert_eq!(r.ip.val.dst_ip.to_ne_bytes(), [10, 0, 0, 5]);
        assert_eq!(r.ip.mask.dst_ip, u32::MAX);
        assert_eq!(r.udp.val.dst_port.to_ne_bytes(), 9000u16.to_be_bytes());
        assert_eq!(r.attr.port, 2);
        assert_eq!((r.eth.mask.src_mac, r.ip.mask.src_ip), ([0; 6], 0));
    }

    #[test]
    fn any_address_matches_only_the_port() {
        let r = flow_rule(Ipv4Addr::UNSPECIFIED, 7148, IF_MAC, 1);
        assert_eq!(r.eth.mask, ibv_flow_eth_filter::default());
        assert_eq!(r.eth.val, ibv_flow_eth_filter::default());
        assert_eq!(r.ip.mask, ibv_flow_ipv4_filter::default());
        assert_eq!(r.udp.mask.dst_port, 0xffff);
        assert_eq!((r.eth.type_, r.ip.type_, r.udp.type_), (0x20, 0x30, 0x41));
        assert_eq!(r.attr.num_of_specs, 3);
    }

    fn list(s: &str) -> Vec<Endpoint> {
        firehose_core::endpoint::parse_list(s, 7148, &[]).unwrap()
    }

    #[test]
    fn one_rule_per_endpoint_in_list_order() {
        let l = list("239.10.0.0+3:7148,10.0.0.5:9000,0.0.0.0:7149");
        let rules = endpoint_rules(&l, IF_MAC, 1).unwrap();
        assert_eq!(rules.len(), 6);
        for (k, r) in rules[..4].iter().enumerate() {
            assert_eq!(r.ip.val.dst_ip.to_ne_bytes(), [239, 10, 0, k as u8]);
            assert_eq!(r.eth.val.dst_mac, [0x01, 0x00, 0x5e, 10, 0, k as u8]);
            assert_eq!(r.udp.val.dst_port, 7148u16.to_be());
        }
        assert_eq!(
            rules[4],
            flow_rule("10.0.0.5".parse().unwrap(), 9000, IF_MAC, 1)
        );
        assert_eq!(rules[5], flow_rule(Ipv4Addr::UNSPECIFIED, 7149, IF_MAC, 1));
    }

    #[test]
    fn endpoints_a_rule_cannot_steer_are_refused_by_name() {
        let e = endpoint_rules(&list("239.1.1.1:5,[ff15::1]:5"), IF_MAC, 1).unwrap_err();
        assert!(
            e.contains("[ff15::1]:5 is IPv6") && e.contains("fhudpsrc"),
            "{e}"
        );
        let e = endpoint_rules(&list("232.1.1.1:5@10.0.0.9"), IF_MAC, 1).unwrap_err();
        assert!(e.contains("SSM sources"), "{e}");
        let e = endpoint_rules(&list("10.0.0.1:0"), IF_MAC, 1).unwrap_err();
        assert!(e.contains("10.0.0.1:0 has no port"), "{e}");
        assert!(endpoint_rules(&[], IF_MAC, 1).is_err());
        assert_eq!(
            endpoint_rules(&list("239.0.0.0+255:7148"), IF_MAC, 1)
                .unwrap()
                .len(),
            MAX_ENDPOINTS
        );
    }
}
