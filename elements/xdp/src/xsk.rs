//! An AF_XDP socket for receiving: UMEM registration over a caller's
//! [`MemoryRegion`], the fill and RX rings mapped into this process, bind to one
//! interface queue, kernel statistics and busy-poll options.
//!
//! The rings are single-producer / single-consumer queues in memory shared with the
//! kernel: free-running `u32` producer and consumer indices (wrapping at 2^32), a
//! power-of-two number of entries, entry `i` at `i & (size - 1)`. The index arithmetic
//! is in plain functions ([`ready`], [`room`], [`entry`]) so it can be tested alone.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use firehose_core::MemoryRegion;

/// Entries a consumer may read: what the producer published beyond `consumer`.
#[inline]
pub fn ready(producer: u32, consumer: u32) -> u32 {
    producer.wrapping_sub(consumer)
}

/// Entries a producer may still write into a ring of `size`.
#[inline]
pub fn room(size: u32, producer: u32, consumer: u32) -> u32 {
    size - producer.wrapping_sub(consumer)
}

/// The array position of free-running index `i` in a ring of `size` (a power of 2).
#[inline]
pub fn entry(i: u32, size: u32) -> usize {
    (i & (size - 1)) as usize
}

/// `SO_BUSY_POLL` (asm-generic/socket.h; not in the libc crate for every target).
const SO_BUSY_POLL: libc::c_int = 46;
/// `SO_PREFER_BUSY_POLL`.
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
/// `SO_BUSY_POLL_BUDGET`.
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// A shared mapping of one ring, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; the ring pointers into it die
        // with the socket that owns this mapping.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The producer, consumer and flags words and the entry array of one mapped ring.
struct RingPtrs {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut u8,
    size: u32,
}

impl RingPtrs {
    fn new(map: &Mapping, off: &libc::xdp_ring_offset, size: u32) -> Self {
        // SAFETY: the kernel's offsets lie inside the mapping it sized for this ring.
        unsafe {
            Self {
                producer: map.ptr.add(off.producer as usize) as *const AtomicU32,
                consumer: map.ptr.add(off.consumer as usize) as *const AtomicU32,
                flags: map.ptr.add(off.flags as usize) as *const AtomicU32,
                entries: map.ptr.add(off.desc as usize),
                size,
            }
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 inside a live mapping; the kernel accesses it
        // atomically too.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }
    }
}

/// The RX ring: the kernel produces descriptors of received frames, we consume them.
pub struct RxRing {
    ring: RingPtrs,
    cons: u32,
}

impl RxRing {
    /// How many descriptors are ready, at most `max`, starting at the returned index.
    pub fn peek(&self, max: u32) -> (u32, u32) {
        // Acquire: the frames' bytes and descriptors the kernel wrote before moving the
        // producer index are visible after this load.
        let prod = self.ring.producer().load(Ordering::Acquire);
        (self.cons, ready(prod, self.cons).min(max))
    }

    /// Descriptor at free-running index `i` (one returned by [`Self::peek`]).
    pub fn desc(&self, i: u32) -> libc::xdp_desc {
        let at = entry(i, self.ring.size);
        // SAFETY: `at` < size, and the entry array holds `size` descriptors; the entry
        // is published (before the producer index) and not yet released, so the kernel
        // does not write it now.
        unsafe {
            (self.ring.entries as *const libc::xdp_desc)
                .add(at)
                .read_volatile()
        }
    }

    /// Gives `n` read descriptors back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.cons = self.cons.wrapping_add(n);
        // Release: our reads of those descriptors happen before the kernel reuses them.
        self.ring.consumer().store(self.cons, Ordering::Release);
    }
}

/// The fill ring: we produce UMEM frame addresses for the kernel to receive into.
pub struct FillRing {
    ring: RingPtrs,
    prod: u32,
}

impl FillRing {
    /// Free entries now.
    pub fn room(&self) -> u32 {
        room(
            self.ring.size,
            self.prod,
            self.ring.consumer().load(Ordering::Acquire),
        )
    }

