//! The producer's engine: its consumers, what each holds, and who waits for whom. No
//! GStreamer: the item a buffer keeps alive is any `T` (the sink's `gst::Buffer`).
//!
//! Every consumer gets every buffer, unless it already holds `max-held` of them:
//! - `on-full=block`: the producer waits before the next buffer until it released one
//!   ([`Hub::must_wait`]);
//! - `on-full=drop`: that consumer skips the buffer and its `missed` count goes up; the
//!   count travels in the next buffer message it gets. The producer never waits on it,
//!   and a full socket (a consumer that stopped reading) is a miss too.
//!
//! A buffer's item is kept until every consumer it went to has released it, so the slot
//! under it is reused only then. A consumer that goes away (its socket hangs up, it
//! breaks the protocol) has its references dropped at once.
//!
//! Messages for a consumer go into its queue ([`proto::Batch`]) and the queue is sent as
//! one packet: at once after each buffer ([`Hub::publish`]), or after several when the
//! producer has several at hand ([`Hub::queue`] for each buffer of a list, then
//! [`Hub::flush`]). A queue the socket has no room for waits there, and later buffers
//! join it, until the socket takes it (the next buffer, or the service thread when the
//! socket has room): nothing is held back waiting for more.
//!
//! A consumer that asked for rings ([`crate::ring`], protocol version 3) gets its
//! packets in its message ring instead, with a wake-up on the socket only when it
//! announced that it sleeps, and writes its releases into its release ring, which the
//! streaming thread reads before each buffer ([`Hub::drain_rings`]) and the service
//! thread while it is awake. Socket packets (segments, with their descriptors, and
//! whatever the full ring had no room for) keep their place in the order: the ring's
//! next record is a sync naming how many socket packets the consumer must have read.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use firehose_core::stats::Counter;

use crate::proto::{self, BufferMsg, Msg, OnFull, ProtoError};
use crate::ring::{ProducerRing, RingError};
use crate::segments::Segment;
use crate::wire;

/// Byte offset of `missed` in an encoded buffer message (patched per consumer, so the
/// message is encoded once per buffer).
const MISSED_AT: usize = 1 + 8 + 4 + 5 * 8 + 4;

/// How long a send to a consumer that must not miss anything (a block-mode consumer,
/// or the set-up messages of any) may wait for room in its socket before that consumer
/// is declared stuck and disconnected.
const STUCK_MS: u64 = 10_000;

/// What the hub counts.
#[derive(Debug, Default)]
pub struct HubCounters {
    /// Consumers attached now.
    pub consumers: Counter,
    /// Consumers attached now whose `on-full` is drop.
    pub consumers_drop: Counter,
    /// Consumers ever attached.
    pub consumers_total: Counter,
    /// Buffers released by consumers (one per consumer per buffer).
    pub released: Counter,
    /// Release messages read (each names one or more buffers: consumers batch them).
    pub release_messages: Counter,
    /// Releases of a buffer the consumer did not hold (never sent to it, or released
    /// twice): counted and ignored.
    pub releases_unknown: Counter,
    /// Consumers that went away without being asked (hang-up, crash).
    pub consumers_lost: Counter,
    /// Consumers disconnected for breaking the protocol.
    pub consumers_malformed: Counter,
    /// Buffer messages sent (one per consumer per buffer).
    pub messages: Counter,
    /// Buffers a drop-mode consumer missed because it held its limit.
    pub drops_held: Counter,
    /// Buffers a drop-mode consumer missed because its socket was full.
    pub drops_socket: Counter,
    /// Buffers skipped for a block-mode consumer because the element was flushing.
    pub drops_flushing: Counter,
    /// Metas left out of a message that would have been over [`proto::MAX_MESSAGE`].
    pub metas_dropped: Counter,
    /// Packets sent to consumers that carried several messages (a batch).
    pub batches: Counter,
    /// Messages that travelled in those batches.
    pub batched: Counter,
    /// Consumers that read rings (now).
    pub ring_consumers: Counter,
    /// Packets written into consumers' rings (no system call).
    pub ring_packets: Counter,
    /// Packets a full ring had no room for (sent on the socket instead).
    pub ring_full: Counter,
    /// Wake-ups sent to consumers that announced they sleep.
    pub wakes_sent: Counter,
    /// Wake-ups consumers sent (the service thread had announced that it sleeps).
    pub wakes_received: Counter,
    /// Releases read from release rings.
    pub ring_releases: Counter,
}

struct Peer {
    id: u64,
    fd: OwnedFd,
    on_full: OnFull,
    max_held: usize,
    /// The producer's limit, which a consumer's subscribe cannot raise.
    cap_held: usize,
    held: HashSet<u64>,
    missed: u64,
    caps_sent: bool,
    segments: HashSet<u32>,
    /// Messages queued for it, not yet sent.
    queue: proto::Batch,
    /// Since when its socket has had no room for the queue.
    full_since: Option<std::time::Instant>,
    /// Its rings, once it asked for them.
    ring: Option<ProducerRing>,
    /// Socket packets sent to it, and how many of them a sync in its ring covers.
    sent: u64,
    synced: u64,
}

/// Why a consumer left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leave {
    /// Its socket hung up or failed.
    Lost(String),
    /// It broke the protocol.
    Malformed(String),
    /// The producer is stopping, or the consumer closed after end-of-stream.
    Stopped,
}

struct Held<T> {
    _item: T,
    refs: u32,
}

/// The producer's consumers and the buffers they hold.
pub struct Hub<T> {
    peers: Vec<Peer>,
    segments: Vec<Segment>,
    caps: Option<String>,
    held: HashMap<u64, Held<T>>,
    next_seq: u64,
    next_peer: u64,
    out: Vec<u8>,
    caps_out: Vec<u8>,
    inbuf: Vec<u8>,
    fds: Vec<OwnedFd>,
    /// Release numbers read from a ring, reused.
    seqs: Vec<u64>,
    /// What it counts (shared: the element reads it without the hub's lock).
    pub counters: Arc<HubCounters>,
    /// Consumers that left since [`Hub::take_left`], and why (for the element's log).
    left: Vec<(u64, Leave)>,
    /// End-of-stream was sent: a consumer that closes now simply finished.
    ended: bool,
}

impl<T> Default for Hub<T> {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            segments: Vec::new(),
            caps: None,
            held: HashMap::with_capacity(1024),
            next_seq: 0,
            next_peer: 1,
            out: Vec::with_capacity(proto::MAX_MESSAGE),
            caps_out: Vec::new(),
            inbuf: vec![0; proto::MAX_MESSAGE],
            fds: Vec::new(),
            seqs: Vec::with_capacity(crate::ring::RELEASE_SLOTS as usize),
            counters: Arc::default(),
            left: Vec::new(),
            ended: false,
        }
    }
}

