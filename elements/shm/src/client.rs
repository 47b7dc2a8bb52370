//! The consumer's engine: connect, map the segments the producer announces read-only,
//! and hand out each buffer as a view into them ([`BufferView`]) that sends its release
//! message when dropped. No GStreamer: `fhshmsrc` wraps the views as `GstMemory`.
//!
//! Every message is checked ([`proto::Consumer`]): a segment's descriptor must be a
//! memfd sealed against shrinking, and its claimed size no more than the file's (a
//! mapping past the end of a file faults on access), a buffer's range within its
//! segment. A lie ends the connection with an
//! error that says what was wrong.
//!
//! With a version 3 producer the consumer asks for rings ([`crate::ring`]; unless
//! [`RING_ENV`] is `0` or [`Client::set_ring`] says no): packets then come from its
//! message ring, releases go into its release ring, and the socket is read only when
//! the ring is empty, or when a sync record in the ring says a socket packet comes
//! first. A consumer whose ring is empty naps a few times ([`NAPS`] of [`NAP_NS`]:
//! [`Client::nap_ns`] tells the caller how long to wait) before it announces that it
//! sleeps, after which the producer wakes it on the socket.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::proto::{self, BufferMsg, Msg, OnFull, ProtoError};
use crate::ring::{self, ConsumerRing, Record, ReleaseRing};
use crate::wire::{self, Address, Received};

/// An environment variable: `0` keeps consumers of this crate off the rings (every
/// message on the socket, as with protocol version 2; for comparisons).
pub const RING_ENV: &str = "FIREHOSE_SHM_RING";

/// How long a consumer whose ring is empty waits before it looks again, without
/// announcing that it sleeps (the producer sends no wake-up for it).
pub const NAP_NS: u64 = 50_000;

/// Naps in a row before the consumer announces that it sleeps and waits to be woken.
pub const NAPS: u32 = 20;

/// An environment variable: the nap in microseconds instead of [`NAP_NS`] (for
/// measurements: shorter naps cost more `ppoll` calls, longer ones more latency).
pub const NAP_ENV: &str = "FIREHOSE_SHM_NAP_US";

