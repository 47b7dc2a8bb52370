//! The floor receivers: the least a program can do to receive a UDP stream —
//! `recvmmsg` of 64 messages at a time into preallocated memory, nothing parsed, copied
//! or pushed, no GStreamer. Their CPU per GB is the physical limit of the kernel path on
//! this machine, against which every other receiver's figure reads.
//!
//! Two of them, one loop with two ways of waiting ([`Wait`]):
//!
//! - the blocking floor ([`Wait::Block`]): each call blocks for the first datagram
//!   (`MSG_WAITFORONE`), so it is woken by the sender's own bursts, and receives into
//!   one 64-slot buffer that stays in the CPU cache;
//! - the batching floor ([`Wait::Nap`]): non-blocking calls (`MSG_DONTWAIT`) and a nap
//!   when a call comes back short, into consecutive slots of a large pre-faulted ring,
//!   as a batching capture receives into its pool. A wake-up costs more than a batch on
//!   some hosts (a VM's timer and scheduler path), so this is the floor that a capture
//!   which naps and batches reads against.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// Messages per `recvmmsg` call (what spead2 and most capture loops use).
pub const BATCH: usize = 64;
/// The batching floor's ring: what a capture's pool of a few MiB per queue and the
/// heaps or chunks behind it take, far more than any CPU cache keeps.
pub const RING_BYTES: usize = 64 << 20;
/// The batching floor's nap after a short call (issue 33's definition).
pub const NAP: Duration = Duration::from_millis(1);
/// How long nothing must arrive before [`Floor::drain`] ends.
const SETTLE: Duration = Duration::from_millis(20);

/// How a floor waits for datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Block in `recvmmsg` for the first datagram of each call (`MSG_WAITFORONE`), at
    /// most `tick` (SO_RCVTIMEO), so that the caller can look at its stop flag.
    Block {
        /// The longest a call blocks with nothing arriving.
        tick: Duration,
    },
    /// Never block (`MSG_DONTWAIT`); sleep `nap` after every call that brought fewer
    /// than [`BATCH`] datagrams (none included).
    Nap {
        /// The sleep after a short call.
        nap: Duration,
    },
}

/// Counts of what the loop received.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Datagrams.
    pub datagrams: u64,
    /// UDP payload bytes.
    pub bytes: u64,
    /// `recvmmsg` calls that brought datagrams.
    pub batches: u64,
}

/// A bound socket and its preallocated receive memory: a ring of slots, one datagram
/// each, that calls fill [`BATCH`] consecutive slots at a time.
pub struct Floor {
    socket: UdpSocket,
    wait: Wait,
    ring: Vec<u8>,
    /// Bytes per slot.
    slot: usize,
    /// Slots in the ring, at least [`BATCH`].
    slots: usize,
    /// The slot the next call's first datagram goes to.
    next: usize,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// What has been received so far.
    pub counts: Counts,
}

