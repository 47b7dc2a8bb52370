//! The AF_XDP receive loop, free of GStreamer types: from the RX ring to a batch of
//! datagrams lying in the UMEM ([`XdpReceiver::receive`]), which the caller either lends
//! downstream as it is (`fhxdpsrc`, over [`Capture::ring`]) or hands to an engine in
//! place and gives straight back ([`firehose_core::transport::InPlaceTransport`]: heap
//! reassembly or chunk placement over AF_XDP with the one copy from the UMEM into the
//! heap or chunk).
//!
//! What stays with the element: mapping settings to a [`super::Config`], errors to
//! GStreamer messages, and stats.

use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::endpoint::{EndpointCounters, Tally as EndpointTally};
use firehose_core::frame::accept::{packet_entry_dest, Rejected};
use firehose_core::meta::dest::PacketDest;
use firehose_core::netif::LinkWatch;
use firehose_core::stats::names;
use firehose_core::sync::lock;
use firehose_core::transport::{Discarded, InPlaceTransport, Received};
use firehose_core::wake::{self, wait_readable, Waker};
use firehose_core::{MemoryRegion, PacketInfo};

use super::jumbo::{self, Geometry, Placed};
use super::{refill, Capture};

/// Poll timeout while the kernel has frames to receive into: long, since a packet
/// wakes us anyway.
const IDLE_WAIT_MS: i32 = 100;
/// Poll timeout while few frames are posted: a dry fill ring makes the kernel drop
/// without waking us, so look again soon for frames released downstream.
const STARVED_WAIT_MS: i32 = 1;
/// How often the kernel's drop counters are read while no packet comes.
const KERNEL_STATS_IDLE: Duration = Duration::from_millis(100);

/// How an [`XdpReceiver`] waits for packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Block in `poll` until packets arrive.
    Block,
    /// Sleep this long after an empty RX ring (nobody waits on the socket, so the
    /// kernel wakes no one per packet; the RX ring holds what arrives meanwhile).
    Nap(Duration),
    /// Spin on the ring, kicking the kernel to busy-poll the queue.
    BusyPoll,
}

firehose_core::counts! {
    /// What the receive loop counted since start, with the stats names `fhxdpsrc`
    /// reports them under.
    pub struct Tally {
        /// Datagrams delivered.
        packets: names::PACKETS,
        /// Their payload bytes.
        bytes: names::BYTES,
        /// Batches delivered.
        batches: names::BATCHES,
        /// Frames that were no UDP datagram, or descriptors that lied.
        malformed: names::MALFORMED,
        /// Datagrams longer than the capture allows.
        truncated: names::TRUNCATED,
        /// Datagrams the filter did not want.
        filtered: names::FILTERED,
        /// Zero-length datagrams.
        empty: names::EMPTY,
        /// Datagrams longer than a frame, joined from several (jumbo frames).
        joined: names::JOINED,
        /// Datagrams longer than a frame whose frames could not be joined: dropped.
        unjoined: names::UNJOINED,
    }
}

/// Why [`XdpReceiver::receive`] returned without a batch.
#[derive(Debug)]
pub enum RxError {
    /// The stop flag was raised or the waker fired.
    Interrupted,
    /// The interface went away or down.
    Link(String),
    /// `poll` on the socket failed.
    Poll(std::io::Error),
}

/// One batch of datagrams in the UMEM: the frames `range` spans (only this batch's own),
/// held until [`XdpReceiver::lend`] or [`XdpReceiver::give_back`].
#[derive(Debug)]
pub struct RxBatch {
    /// Bytes of the UMEM the batch lies in.
    pub range: Range<usize>,
    /// The frames it holds, in slot order.
    pub slots: Vec<u32>,
    /// The datagrams, offsets relative to `range.start`.
    pub packets: Vec<PacketInfo>,
    /// Where each was sent.
    pub dests: Vec<PacketDest>,
}