/// The nap: [`NAP_ENV`] if set, else [`NAP_NS`].
fn nap_setting() -> u64 {
    std::env::var(NAP_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(NAP_NS, |us| us.max(1) * 1000)
}

/// A segment mapped read-only; unmapped when the last view into it is gone.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a read-only mapping owned by this value; only shared reads happen through it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` read-only, after checking that the file is sealed
    /// against shrinking ([`wire::check_sealed`]) and is that large (in that order: once
    /// sealed, the size read is the size for good).
    pub fn new(fd: BorrowedFd<'_>, len: u64) -> Result<Self, ClientError> {
        wire::check_sealed(fd).map_err(|why| {
            ClientError::Protocol(ProtoError::Invalid(format!(
                "a segment of {len} bytes: {why}"
            )))
        })?;
        let actual = wire::file_size(fd).map_err(ClientError::Io)?;
        if actual < len {
            return Err(ClientError::Protocol(ProtoError::Invalid(format!(
                "a segment announced as {len} bytes whose file has {actual}"
            ))));
        }
        let len = usize::try_from(len).map_err(|_| {
            ClientError::Protocol(ProtoError::Invalid(format!("segment of {len} bytes")))
        })?;
        // SAFETY: maps a descriptor we were given, read-only, at no fixed address; the
        // result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ClientError::Io(io::Error::last_os_error()));
        }
        Ok(Self {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.len, "checked by proto::Consumer");
        // SAFETY: within the mapping (asserted), which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; no view outlives this (they hold an Arc).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A release in the batch older than this at a poll is sent then, full batch or not.
const RELEASE_DELAY: Duration = Duration::from_millis(1);

/// An environment variable that, when set to a number, is every consumer's release
/// batch unless [`Client::set_release_batch`] sets one (1: a message per buffer, as
/// before batching; for measurements: `firehose bench shm` under it shows what
/// batching saves). The Python package reads it too.
pub const RELEASE_BATCH_ENV: &str = "FIREHOSE_SHM_RELEASE_BATCH";

/// Fewest unread releases that wake a producer that is not asleep (see
/// [`crate::ring::ReleaseRing::backlog`]).
const BACKLOG_FLOOR: u64 = 8;

/// Most buffers one release message names when nothing else limits the batch.
pub const DEFAULT_RELEASE_BATCH: usize = 16;

/// The release batch for a consumer that may hold `max_held` buffers: an eighth of
/// them (at least 1, at most [`DEFAULT_RELEASE_BATCH`]), so that releases waiting in the
/// batch tie up little of what the producer lets it hold (and of the producer's pool,
/// which the consumer cannot see: `fhshmsink`'s copy pool has 16 slots by default).
pub fn release_batch(max_held: u32) -> usize {
    (max_held as usize / 8).clamp(1, DEFAULT_RELEASE_BATCH)
}

#[derive(Debug)]
struct Pending {
    seqs: Vec<u64>,
    /// When the oldest of `seqs` was released.
    since: Option<Instant>,
    out: Vec<u8>,
    /// Release messages sent, and the buffers they named.
    messages: u64,
    released: u64,
    /// The release ring, once the producer passed it.
    ring: Option<ReleaseRing>,
    /// Releases written into it, and wake-ups sent to the producer.
    ring_released: u64,
    wakes: u64,
}

/// Sends release messages in batches: one message names every buffer released since
/// the last one, while the consumer is behind (messages wait in its socket). A batch
/// goes when it holds [`Releaser::batch`] buffers, at a poll once its oldest release is
/// [`RELEASE_DELAY`] old, and whenever the receive loop finds nothing to read: it is
/// about to wait, so nothing may wait with it, and it is idle ([`Releaser::set_idle`])
/// until its next poll: a buffer released then (on another thread) goes at once. So a
/// consumer that keeps up sends a release per buffer, one that falls behind one per
/// batch. Releases that find the socket full stay in the batch.
///
/// One short lock per release (a push, and a non-blocking `send` for the release that
/// fills a batch), never held while waiting.
#[derive(Debug)]
pub struct Releaser {
    fd: Arc<OwnedFd>,
    pending: Mutex<Pending>,
    has_pending: AtomicBool,
    /// The receive loop is waiting (or nobody polls): a release is sent at once.
    idle: AtomicBool,
    batch: AtomicUsize,
}

impl Releaser {
    fn new(fd: Arc<OwnedFd>) -> Self {
        Self {
            fd,
            pending: Mutex::new(Pending {
                seqs: Vec::with_capacity(proto::MAX_RELEASE),
                since: None,
                out: Vec::with_capacity(16 + 8 * proto::MAX_RELEASE),
                messages: 0,
                released: 0,
                ring: None,
                ring_released: 0,
                wakes: 0,
            }),
            has_pending: AtomicBool::new(false),
            idle: AtomicBool::new(true),
            batch: AtomicUsize::new(DEFAULT_RELEASE_BATCH),
        }
    }

    /// Buffers one release message names at most (1: one message per buffer).
    pub fn batch(&self) -> usize {
        self.batch.load(Ordering::Relaxed)
    }

    /// Sets [`Releaser::batch`] (at least 1, at most [`proto::MAX_RELEASE`]).
    pub fn set_batch(&self, n: usize) {
        self.batch
            .store(n.clamp(1, proto::MAX_RELEASE), Ordering::Relaxed);
    }

    fn release(&self, seq: u64) {
        let mut p = firehose_core::sync::lock(&self.pending);
        let p = &mut *p;
        if let Some(r) = p.ring.as_mut() {
            if r.push(seq) {
                p.ring_released += 1;
                // The backlog threshold has a floor: a consumer with a release batch
                // of 1 (max-held under 16) would otherwise wake the producer for
                // nearly every buffer while it polls its rings anyway.
                let backlog = (self.batch() as u64).max(BACKLOG_FLOOR);
                if r.producer_asleep() || r.backlog(backlog) {
                    // Whatever woke it, the next backlog wake-up counts from here.
                    r.woke();
                    // Gone or full: either way there is nothing more to do.
                    if wire::send(self.fd.as_fd(), proto::WAKE_PACKET, None).is_ok() {
                        p.wakes += 1;
                    }
                }
                return;
            }
            // The ring is full: a release message, as without rings.
        }
        p.seqs.push(seq);
        if p.since.is_none() {
            p.since = Some(Instant::now());
        }
        // SeqCst, against `set_idle`'s: either this sees the loop idle and sends, or
        // the loop's flush after it went idle sees this release.
        if p.seqs.len() >= self.batch() || self.idle.load(Ordering::SeqCst) {
            self.send_locked(p);
        }
        self.has_pending
            .store(!p.seqs.is_empty(), Ordering::Release);
    }

    /// Marks the receive loop as waiting (`true`: releases go at once, and the batch is
    /// sent now) or receiving again (`false`: releases wait for a batch).
    pub fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::SeqCst);
        if idle {
            self.flush(true);
        }
    }

    /// Sends the batch if `all`, or if it is full or its oldest release is
    /// [`RELEASE_DELAY`] old.
    pub fn flush(&self, all: bool) {
        if !self.has_pending.load(Ordering::Acquire) && !all {
            return;
        }
        let mut p = firehose_core::sync::lock(&self.pending);
        let due = all
            || p.seqs.len() >= self.batch()
            || p.since.is_some_and(|t| t.elapsed() >= RELEASE_DELAY);
        if due {
            self.send_locked(&mut p);
        }
        self.has_pending
            .store(!p.seqs.is_empty(), Ordering::Release);
    }

    /// Whether releases wait in the batch.
    pub fn has_pending(&self) -> bool {
        self.has_pending.load(Ordering::Acquire)
    }

    /// Release messages sent, and the buffers they named.
    pub fn counts(&self) -> (u64, u64) {
        let p = firehose_core::sync::lock(&self.pending);
        (p.messages, p.released)
    }

    /// Releases written into the release ring, and wake-ups sent to the producer.
    pub fn ring_counts(&self) -> (u64, u64) {
        let p = firehose_core::sync::lock(&self.pending);
        (p.ring_released, p.wakes)
    }

    fn send_locked(&self, p: &mut Pending) {
        while !p.seqs.is_empty() {
            let n = p.seqs.len().min(proto::MAX_RELEASE);
            let Pending { seqs, out, .. } = &mut *p;
            proto::encode_release(&seqs[..n], out).expect("within the cap");
            match wire::send(self.fd.as_fd(), out, None) {
                // Full: stays in the batch for the next flush.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                r => {
                    if r.is_ok() {
                        p.messages += 1;
                        p.released += n as u64;
                    }
                    // Sent, or the producer is gone: nothing to give back to.
                    p.seqs.drain(..n);
                }
            }
        }
        p.since = None;
    }
}

