//! Rings of messages in shared memory, one pair per consumer (protocol version 3): the
//! producer's messages go into a ring the consumer maps read-only, the consumer's
//! releases into a ring of its own, and the unix socket carries only the set-up,
//! descriptors, what does not fit, and a wake-up when the reader announced that it
//! sleeps. No system call per buffer while both sides are busy. No GStreamer.
//!
//! Two memfd regions, both made by the producer, sealed against any change of size
//! (`firehose_core::provider::SharedSegment`), each a header page then data:
//!
//! | region | written by | header (u64 each, 64 bytes apart) | data |
//! |---|---|---|---|
//! | messages ([`ProducerRing`] writes, [`ConsumerRing`] reads) | the producer; passed to the consumer as a **read-only** descriptor, so it cannot map it writable | `head` (bytes written), `release-tail` (releases read), `producer-asleep` (epoch, 0: awake) | records: u32 length, u32 kind, the body, padded to 8 bytes |
//! | releases | the consumer (the producer treats every word of it as hostile) | `tail` (bytes of messages read), `release-head` (releases written), `consumer-asleep` (epoch, 0: awake) | u64 sequence numbers, one per slot |
//!
//! A record is a packet exactly as it would travel on the socket (one message or a
//! batch), a *sync* (the consumer must have read this many socket packets before it reads
//! on: socket packets, which carry descriptors or what did not fit, keep their place in
//! the order), or a wrap (the rest of the ring is skipped).
//!
//! Sleeping: a reader that finds its ring empty stores a new epoch in its `asleep` word,
//! then a `SeqCst` fence, then looks at the ring once more before it waits on the socket;
//! a writer stores its head, then a `SeqCst` fence, then reads the peer's `asleep` word,
//! and sends a wake-up on the socket only when it holds an epoch not woken yet (Dekker's
//! pattern: one of the two sees the other).
//!
//! Trust: the producer never trusts the release region. Every index read from it is
//! checked (a tail that goes backwards or past the head, a release head more than a ring
//! ahead or behind) and is a [`RingError`] that disconnects that consumer, naming the
//! field; a sequence number is only a claim, checked by the hub against what the consumer
//! holds. A consumer checks the producer's head and records as strictly.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use firehose_core::memory::MemoryRegion;
use firehose_core::provider::{MemoryProvider, SharedSegment};

/// Bytes of the message ring's data (a power of two).
pub const MESSAGE_BYTES: u32 = 256 * 1024;
/// Slots of the release ring (a power of two).
pub const RELEASE_SLOTS: u32 = 4096;
/// Largest message ring a consumer maps.
pub const MAX_MESSAGE_BYTES: u32 = 64 << 20;
/// Largest release ring a consumer maps.
pub const MAX_RELEASE_SLOTS: u32 = 1 << 20;
/// The header page before each region's data.
pub const HEADER: usize = 4096;

const HEAD: usize = 0;
const REL_TAIL: usize = 64;
const P_ASLEEP: usize = 128;
const TAIL: usize = 0;
const REL_HEAD: usize = 64;
const C_ASLEEP: usize = 128;

const RECORD_HEAD: usize = 8;
const KIND_PACKET: u32 = 1;
const KIND_SYNC: u32 = 2;
const KIND_WRAP: u32 = 3;

/// A peer's ring broke the rules: what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingError(pub String);

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RingError {}

fn lie(what: String) -> RingError {
    RingError(what)
}

/// The writer's half of the sleep handshake, after its records are written: true when
/// the peer announced in `asleep` an epoch (non-zero) not woken yet, which it then is
/// (the fence pairs with the peer's between announcing and looking once more).
fn asleep_unwoken(asleep: &AtomicU64, woken: &mut u64) -> bool {
    fence(Ordering::SeqCst);
    let e = asleep.load(Ordering::Relaxed);
    if e != 0 && e != *woken {
        *woken = e;
        return true;
    }
    false
}

fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

