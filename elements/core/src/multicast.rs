//! Multicast membership, one piece for every source: the distinct groups of an endpoint
//! list, a join on a socket (the kernel UDP sources' own, which then receives the group)
//! or on a socket of its own that receives nothing (the bypass sources, whose frames the
//! NIC hands elsewhere, but only once the host has joined: the join programs the NIC's
//! multicast filter and sends the IGMP or MLD report that makes switches forward the
//! group). One socket per group for the bypass sources, since a socket holds only
//! `net.ipv4.igmp_max_memberships` groups, 20 by default; dropping it leaves the group.
//! All joins use RFC 3678's protocol-independent requests, which name the interface by
//! index for both families, with or without SSM sources.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use std::os::fd::BorrowedFd;

use crate::endpoint::Endpoint;

/// Membership of one group (with its SSM sources), held by a socket.
#[derive(Debug)]
pub struct Membership {
    _socket: OwnedFd,
}

/// The distinct groups of `list` with their sources, in list order (a group listed on
/// several ports is joined once).
pub fn groups(list: &[Endpoint]) -> Vec<(IpAddr, &[IpAddr])> {
    let mut out: Vec<(IpAddr, &[IpAddr])> = Vec::new();
    for e in list.iter().filter(|e| e.addr.is_multicast()) {
        if !out.iter().any(|(g, _)| *g == e.addr) {
            out.push((e.addr, &e.sources));
        }
    }
    out
}

/// Joins every group of `list` on interface `ifindex`; an error names the group.
pub fn join_all(list: &[Endpoint], ifindex: u32) -> io::Result<Vec<Membership>> {
    groups(list)
        .into_iter()
        .map(|(g, sources)| {
            join(g, sources, ifindex).map_err(|e| {
                let what = if sources.is_empty() {
                    format!("joining multicast group {g}")
                } else {
                    format!("joining multicast group {g} from {sources:?}")
                };
                io::Error::new(e.kind(), format!("{what} failed ({e})"))
            })
        })
        .collect()
}

/// `addr` as a `sockaddr_storage`.
fn storage(addr: IpAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match SocketAddr::new(addr, 0) {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

/// `setsockopt(fd, level, name, value)`, `value` a plain C value of the type the option
/// takes.
pub fn set<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Joins `group` on interface `ifindex` (0: the one the kernel routes the group to) on
/// the socket `fd`, from each of `sources` if any (SSM), with the protocol-independent
/// requests of RFC 3678, which name the interface by index for both families. The
/// membership lasts as long as the socket.
pub fn join_on(
    fd: BorrowedFd<'_>,
    group: IpAddr,
    sources: &[IpAddr],
    ifindex: u32,
) -> io::Result<()> {
    let level = match group {
        IpAddr::V4(_) => libc::IPPROTO_IP,
        IpAddr::V6(_) => libc::IPPROTO_IPV6,
    };
    if sources.is_empty() {
        let req = libc::group_req {
            gr_interface: ifindex,
            gr_group: storage(group),
        };
        set(fd, level, libc::MCAST_JOIN_GROUP, &req)?;
    }
    for &s in sources {
        let req = libc::group_source_req {
            gsr_interface: ifindex,
            gsr_group: storage(group),
            gsr_source: storage(s),
        };
        set(fd, level, libc::MCAST_JOIN_SOURCE_GROUP, &req)?;
    }
    Ok(())
}

/// Joins `group` on `ifindex` (with `sources`: SSM) on a socket of its own, which
/// receives nothing itself: the membership, left when it drops.
pub fn join(group: IpAddr, sources: &[IpAddr], ifindex: u32) -> io::Result<Membership> {
    let domain = match group {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    join_on(fd.as_fd(), group, sources, ifindex)?;
    Ok(Membership { _socket: fd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_once_unicast_never() {
        let l = crate::endpoint::parse_list(
            "239.1.1.1:7148,239.1.1.1:7149,10.0.0.1:7148,232.1.1.1:5@10.0.0.9,[ff15::1]:5",
            0,
            &[],
        )
        .unwrap();
        let g = groups(&l);
        let names: Vec<String> = g.iter().map(|(a, _)| a.to_string()).collect();
        assert_eq!(names, ["239.1.1.1", "232.1.1.1", "ff15::1"]);
        assert_eq!(g[1].1, ["10.0.0.9".parse::<IpAddr>().unwrap()]);
    }

    /// A real join on `lo` (needs no privilege): the group shows in /proc/net/igmp while
    /// the membership lives, and is left when it drops.
    #[test]
    fn a_join_is_listed_by_the_kernel_until_dropped() {
        let listed = || {
            std::fs::read_to_string("/proc/net/igmp")
                .unwrap_or_default()
                .contains("4D0C4DEF") // 239.77.12.77, as the kernel prints it
        };
        let l = crate::endpoint::parse_list("239.77.12.77:7148", 0, &[]).unwrap();
        let lo = crate::netif::iface_index("lo").unwrap();
        let m = join_all(&l, lo).expect("join on lo");
        assert!(listed(), "group not in /proc/net/igmp after the join");
        drop(m);
        assert!(!listed(), "group still joined after the drop");
        let e = join_all(&l, 999_999).unwrap_err();
        assert!(e.to_string().contains("239.77.12.77"), "{e}");
    }
}