/// One buffer: a read-only view of its bytes in the segment, and its message (times,
/// flags, metas, buffers missed before it). Dropping it releases it to the producer.
#[derive(Debug)]
pub struct BufferView {
    /// What the producer said of the buffer.
    pub msg: BufferMsg,
    mapping: Arc<Mapping>,
    releaser: Arc<Releaser>,
}

impl AsRef<[u8]> for BufferView {
    fn as_ref(&self) -> &[u8] {
        self.mapping
            .bytes(self.msg.offset as usize, self.msg.len as usize)
    }
}

impl Drop for BufferView {
    fn drop(&mut self) {
        self.releaser.release(self.msg.seq);
    }
}

/// What the consumer reads from the producer.
#[derive(Debug)]
pub enum Event {
    /// Caps of the buffers that follow.
    Caps(String),
    /// A buffer.
    Buffer(BufferView),
    /// End of stream.
    Eos,
    /// The producer failed: its message.
    Error(String),
}

/// What one message gives [`Client::poll_event`].
enum Step {
    /// An event for the caller.
    Event(Event),
    /// The hello: back to the caller, who may be waiting for just this.
    Hello,
    /// Nothing for the caller (a segment): read on.
    More,
}

/// Why the connection ended badly.
#[derive(Debug)]
pub enum ClientError {
    /// The producer broke the protocol.
    Protocol(ProtoError),
    /// The socket failed.
    Io(io::Error),
    /// The producer closed the connection without EOS (it stopped or crashed).
    Closed,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Protocol(e) => write!(f, "the producer broke the protocol: {e}"),
            Self::Io(e) => write!(f, "the connection to the producer failed: {e}"),
            Self::Closed => write!(
                f,
                "the producer closed the connection without end-of-stream (it stopped or \
                 crashed)"
            ),
        }
    }
}

