//! Interruptible waits for receive threads: an eventfd [`Waker`] that an element's
//! `unlock` fires, and [`wait_readable`], which sleeps until a socket has data or the
//! waker fires. One implementation for every source that blocks in `poll` (kernel UDP,
//! AF_XDP).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd that interrupts [`wait_readable`].
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the current and every later wait return `true` until [`Waker::clear`].
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Consumes pending wake-ups.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }
}

/// Waits until `fd` is readable (`Ok(false)`), `waker` fires (`Ok(true)`), `timeout_ms`
/// passes (`Ok(false)`; -1 = no timeout) or a signal interrupts (`Ok(false)`): callers
/// try their read again and wait again when it finds nothing.
pub fn wait_readable(fd: RawFd, waker: &Waker, timeout_ms: i32) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live array of two pollfds.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(fds[1].revents & libc::POLLIN != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waker_interrupts_a_wait() {
        let w = Waker::new().unwrap();
        let idle = Waker::new().unwrap();
        let fd = idle.fd.as_raw_fd();
        assert!(!wait_readable(fd, &w, 0).unwrap());
        w.wake();
        assert!(wait_readable(fd, &w, 1000).unwrap());
        w.clear();
        assert!(!wait_readable(fd, &w, 0).unwrap());
    }
}
