//! Endpoint lists: the unicast addresses or multicast groups, with ports and SSM
//! sources, that one source receives as one stream (the `endpoints` property of every
//! packet source), how a datagram's destination finds its endpoint, and the counters
//! kept per endpoint. No GStreamer types but the stats field they are shown in.
//!
//! Why a list: an ingest host subscribes to its share of a stream's multicast groups
//! into one receiver (katsdpingest; spead2's readers take endpoint lists). The syntax is
//! the one the MeerKAT tools write (katsdptelstate's `endpoint_list_parser`):
//! `239.10.0.0+7:7148` is eight consecutive groups on port 7148.
//!
//! Grammar, items separated by commas or white space:
//! `ADDRESS[+N][:PORT][@SOURCE[;SOURCE…]]`, IPv6 in brackets (`[ff15::1]:7148`). A missing
//! port is the element's `port`; missing sources are its `multicast-source` (for groups).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::packet::PacketAddr;

/// The most endpoints one source takes: far more than one host's share of any stream we
/// know (MeerKAT's correlator streams have 4–64 groups), few enough that the per-endpoint
/// table stays small and the stats readable.
pub const MAX_ENDPOINTS: usize = 256;

/// One endpoint: where datagrams are sent, and for a source-specific multicast group the
/// senders accepted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Unicast address (unspecified: any local address) or multicast group.
    pub addr: IpAddr,
    /// UDP destination port (0: any free port, for a single kernel endpoint only).
    pub port: u16,
    /// SSM sources (groups only); empty: any sender.
    pub sources: Vec<IpAddr>,
}

impl Endpoint {
    /// The endpoint's address and port.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.socket_addr())?;
        for (i, s) in self.sources.iter().enumerate() {
            write!(f, "{}{s}", if i == 0 { '@' } else { ';' })?;
        }
        Ok(())
    }
}

/// The `endpoints` property, the same on every packet source.
pub fn property_spec() -> gst::glib::ParamSpec {
    use gst::prelude::*;
    gst::glib::ParamSpecString::builder("endpoints")
        .nick("Endpoints")
        .blurb(ENDPOINTS_BLURB)
        .mutable_ready()
        .build()
}

/// What `endpoints` takes, in the words of every source's reference.
pub const ENDPOINTS_BLURB: &str = "Receive several addresses or multicast groups as one stream, instead of address: a comma-separated list of ADDRESS[+N][:PORT][@SOURCE[;SOURCE]] (+N: N more consecutive addresses; no port: the port property; @: the group's SSM sources), e.g. 239.10.0.0+7:7148. Each datagram's destination is kept in the batch meta, and stats count packets and bytes per endpoint";

/// Parses `list` (see the module docs): `default_port` for items without a port,
/// `default_sources` for groups without sources. Refuses, with what to write instead:
/// an empty list, an unparsable item, more than [`MAX_ENDPOINTS`], an endpoint listed
/// twice, sources on a unicast address or of the other IP family, a range that runs past
/// the address space, and a wildcard address beside other endpoints of its port (it
/// already receives what they would).
pub fn parse_list(
    list: &str,
    default_port: u16,
    default_sources: &[IpAddr],
) -> Result<Vec<Endpoint>, String> {
    let mut out: Vec<Endpoint> = Vec::new();
    for item in list.split(|c: char| c == ',' || c.is_whitespace()) {
        if item.is_empty() {
            continue;
        }
        let (base, count, port, sources) = parse_item(item, default_port)?;
        let sources = if sources.is_empty() && base.is_multicast() {
            default_sources.to_vec()
        } else {
            sources
        };
        check_sources(item, base, &sources)?;
        if out.len() + count > MAX_ENDPOINTS {
            return Err(format!(
                "endpoints: more than {MAX_ENDPOINTS} endpoints; one source takes at most \
                 {MAX_ENDPOINTS} (split the stream over several sources)"
            ));
        }
        for k in 0..count {
            let addr = offset(base, k as u128).ok_or_else(|| {
                format!("endpoints: {item:?} runs past the last address of its family")
            })?;
            out.push(Endpoint {
                addr,
                port,
                sources: sources.clone(),
            });
        }
    }
    if out.is_empty() {
        return Err(
            "endpoints: the list is empty; give ADDRESS[+N][:PORT], e.g. \
                    239.10.0.0+7:7148"
                .into(),
        );
    }
    check_distinct(&out)?;
    Ok(out)
}