    /// Publishes `addrs` (at most [`Self::room`] of them; the rest are not written and
    /// the count written is returned).
    pub fn push(&mut self, addrs: impl IntoIterator<Item = u64>) -> u32 {
        let room = self.room();
        let mut n = 0;
        for a in addrs.into_iter().take(room as usize) {
            let at = entry(self.prod.wrapping_add(n), self.ring.size);
            // SAFETY: `at` < size and the entry is free (counted in `room`): the kernel
            // does not read it until the producer index moves past it.
            unsafe { (self.ring.entries as *mut u64).add(at).write_volatile(a) };
            n += 1;
        }
        self.prod = self.prod.wrapping_add(n);
        // Release: the addresses are visible before the new producer index.
        self.ring.producer().store(self.prod, Ordering::Release);
        n
    }

    /// The kernel asked to be woken (`XDP_USE_NEED_WAKEUP`) to look at the fill ring.
    pub fn needs_wakeup(&self) -> bool {
        self.ring.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// How to bind.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Interface index.
    pub ifindex: u32,
    /// Receive queue.
    pub queue: u32,
    /// UMEM frames (a power of two; also the fill and RX ring sizes).
    pub frames: u32,
    /// Bytes per frame (2048 or 4096).
    pub frame_size: u32,
    /// Bind with `XDP_USE_SG`: a frame longer than one UMEM frame arrives in several,
    /// each descriptor but the last marked `XDP_PKT_CONTD` (Linux 6.6+).
    pub multi_buffer: bool,
    /// Bind with `XDP_ZEROCOPY` (else `XDP_COPY`).
    pub zero_copy: bool,
}

/// Why a socket could not be set up: the step that failed and its errno.
#[derive(Debug)]
pub struct XskError {
    /// `socket`, `XDP_UMEM_REG`, `bind`, …
    pub step: &'static str,
    /// The OS error.
    pub error: io::Error,
}

impl std::fmt::Display for XskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AF_XDP {} failed: {}", self.step, self.error)
    }
}