impl std::error::Error for ClientError {}

/// A connection to a producer.
#[derive(Debug)]
pub struct Client {
    fd: Arc<OwnedFd>,
    state: proto::Consumer,
    maps: HashMap<u32, Arc<Mapping>>,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
    releaser: Arc<Releaser>,
    hello: Option<(u64, OnFull, u32)>,
    /// The max-held this consumer asked for (0: the producer's).
    asked_held: u32,
    /// The release batch asked for ([`Client::set_release_batch`]), if any.
    release_batch: Option<usize>,
    /// Messages of the last batch not yet read: where the next one's length is in
    /// `buf`, and how many are left.
    batch_at: usize,
    batch_left: usize,
    /// Packets received, and how many of them were batches.
    packets: u64,
    batches: u64,
    /// Whether to ask a version 3 producer for rings.
    want_ring: bool,
    /// The message ring, once the producer passed it.
    ring: Option<ConsumerRing>,
    /// Socket packets read, and how many must have been read before the ring is read
    /// on (a sync record).
    sock_read: u64,
    sync_to: u64,
    /// Packets read from the ring.
    ring_packets: u64,
    /// Naps since the last packet; whether the caller should nap (no wake-up comes).
    naps: u32,
    nap: bool,
    nap_ns: u64,
}

impl Client {
    /// Connects to the producer at `addr`.
    pub fn connect(addr: &Address) -> io::Result<Self> {
        Self::subscribe(addr, None)
    }