/// The endpoints of a source from its properties: the `endpoints` list when it is set
/// (`address` must then be left at its default, `address_default`), else the one
/// endpoint `address`:`port` (no address: any). `sources` are the SSM sources of groups
/// that name none (`multicast-source`).
pub fn from_properties(
    endpoints: Option<&str>,
    address: Option<&str>,
    address_default: Option<&str>,
    port: u16,
    sources: &[IpAddr],
) -> Result<Vec<Endpoint>, String> {
    let address = address.map(str::trim).filter(|a| !a.is_empty());
    if let Some(list) = endpoints.filter(|l| !l.trim().is_empty()) {
        if address.is_some() && address != address_default {
            return Err(format!(
                "both address ({}) and endpoints are set: list every address in endpoints \
                 and leave address unset",
                address.unwrap_or_default()
            ));
        }
        return parse_list(list, port, sources);
    }
    let addr = match address {
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Some(a) => a
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| format!("invalid address '{a}': expected an IPv4 or IPv6 address"))?,
    };
    if !sources.is_empty() && !addr.is_multicast() {
        return Err(format!(
            "multicast-source is set but address {addr} is not a multicast group \
             (IPv4 224.0.0.0/4 or IPv6 ff00::/8); SSM needs a group such as 232.1.1.1"
        ));
    }
    check_sources(&addr.to_string(), addr, sources)?;
    Ok(vec![Endpoint {
        addr,
        port,
        sources: sources.to_vec(),
    }])
}

/// One item: its first address, how many consecutive ones, the port and the sources.
fn parse_item(item: &str, default_port: u16) -> Result<(IpAddr, usize, u16, Vec<IpAddr>), String> {
    let bad = |why: &str| {
        format!(
            "endpoints: {item:?} {why}; write ADDRESS[+N][:PORT][@SOURCE[;SOURCE]], e.g. \
             239.10.0.0+7:7148 or [ff15::1]:7148@10.0.0.5"
        )
    };
    let (target, sources) = match item.split_once('@') {
        Some((t, s)) => (t, s),
        None => (item, ""),
    };
    // The address ends at a closing bracket (IPv6) or at the first '+' or ':' (IPv4).
    let (addr_text, rest) = if let Some(r) = target.strip_prefix('[') {
        let (a, rest) = r.split_once(']').ok_or_else(|| bad("has no closing ']'"))?;
        (a, rest)
    } else {
        let end = target.find(['+', ':']).unwrap_or(target.len());
        (&target[..end], &target[end..])
    };
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| bad("does not start with an IPv4 or bracketed IPv6 address"))?;
    let (plus, port_text) = match rest.split_once(':') {
        Some((p, port)) => (p, Some(port)),
        None => (rest, None),
    };
    let count = match plus {
        "" => 1,
        p => match p.strip_prefix('+').map(str::parse::<usize>) {
            Some(Ok(n)) if n < MAX_ENDPOINTS => n + 1,
            _ => {
                return Err(bad(&format!(
                    "has a bad range (+N with N below {MAX_ENDPOINTS})"
                )))
            }
        },
    };
    let port = match port_text {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| bad("has a port that is not 0–65535"))?,
    };
    let sources = sources
        .split(';')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<IpAddr>()
                .map_err(|_| bad(&format!("has a source {s:?} that is not an IP address")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((addr, count, port, sources))
}

fn check_sources(item: &str, addr: IpAddr, sources: &[IpAddr]) -> Result<(), String> {
    if sources.is_empty() {
        return Ok(());
    }
    if !addr.is_multicast() {
        return Err(format!(
            "endpoints: {item:?} names SSM sources, but {addr} is not a multicast group \
             (IPv4 224.0.0.0/4 or IPv6 ff00::/8); SSM needs a group such as 232.1.1.1"
        ));
    }
    if let Some(s) = sources.iter().find(|s| s.is_ipv4() != addr.is_ipv4()) {
        return Err(format!(
            "endpoints: {item:?}: source {s} and group {addr} are of different IP families"
        ));
    }
    Ok(())
}

fn check_distinct(list: &[Endpoint]) -> Result<(), String> {
    let mut seen = HashMap::with_capacity(list.len());
    for e in list {
        if seen.insert((e.addr, e.port), ()).is_some() {
            return Err(format!(
                "endpoints: {} is listed twice; list each address and port once",
                e.socket_addr()
            ));
        }
    }
    for e in list.iter().filter(|e| e.addr.is_unspecified()) {
        if let Some(o) = list
            .iter()
            .find(|o| o.port == e.port && o.addr != e.addr && o.addr.is_ipv4() == e.addr.is_ipv4())
        {
            return Err(format!(
                "endpoints: {} receives every datagram to port {} already, {} too; list \
                 either the wildcard or the addresses",
                e.socket_addr(),
                e.port,
                o.socket_addr()
            ));
        }
    }
    if list.len() > 1 {
        if let Some(e) = list.iter().find(|e| e.port == 0) {
            return Err(format!(
                "endpoints: {} asks for any free port, which only a single endpoint can; \
                 give every endpoint of a list its port",
                e.socket_addr()
            ));
        }
    }
    Ok(())
}

/// `base` + `k` in its family, if that stays inside the family's address space.
fn offset(base: IpAddr, k: u128) -> Option<IpAddr> {
    Some(match base {
        IpAddr::V4(a) => {
            let v = u64::from(u32::from(a)) + u64::try_from(k).ok()?;
            IpAddr::V4(Ipv4Addr::from(u32::try_from(v).ok()?))
        }
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).checked_add(k)?)),
    })
}