impl Floor {
    /// Binds `addr` with a receive buffer of `buffer_size` bytes (SO_RCVBUFFORCE as root,
    /// else SO_RCVBUF) and a ring of `ring_bytes` (at least [`BATCH`] slots) for
    /// datagrams of up to `max_payload` bytes, waiting as `wait` says.
    pub fn bind(
        addr: SocketAddr,
        buffer_size: usize,
        max_payload: usize,
        ring_bytes: usize,
        wait: Wait,
    ) -> Result<Self, String> {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| format!("floor receiver: socket: {e}"))?;
        let want = libc::c_int::try_from(buffer_size).unwrap_or(libc::c_int::MAX);
        // SAFETY: setsockopt on a socket we own, reading one c_int from a live local.
        let forced = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&want as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if !forced {
            // Not root: as much as net.core.rmem_max grants.
            let _ = s.set_recv_buffer_size(buffer_size);
        }
        s.bind(&addr.into())
            .map_err(|e| format!("floor receiver: cannot bind {addr}: {e}"))?;
        if let Wait::Block { tick } = wait {
            s.set_read_timeout(Some(tick))
                .map_err(|e| format!("floor receiver: SO_RCVTIMEO: {e}"))?;
        }
        let socket: UdpSocket = s.into();
        // One slot per message, one byte more than the largest payload so that a larger
        // datagram shows as truncated rather than passing unnoticed.
        let slot = max_payload + 1;
        let slots = (ring_bytes / slot).max(BATCH);
        let mut floor = Self {
            socket,
            wait,
            ring: vec![0u8; slot * slots],
            slot,
            slots,
            next: 0,
            iov: Vec::with_capacity(BATCH),
            msgs: Vec::with_capacity(BATCH),
            counts: Counts::default(),
        };
        // Touch every page now, as any receiver's pool is pre-faulted.
        floor.ring.iter_mut().step_by(4096).for_each(|b| *b = 1);
        for _ in 0..BATCH {
            // Pointed at their slots before each call (`aim`).
            floor.iov.push(libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: slot,
            });
        }
        let iov = floor.iov.as_mut_ptr();
        for i in 0..BATCH {
            // SAFETY: an all-zero mmsghdr is a valid empty header (plain C struct).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: `i < BATCH == iov.len()`; the vector is never resized after this.
            m.msg_hdr.msg_iov = unsafe { iov.add(i) };
            m.msg_hdr.msg_iovlen = 1;
            floor.msgs.push(m);
        }
        floor.aim();
        Ok(floor)
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr, String> {
        self.socket.local_addr().map_err(|e| e.to_string())
    }

    /// Points the iovecs at the [`BATCH`] slots from `next` on (64 stores per call, as a
    /// capture hands each call the free slots of its pool).
    fn aim(&mut self) {
        let base = self.ring.as_mut_ptr();
        for (i, v) in self.iov.iter_mut().enumerate() {
            // SAFETY: `next + BATCH <= slots` (see `receive`), so slot `next + i` lies
            // within `ring`; the pointer is only handed to the kernel while `ring`
            // lives in `self` and is never resized.
            v.iov_base = unsafe { base.add((self.next + i) * self.slot) }.cast();
        }
    }

    /// One `recvmmsg` call: adds what it got to [`Self::counts`] and returns the number
    /// of datagrams. Blocking: waits up to the tick for the first datagram (0 on the
    /// tick). Napping: takes what is queued, then naps if that was fewer than
    /// [`BATCH`].
    pub fn receive(&mut self) -> Result<usize, String> {
        let flags = match self.wait {
            Wait::Block { .. } => libc::MSG_WAITFORONE,
            Wait::Nap { .. } => libc::MSG_DONTWAIT,
        };
        // SAFETY: `msgs` holds BATCH headers whose iovecs point into `ring`, all owned
        // by `self` and alive for the call; the kernel writes at most `slot` bytes into
        // each and fills msg_len.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                BATCH as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        let n = if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => 0,
                _ => return Err(format!("floor receiver: recvmmsg: {e}")),
            }
        } else {
            n as usize
        };
        let bytes: u64 = self.msgs[..n].iter().map(|m| u64::from(m.msg_len)).sum();
        self.counts.datagrams += n as u64;
        self.counts.bytes += bytes;
        self.counts.batches += u64::from(n > 0);
        if n > 0 && self.slots > BATCH {
            // On through the ring; back to its start when a whole call no longer fits
            // before its end (the few slots left there wait for the next lap).
            self.next += n;
            if self.next + BATCH > self.slots {
                self.next = 0;
            }
            self.aim();
        }
        if let Wait::Nap { nap } = self.wait {
            if n < BATCH {
                std::thread::sleep(nap);
            }
        }
        Ok(n)
    }

    /// Receives until [`SETTLE`] passes with nothing arriving: what is still queued when
    /// the sender ends is received, not lost. Returns the datagrams it took.
    pub fn drain(&mut self) -> Result<u64, String> {
        let before = self.counts.datagrams;
        let mut quiet = Instant::now();
        loop {
            if self.receive()? > 0 {
                quiet = Instant::now();
            } else if quiet.elapsed() >= SETTLE {
                return Ok(self.counts.datagrams - before);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends 100 datagrams of 100…199 bytes to `to`.
    fn send_100(to: SocketAddr) {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..100u16 {
            tx.send_to(&vec![0u8; 100 + usize::from(i)], to).unwrap();
        }
    }

    #[test]
    fn counts_every_datagram_and_byte() {
        let tick = Duration::from_millis(20);
        let mut floor = Floor::bind(
            "127.0.0.1:0".parse().unwrap(),
            1 << 20,
            1472,
            0,
            Wait::Block { tick },
        )
        .unwrap();
        // The blocking floor's ring is one call's worth: it stays in the cache.
        assert_eq!(floor.slots, BATCH);
        send_100(floor.local_addr().unwrap());
        let mut got = 0;
        for _ in 0..50 {
            got += floor.receive().unwrap();
            if got == 100 {
                break;
            }
        }
        assert_eq!(got, 100);
        // 100 + 101 + … + 199
        assert_eq!(
            (floor.counts.datagrams, floor.counts.bytes),
            (100, (100..200).sum())
        );
        // At most BATCH datagrams per call, and only calls that brought some count.
        assert!(
            (2..=100).contains(&floor.counts.batches),
            "{:?}",
            floor.counts
        );
        assert_eq!(floor.next, 0, "one buffer, reused");
        // Nothing queued: the call returns on the tick with nothing.
        let t = Instant::now();
        assert_eq!(floor.receive().unwrap(), 0);
        assert!(t.elapsed() >= tick / 2, "{:?}", t.elapsed());
    }

    #[test]
    fn the_batching_floor_counts_every_datagram_and_byte_around_its_ring() {
        // A ring of 150 slots of 201 bytes: calls start at slot 0, then on by what each
        // got, back to 0 whenever fewer than 64 slots are left before the end.
        let mut floor = Floor::bind(
            "127.0.0.1:0".parse().unwrap(),
            1 << 20,
            200,
            150 * 201 + 100,
            Wait::Nap { nap: NAP },
        )
        .unwrap();
        assert_eq!(floor.slots, 150);
        let to = floor.local_addr().unwrap();
        // Nothing queued: a non-blocking call returns at once with nothing, then naps.
        let t = Instant::now();
        assert_eq!(floor.receive().unwrap(), 0);
        let took = t.elapsed();
        assert!(took >= NAP && took < Duration::from_millis(500), "{took:?}");
        assert_eq!(floor.counts, Counts::default());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut wrapped = 0;
        for lap in 1..=3u64 {
            // Datagram i of the lap: 100 + i bytes, all of them i + lap.
            for i in 0..100u8 {
                tx.send_to(&vec![i + lap as u8; 100 + usize::from(i)], to)
                    .unwrap();
            }
            let mut got = 0;
            let t = Instant::now();
            while got < 100 && t.elapsed() < Duration::from_secs(5) {
                let first = floor.next;
                let n = floor.receive().unwrap();
                assert!(n <= BATCH);
                // The call filled consecutive slots from `first`: each holds its
                // datagram, whole.
                for k in 0..n {
                    let i = got + k;
                    let at = (first + k) * 201;
                    let len = 100 + i;
                    assert!(
                        floor.ring[at..at + len]
                            .iter()
                            .all(|&b| usize::from(b) == i + lap as usize),
                        "lap {lap}, datagram {i} in slot {}",
                        first + k
                    );
                }
                if n > 0 {
                    let mut next = first + n;
                    if next + BATCH > 150 {
                        next = 0;
                        wrapped += 1;
                    }
                    assert_eq!(floor.next, next, "lap {lap}");
                }
                got += n;
            }
            assert_eq!(got, 100, "lap {lap}");
            assert_eq!(
                (floor.counts.datagrams, floor.counts.bytes),
                (100 * lap, lap * (100..200).sum::<u64>()),
                "lap {lap}"
            );
        }
        // 300 datagrams through 150 slots: the ring went round at least once.
        assert!(wrapped >= 1, "{:?}", floor.counts);
        assert!(floor.counts.batches >= 5, "{:?}", floor.counts);
    }

    #[test]
    fn drain_ends_when_nothing_arrives() {
        for wait in [
            Wait::Block {
                tick: Duration::from_millis(5),
            },
            Wait::Nap { nap: NAP },
        ] {
            let mut floor =
                Floor::bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1472, 0, wait).unwrap();
            send_100(floor.local_addr().unwrap());
            let t = Instant::now();
            assert_eq!(floor.drain().unwrap(), 100, "{wait:?}");
            assert!(t.elapsed() >= SETTLE, "{wait:?}");
            assert_eq!(floor.drain().unwrap(), 0, "{wait:?}");
        }
    }
}
