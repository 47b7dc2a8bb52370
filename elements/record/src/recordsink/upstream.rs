//! What the recorder learns from the elements upstream of it: the source's address and
//! port (the destination written in synthesized headers) and its drop counters (written
//! in pcapng interface statistics). Walked rarely (first buffer, file close), never per
//! buffer.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use firehose_core::stats::{self, names};
use gst::prelude::*;

/// How far upstream to look (elements), so a loop in a strange graph cannot spin.
const MAX_DEPTH: usize = 32;

/// The elements upstream of `sink`, nearest first.
fn upstream(sink: &gst::Element) -> Vec<gst::Element> {
    let mut out: Vec<gst::Element> = Vec::new();
    let mut frontier = vec![sink.clone()];
    while let Some(el) = frontier.pop() {
        if out.len() >= MAX_DEPTH {
            break;
        }
        for pad in el.sink_pads() {
            if let Some(up) = pad.peer().and_then(|p| p.parent_element()) {
                if !out.contains(&up) && &up != sink {
                    out.push(up.clone());
                    frontier.insert(0, up);
                }
            }
        }
    }
    out
}

fn firehose_stats(el: &gst::Element) -> Option<gst::Structure> {
    let p = el.find_property("stats")?;
    if p.value_type() != gst::Structure::static_type() {
        return None;
    }
    el.property_value("stats")
        .get::<gst::Structure>()
        .ok()
        .filter(|s| s.name() == stats::STRUCTURE_NAME)
}

/// Counters for the capture's interface statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamCounts {
    /// Packets the source delivered.
    pub packets: u64,
    /// Packets lost before the recorder (`drops-kernel` + `drops-pool`).
    pub drops: u64,
}

/// The counters of the element named `name` in the same pipeline, or of the nearest
/// upstream element with Firehose statistics when `name` is empty.
pub fn counts(sink: &gst::Element, name: &str) -> Option<UpstreamCounts> {
    let s = if name.is_empty() {
        upstream(sink).iter().find_map(firehose_stats)?
    } else {
        let mut top: gst::Object = sink.clone().upcast();
        while let Some(p) = top.parent() {
            top = p;
        }
        let bin = top.downcast::<gst::Bin>().ok()?;
        firehose_stats(&bin.by_name_recurse_up(name)?)?
    };
    Some(UpstreamCounts {
        packets: stats::field(&s, names::PACKETS),
        drops: stats::field(&s, names::DROPS_KERNEL) + stats::field(&s, names::DROPS_POOL),
    })
}

/// The address and port the nearest upstream source receives on (an element with
/// `address` and `port` properties, e.g. `fhudpsrc`), if any. An unspecified address
/// becomes the loopback address of its family.
pub fn source_address(sink: &gst::Element) -> Option<SocketAddr> {
    upstream(sink).iter().find_map(|el| {
        el.find_property("port")?;
        el.find_property("address")?;
        let port = el.property_value("port");
        let port = port
            .get::<i32>()
            .map(|p| p as i64)
            .or_else(|_| port.get::<u32>().map(i64::from))
            .ok()?;
        let port = u16::try_from(port).ok()?;
        let addr = el
            .property_value("address")
            .get::<Option<String>>()
            .ok()??;
        let ip: IpAddr = addr.trim_matches(['[', ']']).parse().ok()?;
        let ip = match ip {
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            other => other,
        };
        Some(SocketAddr::new(ip, port))
    })
}
