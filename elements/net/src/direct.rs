//! Kernel UDP straight into an engine's memory: `recvmmsg` with a scatter list per
//! message that puts each expected datagram's header into scratch and its payload where
//! the engine predicts it belongs ([`LandingEngine::plan`]), so that the only copy of a
//! payload is the kernel's. Any [`LandingEngine`] will do: today the chunk engine
//! ([`ChunkAssembler`], whose chunks the payloads land in). Packets that arrive other
//! than predicted (the first of a stream, a message placed from its contents, loss,
//! reordering, a changed header) are gathered from wherever they landed and pushed
//! through the engine as usual: correctness never depends on the guess, only the copy
//! saved does.
//!
//! The receiver owns neither the socket nor the engine: each [`DirectReceiver::recv`] is
//! handed both, so that the caller keeps them at hand (to wait, set the engine's clock,
//! flush it, read their counters) between receives.
//!
//! One receive runs in two passes. The first decides, before anything is written, which
//! packets landed as predicted and copies every other one that (partly) landed in engine
//! memory out to staging: a push may write where another packet's payload landed on a
//! wrong guess. The second accounts the landed packets ([`LandingEngine::land`]) and
//! pushes the others ([`LandingEngine::push`]), in arrival order; a packet received
//! wholly into scratch is pushed from there. With no prediction at all (a handler that
//! does not allow it, chunks too large to land in: [`ChunkAssembler::lands_directly`])
//! that is the same one copy into a cached batch and one into the chunk as
//! `fhudpsrc ! fhdepay`. No GStreamer types; the element is `fhudpchunksrc`.

use std::io;
use std::ops::Range;

use firehose_chunk::handler::PacketFacts;
use firehose_chunk::landing::{Landed, Landing, LandingEngine};
#[cfg(doc)]
use firehose_chunk::ChunkAssembler;
use firehose_chunk::Flow;

use crate::recv::{UdpReceiver, MAX_DATAGRAM};

/// Most datagrams planned into one GRO message (64 KiB of 1 KiB datagrams).
pub const MAX_SEGMENTS: usize = 64;

/// Re-exported from the landing module, where the other rules of when landing pays live.
pub use firehose_chunk::landing::LANDING_MIN_PAYLOAD_BYTES;

/// Headers longer than this are not predicted.
const MAX_HEADER: usize = firehose_chunk::landing::MAX_HEADER;

/// Scatter-list entries per message: a header and a payload per segment, then overflow.
const IOVS_PER_MSG: usize = 2 * MAX_SEGMENTS + 1;

/// Counters of a [`DirectReceiver`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectCounts {
    /// Datagrams received (GRO segments counted one by one), before the engine's verdict.
    pub datagrams: u64,
    /// Their bytes, headers included.
    pub bytes: u64,
    /// Datagrams whose payload the kernel put where it belongs (no copy).
    pub landed: u64,
    /// Datagrams gathered from where they landed and pushed (one copy, as without
    /// direct receive).
    pub copied: u64,
    /// Datagrams longer than the largest accepted, or that did not fit (dropped).
    pub truncated: u64,
    /// Zero-length datagrams (dropped).
    pub empty: u64,
    /// Datagrams to a destination not in the endpoint list (dropped).
    pub filtered: u64,
    /// `recvmmsg` calls that returned data.
    pub batches: u64,
}

/// What one [`DirectReceiver::recv`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectRecv {
    /// Datagrams were received (or none was queued and waiting was not asked for);
    /// `Flow::End` when the handler ended the stream.
    Batch(Flow),
    /// The receiver's waker fired while waiting.
    Woken,
}

/// One received datagram, between the two passes.
enum Item {
    /// Predicted right: plan entry `landing`, its header in scratch at `header`.
    Landed {
        landing: usize,
        header: Range<usize>,
        facts: PacketFacts,
        msg: usize,
        from: usize,
    },
    /// Gathered into staging.
    Staged(Range<usize>),
    /// Wholly in a message's overflow scratch, which no push writes: pushed from there.
    Scratch(Range<usize>),
}

