//! The UDP send engine behind `fhudpsink` (no GStreamer types).
//!
//! [`UdpSender`] owns one socket and sends a batch of datagrams to one or several
//! destinations with as few `sendmmsg` calls as possible: every datagram goes to every
//! destination, destination by destination, so that runs of equal-size datagrams to one
//! destination can go out as one UDP GSO send (`UDP_SEGMENT`). The message, iovec and
//! control-message arrays are allocated once and reused, so sending costs no heap
//! allocation. [`Pacer`] spaces the sends to a target rate; [`Interrupt`] lets another
//! thread cut a paced send short (the element's `unlock`).

use std::io;
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use firehose_core::stats::Counter;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::sockaddr::{iface_index, iface_ipv4};

/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const MAX_PAYLOAD_V4: usize = 65507;
/// Largest UDP payload over IPv6 without jumbograms (65535 − 8).
pub const MAX_PAYLOAD_V6: usize = 65527;
/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` before Linux 6.9).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one GSO send (the segments must fit one IPv4 datagram).
pub const GSO_MAX_BYTES: usize = MAX_PAYLOAD_V4;
/// Messages, and iovecs, per `sendmmsg`: the kernel caps `vlen` at `UIO_MAXIOV`.
const MAX_MSGS: usize = 1024;
/// `UDP_SEGMENT` from `<linux/udp.h>`; libc only exports it for some targets.
const UDP_SEGMENT: libc::c_int = 103;
/// How long one message may keep failing with `EAGAIN`/`ENOBUFS` before it is dropped
/// and counted: long enough for a NIC queue to drain, short enough not to stall a pipeline.
const STALL_LIMIT: Duration = Duration::from_secs(1);
/// How often an ICMP "port unreachable" may be reported for one message before it is
/// dropped (each report consumes one pending socket error, so a retry normally succeeds).
const REFUSED_RETRIES: u32 = 3;

/// Anything that holds a batch of datagrams, addressed by index.
pub trait Datagrams {
    /// Number of datagrams.
    fn count(&self) -> usize;
    /// The payload of datagram `i` (`i < count()`).
    fn datagram(&self, i: usize) -> &[u8];
}

impl<T: AsRef<[u8]>> Datagrams for [T] {
    fn count(&self) -> usize {
        self.len()
    }
    fn datagram(&self, i: usize) -> &[u8] {
        self[i].as_ref()
    }
}

/// Socket and sending options of a [`UdpSender`].
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Where every datagram goes (at least one).
    pub destinations: Vec<SocketAddr>,
    /// Local source address to bind to (`None`: any address, any port).
    pub bind: Option<SocketAddr>,
    /// Unicast TTL / hop limit.
    pub ttl: u32,
    /// Multicast TTL / hop limit.
    pub ttl_mc: u32,
    /// Whether multicast is looped back to local receivers.
    pub multicast_loop: bool,
    /// Interface for outgoing multicast, by name.
    pub multicast_iface: Option<String>,
    /// `SO_SNDBUF` in bytes (0: the system default).
    pub send_buffer: usize,
    /// Use UDP GSO where the kernel allows it.
    pub gso: bool,
    /// Target rate in bits/s of UDP payload, all destinations together (0: unpaced).
    pub rate_bps: u64,
    /// Bytes that may go back-to-back before pacing applies.
    pub burst_bytes: u64,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            destinations: Vec::new(),
            bind: None,
            ttl: 64,
            ttl_mc: 1,
            multicast_loop: true,
            multicast_iface: None,
            send_buffer: 0,
            gso: true,
            rate_bps: 0,
            burst_bytes: 65536,
        }
    }
}

/// Why [`UdpSender::send`] stopped before the end of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// Datagram `index` has `size` bytes, more than one UDP datagram can carry (`max`).
    /// Nothing of the batch was sent.
    TooLarge {
        /// Index of the datagram in the batch.
        index: usize,
        /// Its size in bytes.
        size: usize,
        /// The largest payload for the destinations' address family.
        max: usize,
    },
    /// [`Interrupt::interrupt`] was called; pass `resume_at` to the next `send` of the
    /// same batch to send the rest.
    Interrupted {
        /// Where to resume.
        resume_at: usize,
    },
}

/// Counters of a sender, shared with whoever reports them.
#[derive(Debug, Default)]
pub struct SendStats {
    /// Datagrams handed to the kernel (each destination counts).
    pub packets: Counter,
    /// Payload bytes handed to the kernel.
    pub bytes: Counter,
    /// Datagrams not sent (or reported refused by the peer).
    pub errors: Counter,
    /// GSO sends (one per multi-segment message).
    pub gso_sends: Counter,
    /// Times the kernel refused GSO and the sender fell back to plain sends (0 or 1).
    pub gso_fallbacks: Counter,
}

impl SendStats {
    /// All counters back to zero.
    pub fn reset(&self) {
        for c in [
            &self.packets,
            &self.bytes,
            &self.errors,
            &self.gso_sends,
            &self.gso_fallbacks,
        ] {
            c.reset();
        }
    }
}

/// A flag another thread raises to cut sleeps and retries short, with a condition
/// variable so a sleeping sender wakes at once.
#[derive(Debug, Default)]
pub struct Interrupt {
    flag: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

/// The tail of a sleep that is spun rather than slept: thread wake-ups are late by
/// tens of microseconds (timer slack), which would make every paced send late.
const SPIN: Duration = Duration::from_micros(50);

impl Interrupt {
    /// Raises the flag and wakes a sleeper.
    pub fn interrupt(&self) {
        let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.flag.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    /// Lowers the flag.
    pub fn clear(&self) {
        self.flag.store(false, Ordering::Release);
    }

    /// Whether the flag is raised.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Sleeps until `deadline` (spinning the last 50 µs). Returns false, early, if
    /// the flag is or gets raised.
    pub fn sleep_until(&self, deadline: Instant) -> bool {
        loop {
            if self.is_set() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            let left = deadline - now;
            if left > SPIN {
                let g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                // Checked under the lock, so a concurrent interrupt() cannot be missed.
                if self.is_set() {
                    return false;
                }
                let _ = self.cv.wait_timeout(g, left - SPIN);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// How far behind schedule a paced sender may fall before the schedule moves instead
/// of the sender catching up (after a pause or a stall upstream), so the catch-up burst
/// stays short.
const MAX_CATCH_UP: Duration = Duration::from_millis(10);

/// Spaces sends to a target rate. The send time of each chunk is computed from the
/// bytes sent since the start, not from the previous send, so errors do not add up.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_bps: u64,
    burst: u64,
    start: Option<Instant>,
    sent: u64,
}

impl Pacer {
    /// A pacer for `rate_bps` bits/s (0: unpaced) letting `burst_bytes` go back-to-back.
    pub fn new(rate_bps: u64, burst_bytes: u64) -> Self {
        Self {
            rate_bps,
            burst: burst_bytes,
            start: None,
            sent: 0,
        }
    }

    /// Whether sends are paced at all.
    pub fn is_paced(&self) -> bool {
        self.rate_bps > 0
    }

    /// Most bytes per send: the burst allowance when paced (a send always carries at
    /// least one datagram), unlimited otherwise.
    pub fn chunk_bytes(&self) -> usize {
        if self.is_paced() {
            usize::try_from(self.burst).unwrap_or(usize::MAX).max(1)
        } else {
            usize::MAX
        }
    }

    /// How long `bytes` take at the target rate.
    pub fn duration_of(&self, bytes: u64) -> Duration {
        if self.rate_bps == 0 {
            return Duration::ZERO;
        }
        let ns = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(self.rate_bps);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// When a send of `next` bytes may start: when the bytes sent so far plus these,
    /// less the burst allowance, have had their time at the target rate (a token bucket
    /// of `burst` bytes, full at the start). Starts the clock on first use, and moves
    /// the schedule when the sender is more than 10 ms behind.
    pub fn deadline(&mut self, now: Instant, next: u64) -> Instant {
        let start = *self.start.get_or_insert(now);
        let due = (self.sent + next).saturating_sub(self.burst);
        let target = start + self.duration_of(due);
        match now.checked_duration_since(target) {
            Some(lag) if lag > MAX_CATCH_UP => {
                self.start = Some(start + (lag - MAX_CATCH_UP));
                now - MAX_CATCH_UP
            }
            _ => target,
        }
    }

    /// Counts `bytes` as sent.
    pub fn record(&mut self, bytes: u64) {
        self.sent += bytes;
    }

    /// Forgets the past: the next send starts a new schedule with a full burst.
    pub fn reset(&mut self) {
        self.start = None;
        self.sent = 0;
    }

    /// Sleeps until a send of `next` bytes may start. Returns false if interrupted.
    pub fn wait(&mut self, next: u64, interrupt: &Interrupt) -> bool {
        if !self.is_paced() {
            return !interrupt.is_set();
        }
        let deadline = self.deadline(Instant::now(), next);
        interrupt.sleep_until(deadline)
    }
}

/// How many datagrams from `first` (below `end`) one GSO send can carry: a run of
/// equal-size datagrams, the last of which may be shorter, at most [`GSO_MAX_SEGMENTS`]
/// of them and [`GSO_MAX_BYTES`] in all. 1 means "send it alone".
pub fn gso_run<D: Datagrams + ?Sized>(data: &D, first: usize, end: usize) -> usize {
    let seg = data.datagram(first).len();
    if seg == 0 || 2 * seg > GSO_MAX_BYTES {
        return 1;
    }
    let (mut n, mut bytes) = (1, seg);
    while first + n < end && n < GSO_MAX_SEGMENTS {
        let len = data.datagram(first + n).len();
        if len == 0 || len > seg || bytes + len > GSO_MAX_BYTES {
            break;
        }
        n += 1;
        bytes += len;
        if len < seg {
            break; // only the last segment may be short
        }
    }
    n
}

/// The `UDP_SEGMENT` control message, laid out as `CMSG_SPACE(sizeof(u16))` bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct GsoCmsg {
    hdr: libc::cmsghdr,
    segment: u16,
    _pad: [u8; 6],
}

/// What one message of a round carries.
#[derive(Clone, Copy, Default)]
struct MsgInfo {
    /// Position (destination × datagram) of its first datagram.
    pos: usize,
    datagrams: usize,
    bytes: usize,
}

/// The arrays handed to `sendmmsg`, allocated once.
struct Scratch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    cmsgs: Vec<GsoCmsg>,
    info: Vec<MsgInfo>,
    len: usize,
}

// SAFETY: the raw pointers in `msgs` and `iovs` point into the current batch only while
// `UdpSender::send` runs on one thread; between calls they are stale and never read.
unsafe impl Send for Scratch {}

impl Scratch {
    fn new() -> Self {
        let iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let msg = libc::mmsghdr {
            msg_hdr: libc::msghdr {
                msg_name: std::ptr::null_mut(),
                msg_namelen: 0,
                msg_iov: std::ptr::null_mut(),
                msg_iovlen: 0,
                msg_control: std::ptr::null_mut(),
                msg_controllen: 0,
                msg_flags: 0,
            },
            msg_len: 0,
        };
        let cmsg = GsoCmsg {
            hdr: libc::cmsghdr {
                cmsg_len: std::mem::offset_of!(GsoCmsg, segment) + 2,
                cmsg_level: libc::SOL_UDP,
                cmsg_type: UDP_SEGMENT,
            },
            segment: 0,
            _pad: [0; 6],
        };
        Self {
            msgs: vec![msg; MAX_MSGS],
            iovs: vec![iov; MAX_MSGS],
            cmsgs: vec![cmsg; MAX_MSGS],
            info: vec![MsgInfo::default(); MAX_MSGS],
            len: 0,
        }
    }
}

/// How a round of messages ended.
enum RoundEnd {
    /// All messages were sent or counted as errors.
    Done,
    /// The kernel refused GSO at message `.0`; GSO is now off.
    GsoRefused(usize),
    /// Interrupted before message `.0`.
    Interrupted(usize),
}

/// A UDP socket that sends batches of datagrams to fixed destinations.
pub struct UdpSender {
    socket: Socket,
    dests: Vec<SockAddr>,
    max_payload: usize,
    gso: bool,
    gso_refusal: Option<i32>,
    last_error: Option<i32>,
    pacer: Pacer,
    scratch: Scratch,
    stats: std::sync::Arc<SendStats>,
}

impl std::fmt::Debug for UdpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSender")
            .field("destinations", &self.dests.len())
            .field("gso", &self.gso)
            .field("pacer", &self.pacer)
            .finish()
    }
}

impl UdpSender {
    /// Opens and configures the socket. Errors say what failed and how to fix it.
    pub fn new(cfg: &SenderConfig, stats: std::sync::Arc<SendStats>) -> Result<Self, String> {
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

        let mut sender = Self {
            dests: cfg.destinations.iter().map(|&a| map(a)).collect(),
            max_payload: if any_v4 {
                MAX_PAYLOAD_V4
            } else {
                MAX_PAYLOAD_V6
            },
            gso: false,
            gso_refusal: None,
            last_error: None,
            pacer: Pacer::new(cfg.rate_bps, cfg.burst_bytes),
            scratch: Scratch::new(),
            stats,
            socket,
        };
        if cfg.gso {
            sender.gso = true;
            if let Err(errno) = sender.probe_gso() {
                sender.refuse_gso(errno);
            }
        }
        Ok(sender)
    }

    /// Whether sends use GSO now.
    pub fn gso_active(&self) -> bool {
        self.gso
    }

    /// The errno with which the kernel refused GSO, once, after it happened.
    pub fn take_gso_refusal(&mut self) -> Option<i32> {
        self.gso_refusal.take()
    }

    /// The errno of the latest failed send since the last call, if any.
    pub fn take_last_error(&mut self) -> Option<i32> {
        self.last_error.take()
    }

    /// How many destinations each datagram goes to.
    pub fn destinations(&self) -> usize {
        self.dests.len()
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP socket"))
    }

    /// The socket's `SO_SNDBUF` as the kernel reports it.
    pub fn send_buffer_size(&self) -> io::Result<usize> {
        self.socket.send_buffer_size()
    }

    /// The pacer, e.g. to reset its schedule after a pause.
    pub fn pacer_mut(&mut self) -> &mut Pacer {
        &mut self.pacer
    }

    /// Sends every datagram of `data` to every destination, from position `from`
    /// (0 for a new batch; positions run over destinations × datagrams). Failed
    /// datagrams are counted in the stats, not returned.
    pub fn send<D: Datagrams + ?Sized>(
        &mut self,
        data: &D,
        from: usize,
        interrupt: &Interrupt,
    ) -> Result<(), SendError> {
        let n = data.count();
        if let Some(index) = (0..n).find(|&i| data.datagram(i).len() > self.max_payload) {
            return Err(SendError::TooLarge {
                index,
                size: data.datagram(index).len(),
                max: self.max_payload,
            });
        }
        let total = n * self.dests.len();
        let mut pos = from;
        while pos < total {
            let end = self.build(data, pos, total);
            let round = &self.scratch.info[..self.scratch.len];
            let bytes: usize = round.iter().map(|m| m.bytes).sum();
            if !self.pacer.wait(bytes as u64, interrupt) {
                return Err(SendError::Interrupted { resume_at: pos });
            }
            let (done, how) = self.flush(interrupt);
            let bytes: usize = self.scratch.info[..done].iter().map(|m| m.bytes).sum();
            self.pacer.record(bytes as u64);
            pos = match how {
                RoundEnd::Done => end,
                RoundEnd::GsoRefused(k) => self.scratch.info[k].pos,
                RoundEnd::Interrupted(k) => {
                    let resume_at = self.scratch.info[k].pos;
                    return Err(SendError::Interrupted { resume_at });
                }
            };
        }
        Ok(())
    }

    /// Checks that the kernel knows `UDP_SEGMENT` (setting 0 keeps it off per socket;
    /// each GSO send sets its segment size in a control message).
    fn probe_gso(&self) -> Result<(), i32> {
        let zero: libc::c_int = 0;
        // SAFETY: setsockopt on our open socket with a valid pointer to a c_int and its size.
        let rc = unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_UDP,
                UDP_SEGMENT,
                (&zero as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    }

    fn refuse_gso(&mut self, errno: i32) {
        self.gso = false;
        self.gso_refusal = Some(errno);
        self.stats.gso_fallbacks.add(1);
    }

    /// Fills the scratch arrays with messages from position `pos` and returns the
    /// position after the last datagram placed.
    fn build<D: Datagrams + ?Sized>(&mut self, data: &D, mut pos: usize, total: usize) -> usize {
        let n = data.count();
        let budget = self.pacer.chunk_bytes();
        let s = &mut self.scratch;
        let (mut msgs, mut iovs, mut bytes) = (0, 0, 0usize);
        while pos < total && msgs < MAX_MSGS && iovs < MAX_MSGS {
            let (dest, first) = (pos / n, pos % n);
            let end = n.min(first + (MAX_MSGS - iovs));
            let run = if self.gso {
                gso_run(data, first, end)
            } else {
                1
            };
            // Trim the run to the pacing budget; a round always carries one datagram.
            let (mut count, mut len) = (0, 0);
            while count < run {
                let l = data.datagram(first + count).len();
                if bytes + len + l > budget && (msgs > 0 || count > 0) {
                    break;
                }
                len += l;
                count += 1;
            }
            if count == 0 {
                break;
            }
            for (i, iov) in s.iovs[iovs..iovs + count].iter_mut().enumerate() {
                let d = data.datagram(first + i);
                iov.iov_base = d.as_ptr() as *mut libc::c_void;
                iov.iov_len = d.len();
            }
            let hdr = &mut s.msgs[msgs].msg_hdr;
            hdr.msg_name = self.dests[dest].as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = self.dests[dest].len();
            hdr.msg_iov = s.iovs[iovs..].as_mut_ptr();
            hdr.msg_iovlen = count;
            if count > 1 {
                let seg = data.datagram(first).len();
                s.cmsgs[msgs].segment = seg as u16; // seg ≤ GSO_MAX_BYTES / 2
                hdr.msg_control = (&mut s.cmsgs[msgs] as *mut GsoCmsg).cast();
                hdr.msg_controllen = std::mem::size_of::<GsoCmsg>();
            } else {
                hdr.msg_control = std::ptr::null_mut();
                hdr.msg_controllen = 0;
            }
            s.info[msgs] = MsgInfo {
                pos,
                datagrams: count,
                bytes: len,
            };
            msgs += 1;
            iovs += count;
            bytes += len;
            pos += count;
            if bytes >= budget {
                break;
            }
        }
        s.len = msgs;
        pos
    }

    /// Sends the built messages; returns how many were dealt with and why it stopped.
    fn flush(&mut self, interrupt: &Interrupt) -> (usize, RoundEnd) {
        let fd = self.socket.as_raw_fd();
        let len = self.scratch.len;
        let (mut k, mut refused) = (0, 0);
        let mut stalled_since: Option<Instant> = None;
        while k < len {
            // SAFETY: msgs[k..len] were filled by build() with pointers into the batch
            // (alive for this call), self.dests and self.scratch, none moved since.
            let rc = unsafe {
                libc::sendmmsg(
                    fd,
                    self.scratch.msgs.as_mut_ptr().add(k),
                    (len - k) as libc::c_uint,
                    0,
                )
            };
            if rc > 0 {
                let sent = rc as usize;
                self.count_sent(k, k + sent);
                k += sent;
                (refused, stalled_since) = (0, None);
                continue;
            }
            let errno = if rc == 0 {
                libc::EAGAIN
            } else {
                io::Error::last_os_error().raw_os_error().unwrap_or(0)
            };
            let info = self.scratch.info[k];
            match errno {
                libc::EINTR => {}
                libc::EAGAIN | libc::ENOBUFS => {
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > STALL_LIMIT {
                        self.count_failed(k, errno);
                        k += 1;
                        stalled_since = None;
                    } else if !self.wait_writable(errno, interrupt) {
                        return (k, RoundEnd::Interrupted(k));
                    }
                }
                libc::ECONNREFUSED => {
                    // An ICMP port unreachable for an earlier datagram; this one was not
                    // sent, and the socket error is now consumed, so try it again.
                    self.stats.errors.add(1);
                    self.last_error = Some(errno);
                    refused += 1;
                    if refused > REFUSED_RETRIES {
                        self.count_failed(k, errno);
                        k += 1;
                        refused = 0;
                    }
                }
                // GSO refused: no support (ENOPROTOOPT, EOPNOTSUPP), no checksum offload
                // on the device (EIO), or segments larger than the path MTU (EINVAL
                // before Linux 6.5, EMSGSIZE since), which plain sends fragment.
                libc::EINVAL
                | libc::EIO
                | libc::ENOPROTOOPT
                | libc::EOPNOTSUPP
                | libc::EMSGSIZE
                    if info.datagrams > 1 =>
                {
                    self.refuse_gso(errno);
                    return (k, RoundEnd::GsoRefused(k));
                }
                _ => {
                    self.count_failed(k, errno);
                    k += 1;
                }
            }
        }
        (k, RoundEnd::Done)
    }

    /// Waits a little for room in the socket buffer (`EAGAIN`) or in the device queue
    /// (`ENOBUFS`, which poll cannot see). Returns false if interrupted.
    fn wait_writable(&self, errno: i32, interrupt: &Interrupt) -> bool {
        if errno == libc::ENOBUFS {
            return interrupt.sleep_until(Instant::now() + Duration::from_micros(200));
        }
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a short timeout so the interrupt flag is seen.
        unsafe { libc::poll(&mut pfd, 1, 5) };
        !interrupt.is_set()
    }

    fn count_sent(&self, from: usize, to: usize) {
        let info = &self.scratch.info[from..to];
        let datagrams: usize = info.iter().map(|m| m.datagrams).sum();
        let bytes: usize = info.iter().map(|m| m.bytes).sum();
        let gso = info.iter().filter(|m| m.datagrams > 1).count();
        self.stats.packets.add(datagrams as u64);
        self.stats.bytes.add(bytes as u64);
        self.stats.gso_sends.add(gso as u64);
    }

    fn count_failed(&mut self, k: usize, errno: i32) {
        self.stats.errors.add(self.scratch.info[k].datagrams as u64);
        self.last_error = Some(errno);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::sync::Arc;

    fn sizes(v: &[usize]) -> Vec<Vec<u8>> {
        v.iter().map(|&n| vec![0u8; n]).collect()
    }

    #[test]
    fn cmsg_layout_matches_the_kernel() {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let (space, len) = unsafe { (libc::CMSG_SPACE(2), libc::CMSG_LEN(2)) };
        assert_eq!(std::mem::size_of::<GsoCmsg>(), space as usize);
        assert_eq!(std::mem::offset_of!(GsoCmsg, segment) + 2, len as usize);
    }

    #[test]
    fn gso_runs_group_equal_sizes_with_a_short_tail() {
        let d = sizes(&[1000, 1000, 1000, 400, 1000, 1000]);
        assert_eq!(
            gso_run(d.as_slice(), 0, d.len()),
            4,
            "short tail ends the run"
        );
        assert_eq!(gso_run(d.as_slice(), 4, d.len()), 2);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 2, "end bounds the run");
        let d = sizes(&[500, 1000]);
        assert_eq!(
            gso_run(d.as_slice(), 0, 2),
            1,
            "a longer datagram is not a segment"
        );
        let d = sizes(&[0, 0]);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 1, "empty datagrams go alone");
    }

    #[test]
    fn gso_runs_respect_segment_and_byte_limits() {
        let d = sizes(&[100; 100]);
        assert_eq!(gso_run(d.as_slice(), 0, 100), GSO_MAX_SEGMENTS);
        let d = sizes(&[9000; 10]);
        assert_eq!(
            gso_run(d.as_slice(), 0, 10),
            7,
            "7 × 9000 ≤ 65507 < 8 × 9000"
        );
        let d = sizes(&[40000, 40000]);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 1);
    }

    #[test]
    fn pacer_math() {
        let p = Pacer::new(10_000_000, 0);
        assert_eq!(p.duration_of(1_250_000), Duration::from_secs(1));
        let p = Pacer::new(1_000_000_000, 65536);
        assert_eq!(p.duration_of(125), Duration::from_micros(1));
        assert_eq!(p.chunk_bytes(), 65536);
        assert!(!Pacer::new(0, 10).is_paced());
        assert_eq!(Pacer::new(0, 10).chunk_bytes(), usize::MAX);
        assert_eq!(Pacer::new(1, 0).chunk_bytes(), 1);
    }

    #[test]
    fn pacer_deadlines_follow_cumulative_bytes() {
        let mut p = Pacer::new(8_000_000, 1000); // 1 byte per µs
        let t0 = Instant::now();
        assert_eq!(p.deadline(t0, 600), t0, "the burst allowance goes at once");
        p.record(600);
        assert_eq!(p.deadline(t0, 400), t0);
        p.record(400);
        assert_eq!(p.deadline(t0, 500), t0 + Duration::from_micros(500));
        p.record(500);
        // Asked late (but within the catch-up window): the target does not move.
        let late = t0 + Duration::from_millis(5);
        assert_eq!(p.deadline(late, 500), t0 + Duration::from_micros(1000));
        // A send larger than the burst waits for its excess even at the start.
        let mut q = Pacer::new(8_000_000, 100);
        assert_eq!(q.deadline(t0, 300), t0 + Duration::from_micros(200));
    }

    #[test]
    fn pacer_moves_the_schedule_after_a_long_stall() {
        let mut p = Pacer::new(8_000_000, 0);
        let t0 = Instant::now();
        p.deadline(t0, 1000);
        p.record(1000); // was due at t0 + 1 ms
        let now = t0 + Duration::from_secs(1);
        assert_eq!(p.deadline(now, 1000), now - MAX_CATCH_UP);
        p.record(1000);
        let next = p.deadline(now, 1000);
        assert_eq!(next, now - MAX_CATCH_UP + Duration::from_millis(1));
    }

    #[test]
    fn interrupt_cuts_a_sleep_short() {
        let i = Arc::new(Interrupt::default());
        let i2 = i.clone();
        let t = std::thread::spawn(move || {
            let t0 = Instant::now();
            let slept = i2.sleep_until(t0 + Duration::from_secs(10));
            (slept, t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        i.interrupt();
        let (slept, took) = t.join().unwrap();
        assert!(!slept);
        assert!(took < Duration::from_secs(2));
        i.clear();
        assert!(i.sleep_until(Instant::now() + Duration::from_millis(1)));
    }

    fn receiver() -> UdpSocket {
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        r
    }

    fn recv_all(r: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 65536];
        (0..n)
            .map(|_| {
                let len = r.recv(&mut buf).expect("datagram");
                buf[..len].to_vec()
            })
            .collect()
    }

    fn batch(lens: &[usize]) -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect()
    }

    #[test]
    fn sends_gso_runs_and_plain_datagrams_alike() {
        let data = batch(&[1200, 1200, 1200, 300, 50, 1200, 1200, 0, 9000]);
        for gso in [true, false] {
            let r = receiver();
            let stats = Arc::new(SendStats::default());
            let cfg = SenderConfig {
                destinations: vec![r.local_addr().unwrap()],
                gso,
                ..Default::default()
            };
            let mut s = UdpSender::new(&cfg, stats.clone()).unwrap();
            s.send(data.as_slice(), 0, &Interrupt::default()).unwrap();
            assert_eq!(recv_all(&r, data.len()), data, "gso={gso}");
            assert_eq!(stats.packets.get(), data.len() as u64);
            assert_eq!(stats.errors.get(), 0);
            if gso {
                assert!(s.gso_active(), "UDP GSO works on loopback since Linux 4.18");
                assert_eq!(stats.gso_sends.get(), 2);
            } else {
                assert_eq!(stats.gso_sends.get(), 0);
            }
        }
    }

    #[test]
    fn too_large_is_refused_before_sending() {
        let r = receiver();
        let cfg = SenderConfig {
            destinations: vec![r.local_addr().unwrap()],
            ..Default::default()
        };
        let mut s = UdpSender::new(&cfg, Arc::default()).unwrap();
        let data = batch(&[10, 70000]);
        let e = s.send(data.as_slice(), 0, &Interrupt::default());
        assert_eq!(
            e,
            Err(SendError::TooLarge {
                index: 1,
                size: 70000,
                max: MAX_PAYLOAD_V4
            })
        );
    }

    #[test]
    fn interrupted_paced_send_resumes_where_it_stopped() {
        let r = receiver();
        let cfg = SenderConfig {
            destinations: vec![r.local_addr().unwrap()],
            rate_bps: 8_000, // 1 kB/s
            burst_bytes: 100,
            ..Default::default()
        };
        let mut s = UdpSender::new(&cfg, Arc::default()).unwrap();
        let data = batch(&[100, 100, 100]);
        let stop = Interrupt::default();
        // The first datagram is the burst; the second is due 100 ms later.
        let first = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                stop.interrupt();
            });
            s.send(data.as_slice(), 0, &stop)
        });
        assert_eq!(first, Err(SendError::Interrupted { resume_at: 1 }));
        stop.clear();
        s.pacer_mut().reset();
        let t0 = Instant::now();
        s.send(data.as_slice(), 1, &stop).unwrap();
        // After the reset: one datagram of burst, then one 100 ms later.
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(95) && took < Duration::from_secs(1),
            "{took:?}"
        );
        assert_eq!(recv_all(&r, 3), data);
    }
}
