//! Receive buffers for tests' own sockets that do not depend on `net.core.rmem_max`.
//!
//! A fresh machine caps `SO_RCVBUF` at about 416 KiB (rmem_max 212992), a few
//! milliseconds of a fast test stream: a test's reader thread that is descheduled that
//! long on a loaded CI machine would see loss the code under test did not cause. With
//! CAP_NET_ADMIN (root, outside a user namespace), `SO_RCVBUFFORCE` goes past the cap, as
//! the elements' own sockets do.

use std::io;
use std::os::fd::AsRawFd;

/// Asks for a receive buffer of `bytes` on `sock`, past `net.core.rmem_max` where the
/// process may (CAP_NET_ADMIN), else up to it, and returns what the kernel granted (twice
/// the usable size, as the kernel reports it).
pub fn force_recv_buffer(sock: &impl AsRawFd, bytes: usize) -> io::Result<usize> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let fd = sock.as_raw_fd();
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads one c_int from a valid pointer of the length given.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&want as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the c_int it is given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(got).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_granted_and_reported() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let got = force_recv_buffer(&s, 1 << 20).unwrap();
        assert!(got >= 4096, "granted {got}");
        if has_net_admin() {
            assert!(
                got >= 1 << 20,
                "CAP_NET_ADMIN is granted past rmem_max: {got}"
            );
        }
    }

    /// Whether this process has CAP_NET_ADMIN (bit 12 of its effective set).
    fn has_net_admin() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 12) != 0)
    }
}