impl<T> Hub<T> {
    /// Consumers attached now.
    pub fn consumers(&self) -> usize {
        self.peers.len()
    }

    /// Buffers some consumer still holds.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Consumers that left since the last call, and why.
    pub fn take_left(&mut self) -> Vec<(u64, Leave)> {
        std::mem::take(&mut self.left)
    }

    /// Each consumer's descriptor and id, and whether its queue waits for room in its
    /// socket (poll for room then, and [`Hub::flush`]), for the service thread's `poll`.
    /// A queue being filled by the streaming thread is not the service thread's: that
    /// thread sends it itself.
    pub fn poll_set(&self, out: &mut Vec<(RawFd, u64, bool)>) {
        use std::os::fd::AsRawFd;
        out.clear();
        out.extend(
            self.peers
                .iter()
                .map(|p| (p.fd.as_raw_fd(), p.id, p.full_since.is_some())),
        );
    }

    /// Attaches a consumer on `fd`: sends it the hello, every live segment and the
    /// current caps; it gets buffers from the next one on. Its id, or why it could not
    /// be set up (it is dropped then).
    pub fn attach(&mut self, fd: OwnedFd, on_full: OnFull, max_held: u32) -> io::Result<u64> {
        let id = self.next_peer;
        self.next_peer += 1;
        let mut peer = Peer {
            id,
            fd,
            on_full,
            max_held: max_held.max(1) as usize,
            cap_held: max_held.max(1) as usize,
            held: HashSet::new(),
            missed: 0,
            caps_sent: false,
            segments: HashSet::new(),
            queue: proto::Batch::default(),
            full_since: None,
            ring: None,
            sent: 0,
            synced: 0,
        };
        let hello = Msg::Hello {
            version: proto::VERSION,
            consumer: id,
            on_full,
            max_held,
        };
        proto::encode(&hello, &mut self.out).expect("a hello fits");
        send_patient(peer.fd.as_fd(), &self.out, None, None)?;
        peer.sent += 1;
        for s in &self.segments {
            announce(&mut self.out, &mut peer, s)?;
        }
        if let Some(c) = &self.caps {
            send_caps(&mut self.out, &mut peer, c)?;
        }
        self.peers.push(peer);
        self.counters.consumers_total.add(1);
        self.count_peers();
        Ok(id)
    }

    /// Announces new segments and retires those no longer in `live` (from the
    /// registry). Consumers that cannot be told are dropped.
    pub fn sync_segments(&mut self, live: Vec<Segment>) {
        let gone: Vec<u32> = self
            .segments
            .iter()
            .filter(|s| !live.iter().any(|l| l.id == s.id))
            .map(|s| s.id)
            .collect();
        let mut lost = Vec::new();
        // Queued buffers go first: they may lie in a segment about to be retired.
        for p in &mut self.peers {
            if let Err(e) = flush_patient(p, &self.counters, None) {
                lost.push((p.id, e));
            }
        }
        for id in gone {
            proto::encode(&Msg::SegmentGone { id }, &mut self.out).expect("fits");
            for p in &mut self.peers {
                if p.segments.remove(&id) {
                    match send_patient(p.fd.as_fd(), &self.out, None, None) {
                        Ok(()) => p.sent += 1,
                        Err(e) => lost.push((p.id, e)),
                    }
                }
            }
        }
        for s in &live {
            for p in &mut self.peers {
                if !p.segments.contains(&s.id) {
                    if let Err(e) = announce(&mut self.out, p, s) {
                        lost.push((p.id, e));
                    }
                }
            }
        }
        self.segments = live;
        for (id, e) in lost {
            self.detach(id, leave(e));
        }
    }

    /// Sets the caps of the buffers that follow; every consumer gets them before its
    /// next buffer.
    pub fn set_caps(&mut self, caps: String) {
        if self.caps.as_ref() != Some(&caps) {
            self.caps = Some(caps);
            for p in &mut self.peers {
                p.caps_sent = false;
            }
        }
    }

    /// True when a block-mode consumer holds its limit: the producer waits (and calls
    /// [`Hub::service`] meanwhile, or lets the service thread do so).
    pub fn must_wait(&self) -> bool {
        self.peers
            .iter()
            .any(|p| p.on_full == OnFull::Block && p.held.len() >= p.max_held)
    }

    /// Sends `msg` (its `seq` and `missed` are filled in here) to every consumer that
    /// can take it, keeping `item` until all of them release it: [`Hub::queue`], then
    /// [`Hub::flush`]. Returns how many consumers got it.
    pub fn publish(&mut self, msg: &mut BufferMsg, item: T, flushing: &AtomicBool) -> usize {
        let n = self.queue(msg, item, flushing);
        self.flush();
        n
    }