/// Receives from a UDP socket into a [`LandingEngine`], payloads straight into the
/// engine's memory; both are passed to each [`DirectReceiver::recv`].
pub struct DirectReceiver {
    batch: usize,
    plan: Vec<Landing>,
    /// The plan entries given to each message of the current receive.
    assigned: Vec<Range<usize>>,
    /// The scatter-list length of each message of the current receive.
    iov_lens: Vec<usize>,
    headers: Vec<u8>,
    overflow: Vec<u8>,
    iovs: Vec<libc::iovec>,
    staging: Vec<u8>,
    /// Where a packet predicted right but then refused by the engine (its chunk) is
    /// gathered.
    missed: Vec<u8>,
    items: Vec<Item>,
    /// The most datagrams one message of the last receive carried: GRO coalesces only
    /// what arrives together (a sender using GSO, a NIC under load), so a message is
    /// planned that many, not a full 64 KiB, lest one datagram short shift every later
    /// message of the receive off its predictions.
    coalesced: usize,
    /// Messages of the last receive that held several datagrams (GRO).
    coalesced_msgs: usize,
    /// Messages this receive has room for: `batch`, or fewer while the receiver sizes
    /// its batches for coalesced messages.
    active: usize,
    counts: DirectCounts,
}

// SAFETY: the raw pointers in `iovs` and `plan` point into this struct's own buffers and
// into the engine's memory, which the engine passed to `recv` owns; the receiver is used
// by one thread at a time.
unsafe impl Send for DirectReceiver {}

