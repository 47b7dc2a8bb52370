//! The sockets of a kernel-UDP endpoint list: the fewest that receive every endpoint.
//!
//! One socket per (IP family, port). A port with one endpoint binds that address (a
//! multicast group binds the group, so the kernel delivers nothing else to it and no
//! datagram needs its destination read). A port with several binds the wildcard, joins
//! each group and asks for each datagram's destination (`IP_PKTINFO`), which
//! [`EndpointTable`](firehose_core::endpoint::EndpointTable) turns into the endpoint: what
//! the port receives that is not listed (unicast to another local address, a group
//! joined by another socket of this host) is counted as filtered. `IP_MULTICAST_ALL` is
//! switched off so that the kernel delivers only the groups this socket joined.
//!
//! So a stream of 8 groups on one port — the usual SPEAD layout — is one socket and one
//! `recvmmsg` per batch, whatever the number of groups.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;

use firehose_core::endpoint::Endpoint;
use firehose_core::multicast;
use firehose_core::netif::iface_index;
use socket2::{Domain, Protocol, Socket, Type};

use crate::recv::{OpenError, OpenReport, SocketConfig};

/// One socket of the list and what a datagram on it was sent to when the kernel does
/// not say.
#[derive(Debug)]
pub struct PortSocket {
    /// The socket, bound and joined, not yet non-blocking.
    pub sock: Socket,
    /// The bound port.
    pub port: u16,
    /// The bound address unless it is a wildcard: the destination of every datagram.
    pub bound: Option<IpAddr>,
    /// The endpoint every datagram belongs to, when the socket has exactly one; `None`:
    /// look the destination up.
    pub endpoint: Option<u16>,
}

/// `IP_MULTICAST_ALL` and `IPV6_MULTICAST_ALL` (Linux; not in every libc): off, a socket
/// bound to a wildcard receives only the groups it joined itself.
const IP_MULTICAST_ALL: i32 = 49;
const IPV6_MULTICAST_ALL: i32 = 29;

/// Opens the sockets of `cfg.endpoints` (at least one), each with the receive buffer,
/// reuse and joins `cfg` asks for. `report` gets the first socket's bound address and
/// the buffer granted (the smallest, with a warning if capped).
pub fn open_sockets(
    cfg: &SocketConfig,
    report: &mut OpenReport,
) -> Result<Vec<PortSocket>, OpenError> {
    if cfg.endpoints.is_empty() {
        return Err(OpenError("no endpoint to receive on".into()));
    }
    if let Some(name) = &cfg.multicast_iface {
        iface_index(name).map_err(OpenError)?;
    }
    // Groups of endpoints by (family, port), in the list's order.
    let mut groups: Vec<(bool, u16, Vec<usize>)> = Vec::new();
    for (i, e) in cfg.endpoints.iter().enumerate() {
        let v4 = e.addr.is_ipv4();
        match groups.iter_mut().find(|(f, p, _)| *f == v4 && *p == e.port) {
            Some((_, _, members)) => members.push(i),
            None => groups.push((v4, e.port, vec![i])),
        }
    }
    let both_families = |port: u16| groups.iter().filter(|(_, p, _)| *p == port).count() > 1;
    let mut out = Vec::with_capacity(groups.len());
    for (v4, port, members) in &groups {
        let first = &cfg.endpoints[members[0]];
        let single = members.len() == 1;
        let ip = if single {
            first.addr
        } else if *v4 {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        };
        let sock = bind(
            cfg,
            SocketAddr::new(ip, *port),
            both_families(*port),
            report,
        )?;
        for &m in members {
            let e = &cfg.endpoints[m];
            if e.addr.is_multicast() {
                join_multicast(&sock, e, cfg)?;
            }
        }
        if !single {
            let _ = if *v4 {
                setsockopt_int(&sock, libc::IPPROTO_IP, IP_MULTICAST_ALL, 0)
            } else {
                setsockopt_int(&sock, libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
            };
        }
        // Each datagram's destination, asked of the kernel only where the bind does not
        // say it: a wildcard bind receives on several addresses (recordings write the
        // real one, the endpoint table finds the endpoint); a bind to one address, or to
        // a multicast group, is that address for every datagram, and a control message
        // per datagram would cost every packet for nothing. An IPv6 socket takes IPv4
        // datagrams too.
        if ip.is_unspecified() {
            let _ = setsockopt_int(&sock, libc::IPPROTO_IP, libc::IP_PKTINFO, 1);
            if ip.is_ipv6() {
                let _ = setsockopt_int(&sock, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1);
            }
        }
        let local = sock.local_addr().ok().and_then(|a| a.as_socket());
        if report.local.is_none() {
            report.local = local;
        }
        out.push(PortSocket {
            port: local.map_or(*port, |a| a.port()),
            bound: (!ip.is_unspecified()).then_some(ip),
            endpoint: single.then_some(members[0] as u16),
            sock,
        });
    }
    Ok(out)
}

/// A UDP socket bound to `bind`, with `cfg`'s buffer and reuse; `v6only` keeps an IPv6
/// wildcard off IPv4 where the list has an IPv4 socket on the same port.
fn bind(
    cfg: &SocketConfig,
    bind: SocketAddr,
    v6only: bool,
    report: &mut OpenReport,
) -> Result<Socket, OpenError> {
    let sock = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| OpenError(format!("could not create a UDP socket: {e}")))?;
    if cfg.reuse {
        let _ = sock.set_reuse_address(true);
    }
    if v6only && bind.is_ipv6() {
        let _ = sock.set_only_v6(true);
    }
    let mut mine = OpenReport::default();
    set_buffer(&sock, cfg.buffer_size, &mut mine);
    if report.buffer_granted == 0 || mine.buffer_granted < report.buffer_granted {
        report.buffer_granted = mine.buffer_granted;
    }
    if report.buffer_warning.is_none() {
        report.buffer_warning = mine.buffer_warning;
    }
    let ip = bind.ip();
    let port = bind.port();
    sock.bind(&bind.into()).map_err(|e| {
        OpenError(if e.kind() == io::ErrorKind::AddrInUse {
            format!(
                "could not bind {bind}: port {port} is in use by another socket. Find it with \
                 `ss -ulpn 'sport = :{port}'`, stop it or pick another port (port=0 picks a free one)"
            )
        } else if e.kind() == io::ErrorKind::AddrNotAvailable {
            format!("could not bind {bind}: {ip} is not an address of this machine ({e})")
        } else {
            format!("could not bind {bind}: {e}")
        })
    })?;
    Ok(sock)
}

