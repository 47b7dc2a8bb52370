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
/// settings (ports, address).
#[derive(Clone, Debug)]
pub struct Config {
    /// Network interface to capture on.
    pub interface: String,
    /// Receive queue to bind.
    pub queue: u32,
    /// UDP destination ports to redirect (at least one, none zero).
    pub ports: Vec<u16>,
    /// Destination address to redirect, or `None` for any.
    pub address: Option<IpAddr>,
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
    /// The datagrams the program redirects (checked again per frame).
    pub filter: UdpFilter,
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
        filter: UdpFilter {
            ports: cfg.ports.clone(),
            address: cfg.address,
        },
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

/// `address` as a filter: `None` for any (empty, `0.0.0.0`, `::`).
pub fn parse_address(address: &str) -> Result<Option<IpAddr>, String> {
    match address.trim() {
        "" | "0.0.0.0" | "::" => Ok(None),
        a => a.parse::<IpAddr>().map(Some).map_err(|_| {
            format!(
                "address {a:?} is not an IP address: set address to the stream's \
                 destination IPv4 or IPv6 address, or 0.0.0.0 for any"
            )
        }),
    }
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

    #[test]
    fn any_address_is_none_and_bad_ones_say_what_to_set() {
        assert_eq!(parse_address("0.0.0.0").unwrap(), None);
        assert_eq!(parse_address(" :: ").unwrap(), None);
        assert_eq!(
            parse_address("10.0.0.1").unwrap(),
            Some("10.0.0.1".parse().unwrap())
        );
        assert!(parse_address("ten").unwrap_err().contains("set address"));
    }
}