/// A mapped region: the producer's own (a [`MemoryRegion`]) or a consumer's mapping of
/// a descriptor it was given.
enum Map {
    Own(MemoryRegion),
    Mapped { ptr: NonNull<u8>, len: usize },
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ring region of {} bytes", self.len())
    }
}

// SAFETY: the mapping is owned by this value; shared access to it goes through atomics
// and copies (the other process writes it concurrently, which no Rust reference
// covers).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    fn ptr(&self) -> *mut u8 {
        match self {
            Self::Own(r) => r.as_ptr(),
            Self::Mapped { ptr, .. } => ptr.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Own(r) => r.len(),
            Self::Mapped { len, .. } => *len,
        }
    }

    /// Maps `len` bytes of `fd`, writable or not.
    fn of_fd(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Self> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: maps a descriptor we were given at no fixed address; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::Mapped {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    /// The u64 word at `off` (8-aligned, within the region), as an atomic.
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len(),
            "a word within the region"
        );
        // SAFETY: in bounds and aligned (asserted; the mapping is page-aligned); the
        // mapping lives as long as `self`. The other process writes the word
        // concurrently, so it is only ever read and written as an atomic. In a
        // read-only mapping (the consumer's message region) only `load` is used. Rust
        // documents that only for Relaxed loads no wider than a word; the Acquire
        // loads used here compile to the same plain load on x86-64 and aarch64 (the
        // targets we build for), so no write to the page can happen.
        unsafe { &*self.ptr().add(off).cast::<AtomicU64>() }
    }

    /// Copies `src` to `off` (writable regions only: the caller's own).
    fn write(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len(), "within the region");
        // SAFETY: in bounds (asserted); the writer owns these bytes until it publishes
        // them with a head store, and a reader copies them out only after that.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr().add(off), src.len()) }
    }

    /// Copies `dst.len()` bytes from `off` out.
    fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len(), "within the region");
        // SAFETY: in bounds (asserted); plain bytes, copied out before they are used.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if let Self::Mapped { ptr, len } = self {
            // SAFETY: exactly what mmap returned; nothing borrows it past `self`.
            unsafe {
                libc::munmap(ptr.as_ptr().cast(), *len);
            }
        }
    }
}

/// The producer's end of one consumer's rings.
#[derive(Debug)]
pub struct ProducerRing {
    msgs: Map,
    rels: Map,
    /// A read-only descriptor of the message region, for the consumer.
    msgs_ro: OwnedFd,
    size: u64,
    slots: u64,
    head: u64,
    /// The consumer's tail as last read (it only moves forward).
    tail: u64,
    rel_tail: u64,
    /// The consumer's sleep epoch woken last.
    woken: u64,
}

impl ProducerRing {
    /// New rings: `size` bytes of messages, `slots` releases (powers of two).
    pub fn new(size: u32, slots: u32) -> io::Result<Self> {
        assert!(size.is_power_of_two() && slots.is_power_of_two());
        let provider = SharedSegment::new("fhshm-ring");
        let make = |len: usize| {
            provider
                .allocate(len)
                .map_err(|e| io::Error::other(e.to_string()))
        };
        let msgs = make(HEADER + size as usize)?;
        let rels = make(HEADER + 8 * slots as usize)?;
        let fd = msgs.fd().expect("a shared segment has a descriptor");
        // A second open of the same memfd, read-only: the consumer can map it only
        // read-only (mmap of a read-only descriptor with PROT_WRITE and MAP_SHARED is
        // refused by the kernel).
        let msgs_ro: OwnedFd =
            std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?.into();
        Ok(Self {
            msgs: Map::Own(msgs),
            rels: Map::Own(rels),
            msgs_ro,
            size: size.into(),
            slots: slots.into(),
            head: 0,
            tail: 0,
            rel_tail: 0,
            woken: 0,
        })
    }

    /// Data bytes of the message ring, and release slots.
    pub fn sizes(&self) -> (u32, u32) {
        (self.size as u32, self.slots as u32)
    }

    /// The descriptors to pass: the message region (read-only), the release region.
    pub fn fds(&self) -> [BorrowedFd<'_>; 2] {
        let Map::Own(r) = &self.rels else {
            unreachable!("the producer's regions are its own")
        };
        [
            self.msgs_ro.as_fd(),
            r.fd().expect("a shared segment has a descriptor"),
        ]
    }

