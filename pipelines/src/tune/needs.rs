//! What a pipeline asks of the host, read from its elements' properties: the thresholds
//! of `tune --check --pipeline "…"`.

use std::net::IpAddr;

use gst::prelude::*;

use crate::session::int_property;

/// Socket buffer the Firehose receivers ask for when nothing says otherwise (8 MiB).
pub const DEFAULT_SOCKET_BUFFER: u64 = 8 << 20;
/// IPv4 + UDP header bytes on the wire above a datagram's payload.
pub const IP_UDP_HEADERS: u64 = 28;

/// The host resources a pipeline needs. Zero / empty means "does not ask".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Largest receive socket buffer asked for (`buffer-size` of a receiver), bytes.
    pub rcvbuf: u64,
    /// Largest send socket buffer asked for (`buffer-size` of a sender), bytes.
    pub sndbuf: u64,
    /// Bytes of pool memory that want hugepages (`memory=auto|hugepages`).
    pub hugepage_bytes: u64,
    /// True when some element requires hugepages (`memory=hugepages`): then missing
    /// hugepages are a failure, not a warning.
    pub hugepages_required: bool,
    /// Bytes of memory that must be pinned (AF_XDP UMEM, RDMA regions).
    pub pinned_bytes: u64,
    /// Largest IP packet on the wire (payload + IPv4/UDP headers), for the MTU.
    pub max_ip_packet: u64,
    /// Multicast groups joined.
    pub multicast_groups: Vec<IpAddr>,
    /// UDP ports received on.
    pub ports: Vec<u16>,
    /// Interfaces named by the elements (`interface`, `multicast-iface`).
    pub interfaces: Vec<String>,
    /// The CPUs the sources' receive threads are pinned to (`cpu`), in pipeline order.
    pub cpus: Vec<u32>,
    /// Largest `busy-poll` asked for, µs.
    pub busy_poll_us: u64,
    /// True when a receiver relies on UDP GRO (`gro=true`).
    pub udp_gro: bool,
    /// Elements whose hugepage pool is sized at start (`pool-size=0`), not counted in
    /// `hugepage_bytes`.
    pub pools_sized_at_start: Vec<String>,
    /// True when an element works on a GPU (its factory names CUDA or a GPU).
    pub gpu: bool,
    /// Factories of the elements that decided these needs, for the report.
    pub from: Vec<String>,
}

fn string_property(e: &gst::Element, name: &str) -> Option<String> {
    e.find_property(name)?;
    e.property_value(name)
        .get::<Option<String>>()
        .ok()
        .flatten()
        .filter(|s| !s.is_empty())
}

fn bool_property(e: &gst::Element, name: &str) -> Option<bool> {
    e.find_property(name)?;
    e.property_value(name).get::<bool>().ok()
}

fn enum_nick(e: &gst::Element, name: &str) -> Option<String> {
    e.find_property(name)?;
    let v = e.property_value(name);
    let (_, ev) = gst::glib::EnumValue::from_value(&v)?;
    Some(ev.nick().to_string())
}

