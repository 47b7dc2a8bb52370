//! Opening and configuring the sender's socket: address families, binding, TTLs,
//! multicast options and the send buffer. Errors say what failed and how to fix it.

use std::io;
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::SenderConfig;
use crate::sockaddr::iface_ipv4;
use firehose_core::netif::iface_index;

/// Opens a non-blocking UDP socket configured by `cfg`; returns it with the
/// destinations as addresses of its family (IPv4 ones v4-mapped on an IPv6 socket).
pub(super) fn open(cfg: &SenderConfig) -> Result<(Socket, Vec<SockAddr>), String> {
    if cfg.destinations.is_empty() {
        return Err("no destination: set host and port, or clients".into());
    }
    let any_v4 = cfg.destinations.iter().any(SocketAddr::is_ipv4);
    let any_v6 = cfg.destinations.iter().any(SocketAddr::is_ipv6);
    let v6 = any_v6 || cfg.bind.is_some_and(|b| b.is_ipv6());
    // One socket serves every destination: a v6 socket reaches IPv4 destinations as
    // v4-mapped addresses, but only from an unbound or v4-mapped source address.
    if let Some(b) = cfg.bind.filter(|b| !b.ip().is_unspecified()) {
        let other = if b.is_ipv6() { any_v4 } else { any_v6 };
        if other {
            return Err(format!(
                "bind-address {} and the destinations {:?} mix IPv4 and IPv6: bind an \
                     address of the destinations' family, or none",
                b.ip(),
                cfg.destinations
            ));
        }
    }
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| format!("cannot create a UDP socket: {e}"))?;
    let opt = |what: &str, r: io::Result<()>| r.map_err(|e| format!("cannot set {what}: {e}"));
    if v6 {
        // Dual stack, so IPv4 clients can share the socket as v4-mapped addresses.
        opt("IPV6_V6ONLY off", socket.set_only_v6(false))?;
    }
    let map = |a: SocketAddr| -> SockAddr {
        match a {
            SocketAddr::V4(a4) if v6 => {
                SocketAddrV6::new(a4.ip().to_ipv6_mapped(), a4.port(), 0, 0).into()
            }
            _ => a.into(),
        }
    };
    if let Some(b) = cfg.bind {
        socket.bind(&map(b)).map_err(|e| bind_error(b, &e))?;
    }
    if any_v4 {
        opt("ttl", socket.set_ttl_v4(cfg.ttl))?;
        opt("ttl-mc", socket.set_multicast_ttl_v4(cfg.ttl_mc))?;
        opt("loop", socket.set_multicast_loop_v4(cfg.multicast_loop))?;
    }
    if v6 {
        opt("ttl (hop limit)", socket.set_unicast_hops_v6(cfg.ttl))?;
        opt(
            "ttl-mc (hop limit)",
            socket.set_multicast_hops_v6(cfg.ttl_mc),
        )?;
        opt("loop", socket.set_multicast_loop_v6(cfg.multicast_loop))?;
    }
    if let Some(name) = cfg.multicast_iface.as_deref().filter(|n| !n.is_empty()) {
        set_multicast_iface(&socket, name, any_v4, any_v6)?;
    }
    if cfg.send_buffer > 0 {
        set_send_buffer(&socket, cfg.send_buffer)?;
    }
    // Non-blocking, so a full socket buffer turns into a wait that can be interrupted.
    opt("O_NONBLOCK", socket.set_nonblocking(true))?;
    let dests = cfg.destinations.iter().map(|&a| map(a)).collect();
    Ok((socket, dests))
}

/// The error of a failed bind, with the likely fix.
fn bind_error(addr: SocketAddr, e: &io::Error) -> String {
    let fix = match e.kind() {
        io::ErrorKind::AddrInUse => {
            "; another socket uses it: choose another bind-port, or 0 for any"
        }
        io::ErrorKind::AddrNotAvailable => {
            "; no interface here has that address (see `ip addr`): fix bind-address"
        }
        io::ErrorKind::PermissionDenied => "; ports below 1024 need root or CAP_NET_BIND_SERVICE",
        _ => "",
    };
    format!("cannot bind to {addr}: {e}{fix}")
}

fn set_multicast_iface(socket: &Socket, name: &str, v4: bool, v6: bool) -> Result<(), String> {
    let index = iface_index(name)?;
    let err = |e: io::Error| format!("cannot send multicast on interface '{name}': {e}");
    if v4 {
        match iface_ipv4(name) {
            Some(addr) => socket.set_multicast_if_v4(&addr).map_err(err)?,
            None => {
                // No IPv4 address on the interface: name it by index (ip_mreqn).
                let mreqn = libc::ip_mreqn {
                    imr_multiaddr: libc::in_addr { s_addr: 0 },
                    imr_address: libc::in_addr { s_addr: 0 },
                    imr_ifindex: index as libc::c_int,
                };
                // SAFETY: setsockopt on our open socket with a valid ip_mreqn and its size.
                let rc = unsafe {
                    libc::setsockopt(
                        socket.as_raw_fd(),
                        libc::IPPROTO_IP,
                        libc::IP_MULTICAST_IF,
                        (&mreqn as *const libc::ip_mreqn).cast(),
                        std::mem::size_of::<libc::ip_mreqn>() as libc::socklen_t,
                    )
                };
                if rc != 0 {
                    return Err(err(io::Error::last_os_error()));
                }
            }
        }
    }
    if v6 {
        socket.set_multicast_if_v6(index).map_err(err)?;
    }
    Ok(())
}

/// Sets `SO_SNDBUF`, forcing past `net.core.wmem_max` when allowed (root); a smaller
/// result is not an error (the element warns), since sending still works.
fn set_send_buffer(socket: &Socket, size: usize) -> Result<(), String> {
    socket
        .set_send_buffer_size(size)
        .map_err(|e| format!("cannot set buffer-size {size}: {e}"))?;
    if socket.send_buffer_size().unwrap_or(0) < size {
        let val = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
        // SAFETY: setsockopt on our open socket with a valid pointer to a c_int; failure
        // (no CAP_NET_ADMIN) leaves the earlier, smaller size in place.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    Ok(())
}