fn join_multicast(sock: &Socket, e: &Endpoint, cfg: &SocketConfig) -> Result<(), OpenError> {
    let ifindex = match &cfg.multicast_iface {
        Some(name) => iface_index(name).map_err(OpenError)?,
        None => 0,
    };
    // The family of every source was checked against its group's when the list was made.
    multicast::join_on(sock.as_fd(), e.addr, &e.sources, ifindex).map_err(|err| {
        OpenError(format!(
            "could not join multicast group {}{}: {err}. Check that the interface exists, \
             is up and has multicast enabled (`ip link show`), and has a route for the group.",
            e.addr,
            cfg.multicast_iface
                .as_ref()
                .map(|i| format!(" on {i}"))
                .unwrap_or_default()
        ))
    })
}

/// Sets an int socket option.
pub fn setsockopt_int(sock: &Socket, level: i32, name: i32, value: i32) -> io::Result<()> {
    multicast::set(sock.as_fd(), level, name, &value)
}

/// Asks for a receive buffer of `want` bytes on `sock`: `SO_RCVBUF`, capped by
/// `net.core.rmem_max`, then, if that granted less, `SO_RCVBUFFORCE`, which goes past the
/// cap with CAP_NET_ADMIN (root outside a user namespace). Returns what the kernel granted
/// (twice the usable size, as the kernel reports it). Tests' own receiving sockets use it
/// too, so that a loaded CI machine with a stock rmem_max loses nothing they did not.
pub fn grow_recv_buffer(sock: &Socket, want: usize) -> usize {
    let _ = sock.set_recv_buffer_size(want);
    let mut got = sock.recv_buffer_size().unwrap_or(0);
    if got < want {
        let v = i32::try_from(want).unwrap_or(i32::MAX);
        if setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v).is_ok() {
            got = sock.recv_buffer_size().unwrap_or(0);
        }
    }
    got
}

fn set_buffer(sock: &Socket, want: usize, report: &mut OpenReport) {
    if want == 0 {
        report.buffer_granted = sock.recv_buffer_size().unwrap_or(0);
        return;
    }
    let got = grow_recv_buffer(sock, want);
    report.buffer_granted = got;
    // The kernel reports twice the usable size it granted.
    if got < want {
        report.buffer_warning = Some(format!(
            "buffer-size={want} was capped by the kernel to {} bytes; packets may be dropped at \
             high rates. Raise the limit as root: sysctl -w net.core.rmem_max={want}",
            got / 2
        ));
    }
}