/// Reads the needs of every element of `pipeline`.
pub fn of_pipeline(pipeline: &gst::Pipeline) -> Needs {
    let mut n = Needs::default();
    // Every pool's bytes: a GPU upload element page-locks the pools upstream of it.
    let mut all_pools = 0u64;
    for e in pipeline.iterate_recurse().into_iter().flatten() {
        let factory = e
            .factory()
            .map(|f| f.name().to_string())
            .unwrap_or_default();
        let sender = e.element_flags().contains(gst::ElementFlags::SINK);
        let mut used = false;
        if let Some(size) = int_property(&e, "buffer-size").filter(|s| *s > 0) {
            if sender {
                n.sndbuf = n.sndbuf.max(size);
            } else {
                n.rcvbuf = n.rcvbuf.max(size);
            }
            used = true;
        }
        if let Some(max) = int_property(&e, "max-packet-size").filter(|s| *s > 0) {
            n.max_ip_packet = n.max_ip_packet.max(max + IP_UDP_HEADERS);
            used = true;
        }
        if let Some(size) = int_property(&e, "packet-size").filter(|s| *s > 0) {
            n.max_ip_packet = n.max_ip_packet.max(size + IP_UDP_HEADERS);
        }
        // `pool-size` is bytes on every Firehose element; 0 means "sized at start from
        // other properties", which only the element knows: such pools are listed apart.
        let pool = int_property(&e, "pool-size");
        all_pools += pool.unwrap_or(0);
        let wants_huge = match enum_nick(&e, "memory").as_deref() {
            Some("hugepages") => {
                n.hugepages_required = true;
                true
            }
            Some("auto") => true,
            _ => false,
        };
        if wants_huge {
            match pool {
                Some(bytes) if bytes > 0 => n.hugepage_bytes += bytes,
                _ => n.pools_sized_at_start.push(e.name().to_string()),
            }
            used = true;
        }
        if factory.starts_with("fhxdp")
            || factory.starts_with("fhibv")
            || factory.starts_with("fhdpdk")
        {
            // UMEM / registered memory / mbufs: the pool, or at least a ring's worth of
            // slots (`slot-size` on all three).
            let frame = int_property(&e, "slot-size").unwrap_or(4096);
            n.pinned_bytes += pool.filter(|b| *b > 0).unwrap_or(4096 * frame);
            used = true;
        }
        for prop in ["address", "multicast-group"] {
            if let Some(ip) = string_property(&e, prop).and_then(|a| a.parse::<IpAddr>().ok()) {
                if ip.is_multicast() && !n.multicast_groups.contains(&ip) {
                    n.multicast_groups.push(ip);
                    used = true;
                }
            }
        }
        if !sender {
            if let Some(port) = int_property(&e, "port").filter(|p| (1..=65535).contains(p)) {
                if !n.ports.contains(&(port as u16)) {
                    n.ports.push(port as u16);
                }
            }
            // An endpoint list's groups and ports (a list that does not parse fails
            // when the pipeline starts, with its own message).
            let default_port = int_property(&e, "port").unwrap_or(0) as u16;
            let list = string_property(&e, "endpoints")
                .and_then(|l| firehose_core::endpoint::parse_list(&l, default_port, &[]).ok());
            for ep in list.unwrap_or_default() {
                if ep.addr.is_multicast() && !n.multicast_groups.contains(&ep.addr) {
                    n.multicast_groups.push(ep.addr);
                    used = true;
                }
                if ep.port != 0 && !n.ports.contains(&ep.port) {
                    n.ports.push(ep.port);
                }
            }
        }
        for prop in ["interface", "multicast-iface"] {
            if let Some(i) = string_property(&e, prop) {
                if !n.interfaces.contains(&i) {
                    n.interfaces.push(i);
                }
            }
        }
        if !sender {
            if let Some(cpu) = e
                .find_property("cpu")
                .and_then(|_| e.property_value("cpu").get::<i32>().ok())
                .and_then(|c| u32::try_from(c).ok())
            {
                if !n.cpus.contains(&cpu) {
                    n.cpus.push(cpu);
                }
                used = true;
            }
        }
        if let Some(us) = int_property(&e, "busy-poll") {
            n.busy_poll_us = n.busy_poll_us.max(us);
        }
        if !sender && bool_property(&e, "gro") == Some(true) {
            n.udp_gro = true;
        }
        if factory.contains("cuda") || factory.contains("gpu") {
            n.gpu = true;
            used = true;
        }
        if used && !n.from.contains(&factory) {
            n.from.push(factory);
        }
    }
    if n.gpu {
        // cuMemHostRegister counts against RLIMIT_MEMLOCK like AF_XDP's UMEM.
        n.pinned_bytes += all_pools;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_come_from_the_properties() {
        gst::init().unwrap();
        gstfirehose::register_static().unwrap();
        let p = crate::session::parse(
            "fhudpsrc address=239.1.2.3 port=7148 buffer-size=67108864 max-packet-size=8972 \
             multicast-iface=eth7 pool-size=16777216 memory=hugepages ! fakesink",
        )
        .unwrap();
        let n = of_pipeline(&p);
        assert_eq!(n.rcvbuf, 64 << 20);
        assert_eq!(n.sndbuf, 0);
        assert_eq!(n.max_ip_packet, 9000);
        assert_eq!(n.hugepage_bytes, 16 << 20);
        assert!(n.hugepages_required);
        assert_eq!(
            n.multicast_groups,
            vec!["239.1.2.3".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(n.ports, vec![7148]);
        assert_eq!(n.interfaces, vec!["eth7".to_string()]);
        assert!(n.udp_gro, "fhudpsrc asks for GRO by default");
        assert_eq!(n.from, vec!["fhudpsrc".to_string()]);

        // An endpoint list's groups and ports are needs too.
        let p = crate::session::parse(
            "fhudpsrc endpoints=\"239.9.0.0+1:7150,10.0.0.1,239.9.1.0\" port=7148 ! fakesink",
        )
        .unwrap();
        let n = of_pipeline(&p);
        let groups: Vec<IpAddr> = ["239.9.0.0", "239.9.0.1", "239.9.1.0"]
            .iter()
            .map(|g| g.parse().unwrap())
            .collect();
        assert_eq!(n.multicast_groups, groups);
        assert_eq!(n.ports, vec![7148, 7150]);

        let p = crate::session::parse(
            "fhtestsrc packet-size=1472 memory=system ! fhudpsink buffer-size=4194304",
        )
        .unwrap();
        let n = of_pipeline(&p);
        assert_eq!(n.sndbuf, 4 << 20);
        assert_eq!(n.rcvbuf, 0);
        assert_eq!(n.max_ip_packet, 1500);
        assert!(n.multicast_groups.is_empty());
        assert!(!n.gpu);
        assert_eq!(n.hugepage_bytes, 0, "memory=system wants no hugepages");

        // A GPU upload pins the pools upstream of it.
        let p = crate::session::parse(
            "fhtestsrc pool-size=8388608 memory=system ! fhcudaupload ! fakesink",
        )
        .unwrap();
        let n = of_pipeline(&p);
        assert!(n.gpu);
        assert_eq!(n.pinned_bytes, 8 << 20);
        assert!(n.cpus.is_empty(), "no source pinned");

        // The CPUs the sources are pinned to, each once, in order.
        let p = crate::session::parse(
            "fhudpsrc port=7148 cpu=3 busy-poll=50 ! fakesink \
             fhspeadsrc port=7149 cpu=1 ! fakesink fhtestsrc cpu=3 ! fakesink",
        )
        .unwrap();
        let n = of_pipeline(&p);
        assert_eq!(n.cpus, [3, 1]);
        assert_eq!(n.busy_poll_us, 50);
    }
}