/// Finds a datagram's endpoint from its destination, on the receive path: an exact
/// address and port, else the port's wildcard endpoint. A sorted table searched by
/// halves, so that 256 endpoints cost eight comparisons, not 256.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointTable {
    /// (IPv6 form of the address, port) → endpoint index, sorted.
    exact: Vec<((u128, u16), u16)>,
    /// (port, endpoint index) of wildcard-address endpoints.
    wildcard: Vec<(u16, u16)>,
}

/// The IPv6 form of an address (IPv4-mapped for IPv4): one key type for both families.
fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl EndpointTable {
    /// The table of `list` (as [`parse_list`] returns it: at most [`MAX_ENDPOINTS`]).
    pub fn new(list: &[Endpoint]) -> Self {
        let mut t = Self::default();
        for (i, e) in list.iter().enumerate().take(MAX_ENDPOINTS) {
            let i = i as u16;
            if e.addr.is_unspecified() {
                t.wildcard.push((e.port, i));
            } else {
                t.exact.push(((key(e.addr), e.port), i));
            }
        }
        t.exact.sort_unstable();
        t
    }

    /// The index of the endpoint a datagram to `ip`:`port` belongs to, if any.
    pub fn find(&self, ip: IpAddr, port: u16) -> Option<usize> {
        // The address on this port, else the address on any port (a filter of
        // address only), else the port's wildcard.
        for k in [(key(ip), port), (key(ip), 0)] {
            if let Ok(i) = self.exact.binary_search_by(|(e, _)| e.cmp(&k)) {
                return Some(usize::from(self.exact[i].1));
            }
        }
        self.wildcard
            .iter()
            .find(|(p, _)| *p == port || *p == 0)
            .map(|(_, i)| usize::from(*i))
    }

    /// The distinct ports of the endpoints, sorted (empty when one takes any port):
    /// what an XDP program redirects or a flow rule steers.
    pub fn ports(&self) -> Vec<u16> {
        let mut p: Vec<u16> = self
            .exact
            .iter()
            .map(|((_, port), _)| *port)
            .chain(self.wildcard.iter().map(|(port, _)| *port))
            .collect();
        if p.contains(&0) {
            return Vec::new();
        }
        p.sort_unstable();
        p.dedup();
        p
    }

    /// How many endpoints the table holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }

    /// True when it holds none (then nothing is found).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`EndpointTable::find`] for a batch entry's destination.
    pub fn find_dest(&self, dst: &PacketAddr) -> Option<usize> {
        let a = dst.to_socket_addr();
        self.find(a.ip(), a.port())
    }
}