    /// Queues `msg` (its `seq` and `missed` are filled in here) for every consumer that
    /// can take it, keeping `item` until all of them release it; [`Hub::flush`] sends
    /// the queues (call it before waiting for anything: a queued buffer counts as held).
    /// A consumer at its `max-held` misses it; a queue that is full and that its socket
    /// has no room for is waited for if the consumer is in block mode (until
    /// `flushing`), else the buffer is missed. Returns how many consumers got it.
    pub fn queue(&mut self, msg: &mut BufferMsg, item: T, flushing: &AtomicBool) -> usize {
        self.drain_rings();
        let seq = self.next_seq;
        self.next_seq += 1;
        msg.seq = seq;
        msg.missed = 0;
        let mut m = Msg::Buffer(std::mem::take(msg));
        let encoded = loop {
            match proto::encode(&m, &mut self.out) {
                Ok(()) => break true,
                Err(_) => {
                    let Msg::Buffer(b) = &mut m else {
                        unreachable!()
                    };
                    // Too large with its metas (a huge packet list): the largest goes.
                    let Some(biggest) = (0..b.metas.len()).max_by_key(|&i| match &b.metas[i] {
                        proto::WireMeta::Packets(p) => p.len(),
                        proto::WireMeta::Chunk(c) => c.present.len() + c.packet_present.len(),
                        proto::WireMeta::Message(_) => 0,
                    }) else {
                        break false;
                    };
                    b.metas.remove(biggest);
                    self.counters.metas_dropped.add(1);
                }
            }
        };
        if let Msg::Buffer(b) = m {
            *msg = b;
        }
        if !encoded {
            return 0;
        }
        let mut refs = 0u32;
        let mut lost = Vec::new();
        for p in &mut self.peers {
            if let (false, Some(c)) = (p.caps_sent, &self.caps) {
                // The caps go before the buffer; a buffer whose caps find no room is
                // missed, and the caps go with the next one.
                if proto::encode(&Msg::Caps(c.clone()), &mut self.caps_out).is_ok() {
                    match room(p, &self.caps_out, &self.counters, flushing) {
                        Ok(true) => {
                            p.queue.push(&self.caps_out);
                            p.caps_sent = true;
                        }
                        Ok(false) => {
                            p.missed += 1;
                            match p.on_full {
                                OnFull::Drop => self.counters.drops_socket.add(1),
                                OnFull::Block => self.counters.drops_flushing.add(1),
                            }
                            continue;
                        }
                        Err(e) => {
                            lost.push((p.id, e));
                            continue;
                        }
                    }
                }
            }
            if p.held.len() >= p.max_held {
                p.missed += 1;
                match p.on_full {
                    OnFull::Drop => self.counters.drops_held.add(1),
                    OnFull::Block => self.counters.drops_flushing.add(1),
                }
                continue;
            }
            match room(p, &self.out, &self.counters, flushing) {
                Ok(true) => {
                    let at = p.queue.push(&self.out);
                    p.queue.patch(at + MISSED_AT, &p.missed.to_le_bytes());
                    p.held.insert(seq);
                    p.missed = 0;
                    refs += 1;
                    self.counters.messages.add(1);
                }
                Ok(false) if p.on_full == OnFull::Drop => {
                    p.missed += 1;
                    self.counters.drops_socket.add(1);
                }
                Ok(false) => {
                    p.missed += 1;
                    self.counters.drops_flushing.add(1);
                }
                Err(e) => lost.push((p.id, e)),
            }
        }
        if refs > 0 {
            self.held.insert(seq, Held { _item: item, refs });
        }
        for (id, e) in lost {
            self.detach(id, leave(e));
        }
        refs as usize
    }

    /// Sends every consumer's queue, as far as its socket takes it without waiting
    /// (what does not fit stays queued, for the next call). A block-mode consumer whose
    /// socket has had no room for [`STUCK_MS`] is detached, as is one whose socket
    /// failed. True if anything was sent.
    pub fn flush(&mut self) -> bool {
        let mut sent = false;
        let mut lost = Vec::new();
        for p in &mut self.peers {
            if p.queue.is_empty() {
                continue;
            }
            match flush_peer(p, &self.counters) {
                Ok(()) if p.queue.is_empty() => sent = true,
                Ok(()) => {
                    let stuck = p
                        .full_since
                        .is_some_and(|t| t.elapsed().as_millis() as u64 > STUCK_MS);
                    if stuck && p.on_full == OnFull::Block {
                        lost.push((
                            p.id,
                            io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!("its socket stayed full for {} s", STUCK_MS / 1000),
                            ),
                        ));
                    }
                }
                Err(e) => lost.push((p.id, e)),
            }
        }
        for (id, e) in lost {
            self.detach(id, leave(e));
        }
        sent
    }

    /// Sends a last message (EOS or an error) to every consumer, as far as their
    /// sockets take it without waiting.
    pub fn broadcast(&mut self, msg: &Msg) {
        self.ended |= matches!(msg, Msg::Eos);
        if proto::encode(msg, &mut self.out).is_ok() {
            // After what is queued, in the same packet when there is room.
            for p in &mut self.peers {
                if !p.queue.fits(&self.out) {
                    let _ = flush_peer(p, &self.counters);
                }
                if p.queue.fits(&self.out) {
                    p.queue.push(&self.out);
                }
            }
            self.flush();
        }
    }

    /// Reads what consumer `id` sent (releases), without waiting. A consumer that hung
    /// up or broke the protocol is detached. True if anything was released.
    pub fn service(&mut self, id: u64) -> bool {
        let Some(i) = self.peers.iter().position(|p| p.id == id) else {
            return false;
        };
        let mut released = false;
        loop {
            self.fds.clear();
            let r = wire::recv(self.peers[i].fd.as_fd(), &mut self.inbuf, &mut self.fds);
            let n = match r {
                Ok(wire::Received::Message(n)) => n,
                Ok(wire::Received::Nothing) => return released,
                Ok(wire::Received::Closed) if self.ended => {
                    self.detach(id, Leave::Stopped);
                    return true;
                }
                Ok(wire::Received::Closed) => {
                    self.detach(id, Leave::Lost("it closed its connection".into()));
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    self.detach(id, Leave::Malformed(e.to_string()));
                    return true;
                }
                Err(e) => {
                    self.detach(id, leave(e));
                    return true;
                }
            };
            let verdict = match proto::decode(&self.inbuf[..n]) {
                Ok(_) if !self.fds.is_empty() => Err(ProtoError::Descriptors {
                    kind: "release",
                    got: self.fds.len(),
                }),
                Ok(Msg::Release(seqs)) => {
                    self.counters.release_messages.add(1);
                    self.release(i, &seqs)
                }
                Ok(Msg::Wake) => {
                    self.counters.wakes_received.add(1);
                    Ok(())
                }
                Ok(Msg::RingRequest) => match self.open_ring(i) {
                    Ok(r) => r,
                    Err(e) => {
                        self.detach(id, leave(e));
                        return true;
                    }
                },
                Ok(Msg::Subscribe { on_full, max_held }) => {
                    let p = &mut self.peers[i];
                    p.on_full = on_full;
                    if max_held > 0 {
                        p.max_held = (max_held as usize).min(p.cap_held);
                    }
                    self.count_peers();
                    Ok(())
                }
                Ok(_) => Err(ProtoError::Invalid(
                    "a consumer sent a producer's message".into(),
                )),
                Err(e) => Err(e),
            };
            match verdict {
                Ok(()) => released = true,
                Err(e) => {
                    self.detach(id, Leave::Malformed(e.to_string()));
                    return true;
                }
            }
        }
    }

    /// Makes consumer `i`'s rings and passes them (it asked for them). Rings that cannot
    /// be made leave it on the socket, which works as before. An `Err`: its socket
    /// failed (detach it).
    fn open_ring(&mut self, i: usize) -> io::Result<Result<(), ProtoError>> {
        let p = &mut self.peers[i];
        if p.ring.is_some() {
            return Ok(Err(ProtoError::Invalid("it asked for rings twice".into())));
        }
        let Ok(ring) = ProducerRing::new(crate::ring::MESSAGE_BYTES, crate::ring::RELEASE_SLOTS)
        else {
            return Ok(Ok(()));
        };
        let (bytes, slots) = ring.sizes();
        proto::encode(&Msg::Ring { bytes, slots }, &mut self.out).expect("fits");
        // Whatever is queued goes first, on the socket, where it was meant to go.
        flush_patient(p, &self.counters, None)?;
        send_patient_fds(p.fd.as_fd(), &self.out, &ring.fds(), None)?;
        p.sent += 1;
        p.ring = Some(ring);
        self.count_peers();
        Ok(Ok(()))
    }

    /// Whether any consumer reads rings (the service thread then reads their releases
    /// while it is awake, and announces when it sleeps).
    pub fn has_rings(&self) -> bool {
        self.counters.ring_consumers.get() > 0
    }

    /// Reads the releases consumers wrote into their rings, without waiting. A consumer
    /// whose ring lies (an index out of bounds) is disconnected. True if anything was
    /// released or anybody left.
    pub fn drain_rings(&mut self) -> bool {
        if !self.has_rings() {
            return false;
        }
        let mut any = false;
        let mut bad = Vec::new();
        let mut seqs = std::mem::take(&mut self.seqs);
        for i in 0..self.peers.len() {
            let Some(ring) = self.peers[i].ring.as_mut() else {
                continue;
            };
            seqs.clear();
            match ring.releases(&mut seqs) {
                Ok(()) if seqs.is_empty() => {}
                Ok(()) => {
                    self.counters.ring_releases.add(seqs.len() as u64);
                    let _ = self.release(i, &seqs);
                    any = true;
                }
                Err(e) => bad.push((self.peers[i].id, e)),
            }
        }
        self.seqs = seqs;
        for (id, e) in bad {
            self.detach(id, Leave::Malformed(format!("its release ring: {e}")));
            any = true;
        }
        any
    }

    /// Announces to every consumer that reads rings that the producer's service thread
    /// sleeps (`epoch`, non-zero: a release then comes with a wake-up on the socket) or
    /// is awake (0). True when releases wait already: read them instead of sleeping.
    pub fn rings_asleep(&mut self, epoch: u64) -> bool {
        let mut waiting = false;
        for r in self.peers.iter().filter_map(|p| p.ring.as_ref()) {
            r.set_asleep(epoch);
            waiting |= epoch != 0 && r.has_releases();
        }
        waiting
    }

    fn count_peers(&self) {
        let c = &self.counters;
        c.consumers.set(self.peers.len() as u64);
        c.ring_consumers
            .set(self.peers.iter().filter(|p| p.ring.is_some()).count() as u64);
        let drop = self.peers.iter().filter(|p| p.on_full == OnFull::Drop);
        c.consumers_drop.set(drop.count() as u64);
    }

    /// One release message (a batch): each buffer the consumer holds is released; a
    /// buffer it does not hold (never sent to it, or released already) is counted in
    /// `releases_unknown` and ignored. Such a lie can only touch the liar's own
    /// references, so nobody else is affected and the connection goes on.
    fn release(&mut self, i: usize, seqs: &[u64]) -> Result<(), ProtoError> {
        let (mut ok, mut unknown) = (0, 0);
        for &s in seqs {
            if self.peers[i].held.remove(&s) {
                unref(&mut self.held, s);
                ok += 1;
            } else {
                unknown += 1;
            }
        }
        self.counters.released.add(ok);
        if unknown > 0 {
            self.counters.releases_unknown.add(unknown);
        }
        Ok(())
    }

    /// Detaches consumer `id`, dropping its references (a buffer it alone held is
    /// freed now).
    pub fn detach(&mut self, id: u64, why: Leave) {
        let Some(i) = self.peers.iter().position(|p| p.id == id) else {
            return;
        };
        let p = self.peers.swap_remove(i);
        self.count_peers();
        for s in p.held {
            unref(&mut self.held, s);
        }
        match &why {
            Leave::Lost(_) => self.counters.consumers_lost.add(1),
            Leave::Malformed(_) => self.counters.consumers_malformed.add(1),
            Leave::Stopped => {}
        }
        self.left.push((id, why));
    }

    /// Detaches every consumer and forgets every buffer (at stop).
    pub fn clear(&mut self) {
        let ids: Vec<u64> = self.peers.iter().map(|p| p.id).collect();
        for id in ids {
            self.detach(id, Leave::Stopped);
        }
        self.held.clear();
        self.segments.clear();
        self.caps = None;
        self.left.clear();
        self.ended = false;
    }
}