    /// Connects to the producer at `addr`, asking for this consumer's own back-pressure
    /// (`on-full` and buffers held, 0: the producer's limit) instead of the producer's
    /// default. The producer applies it when it reads it, right after the set-up.
    pub fn subscribe(addr: &Address, mode: Option<(OnFull, u32)>) -> io::Result<Self> {
        let fd = Arc::new(wire::connect(addr)?);
        if let Some((on_full, max_held)) = mode {
            let mut out = Vec::new();
            proto::encode(&Msg::Subscribe { on_full, max_held }, &mut out)
                .expect("a subscribe fits");
            wire::send(fd.as_fd(), &out, None)?;
        }
        Ok(Self {
            releaser: Arc::new(Releaser::new(fd.clone())),
            asked_held: mode.map_or(0, |(_, n)| n),
            release_batch: std::env::var(RELEASE_BATCH_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
            fd,
            state: Default::default(),
            maps: HashMap::new(),
            buf: vec![0; proto::MAX_MESSAGE],
            fds: Vec::new(),
            hello: None,
            batch_at: 0,
            batch_left: 0,
            packets: 0,
            batches: 0,
            want_ring: std::env::var(RING_ENV).map_or(true, |v| v != "0"),
            ring: None,
            sock_read: 0,
            sync_to: 0,
            ring_packets: 0,
            naps: 0,
            nap: false,
            nap_ns: nap_setting(),
        })
    }

    /// The socket, to wait on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What the producer said in its hello: this consumer's number, its back-pressure
    /// and the buffers it may hold at once.
    pub fn hello(&self) -> Option<(u64, OnFull, u32)> {
        self.hello
    }

    /// Segments mapped now.
    pub fn segments(&self) -> usize {
        self.maps.len()
    }

    /// Sends every release waiting in the batch now.
    pub fn flush_releases(&self) {
        self.releaser.flush(true);
    }

    /// Packets received from the producer, and how many of them were batches of
    /// several messages.
    pub fn packet_counts(&self) -> (u64, u64) {
        (self.packets, self.batches)
    }

    /// Packets read from the ring (of [`Client::packet_counts`]'s), and whether the
    /// producer passed rings.
    pub fn ring_packets(&self) -> (u64, bool) {
        (self.ring_packets, self.ring.is_some())
    }

    /// Whether to ask a version 3 producer for rings (before its hello is read; by
    /// default yes unless [`RING_ENV`] is `0`).
    pub fn set_ring(&mut self, on: bool) {
        self.want_ring = on;
    }

    /// After [`Client::poll_event`] returned nothing: `Some(ns)` when the caller should
    /// look again within `ns` nanoseconds (the consumer naps: nobody will wake it),
    /// `None` when it may wait on [`Client::fd`] for as long as it likes.
    pub fn nap_ns(&self) -> Option<u64> {
        self.nap.then_some(self.nap_ns)
    }

    /// What sends this consumer's releases (its batch size and counts).
    pub fn releaser(&self) -> &Releaser {
        &self.releaser
    }

    /// Buffers one release message may name (1: a message per buffer, as before
    /// batching); by default [`release_batch`] of this consumer's max-held, set when the
    /// hello comes.
    pub fn set_release_batch(&mut self, n: usize) {
        self.release_batch = Some(n);
        self.releaser.set_batch(n);
    }

    /// The next event, without waiting (`Ok(None)`: nothing yet, or only the hello;
    /// wait on [`Client::fd`] for `POLLIN`). Segments and the hello are handled here.
    ///
    /// Releases are batched while messages keep coming; finding nothing to read sends
    /// the batch and marks this consumer idle (releases go at once) until the next call.
    /// A buffer released after a poll that returned one stays in the batch until the
    /// next poll (or [`Client::flush_releases`]): keep polling, or flush.
    pub fn poll_event(&mut self) -> Result<Option<Event>, ClientError> {
        self.releaser.set_idle(false);
        self.releaser.flush(false);
        self.nap = false;
        if let Some(r) = &self.ring {
            r.wake();
        }
        loop {
            if self.batch_left > 0 {
                // The next message of the batch read last (its framing checked then).
                let at = self.batch_at;
                let n = u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("4")) as usize;
                self.batch_at = at + 4 + n;
                self.batch_left -= 1;
                let msg =
                    proto::decode(&self.buf[at + 4..at + 4 + n]).map_err(ClientError::Protocol)?;
                match self.handle(msg, 0)? {
                    Step::Event(e) => return Ok(Some(e)),
                    Step::Hello => return Ok(None),
                    Step::More => continue,
                }
            }
            // The ring first, unless a sync in it names socket packets not read yet.
            if let (Some(r), true) = (self.ring.as_mut(), self.sock_read >= self.sync_to) {
                match r.next(&mut self.buf) {
                    Ok(Some(Record::Sync(n))) => {
                        self.sync_to = self.sync_to.max(n);
                        continue;
                    }
                    Ok(Some(Record::Packet(n))) => {
                        self.ring_packets += 1;
                        self.naps = 0;
                        match self.packet(n, false)? {
                            Some(Step::Event(e)) => return Ok(Some(e)),
                            Some(Step::Hello) => return Ok(None),
                            _ => continue,
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(ClientError::Protocol(ProtoError::Invalid(format!(
                            "its message ring: {e}"
                        ))))
                    }
                }
            }
            self.fds.clear();
            let n = match wire::recv(self.fd.as_fd(), &mut self.buf, &mut self.fds) {
                Ok(Received::Message(n)) => n,
                Ok(Received::Nothing) => {
                    if self.sock_read < self.sync_to {
                        return Err(ClientError::Protocol(ProtoError::Invalid(format!(
                            "its ring names socket packet {} and only {} came",
                            self.sync_to, self.sock_read
                        ))));
                    }
                    if let Some(r) = self.ring.as_mut() {
                        if self.naps < NAPS {
                            // Nap: look again soon, no wake-up asked for.
                            self.naps += 1;
                            self.nap = true;
                        } else if !r.sleep() {
                            // A record came as it was about to sleep.
                            continue;
                        }
                    }
                    // The caller waits next: no release may wait with it, and one made
                    // while it waits (on another thread) goes at once.
                    self.releaser.set_idle(true);
                    return Ok(None);
                }
                Ok(Received::Closed) => return Err(ClientError::Closed),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(ClientError::Protocol(ProtoError::Invalid(e.to_string())))
                }
                Err(e) => return Err(ClientError::Io(e)),
            };
            self.sock_read += 1;
            match self.packet(n, true)? {
                Some(Step::Event(e)) => return Ok(Some(e)),
                // Back to the caller, who may be waiting for just this.
                Some(Step::Hello) => return Ok(None),
                _ => {}
            }
        }
    }