/// A bound AF_XDP capture and its receive loop.
pub struct XdpReceiver {
    cap: Capture,
    frames: u32,
    frame_size: usize,
    batch: u32,
    wait: Wait,
    waker: Arc<Waker>,
    /// Reused list of slots taken for the fill ring.
    post: Vec<u32>,
    /// The interface: gone or down is an error, not a capture that waits for ever.
    watch: LinkWatch,
    /// When the loop, finding no packet, next reads the kernel's drop counters.
    kernel_stats_due: Instant,
    tally: Tally,
    /// This batch's packets and bytes per endpoint, added to `endpoints` once per batch.
    endpoint_tally: EndpointTally,
    /// Packets and bytes per endpoint since start, read by `stats`.
    endpoints: Arc<EndpointCounters>,
    /// Most frames held (lent, or being received) at once.
    held_high: u64,
}

impl XdpReceiver {
    /// The receive loop of `cap` (`frames` of `frame_size` bytes), taking at most
    /// `batch` frames per batch, waiting as `wait` says; `waker` ends a wait
    /// (the element's unlock). `interface` names the link watched.
    pub fn new(
        cap: Capture,
        interface: &str,
        frames: u32,
        frame_size: u32,
        batch: u32,
        wait: Wait,
        waker: Arc<Waker>,
    ) -> Self {
        let watch = LinkWatch::new(interface, cap.ifindex);
        Self {
            endpoint_tally: EndpointTally::new(cap.endpoints.snapshot().len()),
            endpoints: cap.endpoints.clone(),
            post: Vec::with_capacity(frames as usize),
            cap,
            frames,
            frame_size: frame_size as usize,
            batch: batch.max(1),
            wait,
            waker,
            watch,
            kernel_stats_due: Instant::now(),
            tally: Tally::default(),
            held_high: 0,
        }
    }

    /// The capture (socket, UMEM, slot ring).
    pub fn capture(&self) -> &Capture {
        &self.cap
    }

    /// What was counted since start.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// Packets and bytes per endpoint since start (shared: `stats` reads it while the
    /// loop runs).
    pub fn endpoint_counters(&self) -> &Arc<EndpointCounters> {
        &self.endpoints
    }

    /// Most frames held (lent downstream, or being received) at once since start.
    pub fn held_high_water(&self) -> u64 {
        self.held_high
    }

    /// Ends the capture (detaches the program, closes the socket).
    pub fn close(self) {
        self.cap.close();
    }

    /// Gives a batch's frames straight back to the kernel (its datagrams were used in
    /// place).
    pub fn give_back(&mut self, b: RxBatch) {
        let mut ring = lock(&self.cap.ring);
        for s in b.slots {
            let _ = ring.release(s);
        }
        refill(&mut ring, &mut self.cap.sock.fill, &mut self.post);
    }

    /// The bytes of a batch, in the UMEM.
    pub fn data(&self, b: &RxBatch) -> &[u8] {
        // SAFETY: `range` lies inside the region (the loop built it from checked
        // frames), and its frames are held by the batch: the kernel does not write them
        // until they are released, which needs the batch.
        unsafe {
            std::slice::from_raw_parts(
                MemoryRegion::as_ptr(&self.cap.region).add(b.range.start),
                b.range.len(),
            )
        }
    }