fn unref<T>(held: &mut HashMap<u64, Held<T>>, seq: u64) {
    if let Some(h) = held.get_mut(&seq) {
        h.refs -= 1;
        if h.refs == 0 {
            held.remove(&seq);
        }
    }
}

fn announce(out: &mut Vec<u8>, p: &mut Peer, s: &Segment) -> io::Result<()> {
    proto::encode(
        &Msg::Segment {
            id: s.id,
            size: s.len as u64,
        },
        out,
    )
    .expect("fits");
    send_patient(p.fd.as_fd(), out, Some(s.fd.as_fd()), None)?;
    p.sent += 1;
    p.segments.insert(s.id);
    Ok(())
}

fn send_caps(out: &mut Vec<u8>, p: &mut Peer, caps: &str) -> io::Result<()> {
    proto::encode(&Msg::Caps(caps.to_owned()), out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    send_patient(p.fd.as_fd(), out, None, None)?;
    p.sent += 1;
    p.caps_sent = true;
    Ok(())
}

/// Why a consumer leaves after `e`: a ring that lied (`InvalidData`) is the consumer's
/// fault, anything else a lost connection.
fn leave(e: io::Error) -> Leave {
    if e.kind() == io::ErrorKind::InvalidData {
        Leave::Malformed(e.to_string())
    } else {
        Leave::Lost(e.to_string())
    }
}

/// Writes `packet` into `ring`, after a sync if socket packets were sent since the last
/// one; false when the ring has no room.
fn ring_put(
    ring: &mut ProducerRing,
    sent: u64,
    synced: &mut u64,
    packet: &[u8],
) -> Result<bool, RingError> {
    if sent > *synced {
        if !ring.push_sync(sent)? {
            return Ok(false);
        }
        *synced = sent;
    }
    ring.push_packet(packet)
}

/// Sends `p`'s queue as one packet: into its ring if it has one with room (and a wake-up
/// on the socket if it sleeps), else on the socket if it has room (it stays queued if
/// not).
fn flush_peer(p: &mut Peer, counters: &HubCounters) -> io::Result<()> {
    if p.queue.is_empty() {
        return Ok(());
    }
    if let Some(ring) = p.ring.as_mut() {
        match ring_put(ring, p.sent, &mut p.synced, p.queue.packet()) {
            Ok(true) => {
                counters.ring_packets.add(1);
                if p.queue.len() > 1 {
                    counters.batches.add(1);
                    counters.batched.add(p.queue.len() as u64);
                }
                p.queue.clear();
                p.full_since = None;
                if ring.consumer_asleep() {
                    match wire::send(p.fd.as_fd(), proto::WAKE_PACKET, None) {
                        Ok(()) => {
                            p.sent += 1;
                            counters.wakes_sent.add(1);
                        }
                        // Its socket is full: it has plenty to read there and will.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                return Ok(());
            }
            Ok(false) => counters.ring_full.add(1),
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("its message ring: {e}"),
                ))
            }
        }
    }
    match wire::send(p.fd.as_fd(), p.queue.packet(), None) {
        Ok(()) => {
            p.sent += 1;
            if p.queue.len() > 1 {
                counters.batches.add(1);
                counters.batched.add(p.queue.len() as u64);
            }
            p.queue.clear();
            p.full_since = None;
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            p.full_since.get_or_insert_with(std::time::Instant::now);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Sends `p`'s queue, waiting for room in its socket in short polls: until `flushing`
/// is raised (`Interrupted`) or [`STUCK_MS`] pass (`TimedOut`).
fn flush_patient(
    p: &mut Peer,
    counters: &HubCounters,
    flushing: Option<&AtomicBool>,
) -> io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        flush_peer(p, counters)?;
        if p.queue.is_empty() {
            return Ok(());
        }
        wait_for_room(p.fd.as_fd(), start, flushing)?;
    }
}

/// One wait of a patient send that began at `start`: `Interrupted` when `flushing` is
/// raised, `TimedOut` once [`STUCK_MS`] have passed; else a short poll for room in `fd`.
fn wait_for_room(
    fd: BorrowedFd<'_>,
    start: std::time::Instant,
    flushing: Option<&AtomicBool>,
) -> io::Result<()> {
    if flushing.is_some_and(|f| f.load(Ordering::Acquire)) {
        return Err(io::ErrorKind::Interrupted.into());
    }
    if start.elapsed().as_millis() as u64 > STUCK_MS {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("its socket stayed full for {} s", STUCK_MS / 1000),
        ));
    }
    let _ = wire::wait(fd, libc::POLLOUT, 20);
    Ok(())
}