/// Packets and bytes per endpoint, written by the receive thread once per batch and read
/// by `stats` from any thread.
#[derive(Debug)]
pub struct EndpointCounters {
    names: Vec<String>,
    packets: Vec<AtomicU64>,
    bytes: Vec<AtomicU64>,
}

impl EndpointCounters {
    /// Zeroed counters for each endpoint of `list`.
    pub fn new(list: &[Endpoint]) -> Self {
        Self {
            names: list.iter().map(|e| e.socket_addr().to_string()).collect(),
            packets: list.iter().map(|_| AtomicU64::new(0)).collect(),
            bytes: list.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds a batch's tally (see [`Tally`]) and clears it.
    pub fn add(&self, tally: &mut Tally) {
        for &i in &tally.touched {
            let (p, b) = std::mem::take(&mut tally.counts[usize::from(i)]);
            if let (Some(pc), Some(bc)) = (
                self.packets.get(usize::from(i)),
                self.bytes.get(usize::from(i)),
            ) {
                pc.fetch_add(p, Ordering::Relaxed);
                bc.fetch_add(b, Ordering::Relaxed);
            }
        }
        tally.touched.clear();
    }

    /// Each endpoint's name (`address:port`), packets and bytes so far.
    pub fn snapshot(&self) -> Vec<(&str, u64, u64)> {
        self.names
            .iter()
            .zip(self.packets.iter().zip(&self.bytes))
            .map(|(n, (p, b))| {
                (
                    n.as_str(),
                    p.load(Ordering::Relaxed),
                    b.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// The counters as the `endpoints` field of a `stats` structure: `endpoint`
    /// structures (`address` as `ip:port`, `packets`, `bytes`), one per endpoint in the
    /// list's order; what the metrics endpoint labels by `endpoint`. Held in a
    /// `GstCaps`, as the heap meta's descriptors are: PyGObject reads caps (`get_size`,
    /// `get_structure`) where a `GstValueArray` needs gst-python's overrides, which
    /// Debian's python3-gi does not have.
    pub fn to_value(&self) -> gst::glib::SendValue {
        use gst::prelude::*;
        let mut caps = gst::Caps::new_empty();
        {
            let caps = caps.get_mut().expect("a new caps is writable");
            for (name, p, b) in self.snapshot() {
                caps.append_structure(
                    gst::Structure::builder(ENDPOINT_STRUCTURE)
                        .field("address", name)
                        .field("packets", p)
                        .field("bytes", b)
                        .build(),
                );
            }
        }
        caps.to_send_value()
    }
}

/// The [`STATS_FIELD`] value of a source: `counters`' ([`EndpointCounters::to_value`]),
/// or an empty list before the source first started, so that the field is always
/// there and tools can rely on it.
pub fn stats_value(counters: Option<&EndpointCounters>) -> gst::glib::SendValue {
    counters.map_or_else(|| EndpointCounters::new(&[]).to_value(), |c| c.to_value())
}

/// Each endpoint's (address, packets, bytes) from a `stats` structure's
/// [`STATS_FIELD`], as [`EndpointCounters::to_value`] writes it; `None` without the
/// field.
pub fn read_stats(stats: &gst::StructureRef) -> Option<Vec<(String, u64, u64)>> {
    let caps = stats.get::<gst::Caps>(STATS_FIELD).ok()?;
    Some(
        caps.iter()
            .map(|e| {
                (
                    e.get::<String>("address").unwrap_or_default(),
                    e.get::<u64>("packets").unwrap_or(0),
                    e.get::<u64>("bytes").unwrap_or(0),
                )
            })
            .collect(),
    )
}

/// The field of a `stats` structure that holds the per-endpoint counters.
pub const STATS_FIELD: &str = "endpoints";

/// Name of each structure in the `endpoints` array of a `stats` structure.
pub const ENDPOINT_STRUCTURE: &str = "endpoint";

/// The receive thread's own per-endpoint counts for one batch: plain adds per packet,
/// handed to [`EndpointCounters::add`] once per batch. Preallocated: no allocation on the
/// receive path.
#[derive(Debug, Default)]
pub struct Tally {
    counts: Vec<(u64, u64)>,
    touched: Vec<u16>,
}

impl Tally {
    /// A tally for `n` endpoints.
    pub fn new(n: usize) -> Self {
        let n = n.min(MAX_ENDPOINTS);
        Self {
            counts: vec![(0, 0); n],
            touched: Vec::with_capacity(n),
        }
    }

    /// Counts one packet of `bytes` to endpoint `i` (ignored if out of range).
    #[inline]
    pub fn count(&mut self, i: usize, bytes: u64) {
        self.add(i, 1, bytes);
    }

    /// Counts `packets` packets of `bytes` in all to endpoint `i` (ignored if out of
    /// range): a GRO message.
    #[inline]
    pub fn add(&mut self, i: usize, packets: u64, bytes: u64) {
        if let Some(c) = self.counts.get_mut(i) {
            if c.0 == 0 && packets > 0 {
                self.touched.push(i as u16);
            }
            c.0 += packets;
            c.1 += bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_ports_sources_and_ipv6() {
        let l = parse_list(
            "239.10.0.0+2:7148, 10.0.0.1 [ff15::1]:9@[fe80::5]",
            5004,
            &[],
        )
        .unwrap();
        let names: Vec<String> = l.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            names,
            [
                "239.10.0.0:7148",
                "239.10.0.1:7148",
                "239.10.0.2:7148",
                "10.0.0.1:5004",
                "[ff15::1]:9@fe80::5"
            ]
        );
        // Default sources go to groups only; an item's own sources win.
        let s = [ip("10.9.9.9")];
        let l = parse_list(
            "232.1.1.1:1,10.0.0.1:1,232.1.1.2:1@10.0.0.7;10.0.0.8",
            0,
            &s,
        )
        .unwrap();
        assert_eq!(l[0].sources, s);
        assert!(l[1].sources.is_empty());
        assert_eq!(l[2].sources, [ip("10.0.0.7"), ip("10.0.0.8")]);
        assert_eq!(l[2].to_string(), "232.1.1.2:1@10.0.0.7;10.0.0.8");
    }

    #[test]
    fn bad_lists_say_what_to_write() {
        for (list, says) in [
            ("", "empty"),
            (" , ", "empty"),
            ("239.1.1.1:70000", "port"),
            ("239.1.1.1+x", "range"),
            ("239.1.1.1+300", "range"),
            ("host:7148", "IPv4"),
            ("[ff15::1:7148", "']'"),
            ("10.0.0.1@10.0.0.2", "not a multicast group"),
            ("232.1.1.1@[fe80::1]", "families"),
            ("239.1.1.1:5,239.1.1.1:5", "twice"),
            ("239.1.1.0+1,239.1.1.1", "twice"),
            ("0.0.0.0:5,239.1.1.1:5", "wildcard"),
            ("239.1.1.1:0,239.1.1.2:0", "free port"),
            ("255.255.255.254+3", "runs past"),
            ("239.0.0.0+200,238.0.0.0+200", "at most"),
        ] {
            let e = parse_list(list, 5004, &[]).unwrap_err();
            assert!(e.contains(says), "{list:?}: {e}");
        }
        // Different ports are different endpoints; 0.0.0.0 with another port is fine.
        assert_eq!(
            parse_list("239.1.1.1:5,239.1.1.1:6,0.0.0.0:7", 0, &[])
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            parse_list("239.0.0.0+255", 1, &[]).unwrap().len(),
            MAX_ENDPOINTS
        );
    }

    #[test]
    fn properties_give_one_endpoint_or_the_list_never_both() {
        let one = from_properties(None, Some("239.1.1.1"), Some("0.0.0.0"), 7148, &[]).unwrap();
        assert_eq!(one[0].to_string(), "239.1.1.1:7148");
        let any = from_properties(Some(" "), None, None, 9, &[]).unwrap();
        assert_eq!(any[0].socket_addr(), "0.0.0.0:9".parse().unwrap());
        let l = from_properties(
            Some("239.1.1.1+1"),
            Some("0.0.0.0"),
            Some("0.0.0.0"),
            9,
            &[],
        );
        assert_eq!(l.unwrap().len(), 2);
        let both = from_properties(Some("239.1.1.1"), Some("10.0.0.1"), Some("0.0.0.0"), 9, &[]);
        assert!(both.unwrap_err().contains("both address"));
        let s = [ip("10.0.0.9")];
        let e = from_properties(None, Some("10.0.0.1"), None, 9, &s).unwrap_err();
        assert!(e.contains("not a multicast group"), "{e}");
        assert!(from_properties(None, Some("nowhere"), None, 9, &[]).is_err());
    }

    #[test]
    fn the_table_finds_exact_then_wildcard_and_nothing_else() {
        let l = parse_list("239.1.1.0+9:7148,0.0.0.0:9000,[ff15::1]:7148", 0, &[]).unwrap();
        let t = EndpointTable::new(&l);
        for (i, e) in l
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.addr.is_unspecified())
        {
            assert_eq!(t.find(e.addr, e.port), Some(i), "{e}");
        }
        assert_eq!(t.find(ip("10.1.2.3"), 9000), Some(10));
        assert_eq!(t.find(ip("239.1.1.5"), 7149), None);
        assert_eq!(t.find(ip("239.1.1.10"), 7148), None);
        // An IPv4 datagram seen as IPv4-mapped IPv6 is the same endpoint.
        assert_eq!(t.find(ip("::ffff:239.1.1.3"), 7148), Some(3));
        let dst: PacketAddr = "239.1.1.2:7148".parse::<SocketAddr>().unwrap().into();
        assert_eq!(t.find_dest(&dst), Some(2));
    }

    #[test]
    fn a_tally_reaches_the_counters_once_per_batch() {
        let l = parse_list("239.1.1.0+2:7148", 0, &[]).unwrap();
        let c = EndpointCounters::new(&l);
        let mut t = Tally::new(l.len());
        t.count(2, 100);
        t.count(0, 10);
        t.count(2, 100);
        t.count(7, 1); // out of range: ignored
        assert!(
            c.snapshot().iter().all(|(_, p, _)| *p == 0),
            "not before add"
        );
        c.add(&mut t);
        c.add(&mut t); // a cleared tally adds nothing
        assert_eq!(
            c.snapshot(),
            [
                ("239.1.1.0:7148", 1, 10),
                ("239.1.1.1:7148", 0, 0),
                ("239.1.1.2:7148", 2, 200)
            ]
        );
        gst::init().unwrap();
        let v = c.to_value();
        let a = v.get::<gst::Caps>().unwrap();
        assert_eq!(a.size(), 3);
        let last = a.structure(2).unwrap();
        assert_eq!(last.name(), ENDPOINT_STRUCTURE);
        assert_eq!(last.get::<u64>("packets").unwrap(), 2);
        assert_eq!(last.get::<&str>("address").unwrap(), "239.1.1.2:7148");
        let mut s = gst::Structure::new_empty("firehose-stats");
        assert_eq!(read_stats(&s), None);
        s.set_value(STATS_FIELD, v);
        assert_eq!(
            read_stats(&s).unwrap()[2],
            ("239.1.1.2:7148".to_string(), 2, 200)
        );
    }
}