    /// One packet of `n` bytes in the buffer, from the socket (with `self.fds`) or the
    /// ring: a batch is checked and its reading begun (`None`: read on), a single
    /// message handled.
    fn packet(&mut self, n: usize, socket: bool) -> Result<Option<Step>, ClientError> {
        self.packets += 1;
        let fds = if socket { self.fds.len() } else { 0 };
        if proto::is_batch(&self.buf[..n]) {
            // Several messages: the whole framing is checked before any is read.
            let frames = proto::frames(&self.buf[..n]).map_err(ClientError::Protocol)?;
            if fds != 0 {
                return Err(ClientError::Protocol(ProtoError::Descriptors {
                    kind: "batch",
                    got: fds,
                }));
            }
            self.batches += 1;
            self.batch_left = frames.left();
            self.batch_at = 3;
            return Ok(None);
        }
        let msg = proto::decode(&self.buf[..n]).map_err(ClientError::Protocol)?;
        self.handle(msg, fds).map(Some)
    }

    /// Checks and acts on one message (`fds` descriptors came with it).
    fn handle(&mut self, msg: Msg, fds: usize) -> Result<Step, ClientError> {
        let msg = self.state.accept(msg, fds).map_err(ClientError::Protocol)?;
        {
            match msg {
                Msg::Hello {
                    version,
                    consumer,
                    on_full,
                    max_held,
                } => {
                    self.hello = Some((consumer, on_full, max_held));
                    if version >= 3 && self.want_ring {
                        let mut out = Vec::new();
                        proto::encode(&Msg::RingRequest, &mut out).expect("fits");
                        // A producer that is gone shows at the next read.
                        let _ = wire::send(self.fd.as_fd(), &out, None);
                    }
                    let held = match self.asked_held {
                        0 => max_held,
                        n => n.min(max_held),
                    };
                    self.releaser
                        .set_batch(self.release_batch.unwrap_or(release_batch(held)));
                    Ok(Step::Hello)
                }
                Msg::Segment { id, size } => {
                    let m = Mapping::new(self.fds[0].as_fd(), size)?;
                    self.maps.insert(id, Arc::new(m));
                    Ok(Step::More)
                }
                Msg::SegmentGone { id } => {
                    self.maps.remove(&id);
                    Ok(Step::More)
                }
                Msg::Ring { bytes, slots } => {
                    let (r, rel) =
                        ring::map_consumer(self.fds[0].as_fd(), self.fds[1].as_fd(), bytes, slots)
                            .map_err(|e| ClientError::Protocol(ProtoError::Invalid(e)))?;
                    self.ring = Some(r);
                    firehose_core::sync::lock(&self.releaser.pending).ring = Some(rel);
                    Ok(Step::More)
                }
                Msg::Wake => Ok(Step::More),
                Msg::Caps(c) => Ok(Step::Event(Event::Caps(c))),
                Msg::Eos => Ok(Step::Event(Event::Eos)),
                Msg::Error(e) => Ok(Step::Event(Event::Error(e))),
                Msg::Buffer(b) => {
                    let mapping = self.maps.get(&b.segment).expect("checked").clone();
                    Ok(Step::Event(Event::Buffer(BufferView {
                        msg: b,
                        mapping,
                        releaser: self.releaser.clone(),
                    })))
                }
                Msg::Release(_) | Msg::Subscribe { .. } | Msg::RingRequest => {
                    unreachable!("refused by accept")
                }
            }
        }
    }

    /// The next event, waiting up to `timeout_ms` (`Ok(None)` when none came).
    pub fn wait_event(&mut self, timeout_ms: i32) -> Result<Option<Event>, ClientError> {
        let end = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            if let Some(e) = self.poll_event()? {
                return Ok(Some(e));
            }
            let left = end.saturating_duration_since(Instant::now()).as_nanos() as u64;
            if left == 0 {
                return Ok(None);
            }
            let ns = self.nap_ns().map_or(left, |n| n.min(left));
            wire::wait_ns(self.fd.as_fd(), libc::POLLIN, ns).map_err(ClientError::Io)?;
        }
    }
}