/// Makes room for `msg` in `p`'s queue: true when it fits (sending the queue first if
/// it is full); false when the queue is full and the socket has no room for it (a
/// block-mode consumer is waited for first, until `flushing`). An error: the consumer
/// is gone or stuck.
fn room(
    p: &mut Peer,
    msg: &[u8],
    counters: &HubCounters,
    flushing: &AtomicBool,
) -> io::Result<bool> {
    if p.queue.fits(msg) {
        return Ok(true);
    }
    let r = match p.on_full {
        OnFull::Drop => flush_peer(p, counters),
        OnFull::Block => flush_patient(p, counters, Some(flushing)),
    };
    match r {
        Ok(()) => Ok(p.queue.fits(msg)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends, waiting for room in the socket in short polls: until `flushing` is raised
/// (`Interrupted`) or [`STUCK_MS`] pass (`TimedOut`: the consumer stopped reading).
fn send_patient(
    fd: BorrowedFd<'_>,
    msg: &[u8],
    pass: Option<BorrowedFd<'_>>,
    flushing: Option<&AtomicBool>,
) -> io::Result<()> {
    send_patient_fds(fd, msg, pass.as_slice(), flushing)
}

/// [`send_patient`] with several descriptors.
fn send_patient_fds(
    fd: BorrowedFd<'_>,
    msg: &[u8],
    pass: &[BorrowedFd<'_>],
    flushing: Option<&AtomicBool>,
) -> io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        match wire::send_fds(fd, msg, pass) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        wait_for_room(fd, start, flushing)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        wire::socket_pair(libc::SOCK_NONBLOCK)
    }

    /// A consumer's end: reads and checks messages like a real one.
    struct Client {
        fd: OwnedFd,
        state: proto::Consumer,
        buf: Vec<u8>,
        packets: usize,
    }

    impl Client {
        fn new(fd: OwnedFd) -> Self {
            Self {
                fd,
                state: Default::default(),
                buf: vec![0; proto::MAX_MESSAGE],
                packets: 0,
            }
        }
        fn all(&mut self) -> Vec<Msg> {
            let mut v = Vec::new();
            loop {
                let mut fds = Vec::new();
                match wire::recv(self.fd.as_fd(), &mut self.buf, &mut fds).unwrap() {
                    wire::Received::Message(n) if proto::is_batch(&self.buf[..n]) => {
                        self.packets += 1;
                        for m in proto::frames(&self.buf[..n]).unwrap() {
                            let m = proto::decode(m).unwrap();
                            v.push(self.state.accept(m, 0).unwrap());
                        }
                    }
                    wire::Received::Message(n) => {
                        self.packets += 1;
                        let m = proto::decode(&self.buf[..n]).unwrap();
                        v.push(self.state.accept(m, fds.len()).unwrap());
                    }
                    _ => return v,
                }
            }
        }
        fn buffers(&mut self) -> Vec<BufferMsg> {
            self.all()
                .into_iter()
                .filter_map(|m| match m {
                    Msg::Buffer(b) => Some(b),
                    _ => None,
                })
                .collect()
        }
        fn release(&self, seqs: Vec<u64>) {
            let mut out = Vec::new();
            proto::encode(&Msg::Release(seqs), &mut out).unwrap();
            wire::send(self.fd.as_fd(), &out, None).unwrap();
        }
    }

    fn segment() -> Segment {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        Segment {
            id: 5,
            base: 0x1000,
            len: 1 << 20,
            fd: Arc::new(f.into()),
        }
    }

    /// A hub with [`segment`] and no consumer.
    fn hub_with_segment<T>() -> Hub<T> {
        let mut hub = Hub::default();
        hub.sync_segments(vec![segment()]);
        hub
    }

    /// A hub with one segment and two consumers in block mode (8 held at most each);
    /// the consumers' ends of their sockets.
    fn hub_with_two_consumers() -> (Hub<Arc<()>>, OwnedFd, OwnedFd) {
        let mut hub: Hub<Arc<()>> = hub_with_segment();
        let (a, ca) = pair();
        let (b, cb) = pair();
        hub.attach(a, OnFull::Block, 8).unwrap();
        hub.attach(b, OnFull::Block, 8).unwrap();
        (hub, ca, cb)
    }

    fn msg() -> BufferMsg {
        BufferMsg {
            segment: 5,
            offset: 64,
            len: 100,
            ..Default::default()
        }
    }

    #[test]
    fn every_consumer_gets_every_buffer_and_the_item_lives_until_all_release() {
        let mut hub: Hub<Arc<()>> = hub_with_segment();
        hub.set_caps("application/x-test".into());
        let (a, ca) = pair();
        let (b, cb) = pair();
        hub.attach(a, OnFull::Block, 8).unwrap();
        hub.attach(b, OnFull::Drop, 8).unwrap();
        let (mut ca, mut cb) = (Client::new(ca), Client::new(cb));
        let first = ca.all();
        assert!(matches!(first[0], Msg::Hello { consumer: 1, .. }));
        assert_eq!(
            first[1],
            Msg::Segment {
                id: 5,
                size: 1 << 20
            }
        );
        assert_eq!(first[2], Msg::Caps("application/x-test".into()));
        let item = Arc::new(());
        let stop = AtomicBool::new(false);
        assert_eq!(hub.publish(&mut msg(), item.clone(), &stop), 2);
        let (ba, bb) = (ca.buffers(), cb.buffers());
        assert_eq!((ba.len(), bb.len()), (1, 1));
        assert_eq!(ba[0].seq, bb[0].seq);
        assert_eq!(Arc::strong_count(&item), 2);
        ca.release(vec![ba[0].seq]);
        hub.service(1);
        assert_eq!(Arc::strong_count(&item), 2, "b still holds it");
        cb.release(vec![bb[0].seq]);
        hub.service(2);
        assert_eq!(Arc::strong_count(&item), 1, "released by all");
        assert_eq!(hub.held(), 0);
    }

    #[test]
    fn a_full_drop_consumer_misses_and_is_told_a_full_block_consumer_holds_the_producer() {
        let mut hub: Hub<()> = hub_with_segment();
        let (a, ca) = pair();
        let (b, cb) = pair();
        hub.attach(a, OnFull::Drop, 2).unwrap();
        let stop = AtomicBool::new(false);
        let mut ca = Client::new(ca);
        for _ in 0..5 {
            hub.publish(&mut msg(), (), &stop);
        }
        assert!(!hub.must_wait(), "drop mode never holds the producer");
        let got = ca.buffers();
        assert_eq!(got.len(), 2);
        assert_eq!(hub.counters.drops_held.get(), 3);
        ca.release(vec![got[0].seq, got[1].seq]);
        hub.service(1);
        hub.publish(&mut msg(), (), &stop);
        let next = ca.buffers();
        assert_eq!(next[0].missed, 3, "told what it missed");
        // A block-mode consumer at its limit makes the producer wait.
        hub.attach(b, OnFull::Block, 1).unwrap();
        let mut cb = Client::new(cb);
        hub.publish(&mut msg(), (), &stop);
        assert!(hub.must_wait());
        let got = cb.buffers();
        cb.release(vec![got[0].seq]);
        hub.service(2);
        assert!(!hub.must_wait());
    }

    #[test]
    fn a_consumer_chooses_its_own_back_pressure_within_the_producers_limit() {
        let mut hub: Hub<()> = hub_with_segment();
        let (a, ca) = pair();
        hub.attach(a, OnFull::Block, 4).unwrap();
        let mut out = Vec::new();
        proto::encode(
            &Msg::Subscribe {
                on_full: OnFull::Drop,
                max_held: 100,
            },
            &mut out,
        )
        .unwrap();
        wire::send(ca.as_fd(), &out, None).unwrap();
        hub.service(1);
        let stop = AtomicBool::new(false);
        for _ in 0..6 {
            hub.publish(&mut msg(), (), &stop);
        }
        assert!(!hub.must_wait(), "drop mode now");
        assert_eq!(
            hub.counters.drops_held.get(),
            2,
            "the producer's limit of 4 still holds"
        );
    }

    #[test]
    fn a_dead_consumer_gives_back_what_it_held_and_is_counted() {
        let (mut hub, ca, cb) = hub_with_two_consumers();
        let item = Arc::new(());
        let stop = AtomicBool::new(false);
        hub.publish(&mut msg(), item.clone(), &stop);
        drop(ca);
        assert!(hub.service(1));
        assert_eq!(hub.consumers(), 1);
        assert_eq!(hub.counters.consumers_lost.get(), 1);
        assert_eq!(Arc::strong_count(&item), 2, "b still holds it");
        drop(cb);
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(hub.consumers(), 0, "a send to a closed socket detaches");
        assert_eq!(Arc::strong_count(&item), 1);
    }

    #[test]
    fn a_garbling_consumer_is_disconnected_and_nobody_else_is_touched() {
        let (mut hub, ca, cb) = hub_with_two_consumers();
        let mut cb = Client::new(cb);
        let item = Arc::new(());
        let stop = AtomicBool::new(false);
        hub.publish(&mut msg(), item.clone(), &stop);
        // Garbage, then a producer's message.
        wire::send(ca.as_fd(), &[0xee, 1, 2], None).unwrap();
        hub.service(1);
        let left = hub.take_left();
        assert_eq!(left.len(), 1);
        assert!(matches!(&left[0].1, Leave::Malformed(_)), "{left:?}");
        let (c, cc) = pair();
        hub.attach(c, OnFull::Drop, 8).unwrap();
        let mut out = Vec::new();
        proto::encode(&Msg::Eos, &mut out).unwrap();
        wire::send(cc.as_fd(), &out, None).unwrap();
        hub.service(3);
        assert_eq!(hub.counters.consumers_malformed.get(), 2);
        // b is untouched: it holds the buffer and gets the next.
        assert_eq!(hub.consumers(), 1);
        assert_eq!(Arc::strong_count(&item), 2);
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(cb.buffers().len(), 2);
    }

    #[test]
    fn releases_of_buffers_not_held_are_counted_and_ignored() {
        let (mut hub, ca, cb) = hub_with_two_consumers();
        let (mut ca, mut cb) = (Client::new(ca), Client::new(cb));
        let stop = AtomicBool::new(false);
        let items: Vec<Arc<()>> = (0..3).map(|_| Arc::new(())).collect();
        for it in &items {
            hub.publish(&mut msg(), it.clone(), &stop);
        }
        let (ga, gb) = (ca.buffers(), cb.buffers());
        assert_eq!((ga.len(), gb.len()), (3, 3));
        // One batch: a buffer it holds, one never sent, the first again in the same
        // message, and a number never used.
        ca.release(vec![ga[0].seq, 12345, ga[0].seq, u64::MAX]);
        hub.service(1);
        assert_eq!(hub.counters.released.get(), 1);
        assert_eq!(hub.counters.releases_unknown.get(), 3);
        assert_eq!(hub.counters.release_messages.get(), 1);
        assert_eq!(hub.counters.consumers_malformed.get(), 0);
        assert!(hub.take_left().is_empty(), "still attached");
        // Released again in a later message: ignored, b's reference untouched.
        ca.release(vec![ga[0].seq]);
        hub.service(1);
        assert_eq!(hub.counters.releases_unknown.get(), 4);
        assert_eq!(Arc::strong_count(&items[0]), 2, "b still holds it");
        // An empty batch is harmless too.
        ca.release(vec![]);
        hub.service(1);
        // The rest in one batch each: every item freed once both released it.
        ca.release(vec![ga[1].seq, ga[2].seq]);
        cb.release(gb.iter().map(|b| b.seq).collect());
        hub.service(1);
        hub.service(2);
        assert_eq!(hub.counters.released.get(), 6);
        assert_eq!(hub.counters.release_messages.get(), 5);
        assert!(items.iter().all(|i| Arc::strong_count(i) == 1));
        assert_eq!(hub.held(), 0);
        assert_eq!(hub.consumers(), 2);
    }

    #[test]
    fn late_joiners_get_segments_and_caps_then_only_new_buffers() {
        let mut hub: Hub<()> = hub_with_segment();
        let stop = AtomicBool::new(false);
        hub.set_caps("a/b".into());
        hub.publish(&mut msg(), (), &stop);
        let (a, ca) = pair();
        hub.attach(a, OnFull::Drop, 4).unwrap();
        let mut ca = Client::new(ca);
        let m = ca.all();
        assert_eq!(m.len(), 3, "hello, segment, caps: {m:?}");
        hub.set_caps("c/d".into());
        hub.publish(&mut msg(), (), &stop);
        let m = ca.all();
        assert_eq!(m[0], Msg::Caps("c/d".into()));
        assert!(matches!(&m[1], Msg::Buffer(b) if b.seq == 1));
        // A segment retired is announced gone.
        hub.sync_segments(vec![]);
        assert_eq!(ca.all(), vec![Msg::SegmentGone { id: 5 }]);
    }

    #[test]
    fn queued_buffers_go_in_one_packet_in_order_and_a_full_socket_queues_them() {
        let mut hub: Hub<Arc<()>> = hub_with_segment();
        hub.set_caps("a/b".into());
        let (a, ca) = pair();
        hub.attach(a, OnFull::Block, 1000).unwrap();
        let mut ca = Client::new(ca);
        ca.all();
        ca.packets = 0;
        hub.set_caps("c/d".into());
        let stop = AtomicBool::new(false);
        for _ in 0..10 {
            hub.queue(&mut msg(), Arc::new(()), &stop);
        }
        assert_eq!(ca.all(), vec![], "nothing sent before the flush");
        assert!(hub.flush());
        let m = ca.all();
        assert_eq!(ca.packets, 1, "caps and 10 buffers in one packet");
        assert_eq!(m[0], Msg::Caps("c/d".into()));
        let seqs: Vec<u64> = m[1..]
            .iter()
            .map(|m| match m {
                Msg::Buffer(b) => b.seq,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seqs, (0..10).collect::<Vec<_>>());
        assert_eq!(hub.counters.batches.get(), 1);
        assert_eq!(hub.counters.batched.get(), 11);
        // One buffer at a time: a packet each, no batch.
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(ca.buffers().len(), 1);
        assert_eq!(ca.packets, 2);
        // Fill the socket: what it has no room for waits in the queue (held, not
        // missed), and goes, in order, in one packet once there is room.
        let mut sent = 11u64;
        let mut queued = 0;
        while queued == 0 {
            hub.publish(&mut msg(), Arc::new(()), &stop);
            sent += 1;
            let (_, _, waiting) = {
                let mut v = Vec::new();
                hub.poll_set(&mut v);
                v[0]
            };
            if waiting {
                queued = 1;
            }
            assert!(sent < 100_000, "the socket never filled");
        }
        for _ in 0..5 {
            hub.publish(&mut msg(), Arc::new(()), &stop);
            sent += 1;
        }
        assert_eq!(hub.counters.drops_socket.get(), 0);
        assert_eq!(hub.held(), sent as usize);
        let mut got = ca.buffers();
        while hub.flush() || got.len() < sent as usize - 11 {
            got.extend(ca.buffers());
        }
        got.extend(ca.buffers());
        let seqs: Vec<u64> = got.iter().map(|b| b.seq).collect();
        assert_eq!(
            seqs,
            (11..sent).collect::<Vec<_>>(),
            "complete and in order"
        );
        assert!(hub.counters.batches.get() >= 2, "the queue went as a batch");
    }

    /// A real memfd segment (a real consumer maps it), and the region behind it.
    fn memfd_segment(id: u32) -> (Segment, firehose_core::memory::MemoryRegion) {
        use firehose_core::provider::MemoryProvider;
        let r = firehose_core::provider::SharedSegment::new("fhshm-hub-test")
            .allocate(1 << 20)
            .unwrap();
        let fd = r.fd().unwrap().try_clone_to_owned().unwrap();
        let s = Segment {
            id,
            base: r.as_ptr() as usize,
            len: r.len(),
            fd: Arc::new(fd),
        };
        (s, r)
    }

    thread_local! {
        static REGIONS: std::cell::RefCell<Vec<firehose_core::memory::MemoryRegion>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// [`memfd_segment`], its region kept for the rest of the test thread.
    fn real_segment(id: u32) -> Segment {
        let (s, r) = memfd_segment(id);
        REGIONS.with(|v| v.borrow_mut().push(r));
        s
    }

    /// A hub with one segment and a real consumer ([`crate::client::Client`]) that asked
    /// for rings and has them; the consumer's id.
    fn hub_with_a_ring_consumer(
        name: &str,
        on_full: OnFull,
        max_held: u32,
    ) -> (Hub<Arc<()>>, crate::client::Client, u64) {
        let addr = wire::Address::new(&format!("fhshm-hub-{name}-{}", std::process::id()), true);
        let l = wire::listen(&addr, 0o600).unwrap();
        let mut c = crate::client::Client::connect(&addr).unwrap();
        c.set_ring(true);
        let fd = wire::accept(l.as_fd())
            .unwrap()
            .expect("a pending connection");
        let mut hub: Hub<Arc<()>> = Hub::default();
        hub.sync_segments(vec![real_segment(5)]);
        let id = hub.attach(fd, on_full, max_held).unwrap();
        while c.hello().is_none() {
            c.poll_event().unwrap();
        }
        // The consumer's ring request.
        let start = std::time::Instant::now();
        while !c.ring_packets().1 {
            hub.service(id);
            let _ = c.poll_event().unwrap();
            assert!(start.elapsed().as_secs() < 5, "no ring");
        }
        assert!(hub.has_rings());
        (hub, c, id)
    }

    fn read_all(c: &mut crate::client::Client) -> Vec<crate::client::BufferView> {
        let mut v = Vec::new();
        while let Some(e) = c.poll_event().unwrap() {
            if let crate::client::Event::Buffer(b) = e {
                v.push(b);
            }
        }
        v
    }

    #[test]
    fn a_ring_consumer_reads_every_buffer_in_order_through_wraps_and_a_full_ring() {
        let (mut hub, mut c, _) = hub_with_a_ring_consumer("order", OnFull::Drop, 100_000);
        let stop = AtomicBool::new(false);
        let mut seq = 0u64;
        // One at a time, read as they come: the ring goes round many times.
        for _ in 0..10_000 {
            hub.publish(&mut msg(), Arc::new(()), &stop);
            let got = read_all(&mut c);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].msg.seq, seq);
            seq += 1;
        }
        let sent = hub.counters.ring_packets.get();
        assert_eq!(sent, 10_000, "all through the ring");
        hub.drain_rings();
        assert_eq!(hub.held(), 0, "released through the release ring");
        assert_eq!(hub.counters.ring_releases.get(), 10_000);
        assert_eq!(hub.counters.release_messages.get(), 0, "no release message");
        // Nobody reads: the ring fills, later buffers go on the socket, then a segment
        // is announced (a socket packet) and more buffers follow in the ring once
        // there is room: the consumer reads them all, in order.
        while hub.counters.ring_full.get() < 50 {
            hub.publish(&mut msg(), Arc::new(()), &stop);
        }
        let mut got = read_all(&mut c);
        let keep = hub.segments.clone();
        hub.sync_segments(vec![keep[0].clone(), real_segment(6)]);
        for _ in 0..100 {
            hub.publish(
                &mut BufferMsg {
                    segment: 6,
                    ..msg()
                },
                Arc::new(()),
                &stop,
            );
        }
        got.extend(read_all(&mut c));
        let seqs: Vec<u64> = got.iter().map(|b| b.msg.seq).collect();
        let end = hub.next_seq;
        assert_eq!(
            seqs,
            (seq..end).collect::<Vec<_>>(),
            "complete and in order"
        );
        assert_eq!(hub.counters.drops_socket.get(), 0);
        assert!(got.iter().all(|b| b.msg.missed == 0));
        assert_eq!(got.last().unwrap().msg.segment, 6);
        drop(got);
        hub.drain_rings();
        assert_eq!(hub.held(), 0);
    }

    #[test]
    fn sleeping_sides_are_woken_on_the_socket_and_only_then() {
        let (mut hub, mut c, id) = hub_with_a_ring_consumer("wake", OnFull::Block, 64);
        let stop = AtomicBool::new(false);
        // The consumer naps, then announces that it sleeps.
        let mut polls = 0;
        loop {
            assert!(c.poll_event().unwrap().is_none());
            polls += 1;
            if c.nap_ns().is_none() {
                break; // asleep: it waits to be woken
            }
            assert!(polls <= crate::client::NAPS, "naps, then sleep");
            assert_eq!(hub.counters.wakes_sent.get(), 0);
        }
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(hub.counters.wakes_sent.get(), 1, "it slept: woken");
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(hub.counters.wakes_sent.get(), 1, "once per sleep");
        assert_eq!(
            wire::wait(c.fd(), libc::POLLIN, 1000).unwrap() & libc::POLLIN,
            libc::POLLIN
        );
        let got = read_all(&mut c);
        assert_eq!(got.len(), 2);
        // An awake producer gets releases without a wake-up; a sleeping one is woken.
        drop(got);
        assert_eq!(c.releaser().ring_counts(), (2, 0));
        assert!(hub.rings_asleep(9), "releases wait: do not sleep");
        assert!(hub.drain_rings());
        assert!(!hub.rings_asleep(9), "nothing waits now");
        hub.publish(&mut msg(), Arc::new(()), &stop);
        drop(read_all(&mut c));
        assert_eq!(c.releaser().ring_counts(), (3, 1), "woken once");
        hub.service(id);
        assert_eq!(hub.counters.wakes_received.get(), 1);
        assert!(hub.drain_rings());
        assert_eq!(hub.held(), 0);
    }

    #[test]
    fn a_consumer_that_lies_in_its_release_ring_is_disconnected_and_nobody_else_is_touched() {
        let (mut hub, mut c, _) = hub_with_a_ring_consumer("lie", OnFull::Block, 64);
        // A second consumer, on the socket only.
        let (b, cb) = pair();
        hub.attach(b, OnFull::Block, 8).unwrap();
        let mut cb = Client::new(cb);
        let stop = AtomicBool::new(false);
        let item = Arc::new(());
        hub.publish(&mut msg(), item.clone(), &stop);
        let got = read_all(&mut c);
        assert_eq!(cb.buffers().len(), 1);
        // The liar writes a release head far ahead, as a hostile process could.
        let fd = hub.peers[0].ring.as_ref().unwrap().fds()[1]
            .try_clone_to_owned()
            .unwrap();
        let len = crate::ring::HEADER + 8;
        // SAFETY: maps the release region's first page and word, writable, as the
        // consumer may; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: offset 64 (the release head) lies in the mapping; aligned.
        unsafe {
            (*p.cast::<u8>()
                .add(64)
                .cast::<std::sync::atomic::AtomicU64>())
            .store(1 << 50, Ordering::Release)
        };
        hub.drain_rings();
        // SAFETY: what mmap returned.
        unsafe { libc::munmap(p, len) };
        let left = hub.take_left();
        assert_eq!(left.len(), 1);
        match &left[0].1 {
            Leave::Malformed(m) => assert!(m.contains("release ring head"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(hub.counters.consumers_malformed.get(), 1);
        assert_eq!(
            Arc::strong_count(&item),
            2,
            "the other consumer still holds it"
        );
        hub.publish(&mut msg(), Arc::new(()), &stop);
        assert_eq!(cb.buffers().len(), 1, "and gets the next");
        drop(got);
    }
}