    /// Free bytes, from the consumer's tail (checked).
    fn free(&mut self) -> Result<u64, RingError> {
        let t = self.rels.word(TAIL).load(Ordering::Acquire);
        if t < self.tail || t > self.head {
            return Err(lie(format!(
                "its ring tail {t} is outside what it may have read ({} to {})",
                self.tail, self.head
            )));
        }
        self.tail = t;
        Ok(self.size - (self.head - t))
    }

    fn push(&mut self, kind: u32, body: &[u8]) -> Result<bool, RingError> {
        let len = pad8(RECORD_HEAD + body.len()) as u64;
        if len > self.size / 2 {
            return Ok(false);
        }
        let pos = self.head % self.size;
        let to_end = self.size - pos;
        let need = if len > to_end { to_end + len } else { len };
        if self.free()? < need {
            return Ok(false);
        }
        if len > to_end {
            self.write_head(pos, 0, KIND_WRAP);
            self.head += to_end;
        }
        let at = (self.head % self.size) as usize;
        self.write_head(at as u64, body.len() as u32, kind);
        self.msgs.write(HEADER + at + RECORD_HEAD, body);
        self.head += len;
        self.msgs.word(HEAD).store(self.head, Ordering::Release);
        Ok(true)
    }

    fn write_head(&self, at: u64, len: u32, kind: u32) {
        let mut h = [0u8; RECORD_HEAD];
        h[..4].copy_from_slice(&len.to_le_bytes());
        h[4..].copy_from_slice(&kind.to_le_bytes());
        self.msgs.write(HEADER + at as usize, &h);
    }

    /// Writes a packet (one message or a batch, as on the socket): `Ok(false)` when the
    /// ring has no room (send it on the socket then).
    pub fn push_packet(&mut self, packet: &[u8]) -> Result<bool, RingError> {
        self.push(KIND_PACKET, packet)
    }

    /// Writes a sync: the consumer reads socket packets until it has read `packets`.
    pub fn push_sync(&mut self, packets: u64) -> Result<bool, RingError> {
        self.push(KIND_SYNC, &packets.to_le_bytes())
    }

    /// After records were written: true when the consumer announced that it sleeps (an
    /// epoch not woken yet), so a wake-up must go on the socket.
    pub fn consumer_asleep(&mut self) -> bool {
        asleep_unwoken(self.rels.word(C_ASLEEP), &mut self.woken)
    }

    /// Appends the sequence numbers the consumer released since the last call to `out`
    /// (checked only for count: the hub checks each against what it holds).
    pub fn releases(&mut self, out: &mut Vec<u64>) -> Result<(), RingError> {
        let h = self.rels.word(REL_HEAD).load(Ordering::Acquire);
        if h == self.rel_tail {
            return Ok(());
        }
        if h < self.rel_tail || h - self.rel_tail > self.slots {
            return Err(lie(format!(
                "its release ring head {h} is outside {} to {}",
                self.rel_tail,
                self.rel_tail + self.slots
            )));
        }
        for i in self.rel_tail..h {
            let at = HEADER + 8 * (i % self.slots) as usize;
            out.push(self.rels.word(at).load(Ordering::Relaxed));
        }
        self.rel_tail = h;
        self.msgs.word(REL_TAIL).store(h, Ordering::Release);
        Ok(())
    }

    /// Announces that the producer sleeps (`epoch`, non-zero) or is awake (0). After an
    /// announcement, look at [`ProducerRing::releases`] once more before sleeping.
    pub fn set_asleep(&self, epoch: u64) {
        self.msgs.word(P_ASLEEP).store(epoch, Ordering::Relaxed);
        if epoch != 0 {
            fence(Ordering::SeqCst);
        }
    }

    /// Whether releases wait in the ring (after [`ProducerRing::set_asleep`]).
    pub fn has_releases(&self) -> bool {
        self.rels.word(REL_HEAD).load(Ordering::Acquire) != self.rel_tail
    }
}