fn err(step: &'static str) -> impl FnOnce(io::Error) -> XskError {
    move |error| XskError { step, error }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the type the option expects, passed with its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads a socket option of type `T`, a plain C struct (all zeroes is a valid value).
fn getsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<T> {
    // SAFETY: only used with libc's plain-old-data option structs (integers only), for
    // which all-zero bytes are a valid value.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, a live `T`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

fn map_ring(fd: RawFd, len: usize, pgoff: libc::off_t) -> io::Result<Mapping> {
    // SAFETY: a shared mapping of a ring the kernel created for this socket at `pgoff`;
    // the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            pgoff,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: p.cast(), len })
}

/// A bound AF_XDP socket with its rings.
pub struct XskSocket {
    // Field order is drop order: the ring pointers live in the mappings, which must be
    // unmapped before the socket closes (either order is safe for the kernel).
    /// The RX ring.
    pub rx: RxRing,
    /// The fill ring.
    pub fill: FillRing,
    _maps: [Mapping; 2],
    fd: OwnedFd,
    zero_copy: bool,
}

// SAFETY: the raw ring pointers point into mappings owned by this value; the socket is
// used by one thread at a time (the streaming thread, behind the element's state lock).
unsafe impl Send for XskSocket {}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl XskSocket {
    /// Creates the socket, registers `umem` (its first `frames * frame_size` bytes),
    /// creates and maps the rings and binds to `cfg.ifindex` / `cfg.queue`.
    pub fn open(cfg: &Config, umem: &MemoryRegion) -> Result<Self, XskError> {
        let umem_len = u64::from(cfg.frames) * u64::from(cfg.frame_size);
        assert!(
            umem_len as usize <= umem.len(),
            "UMEM larger than its region"
        );
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(err("socket")(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let reg = libc::xdp_umem_reg {
            addr: umem.as_ptr() as u64,
            len: umem_len,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg).map_err(err("XDP_UMEM_REG"))?;
        setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_FILL_RING, &cfg.frames)
            .map_err(err("XDP_UMEM_FILL_RING"))?;
        // The kernel insists on a completion ring even for a socket that never sends.
        let cr: u32 = 64;
        setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_COMPLETION_RING, &cr)
            .map_err(err("XDP_UMEM_COMPLETION_RING"))?;
        setsockopt(raw, libc::SOL_XDP, libc::XDP_RX_RING, &cfg.frames)
            .map_err(err("XDP_RX_RING"))?;
        let off: libc::xdp_mmap_offsets = getsockopt(raw, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
            .map_err(err("XDP_MMAP_OFFSETS"))?;
        let n = cfg.frames as usize;
        let rx_map = map_ring(
            raw,
            off.rx.desc as usize + n * std::mem::size_of::<libc::xdp_desc>(),
            libc::XDP_PGOFF_RX_RING,
        )
        .map_err(err("mmap of the RX ring"))?;
        let fill_map = map_ring(
            raw,
            off.fr.desc as usize + n * 8,
            libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
        )
        .map_err(err("mmap of the fill ring"))?;
        let rx = RxRing {
            ring: RingPtrs::new(&rx_map, &off.rx, cfg.frames),
            cons: 0,
        };
        let fill = FillRing {
            ring: RingPtrs::new(&fill_map, &off.fr, cfg.frames),
            prod: 0,
        };
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP
                | if cfg.multi_buffer {
                    libc::XDP_USE_SG
                } else {
                    0
                }
                | if cfg.zero_copy {
                    libc::XDP_ZEROCOPY
                } else {
                    libc::XDP_COPY
                },
            sxdp_ifindex: cfg.ifindex,
            sxdp_queue_id: cfg.queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `addr` is a valid sockaddr_xdp passed with its size.
        let r = unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("bind")(io::Error::last_os_error()));
        }
        Ok(Self {
            rx,
            fill,
            _maps: [rx_map, fill_map],
            fd,
            zero_copy: cfg.zero_copy,
        })
    }

    /// Whether the socket is bound in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The kernel's drop counters for this socket.
    pub fn statistics(&self) -> io::Result<libc::xdp_statistics> {
        getsockopt(self.fd.as_raw_fd(), libc::SOL_XDP, libc::XDP_STATISTICS)
    }

    /// Asks the kernel to busy-poll the queue's NAPI context for up to `usecs` per
    /// call, `budget` packets at a time, preferring busy polling over interrupts.
    pub fn set_busy_poll(&self, usecs: u32, budget: u32) -> io::Result<()> {
        let raw = self.fd.as_raw_fd();
        let one: libc::c_int = 1;
        setsockopt(raw, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, &one)?;
        setsockopt(raw, libc::SOL_SOCKET, SO_BUSY_POLL, &(usecs as libc::c_int))?;
        setsockopt(
            raw,
            libc::SOL_SOCKET,
            SO_BUSY_POLL_BUDGET,
            &(budget as libc::c_int),
        )
    }

    /// A non-blocking `recvfrom` with no buffer: drives the kernel (busy poll, or a
    /// wake-up the fill ring asked for) without waiting. Errors are only "try again".
    pub fn kick(&self) {
        // SAFETY: a zero-length receive with no buffer or address; the kernel writes
        // nothing.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_arithmetic_wraps_at_u32() {
        assert_eq!(ready(10, 4), 6);
        assert_eq!(room(8, 10, 4), 2);
        // Producer wrapped past u32::MAX, consumer not yet.
        let cons = u32::MAX - 2;
        let prod = cons.wrapping_add(5);
        assert_eq!(prod, 2);
        assert_eq!(ready(prod, cons), 5);
        assert_eq!(room(8, prod, cons), 3);
        assert_eq!(room(8, cons, cons), 8);
        assert_eq!(room(8, cons.wrapping_add(8), cons), 0);
        // Positions follow the low bits across the wrap.
        assert_eq!(entry(u32::MAX, 8), 7);
        assert_eq!(entry(u32::MAX.wrapping_add(1), 8), 0);
        assert_eq!(entry(cons.wrapping_add(3), 4096), 0);
    }

    /// A producer and a consumer walking a small ring across the u32 wrap: every
    /// entry is read once, in order, and the two never overtake each other.
    #[test]
    fn ring_walk_across_the_wrap() {
        let size = 8u32;
        let mut slots = [0u64; 8];
        let (mut prod, mut cons) = (u32::MAX - 20, u32::MAX - 20);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        for step in 0..200u32 {
            let want = step % 5;
            for _ in 0..want.min(room(size, prod, cons)) {
                slots[entry(prod, size)] = next_in;
                next_in += 1;
                prod = prod.wrapping_add(1);
            }
            let n = ready(prod, cons).min(step % 7);
            for _ in 0..n {
                assert_eq!(slots[entry(cons, size)], next_out);
                next_out += 1;
                cons = cons.wrapping_add(1);
            }
            assert!(ready(prod, cons) <= size);
        }
        assert!(next_out > 100, "the walk moved ({next_out})");
        assert!(prod < 1000, "and wrapped");
    }
}
