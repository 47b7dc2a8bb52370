//! The AF_XDP device, free of GStreamer types: from a [`Config`] to a running capture
//! ([`Capture`]: UMEM, XSKMAP, XDP program, bound socket, BPF link and the slot ring).
//!
//! [`open`] runs the set-up steps of [`setup`] in order — allocate the UMEM, create the
//! XSKMAP, load the program, open and bind the socket, insert it in the map, post every
//! frame to the fill ring, attach — each of which turns its failure into a
//! [`SetupError`] that says what to do. The element maps settings to a [`Config`] and
//! the error's [`ErrorKind`] to a GStreamer error; the receive loop is [`receive`].

mod error;
pub mod jumbo;
pub mod receive;
mod setup;

use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use firehose_core::endpoint::{Endpoint, EndpointCounters, MAX_ENDPOINTS};
use firehose_core::frame::accept::UdpFilter;
use firehose_core::memory::HugepagePolicy;
use firehose_core::ring::{ReceiveRing, SharedRing};
use firehose_core::sync::lock;
use firehose_core::MemoryRegion;

pub use error::{ErrorKind, SetupError};

use crate::xsk::{FillRing, XskSocket};

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native if the driver supports it, else generic.
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`), or fail.
    Native,
    /// On the skb (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

/// How the AF_XDP socket binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// `XDP_ZEROCOPY`, falling back to `XDP_COPY`.
    Auto,
    /// `XDP_ZEROCOPY` or fail.
    ZeroCopy,
    /// `XDP_COPY`.
    Copy,
}

/// Everything [`open`] needs, already validated by the caller where it is plain
/// settings (the endpoints: [`check_endpoints`]).
#[derive(Clone, Debug)]
pub struct Config {
    /// Network interface to capture on.
    pub interface: String,
    /// Receive queue to bind.
    pub queue: u32,
    /// The endpoints to redirect (at least one, no port zero; an unspecified address
    /// is any address); multicast groups among them are joined on the interface.
    pub endpoints: Vec<Endpoint>,
    /// Where the program runs.
    pub attach: AttachMode,
    /// How the socket binds.
    pub bind: BindMode,
    /// `SO_BUSY_POLL` microseconds (0 = no busy polling).
    pub busy_poll: u32,
    /// `SO_BUSY_POLL_BUDGET` packets.
    pub busy_poll_budget: u32,
    /// UMEM frames (a power of two).
    pub frames: u32,
    /// Bytes per frame (2048 or 4096).
    pub frame_size: u32,
    /// Most frames per batch (the ring's post batch).
    pub batch_size: u32,
    /// What backs the UMEM.
    pub hugepages: HugepagePolicy,
}

/// Something [`open`] tells its caller to log: a warning a user should see, or a
/// debug line (a fallback that was expected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A degraded set-up the user can fix (no hugepages, no busy polling).
    Warning(String),
    /// A fallback taken under an `auto` setting.
    Debug(String),
}

/// A running capture. Field order is drop order: the link goes first, so the program is
/// detached before the socket it redirects to is closed.
pub struct Capture {
    /// The BPF link; `None` detaches the program (after a fatal error).
    pub link: Option<OwnedFd>,
    /// The bound socket and its rings.
    pub sock: XskSocket,
    _prog: OwnedFd,
    _map: OwnedFd,
    /// The UMEM.
    pub region: Arc<MemoryRegion>,
    /// Slot accounting of the UMEM frames.
    pub ring: SharedRing,
    /// The datagrams the program redirects (checked again per frame, which finds each
    /// datagram's endpoint).
    pub filter: UdpFilter,
    /// The multicast groups joined; dropped after the link, so the group is left once
    /// nothing is redirected any more.
    _memberships: Vec<firehose_core::multicast::Membership>,
    /// Packets and bytes per endpoint (in `Config::endpoints` order), which the receive
    /// loop adds to once per batch.
    pub endpoints: Arc<EndpointCounters>,
    /// `native` or `generic`.
    pub xdp_mode: &'static str,
    /// `zero-copy` or `copy`.
    pub bind_mode: &'static str,
    /// The interface's index when the capture started.
    pub ifindex: u32,
    /// Datagrams longer than a frame arrive in several (the interface's MTU needs
    /// it): join them with [`jumbo`].
    pub multi_buffer: bool,
}

/// Sets up the capture `cfg` describes; `notice` receives what should be logged.
pub fn open(cfg: &Config, notice: &mut dyn FnMut(Notice)) -> Result<Capture, SetupError> {
    let ifindex = setup::interface(cfg)?;
    let queues = setup::check_queue(cfg)?;
    setup::check_frames(cfg)?;
    // Frames longer than one UMEM frame holds (jumbo frames) arrive in several: the
    // program, socket and UMEM must allow it (multi-buffer mode, see `jumbo`).
    let mtu = setup::mtu(cfg);
    let multi_buffer = !jumbo::Geometry::holds_mtu(cfg.frame_size, mtu);
    let region = Arc::new(setup::umem(cfg, multi_buffer, notice)?);
    let map = setup::xskmap(queues.max(cfg.queue + 1))?;
    let prog = setup::program(cfg, &map, multi_buffer)?;
    let mut sock = setup::socket(cfg, ifindex, &region, multi_buffer.then_some(mtu), notice)?;
    setup::busy_poll(cfg, &sock, notice);
    setup::insert(cfg, &map, &sock)?;
    let ring: SharedRing = Arc::new(Mutex::new(ReceiveRing::new(
        cfg.frames,
        cfg.frame_size as usize,
        cfg.batch_size as usize,
    )));
    let mut post = Vec::with_capacity(cfg.frames as usize);
    refill(&mut lock(&ring), &mut sock.fill, &mut post);
    // Attach last: nothing is redirected before the socket can take it.
    let (link, xdp_mode) = setup::attach(cfg, ifindex, &prog, notice)?;
    // The groups last of all: the switch starts sending once the program takes it.
    let memberships = firehose_core::multicast::join_all(&cfg.endpoints, ifindex).map_err(|e| {
        SetupError::new(
            ErrorKind::Open,
            format!(
                "{e} on {}: check that the interface is up (and, for IPv4, has an \
                 address), and that net.ipv4.igmp_max_memberships allows the groups",
                cfg.interface
            ),
        )
    })?;
    let bind_mode = if sock.zero_copy() {
        "zero-copy"
    } else {
        "copy"
    };
    Ok(Capture {
        link: Some(link),
        sock,
        _prog: prog,
        _map: map,
        region,
        ifindex,
        ring,
        filter: UdpFilter::endpoints(&cfg.endpoints),
        _memberships: memberships,
        endpoints: Arc::new(EndpointCounters::new(&cfg.endpoints)),
        xdp_mode,
        bind_mode,
        multi_buffer,
    })
}

impl Capture {
    /// Detaches the program, closes the socket and takes back the frames the kernel
    /// held; frames lent downstream come back when their buffers go.
    pub fn close(mut self) {
        self.link = None;
        let ring = self.ring.clone();
        drop(self);
        lock(&ring).reclaim_posted();
    }
}

/// Moves free slots to the fill ring, a batch at a time, as long as it has room;
/// `post` is a reused list (one allocation for the life of the capture).
pub fn refill(ring: &mut ReceiveRing, fill: &mut FillRing, post: &mut Vec<u32>) {
    loop {
        post.clear();
        if ring.take_for_post(post) == 0 {
            return;
        }
        let pushed = fill.push(post.iter().map(|&s| ring.offset(s) as u64)) as usize;
        if pushed < post.len() {
            // Cannot happen (the fill ring has an entry for every frame), but a slot
            // that is not in the ring must not count as posted.
            let _ = ring.unpost(&post[pushed..]);
            return;
        }
    }
}

/// Receive queues of `iface` per sysfs, or `None` if sysfs does not say.
fn rx_queues(iface: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{iface}/queues")).ok()?;
    let n = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    (n > 0).then_some(n as u32)
}

/// `port` plus the comma-separated `extra`, deduplicated, each from 1 to 65535.
pub fn parse_ports(port: u32, extra: Option<&str>) -> Result<Vec<u16>, String> {
    let mut ports = vec![];
    let words = std::iter::once(port.to_string())
        .chain(extra.unwrap_or("").split(',').map(|w| w.trim().to_string()))
        .filter(|w| !w.is_empty());
    for w in words {
        match w.parse::<u16>() {
            Ok(p) if p != 0 => {
                if !ports.contains(&p) {
                    ports.push(p)
                }
            }
            _ => {
                return Err(format!(
                    "port {w:?} is not a UDP destination port: set port (and extra-ports) \
                     to ports from 1 to 65535 (port=0 cannot be redirected: fhxdpsrc \
                     captures the ports of a stream, it does not bind a free one)"
                ))
            }
        }
    }
    Ok(ports)
}

/// The endpoints of the settings: `list` (the `endpoints` property, or `address` and
/// `port`), or with `extra_ports` the one address of `list` on `port` and each extra
/// port. `listed`: whether `list` came from the `endpoints` property, which names its
/// ports itself (extra-ports beside it is refused).
pub fn with_extra_ports(
    list: Vec<Endpoint>,
    listed: bool,
    port: u32,
    extra_ports: Option<&str>,
) -> Result<Vec<Endpoint>, String> {
    let Some(extra) = extra_ports.filter(|e| !e.trim().is_empty()) else {
        return Ok(list);
    };
    if listed {
        return Err(format!(
            "both endpoints and extra-ports ({extra}) are set: give every port in \
             endpoints (ADDRESS:PORT, e.g. 239.10.0.0:7148,239.10.0.0:7149) and leave \
             extra-ports unset"
        ));
    }
    let addr = list
        .first()
        .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |e| e.addr);
    Ok(parse_ports(port, Some(extra))?
        .into_iter()
        .map(|port| Endpoint {
            addr,
            port,
            sources: Vec::new(),
        })
        .collect())
}

/// Checks what the XDP program can redirect: a port for every endpoint, at most
/// [`MAX_ENDPOINTS`].
pub fn check_endpoints(list: &[Endpoint]) -> Result<(), String> {
    if list.is_empty() || list.len() > MAX_ENDPOINTS {
        return Err(format!(
            "{} endpoints: fhxdpsrc takes 1 to {MAX_ENDPOINTS}",
            list.len()
        ));
    }
    if let Some(e) = list.iter().find(|e| e.port == 0) {
        return Err(if list.len() == 1 {
            "port 0 is not a UDP destination port fhxdpsrc can redirect: set port to the \
             stream's port, 1 to 65535 (port=0 cannot be redirected: fhxdpsrc captures the \
             ports of a stream, it does not bind a free one)"
                .to_string()
        } else {
            format!(
                "endpoint {e} has port 0, which cannot be redirected: give every endpoint \
                 its UDP port (ADDRESS:PORT), or set port"
            )
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_parsed_deduplicated_and_zero_is_refused() {
        assert_eq!(parse_ports(7148, None).unwrap(), vec![7148]);
        assert_eq!(
            parse_ports(7148, Some("7149, 7148,8000")).unwrap(),
            vec![7148, 7149, 8000]
        );
        let e = parse_ports(0, None).unwrap_err();
        assert!(e.contains("port=0"), "{e}");
        assert!(parse_ports(7148, Some("x")).is_err());
        assert!(parse_ports(7148, Some("70000")).is_err());
    }

    fn ep(s: &str) -> Vec<Endpoint> {
        firehose_core::endpoint::parse_list(s, 7148, &[]).unwrap()
    }

    #[test]
    fn extra_ports_put_the_address_on_each_port_and_refuse_a_list() {
        let one = ep("239.1.1.1:7148");
        let l = with_extra_ports(one.clone(), false, 7148, Some("7149,7150")).unwrap();
        let names: Vec<String> = l.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            names,
            ["239.1.1.1:7148", "239.1.1.1:7149", "239.1.1.1:7150"]
        );
        assert_eq!(
            with_extra_ports(one.clone(), false, 7148, Some(" ")).unwrap(),
            one
        );
        let e = with_extra_ports(ep("239.1.1.0+1"), true, 7148, Some("7149")).unwrap_err();
        assert!(e.contains("both endpoints and extra-ports"), "{e}");
        assert!(with_extra_ports(ep("239.1.1.0+1"), true, 7148, None).is_ok());
        assert!(with_extra_ports(one, false, 7148, Some("x")).is_err());
    }

    #[test]
    fn endpoints_need_ports() {
        assert!(check_endpoints(&ep("239.1.1.0+3:7148,10.0.0.1:9")).is_ok());
        let e = check_endpoints(&ep("0.0.0.0:0")).unwrap_err();
        assert!(e.contains("port=0"), "{e}");
        let mut l = ep("239.1.1.0+1:7148");
        l[1].port = 0;
        let e = check_endpoints(&l).unwrap_err();
        assert!(e.contains("endpoint 239.1.1.1:0 has port 0"), "{e}");
        assert!(check_endpoints(&[]).is_err());
    }
}