/// What [`ConsumerRing::next`] read.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// A packet of this many bytes, copied to the start of the buffer.
    Packet(usize),
    /// Read socket packets until this many were read in all.
    Sync(u64),
}

/// The consumer's end of its rings: reads the producer's messages.
#[derive(Debug)]
pub struct ConsumerRing {
    msgs: std::sync::Arc<Map>,
    rels: std::sync::Arc<Map>,
    size: u64,
    tail: u64,
    epoch: u64,
}

/// The consumer's release ring: writes releases, wakes a producer that sleeps.
#[derive(Debug)]
pub struct ReleaseRing {
    msgs: std::sync::Arc<Map>,
    rels: std::sync::Arc<Map>,
    slots: u64,
    head: u64,
    woken: u64,
    /// The release head when the last backlog wake-up went.
    backlog_woken: u64,
}

/// Maps the rings the producer passed (`msgs` read-only, `rels` writable), after
/// checking their seals, sizes and the sizes claimed.
pub fn map_consumer(
    msgs: BorrowedFd<'_>,
    rels: BorrowedFd<'_>,
    size: u32,
    slots: u32,
) -> Result<(ConsumerRing, ReleaseRing), String> {
    if !size.is_power_of_two() || !(4096..=MAX_MESSAGE_BYTES).contains(&size) {
        return Err(format!(
            "a message ring of {size} bytes (a power of two, 4096 to {MAX_MESSAGE_BYTES})"
        ));
    }
    if !slots.is_power_of_two() || slots > MAX_RELEASE_SLOTS {
        return Err(format!(
            "a release ring of {slots} slots (a power of two up to {MAX_RELEASE_SLOTS})"
        ));
    }
    let want = [HEADER + size as usize, HEADER + 8 * slots as usize];
    for (fd, (len, what)) in [msgs, rels]
        .into_iter()
        .zip(want.into_iter().zip(["message", "release"]))
    {
        crate::wire::check_sealed(fd).map_err(|why| format!("the {what} ring: {why}"))?;
        let actual = crate::wire::file_size(fd).map_err(|e| e.to_string())?;
        if actual < len as u64 {
            return Err(format!(
                "the {what} ring needs {len} bytes, its file has {actual}"
            ));
        }
    }
    let m = std::sync::Arc::new(
        Map::of_fd(msgs, want[0], false).map_err(|e| format!("mapping the message ring: {e}"))?,
    );
    let r = std::sync::Arc::new(
        Map::of_fd(rels, want[1], true).map_err(|e| format!("mapping the release ring: {e}"))?,
    );
    let tail = r.word(TAIL).load(Ordering::Acquire);
    let head = r.word(REL_HEAD).load(Ordering::Acquire);
    Ok((
        ConsumerRing {
            msgs: m.clone(),
            rels: r.clone(),
            size: size.into(),
            tail,
            epoch: 0,
        },
        ReleaseRing {
            msgs: m,
            rels: r,
            slots: slots.into(),
            head,
            woken: 0,
            backlog_woken: head,
        },
    ))
}

impl ConsumerRing {
    fn head(&self) -> Result<u64, String> {
        let h = self.msgs.word(HEAD).load(Ordering::Acquire);
        if h < self.tail || h - self.tail > self.size {
            return Err(format!(
                "the producer's ring head {h} is outside {} to {}",
                self.tail,
                self.tail + self.size
            ));
        }
        Ok(h)
    }

    /// Whether a record waits.
    pub fn is_empty(&self) -> bool {
        self.msgs.word(HEAD).load(Ordering::Acquire) == self.tail
    }