    /// Receives until one batch with at least one datagram is ready (its frame
    /// headers lying before each payload), `stop` is raised or the waker fires, or an
    /// error occurs; without `wait`, `None` when the RX ring holds no datagram. `on_idle` is handed what was counted so far and the socket's
    /// `XDP_STATISTICS` at most every 100 ms while no packet comes (the caller reads
    /// them after batches itself), so an idle or starved capture — exactly when the
    /// kernel drops — does not show them stale.
    pub fn receive(
        &mut self,
        stop: &AtomicBool,
        wait: bool,
        on_idle: &mut dyn FnMut(&Tally, std::io::Result<libc::xdp_statistics>),
    ) -> Result<Option<RxBatch>, RxError> {
        loop {
            if stop.load(Ordering::Acquire) {
                return Err(RxError::Interrupted);
            }
            let geometry = Geometry {
                frames: self.frames as usize,
                frame_size: self.frame_size,
            };
            // Multi-buffer: look far enough ahead to see the end of any datagram.
            let ahead = if self.cap.multi_buffer {
                self.batch.max(geometry.max_frags() as u32)
            } else {
                self.batch
            };
            let (start, n) = self.cap.sock.rx.peek(ahead);
            if n == 0 {
                if !wait {
                    // Frames released meanwhile go back before the caller looks again.
                    let mut ring = lock(&self.cap.ring);
                    refill(&mut ring, &mut self.cap.sock.fill, &mut self.post);
                    if self.cap.sock.fill.needs_wakeup() {
                        self.cap.sock.kick();
                    }
                    return Ok(None);
                }
                self.idle(on_idle)?;
                continue;
            }
            let now = firehose_core::batch::unix_ns();
            let mut packets = Vec::with_capacity(n as usize);
            let mut dests = Vec::with_capacity(n as usize);
            let mut slots = Vec::with_capacity(n as usize);
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            let mut t = Tally::default();
            let fs = self.frame_size;
            {
                // One lock per batch: completions, the release of an all-rejected run
                // and the refill.
                let mut ring = lock(&self.cap.ring);
                // Descriptors consumed; the rest stay in the RX ring for the next call.
                let mut used = 0;
                let base = MemoryRegion::as_ptr(&self.cap.region);
                let mut i = 0;
                // A datagram joined in the guard ends the batch: its frames past the
                // last slot are held with the batch but lie outside the run, so no
                // later frame may extend the run over them.
                let mut wrapped = false;
                while i < n && !wrapped {
                    let d = self.cap.sock.rx.desc(start.wrapping_add(i));
                    // A datagram longer than a frame comes in several descriptors
                    // (multi-buffer mode), all in the ring once the first is: find its
                    // last; one cut off by the peek waits for the next call.
                    let mut last = i;
                    if self.cap.multi_buffer {
                        while last < n
                            && self.cap.sock.rx.desc(start.wrapping_add(last)).options
                                & libc::XDP_PKT_CONTD
                                != 0
                        {
                            last += 1;
                        }
                        if last == n && !(i == 0 && n == ahead) {
                            break;
                        }
                        if last == n {
                            // A whole window of continuations, more than any datagram
                            // spans: no datagram (a kernel bug). Waiting for its end
                            // would peek the same descriptors for ever; its frames go
                            // back and it is counted.
                            for k in 0..n {
                                let f = self.cap.sock.rx.desc(start.wrapping_add(k));
                                let fslot = f.addr as usize / fs;
                                if fslot < self.frames as usize
                                    && ring.complete(fslot as u32).is_ok()
                                {
                                    let _ = ring.release(fslot as u32);
                                }
                            }
                            t.malformed += 1;
                            used = n;
                            break;
                        }
                    }
                    let (addr, len) = (d.addr as usize, d.len as usize);
                    let slot = addr / fs;
                    // The lent memory covers lo..hi, so it may hold only this batch's
                    // own frames: a frame that does not continue the run of adjacent
                    // slots ends the batch (the fill ring's order wraps at the end of
                    // the UMEM, and frames between two of ours may be the kernel's).
                    if slots.last().is_some_and(|&l: &u32| l as usize + 1 != slot) {
                        break;
                    }
                    let first = i;
                    used = last + 1;
                    i = last + 1;
                    let frame_start = slot * fs;
                    // A descriptor outside the UMEM or across a frame boundary would
                    // be a kernel bug; count it rather than trust it.
                    let valid = |slot: usize, addr: usize, len: usize| {
                        slot < self.frames as usize && addr + len <= slot * fs + fs
                    };
                    let mut whole = valid(slot, addr, len) && ring.complete(slot as u32).is_ok();
                    if whole {
                        // A completed frame belongs to the run whether its datagram is
                        // kept or rejected: a rejected one goes back with the batch, so
                        // no frame inside lo..hi returns to the kernel while the memory
                        // is lent.
                        lo = lo.min(frame_start);
                        hi = hi.max(frame_start + fs);
                        slots.push(slot as u32);
                    }
                    // The continuation frames' bytes move up against the first's.
                    let mut end = addr + len;
                    for m in 1..=(last - first) as usize {
                        let f = self.cap.sock.rx.desc(start.wrapping_add(first + m as u32));
                        let (faddr, flen) = (f.addr as usize, f.len as usize);
                        let fslot = faddr / fs;
                        if !valid(fslot, faddr, flen) || ring.complete(fslot as u32).is_err() {
                            whole = false;
                            continue;
                        }
                        let placed = whole
                            .then(|| jumbo::place(geometry, slot, m, fslot, flen, end))
                            .flatten();
                        let dst = match placed {
                            Some(Placed::InRun { dst }) => {
                                slots.push(fslot as u32);
                                hi = hi.max(fslot * fs + fs);
                                dst
                            }
                            Some(Placed::Guard { dst }) => {
                                // Held with the batch, not released now: frames go back
                                // in the order they came, which keeps the fill ring in
                                // slot order (a frame returned early would leave a hole
                                // that the next datagram across it could not be joined
                                // over).
                                slots.push(fslot as u32);
                                hi = hi.max((dst + flen).div_ceil(fs) * fs);
                                wrapped = true;
                                dst
                            }
                            None => {
                                whole = false;
                                let _ = ring.release(fslot as u32);
                                continue;
                            }
                        };
                        // SAFETY: faddr..+flen lies in frame `fslot`, just completed
                        // (the kernel no longer writes it); dst..+flen lies in this
                        // datagram's own frames or in the guard past the UMEM, which
                        // the kernel never sees and which only a datagram holding the
                        // last frame (lent until released) uses; `place` checked it
                        // against the region. The ranges may overlap (a move back).
                        unsafe { std::ptr::copy(base.add(faddr), base.add(dst), flen) };
                        end = dst + flen;
                    }
                    if last > first {
                        if whole {
                            t.joined += 1;
                        } else {
                            t.unjoined += 1;
                            continue;
                        }
                    }
                    if !whole {
                        t.malformed += 1;
                        continue;
                    }
                    // SAFETY: addr..end lies inside this datagram's frames of the
                    // region (the first checked above, the rest joined against it); the
                    // frames were just completed, so the kernel no longer writes them
                    // and nobody else reads them until they are lent.
                    let frame = unsafe { std::slice::from_raw_parts(base.add(addr), end - addr) };
                    match packet_entry_dest(frame, addr, &self.cap.filter, now) {
                        Ok((p, d, endpoint)) => {
                            t.packets += 1;
                            t.bytes += u64::from(p.len);
                            self.endpoint_tally.count(endpoint, u64::from(p.len));
                            packets.push(p);
                            dests.push(d);
                        }
                        Err(r) => match r {
                            // The XDP program redirects UDP only.
                            Rejected::Malformed | Rejected::NotUdp => t.malformed += 1,
                            Rejected::Truncated => t.truncated += 1,
                            Rejected::Filtered => t.filtered += 1,
                            Rejected::Empty => t.empty += 1,
                        },
                    }
                }
                self.cap.sock.rx.release(used);
                // Once per batch: one atomic add per endpoint that had a packet.
                self.endpoints.add(&mut self.endpoint_tally);
                if packets.is_empty() {
                    // Nothing to lend: the rejected frames go straight back.
                    for s in slots.drain(..) {
                        let _ = ring.release(s);
                    }
                }
                refill(&mut ring, &mut self.cap.sock.fill, &mut self.post);
                self.held_high = self.held_high.max(ring.counts().held as u64);
            }
            if self.cap.sock.fill.needs_wakeup() {
                self.cap.sock.kick();
            }
            if packets.is_empty() {
                self.tally.add(&t);
                continue;
            }
            for p in &mut packets {
                // Offsets were relative to the UMEM; the batch starts at `lo`.
                p.offset -= lo as u32;
            }
            t.batches = 1;
            self.tally.add(&t);
            return Ok(Some(RxBatch {
                range: lo..hi,
                slots,
                packets,
                dests,
            }));
        }
    }

