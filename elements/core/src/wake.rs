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

    /// A `poll` entry that becomes readable when the waker fires.
    pub fn pollfd(&self) -> libc::pollfd {
        libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
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
    let timeout = u64::try_from(timeout_ms).ok().map(|ms| ms * 1_000_000);
    wait_readable_for(fd, waker, timeout)
}

/// [`wait_readable`] for at most `timeout_ns` nanoseconds.
pub fn wait_readable_ns(fd: RawFd, waker: &Waker, timeout_ns: u64) -> io::Result<bool> {
    wait_readable_for(fd, waker, Some(timeout_ns))
}

fn wait_readable_for(fd: RawFd, waker: &Waker, timeout_ns: Option<u64>) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        waker.pollfd(),
    ];
    poll_with_waker(&mut fds, timeout_ns)
}

/// Waits until one of `fds` is readable (`Ok(false)`), the waker whose pollfd is the
/// last of them fires (`Ok(true)`), `timeout_ms` passes (-1: no timeout) or a signal
/// interrupts (`Ok(false)`): [`wait_readable`] for a receiver with several sockets, whose
/// pollfds it keeps (no allocation per wait; `revents` are overwritten).
pub fn wait_readable_set(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<bool> {
    let timeout = u64::try_from(timeout_ms).ok().map(|ms| ms * 1_000_000);
    poll_with_waker(fds, timeout)
}

/// Sleeps `ns` nanoseconds unless `waker` fires first (`Ok(true)`); a signal ends the
/// nap early (`Ok(false)`).
pub fn nap(waker: &Waker, ns: u64) -> io::Result<bool> {
    poll_with_waker(&mut [waker.pollfd()], Some(ns))
}

/// `ppoll` on `fds`, the last of which is a waker's, for at most `timeout_ns` (`None`:
/// no limit): whether the waker fired. A signal counts as a plain wake-up.
fn poll_with_waker(fds: &mut [libc::pollfd], timeout_ns: Option<u64>) -> io::Result<bool> {
    ppoll(fds, timeout_ns)?;
    Ok(fds.last().is_some_and(|w| w.revents & libc::POLLIN != 0))
}

/// `ppoll` on `fds` for at most `timeout_ns` nanoseconds (`None`: no limit), no signal
/// mask: how many have events; 0 on timeout or when a signal interrupted (callers look
/// again).
pub fn ppoll(fds: &mut [libc::pollfd], timeout_ns: Option<u64>) -> io::Result<usize> {
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a live slice of pollfds and `ts_ptr` null or a live timespec; no
    // signal mask is passed.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            for f in fds.iter_mut() {
                f.revents = 0;
            }
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// Receive-buffer bytes assumed per datagram (or GRO message) beyond its payload: the
/// kernel charges a socket an skb's whole allocation, not just the payload.
pub const PER_MESSAGE_OVERHEAD: u64 = 1024;

/// Wake-up coalescing for a receive loop (what a NIC's `rx-usecs` does for interrupts).
///
/// Why: a thread that sleeps in `poll` whenever its queue is empty is woken for every
/// datagram (every sender `sendmmsg`) that arrives while it sleeps; at a few thousand
/// wake-ups a second the context switches cost more CPU than the data (a third of
/// speaddepay's time at 1472-byte packets). So when a read finds the queue empty after
/// data, the loop naps for a while instead and takes everything that came meanwhile in
/// one go.
///
/// The nap is at most `max_ns`, and short enough that, at the rate measured over the
/// last cycle, the socket buffer never fills past `budget` bytes (a quarter of what the
/// kernel granted): coalescing must never cost a datagram. The first empty read after a
/// wake from `poll` (or after a nap that found nothing) measures from the wake; an empty
/// read right after a nap goes back to `poll`, so an idle socket costs nothing.
#[derive(Debug, Clone)]
pub struct Coalescer {
    max_ns: u64,
    budget: u64,
    since: Option<std::time::Instant>,
    cost: u64,
    napped: bool,
}

impl Coalescer {
    /// Naps of at most `max_ns` (0 = never nap), filling at most `budget` bytes of
    /// socket buffer.
    pub fn new(max_ns: u64, budget: u64) -> Self {
        Self {
            max_ns,
            budget,
            since: None,
            cost: 0,
            napped: false,
        }
    }

    /// A read returned `bytes` of payload in `messages` datagrams (GRO messages).
    pub fn received(&mut self, bytes: u64, messages: u64) {
        self.cost += bytes + messages * PER_MESSAGE_OVERHEAD;
        self.napped = false;
    }

    /// The loop woke from `poll` at `now`: the rate is measured from here.
    pub fn woke(&mut self, now: std::time::Instant) {
        self.since = Some(now);
        self.cost = 0;
        self.napped = false;
    }

    /// A read found the queue empty at `now`: how long to nap before reading again, or
    /// `None` to sleep in `poll` until data arrives.
    pub fn on_empty(&mut self, now: std::time::Instant) -> Option<u64> {
        if self.max_ns == 0 || self.napped {
            self.since = None;
            return None;
        }
        let since = self.since?;
        if self.cost == 0 {
            return None;
        }
        let elapsed = now.saturating_duration_since(since).as_nanos() as u64;
        // Time to fill `budget` at cost/elapsed bytes per ns.
        let fill_ns = (self.budget as u128 * elapsed as u128 / self.cost as u128) as u64;
        let ns = self.max_ns.min(fill_ns);
        self.since = Some(now);
        self.cost = 0;
        self.napped = true;
        (ns > 0).then_some(ns)
    }
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

    #[test]
    fn a_nap_lasts_its_time_unless_woken() {
        let w = Waker::new().unwrap();
        let t = std::time::Instant::now();
        assert!(!nap(&w, 2_000_000).unwrap());
        assert!(t.elapsed() >= std::time::Duration::from_millis(2));
        w.wake();
        let t = std::time::Instant::now();
        assert!(nap(&w, 5_000_000_000).unwrap());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn coalescer_naps_only_in_a_stream_and_never_past_the_budget() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // 1 ms naps, 1 MB of buffer.
        let mut c = Coalescer::new(1_000_000, 1_000_000);
        // Nothing measured yet (no wake from poll): sleep in poll.
        assert_eq!(c.on_empty(ms(0)), None);
        c.woke(ms(0));
        // 100 kB in 1 ms: 100 MB/s fills 1 MB in 10 ms, so the whole 1 ms nap.
        c.received(100_000 - PER_MESSAGE_OVERHEAD, 1);
        assert_eq!(c.on_empty(ms(1)), Some(1_000_000));
        // The nap found nothing: back to poll, and nothing until the next wake.
        assert_eq!(c.on_empty(ms(2)), None);
        assert_eq!(c.on_empty(ms(3)), None);
        // 500 kB in 1 ms (500 MB/s): 2 ms to fill the budget, still a whole nap; 2 MB
        // in 1 ms fills it in 0.5 ms, so the nap is cut to 0.5 ms.
        c.woke(ms(10));
        c.received(500_000 - PER_MESSAGE_OVERHEAD, 1);
        assert_eq!(c.on_empty(ms(11)), Some(1_000_000));
        c.received(2_000_000 - PER_MESSAGE_OVERHEAD, 1);
        assert_eq!(c.on_empty(ms(12)), Some(500_000));
        // Off: never naps.
        let mut off = Coalescer::new(0, 1_000_000);
        off.woke(ms(0));
        off.received(10, 1);
        assert_eq!(off.on_empty(ms(1)), None);
    }
}