    /// The next record, its body copied into `buf` (`Ok(None)`: empty). A record that
    /// does not fit the ring or `buf` is an error.
    pub fn next(&mut self, buf: &mut [u8]) -> Result<Option<Record>, String> {
        loop {
            let h = self.head()?;
            if h == self.tail {
                return Ok(None);
            }
            let pos = self.tail % self.size;
            let mut rh = [0u8; RECORD_HEAD];
            self.msgs.read(HEADER + pos as usize, &mut rh);
            let len = u32::from_le_bytes(rh[..4].try_into().expect("4")) as usize;
            let kind = u32::from_le_bytes(rh[4..].try_into().expect("4"));
            if kind == KIND_WRAP {
                self.tail += self.size - pos;
                self.publish();
                continue;
            }
            let rec = pad8(RECORD_HEAD + len) as u64;
            if pos + rec > self.size || self.tail + rec > h || len > buf.len() {
                return Err(format!(
                    "a ring record of {len} bytes at {pos} that does not fit the ring \
                     ({} bytes, {} written) or the largest message",
                    self.size,
                    h - self.tail
                ));
            }
            let at = HEADER + pos as usize + RECORD_HEAD;
            let r = match kind {
                KIND_PACKET => {
                    self.msgs.read(at, &mut buf[..len]);
                    Record::Packet(len)
                }
                KIND_SYNC if len == 8 => {
                    let mut b = [0u8; 8];
                    self.msgs.read(at, &mut b);
                    Record::Sync(u64::from_le_bytes(b))
                }
                k => return Err(format!("a ring record of kind {k} (length {len})")),
            };
            self.tail += rec;
            self.publish();
            return Ok(Some(r));
        }
    }

    fn publish(&self) {
        self.rels.word(TAIL).store(self.tail, Ordering::Release);
    }

    /// Announces that this consumer is about to sleep; false (and awake again) when a
    /// record came meanwhile: read on instead.
    pub fn sleep(&mut self) -> bool {
        self.epoch += 1;
        self.rels
            .word(C_ASLEEP)
            .store(self.epoch, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !self.is_empty() {
            self.wake();
            return false;
        }
        true
    }

    /// Announces that this consumer reads again. Only this consumer writes the word, so
    /// it is written only when set: an awake consumer (every poll calls this) does not
    /// take the producer's cached copy of the line away once per buffer.
    pub fn wake(&self) {
        let w = self.rels.word(C_ASLEEP);
        if w.load(Ordering::Relaxed) != 0 {
            w.store(0, Ordering::Relaxed);
        }
    }
}

impl ReleaseRing {
    /// Writes a release; false when the ring is full (send it on the socket then).
    pub fn push(&mut self, seq: u64) -> bool {
        let t = self.msgs.word(REL_TAIL).load(Ordering::Acquire);
        // A producer's tail past the head would be a lie: treat the ring as full.
        if t > self.head || self.head - t >= self.slots {
            return false;
        }
        let at = HEADER + 8 * (self.head % self.slots) as usize;
        self.rels.word(at).store(seq, Ordering::Relaxed);
        self.head += 1;
        self.rels.word(REL_HEAD).store(self.head, Ordering::Release);
        true
    }

    /// After releases were written: true when at least `n` of them wait unread by the
    /// producer and `n` more were written since the last wake-up ([`Self::woke`]). A producer
    /// that leaves that many unread is not reading them (its streaming thread may wait
    /// upstream for the very slots they free), asleep or not: one wake-up per `n`
    /// releases gets them back to it at once.
    pub fn backlog(&self, n: u64) -> bool {
        let t = self.msgs.word(REL_TAIL).load(Ordering::Acquire);
        let unread = self.head.saturating_sub(t);
        unread >= n && self.head - self.backlog_woken >= n
    }

    /// A wake-up went (for a backlog or a sleeping producer): the next backlog
    /// wake-up needs `n` more releases from here.
    pub fn woke(&mut self) {
        self.backlog_woken = self.head;
    }