    /// One turn of waiting with an empty RX ring.
    fn idle(
        &mut self,
        on_idle: &mut dyn FnMut(&Tally, std::io::Result<libc::xdp_statistics>),
    ) -> Result<(), RxError> {
        let now = Instant::now();
        if now >= self.kernel_stats_due {
            on_idle(&self.tally, self.cap.sock.statistics());
            self.kernel_stats_due = now + KERNEL_STATS_IDLE;
        }
        if let Err(e) = self.watch.check(now) {
            self.cap.link = None;
            return Err(RxError::Link(e));
        }
        // Frames released downstream go back to the kernel before we wait: with the
        // fill ring dry it drops packets without waking us.
        let posted = {
            let mut ring = lock(&self.cap.ring);
            refill(&mut ring, &mut self.cap.sock.fill, &mut self.post);
            ring.counts().posted
        };
        let busy = self.wait == Wait::BusyPoll;
        if busy || self.cap.sock.fill.needs_wakeup() {
            self.cap.sock.kick();
        }
        match self.wait {
            Wait::BusyPoll => {
                std::hint::spin_loop();
                Ok(())
            }
            // Stop and unlock() fire the waker, which cuts the nap short.
            Wait::Nap(d) => match wake::nap(&self.waker, d.as_nanos() as u64) {
                Ok(false) => Ok(()),
                _ => Err(RxError::Interrupted),
            },
            Wait::Block => {
                let timeout = if posted < self.batch as usize {
                    STARVED_WAIT_MS
                } else {
                    IDLE_WAIT_MS
                };
                match wait_readable(self.cap.sock.as_raw_fd(), &self.waker, timeout) {
                    Ok(true) => Err(RxError::Interrupted),
                    Ok(false) => Ok(()),
                    Err(e) => {
                        self.cap.link = None;
                        Err(RxError::Poll(e))
                    }
                }
            }
        }
    }
}

impl InPlaceTransport for XdpReceiver {
    fn receive_in_place(
        &mut self,
        stop: &AtomicBool,
        wait: bool,
        consume: &mut dyn FnMut(&[u8], &[PacketInfo]),
    ) -> std::io::Result<Received> {
        let b = match self.receive(stop, wait, &mut |_, _| {}) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Received::Nothing),
            Err(RxError::Interrupted) => return Ok(Received::Interrupted),
            Err(RxError::Link(e)) => return Err(std::io::Error::other(e)),
            Err(RxError::Poll(e)) => return Err(e),
        };
        let used = b.range.len();
        consume(self.data(&b), &b.packets);
        self.give_back(b);
        Ok(Received::Batch { used })
    }

    fn discarded(&self) -> Discarded {
        let t = &self.tally;
        Discarded {
            truncated: t.truncated,
            empty: t.empty,
            other: t.malformed + t.filtered + t.unjoined,
        }
    }

    /// The kernel's drops for this socket: no free frame in the fill ring
    /// (`rx_dropped`) and a full RX ring (`rx_ring_full`).
    fn device_drops(&mut self) -> u64 {
        self.cap
            .sock
            .statistics()
            .map_or(0, |k| k.rx_dropped + k.rx_ring_full)
    }
}