impl std::fmt::Debug for DirectReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectReceiver")
            .field("batch", &self.batch)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl DirectReceiver {
    /// A receiver of up to `batch` messages (GRO: up to 64 KiB each) per `recvmmsg`.
    /// `batch` must already be clamped to `1..=rx.max_batch_len()` of the
    /// [`UdpReceiver`] later passed to [`DirectReceiver::recv`] (0 counts as 1); each
    /// receive takes at most `rx.batch_len()` of them (few while GRO may coalesce, all
    /// once the receiver has learnt that the stream does not). Without a plan from the
    /// engine (for the chunk engine, a handler that does not allow it:
    /// [`ChunkAssembler::lands_directly`]) every packet is received into scratch and
    /// pushed.
    pub fn new(batch: usize) -> Self {
        let batch = batch.max(1);
        let null = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Self {
            headers: vec![0; batch * MAX_SEGMENTS * MAX_HEADER],
            overflow: vec![0; batch * MAX_DATAGRAM],
            iovs: vec![null; batch * IOVS_PER_MSG],
            staging: vec![0; batch * MAX_DATAGRAM],
            missed: vec![0; MAX_DATAGRAM],
            plan: Vec::with_capacity(batch * MAX_SEGMENTS),
            assigned: Vec::with_capacity(batch),
            iov_lens: Vec::with_capacity(batch),
            items: Vec::with_capacity(batch * MAX_SEGMENTS),
            coalesced: MAX_SEGMENTS,
            coalesced_msgs: 0,
            active: batch,
            counts: DirectCounts::default(),
            batch,
        }
    }

    /// Counters so far.
    pub fn counts(&self) -> DirectCounts {
        self.counts
    }

    /// Receives one batch from `rx` (waiting, interruptibly, when `wait` and none is
    /// queued) and runs it through `engine`; what the engine finishes (for the chunk
    /// engine, chunks that leave its window) is appended to `out`.
    pub fn recv<E: LandingEngine>(
        &mut self,
        rx: &mut UdpReceiver,
        engine: &mut E,
        out: &mut E::Output,
        wait: bool,
    ) -> io::Result<DirectRecv> {
        let lands = engine
            .expected_payload()
            .is_some_and(|n| n >= LANDING_MIN_PAYLOAD_BYTES);
        let limited = self.batch.min(rx.batch_len()).max(1);
        let per_msg = if rx.gro() { self.coalesced } else { 1 };
        if lands {
            // The receiver's byte limit keeps a batch of payloads in the L2 cache until
            // the engine reads them, which only a copied packet needs: a payload that
            // lands in its place is never read here. So, one datagram per message, every
            // planned message is received in this call, up to batch-size (a plain
            // sender's 8972-byte datagrams came 28 per recvmmsg where the floor takes
            // 64); the unplanned ones stay within the limit.
            let room = if rx.gro() { limited } else { self.batch };
            engine.plan(room * per_msg, &mut self.plan);
            self.active = if rx.gro() {
                limited
            } else {
                self.plan.len().clamp(limited, self.batch)
            };
        } else {
            self.active = limited;
            self.plan.clear();
        }
        self.lay_out(rx);
        let n = match rx.recv_vectored(&mut self.iovs, IOVS_PER_MSG, &self.iov_lens, wait)? {
            Some(n) => n,
            None => return Ok(DirectRecv::Woken),
        };
        if n > 0 {
            self.counts.batches += 1;
        }
        self.sort(rx, engine, n);
        rx.learn_batch(n, self.coalesced_msgs, n < self.active);
        Ok(DirectRecv::Batch(self.run(engine, out)))
    }

    /// Gives each message its share of the plan and builds its scatter list: per
    /// predicted datagram its header into scratch and its payload at its place, then
    /// room for a whole datagram more. `rx` says whether GRO is on.
    fn lay_out(&mut self, rx: &UdpReceiver) {
        self.assigned.clear();
        self.iov_lens.clear();
        let per_msg = if rx.gro() { self.coalesced } else { 1 };
        let mut next = 0;
        for i in 0..self.active {
            let start = next;
            let mut bytes = 0;
            while next < self.plan.len() && next - start < per_msg {
                let l = &self.plan[next];
                let size = l.header_len + l.len;
                let first = self.plan[start].header_len + self.plan[start].len;
                // GRO coalesces datagrams of one size, the last of them possibly shorter,
                // into at most 64 KiB.
                if next > start && (size > first || bytes + size > MAX_DATAGRAM) {
                    break;
                }
                bytes += size;
                next += 1;
                if l.short || size < first {
                    break;
                }
            }
            let iovs = &mut self.iovs[i * IOVS_PER_MSG..(i + 1) * IOVS_PER_MSG];
            for (j, l) in self.plan[start..next].iter().enumerate() {
                let h = (i * MAX_SEGMENTS + j) * MAX_HEADER;
                iovs[2 * j] = libc::iovec {
                    iov_base: self.headers[h..].as_mut_ptr().cast(),
                    iov_len: l.header_len,
                };
                iovs[2 * j + 1] = libc::iovec {
                    iov_base: l.dest.cast(),
                    iov_len: l.len,
                };
            }
            let k = next - start;
            iovs[2 * k] = libc::iovec {
                iov_base: self.overflow[i * MAX_DATAGRAM..].as_mut_ptr().cast(),
                iov_len: MAX_DATAGRAM,
            };
            self.assigned.push(start..next);
            self.iov_lens.push(2 * k + 1);
        }
    }

    /// First pass over `n` received messages: which datagrams landed as predicted; every
    /// other one is gathered into staging now, before any write. `rx` holds the
    /// messages; `engine` only says which packets it predicted.
    fn sort<E: LandingEngine>(&mut self, rx: &mut UdpReceiver, engine: &mut E, n: usize) {
        self.items.clear();
        let mut staged = 0;
        if n > 0 {
            self.coalesced = 1;
        }
        self.coalesced_msgs = 0;
        for i in 0..n {
            let m = rx.message(i);
            if m.endpoint.is_none() {
                // Sent to this port but not to a listed address: wherever its bytes
                // landed, nothing is accounted for them, as for a wrong prediction.
                let seg = if m.gso > 0 { m.gso } else { m.len.max(1) };
                self.counts.filtered += m.len.div_ceil(seg).max(1) as u64;
                continue;
            }
            if m.truncated {
                self.counts.truncated += 1;
                continue;
            }
            if m.len == 0 {
                self.counts.empty += 1;
                continue;
            }
            let seg = if m.gso > 0 { m.gso } else { m.len };
            let segments = m.len.div_ceil(seg) as u64;
            if seg > rx.max_packet() {
                self.counts.truncated += segments;
                continue;
            }
            self.counts.datagrams += segments;
            self.coalesced = self.coalesced.max((segments as usize).min(MAX_SEGMENTS));
            self.coalesced_msgs += usize::from(segments > 1);
            self.counts.bytes += m.len as u64;
            let assigned = self.assigned[i].clone();
            // Where the message's overflow scratch starts in its stream of bytes.
            let overflow_at: usize = self.plan[assigned.clone()]
                .iter()
                .map(|l| l.header_len + l.len)
                .sum();
            // Where the j-th predicted datagram starts in the message's stream of bytes.
            let mut at = 0;
            let mut j = 0;
            let mut off = 0;
            while off < m.len {
                let l = seg.min(m.len - off);
                let mut item = None;
                if assigned.start + j < assigned.end {
                    let idx = assigned.start + j;
                    let landing = self.plan[idx];
                    let h = (i * MAX_SEGMENTS + j) * MAX_HEADER;
                    let header = h..h + landing.header_len;
                    if at == off && l > landing.header_len {
                        item = engine
                            .predicted(&self.headers[header.clone()], l, &landing)
                            .map(|facts| Item::Landed {
                                landing: idx,
                                header,
                                facts,
                                msg: i,
                                from: off,
                            });
                    }
                    at += landing.header_len + landing.len;
                    j += 1;
                }
                let item = item.unwrap_or_else(|| {
                    if off >= overflow_at {
                        let from = i * MAX_DATAGRAM + off - overflow_at;
                        return Item::Scratch(from..from + l);
                    }
                    let range = staged..staged + l;
                    let iovs = &self.iovs[i * IOVS_PER_MSG..][..self.iov_lens[i]];
                    gather(iovs, off, &mut self.staging[range.clone()]);
                    staged += l;
                    Item::Staged(range)
                });
                self.items.push(item);
                off += l;
            }
        }
    }

    /// Second pass: lands or pushes every datagram, in arrival order.
    fn run<E: LandingEngine>(&mut self, engine: &mut E, out: &mut E::Output) -> Flow {
        let mut flow = Flow::Continue;
        for item in &self.items {
            let f = match *item {
                Item::Landed {
                    landing,
                    ref header,
                    ref facts,
                    msg,
                    from,
                } => {
                    let header_bytes = &self.headers[header.clone()];
                    match engine.land(header_bytes, facts, &self.plan[landing], out) {
                        Landed::Done(f) => {
                            self.counts.landed += 1;
                            f
                        }
                        Landed::Missed => {
                            self.counts.copied += 1;
                            let buf = &mut self.missed[..facts.payload.end];
                            gather(
                                &self.iovs[msg * IOVS_PER_MSG..][..self.iov_lens[msg]],
                                from,
                                buf,
                            );
                            engine.push(buf, out)
                        }
                    }
                }
                Item::Staged(ref range) => {
                    self.counts.copied += 1;
                    engine.push(&self.staging[range.clone()], out)
                }
                Item::Scratch(ref range) => {
                    self.counts.copied += 1;
                    engine.push(&self.overflow[range.clone()], out)
                }
            };
            if f == Flow::End {
                flow = Flow::End;
            }
        }
        flow
    }
}

/// Copies the bytes `from..from + dst.len()` of a message received into `iovs` (its
/// scatter list, filled in order) into `dst`.
fn gather(iovs: &[libc::iovec], from: usize, dst: &mut [u8]) {
    let want = from..from + dst.len();
    let mut pos = 0;
    for iov in iovs {
        let (s, e) = (pos, pos + iov.iov_len);
        pos = e;
        let (a, b) = (s.max(want.start), e.min(want.end));
        if a < b {
            // SAFETY: every entry points at `iov_len` bytes of this receiver's scratch or
            // of the engine's memory, both alive during the receive (the engine is
            // borrowed by it); nothing holds a mutable reference to them during this read.
            let src = unsafe { std::slice::from_raw_parts(iov.iov_base as *const u8, iov.iov_len) };
            dst[a - want.start..b - want.start].copy_from_slice(&src[a - s..b - s]);
        }
        if pos >= want.end {
            break;
        }
    }
}