    /// After releases were written: true when the producer announced that it sleeps (an
    /// epoch not woken yet), so a wake-up must go on the socket.
    pub fn producer_asleep(&mut self) -> bool {
        asleep_unwoken(self.msgs.word(P_ASLEEP), &mut self.woken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(size: u32, slots: u32) -> (ProducerRing, ConsumerRing, ReleaseRing) {
        let p = ProducerRing::new(size, slots).unwrap();
        let [m, r] = p.fds();
        let (c, rr) = map_consumer(m, r, size, slots).unwrap();
        (p, c, rr)
    }

    #[test]
    fn records_go_round_the_ring_in_order_and_wrap() {
        let (mut p, mut c, _) = pair(4096, 16);
        let mut buf = vec![0u8; 4096];
        let mut n = 0u32;
        for round in 0..200u32 {
            // Bodies of varied lengths, so records wrap at every offset.
            let body: Vec<u8> = (0..(round * 37 % 700) as usize)
                .map(|i| i as u8 ^ round as u8)
                .collect();
            assert!(p.push_packet(&body).unwrap(), "room at round {round}");
            if round % 7 == 0 {
                assert!(p.push_sync(u64::from(round)).unwrap());
            }
            assert_eq!(c.next(&mut buf).unwrap(), Some(Record::Packet(body.len())));
            assert_eq!(&buf[..body.len()], &body[..]);
            if round % 7 == 0 {
                assert_eq!(
                    c.next(&mut buf).unwrap(),
                    Some(Record::Sync(u64::from(round)))
                );
            }
            assert_eq!(c.next(&mut buf).unwrap(), None);
            n += 1;
        }
        assert_eq!(n, 200);
        assert!(p.head > 10 * 4096, "went round many times");
    }

    #[test]
    fn a_full_ring_refuses_and_takes_again_once_read() {
        let (mut p, mut c, _) = pair(4096, 16);
        let body = [7u8; 500];
        let mut written = 0;
        while p.push_packet(&body).unwrap() {
            written += 1;
        }
        assert_eq!(written, 4096 / 512, "full: the caller sends on the socket");
        assert!(
            !p.push_packet(&[1u8; 3000]).unwrap(),
            "more than half the ring: never"
        );
        let mut buf = vec![0u8; 4096];
        assert_eq!(c.next(&mut buf).unwrap(), Some(Record::Packet(500)));
        assert!(p.push_packet(&body).unwrap(), "room again");
        let mut read = 1;
        while let Some(r) = c.next(&mut buf).unwrap() {
            assert_eq!(r, Record::Packet(500));
            read += 1;
        }
        assert_eq!(read, written + 1, "nothing lost");
    }

    #[test]
    fn releases_round_trip_and_a_full_release_ring_says_so() {
        let (mut p, _, mut r) = pair(4096, 16);
        let mut out = Vec::new();
        for round in 0..10u64 {
            for i in 0..16 {
                assert!(r.push(round * 100 + i));
            }
            assert!(!r.push(1), "16 slots, full");
            out.clear();
            p.releases(&mut out).unwrap();
            assert_eq!(out, (0..16).map(|i| round * 100 + i).collect::<Vec<_>>());
        }
    }

    #[test]
    fn sleeping_peers_are_woken_once_per_sleep() {
        let (mut p, mut c, mut r) = pair(4096, 16);
        assert!(!p.consumer_asleep());
        assert!(c.sleep(), "empty: it sleeps");
        p.push_packet(b"x").unwrap();
        assert!(p.consumer_asleep(), "wake it");
        p.push_packet(b"y").unwrap();
        assert!(!p.consumer_asleep(), "once per sleep");
        c.wake();
        assert!(!c.sleep(), "records wait: it reads on instead");
        // Asleep, then awake again by itself before a record: no wake-up is due (wake
        // clears the word when set, and a second wake leaves it clear).
        while c.next(&mut [0u8; 64]).unwrap().is_some() {}
        assert!(c.sleep());
        c.wake();
        c.wake();
        p.push_packet(b"z").unwrap();
        assert!(!p.consumer_asleep(), "it woke by itself");
        while c.next(&mut [0u8; 64]).unwrap().is_some() {}
        assert!(c.sleep());
        p.push_packet(b"w").unwrap();
        assert!(p.consumer_asleep(), "asleep again: wake it");
        // The producer's side.
        p.set_asleep(5);
        assert!(!p.has_releases());
        r.push(1);
        assert!(r.producer_asleep());
        r.push(2);
        assert!(!r.producer_asleep(), "once per sleep");
        assert!(p.has_releases());
        p.set_asleep(0);
        r.push(3);
        assert!(!r.producer_asleep(), "awake");
        // A backlog: 4 unread releases ask for a wake-up once per 4.
        p.releases(&mut Vec::new()).unwrap();
        let wakes: Vec<bool> = (0..12)
            .map(|i| {
                r.push(i);
                let wake = r.backlog(4);
                if wake {
                    r.woke();
                }
                wake
            })
            .collect();
        assert_eq!(
            wakes,
            [false, false, false, true, false, false, false, true, false, false, false, true]
        );
        p.releases(&mut Vec::new()).unwrap();
        r.push(99);
        assert!(!r.backlog(4), "read: no backlog");
    }

    /// The consumer's words, written as a lying consumer would.
    fn lie_in(p: &ProducerRing, off: usize, v: u64) {
        p.rels.word(off).store(v, Ordering::Release);
    }

    #[test]
    fn a_lying_consumer_is_caught_by_every_index_it_writes() {
        let (mut p, mut c, _) = pair(4096, 16);
        let mut buf = vec![0u8; 4096];
        p.push_packet(&[1; 100]).unwrap();
        c.next(&mut buf).unwrap();
        // A tail past the head: would make the producer overwrite unread records.
        lie_in(&p, TAIL, 1 << 40);
        let e = p.push_packet(b"x").unwrap_err();
        assert!(e.0.contains("ring tail 1099511627776 is outside"), "{e}");
        // A tail that goes backwards.
        let (mut p, mut c, _) = pair(4096, 16);
        p.push_packet(&[1; 100]).unwrap();
        c.next(&mut buf).unwrap();
        p.push_packet(&[1; 100]).unwrap();
        lie_in(&p, TAIL, 0);
        assert!(p.push_packet(b"x").unwrap_err().0.contains("outside"));
        // A release head behind the tail, or more than a ring ahead.
        let (mut p, _, _) = pair(4096, 16);
        lie_in(&p, REL_HEAD, 17);
        let e = p.releases(&mut Vec::new()).unwrap_err();
        assert!(
            e.0.contains("release ring head 17 is outside 0 to 16"),
            "{e}"
        );
        let (mut p, _, mut r) = pair(4096, 16);
        for i in 0..4 {
            r.push(i);
        }
        p.releases(&mut Vec::new()).unwrap();
        lie_in(&p, REL_HEAD, 2);
        assert!(p.releases(&mut Vec::new()).is_err());
        // Garbage in the slots is only numbers: handed to the hub, which checks them.
        let (mut p, _, _) = pair(4096, 16);
        for i in 0..16 {
            lie_in(&p, HEADER + 8 * i, u64::MAX - i as u64);
        }
        lie_in(&p, REL_HEAD, 16);
        let mut out = Vec::new();
        p.releases(&mut out).unwrap();
        assert_eq!(out.len(), 16);
    }

    #[test]
    fn the_consumer_cannot_write_the_message_ring_and_checks_the_producers_records() {
        let p = ProducerRing::new(4096, 16).unwrap();
        let [m, _] = p.fds();
        assert!(
            Map::of_fd(m, HEADER + 4096, true).is_err(),
            "read-only descriptor"
        );
        // A lying head and a lying record.
        let (p, mut c, _) = pair(4096, 16);
        let mut buf = vec![0u8; 4096];
        p.msgs.word(HEAD).store(1 << 20, Ordering::Release);
        assert!(c.next(&mut buf).unwrap_err().contains("head"));
        let (mut p, mut c, _) = pair(4096, 16);
        p.push_packet(&[0; 16]).unwrap();
        p.write_head(0, 5000, KIND_PACKET);
        assert!(c.next(&mut buf).unwrap_err().contains("does not fit"));
        // Sizes it will not map.
        let [m, r] = p.fds();
        assert!(map_consumer(m, r, 3000, 16).is_err());
        assert!(map_consumer(m, r, 1 << 20, 16)
            .unwrap_err()
            .contains("needs"));
    }
}
