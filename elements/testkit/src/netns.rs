//! A veth pair with one end in a private network namespace, for tests and benchmarks
//! that need a second host (AF_XDP, DPDK, anything bound to an interface).
//!
//! [`VethPair::create`] makes a namespace, a veth pair with the host end in the
//! caller's namespace and the peer end inside the new one, addresses both ends from a
//! private /30 and brings them up. Dropping the pair deletes the namespace, which also
//! deletes both veth ends; a panicking test therefore still cleans up. Names carry the
//! process id, so parallel tests and leftovers from a killed run never collide.
//!
//! Needs root (`CAP_NET_ADMIN`) and `ip` from iproute2. Never sends anywhere but the
//! pair itself.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// One veth pair: `host_if` in the caller's namespace, `peer_if` inside `ns`.
#[derive(Debug)]
pub struct VethPair {
    /// The namespace's name (as for `ip netns exec`).
    pub ns: String,
    /// The veth end in the caller's namespace.
    pub host_if: String,
    /// The veth end inside [`Self::ns`].
    pub peer_if: String,
    /// `host_if`'s IPv4 address.
    pub host_ip: Ipv4Addr,
    /// `peer_if`'s IPv4 address.
    pub peer_ip: Ipv4Addr,
    /// `host_if`'s MAC address.
    pub host_mac: [u8; 6],
    /// `peer_if`'s MAC address.
    pub peer_mac: [u8; 6],
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip args…`, failing with its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Reads an interface's MAC address with `ip [-n ns] -o link show dev ifname` (sysfs
/// shows the namespace that mounted it, not the calling thread's).
fn mac_of(ns: Option<&str>, ifname: &str) -> io::Result<[u8; 6]> {
    let mut c = Command::new("ip");
    if let Some(ns) = ns {
        c.args(["-n", ns]);
    }
    let out = c.args(["-o", "link", "show", "dev", ifname]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| io::Error::other(format!("no MAC for {ifname}: {text:?}")))?;
    firehose_core::frame::build::parse_mac(hex)
        .ok_or_else(|| io::Error::other(format!("bad MAC {hex:?} for {ifname}")))
}

impl VethPair {
    /// Creates the namespace and the pair. `tag` (one or two letters) tells pairs of
    /// different tests apart in `ip link` output; the names stay within 15 bytes.
    pub fn create(tag: &str) -> io::Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag: String = tag
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(2)
            .collect();
        let base = format!("fh{tag}{}{n}", pid % 100_000);
        let ns = format!("{base}ns");
        let host_if = format!("{base}h");
        let peer_if = format!("{base}p");
        // A private /30 in 10.128.0.0/9 from (pid, n); collisions between live processes
        // are harmless anyway, the addresses live on different links.
        let k = (pid.wrapping_mul(64) + n) % (1 << 21);
        let net = u32::from(Ipv4Addr::new(10, 128, 0, 0)) + k * 4;
        let host_ip = Ipv4Addr::from(net + 1);
        let peer_ip = Ipv4Addr::from(net + 2);

        ip(&["netns", "add", &ns])?;
        let mut pair = VethPair {
            ns,
            host_if,
            peer_if,
            host_ip,
            peer_ip,
            host_mac: [0; 6],
            peer_mac: [0; 6],
        };
        // From here on, Drop removes whatever was made.
        ip(&[
            "link",
            "add",
            &pair.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &pair.peer_if,
            "netns",
            &pair.ns,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{host_ip}/30"),
            "dev",
            &pair.host_if,
        ])?;
        ip(&["link", "set", &pair.host_if, "up"])?;
        let ns_ip = |args: &[&str]| -> io::Result<()> {
            let mut full = vec!["-n", pair.ns.as_str()];
            full.extend_from_slice(args);
            ip(&full)
        };
        ns_ip(&[
            "addr",
            "add",
            &format!("{peer_ip}/30"),
            "dev",
            &pair.peer_if,
        ])?;
        ns_ip(&["link", "set", &pair.peer_if, "up"])?;
        ns_ip(&["link", "set", "lo", "up"])?;
        pair.host_mac = mac_of(None, &pair.host_if)?;
        pair.peer_mac = mac_of(Some(&pair.ns), &pair.peer_if)?;
        Ok(pair)
    }

    /// Runs `f` on a new thread that has joined the namespace, and returns its result.
    /// Sockets made inside `f` live in the namespace even after `f` returns.
    pub fn in_ns<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let file = std::fs::File::open(format!("/var/run/netns/{}", self.ns))?;
        std::thread::spawn(move || -> io::Result<T> {
            // SAFETY: setns only changes this (new, short-lived) thread's network
            // namespace; `file` is an open namespace file descriptor.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("thread in the namespace panicked"))?
    }

    /// Gives the peer (in the namespace) a permanent neighbour entry for the host end:
    /// a receiver that takes frames off the host interface (AF_XDP, DPDK) leaves no
    /// kernel there to answer ARP, and the first datagrams need not wait for it.
    pub fn pin_host_neighbour(&self) -> io::Result<()> {
        ip(&[
            "-n",
            &self.ns,
            "neigh",
            "replace",
            &self.host_ip.to_string(),
            "lladdr",
            &firehose_core::frame::build::format_mac(&self.host_mac),
            "dev",
            &self.peer_if,
            "nud",
            "permanent",
        ])
    }

    /// Sets both ends' MTU, e.g. 9000 for jumbo frames (a veth carries up to 65535).
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        let mtu = mtu.to_string();
        ip(&["link", "set", "dev", &self.host_if, "mtu", &mtu])?;
        ip(&[
            "-n",
            &self.ns,
            "link",
            "set",
            "dev",
            &self.peer_if,
            "mtu",
            &mtu,
        ])
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting the namespace destroys the peer end, and with it the host end.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_datagram_crosses_the_pair_and_everything_is_removed() {
        let pair = VethPair::create("t").expect("needs root and iproute2");
        let rx = UdpSocket::bind((pair.host_ip, 0)).unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let dst = rx.local_addr().unwrap();
        let peer_ip = pair.peer_ip;
        pair.in_ns(move || {
            let tx = UdpSocket::bind((peer_ip, 0)).unwrap();
            tx.send_to(b"over the veth", dst).unwrap();
        })
        .unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = rx.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"over the veth");
        assert_eq!(from.ip(), std::net::IpAddr::V4(pair.peer_ip));
        assert_ne!(pair.host_mac, pair.peer_mac);
        let (ns, host_if) = (pair.ns.clone(), pair.host_if.clone());
        drop(pair);
        assert!(!std::path::Path::new(&format!("/var/run/netns/{ns}")).exists());
        assert!(!std::path::Path::new(&format!("/sys/class/net/{host_if}")).exists());
    }
}
