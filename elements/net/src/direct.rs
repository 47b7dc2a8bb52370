//! Kernel UDP straight into chunks: `recvmmsg` with a scatter list per message that puts
//! each expected datagram's header into scratch and its payload where the chunk engine
//! predicts it belongs ([`ChunkAssembler::plan`]), so that the only copy of a payload is
//! the kernel's. Packets that arrive other than predicted (the first of a stream, a
//! message placed from its contents, loss, reordering, a changed header) are gathered
//! from wherever they landed and pushed through the engine as usual: correctness never
//! depends on the guess, only the copy saved does.
//!
//! One receive runs in two passes. The first decides, before anything is written, which
//! packets landed as predicted and copies every other one that (partly) landed in chunk
//! memory out to staging: a push may write where another packet's payload landed on a
//! wrong guess. The second accounts the landed packets ([`ChunkAssembler::land`]) and
//! pushes the others, in arrival order; a packet received wholly into scratch is pushed
//! from there. With no prediction at all (a handler that does not allow it, chunks too
//! large to land in: [`ChunkAssembler::lands_directly`]) that is the same one copy into
//! a cached batch and one into the chunk as `fhudpsrc ! fhdepay`. No GStreamer types;
//! the element is `fhudpchunksrc`.

use std::io;
use std::ops::Range;

use firehose_core::chunk::{ChunkAssembler, FinishedChunk, Flow, Landed, Landing};
use firehose_core::handler::PacketFacts;

use crate::recv::{UdpReceiver, MAX_DATAGRAM};

/// Most datagrams planned into one GRO message (64 KiB of 1 KiB datagrams).
pub const MAX_SEGMENTS: usize = 64;

/// Streams whose packets carry less payload than this are not received into chunks:
/// each landed datagram costs the kernel two scatter entries (header, payload), each a
/// copy of its own, and for small datagrams that costs more than the copy it saves. With
/// 1472-byte SPEAD packets (1432-byte payloads) landing cost 0.36–0.41 s/GB against
/// 0.31–0.36 copied; with 8972-byte ones (8928) it cost 10–25 % less (docs/benchmarks.md).
pub const LANDING_MIN_PAYLOAD_BYTES: usize = 4096;

/// Headers longer than this are not predicted.
const MAX_HEADER: usize = firehose_core::chunk::MAX_LANDING_HEADER;

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

/// A UDP socket feeding a chunk engine, receiving payloads straight into its chunks.
pub struct DirectReceiver {
    rx: UdpReceiver,
    engine: ChunkAssembler,
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
    /// Where a packet predicted right but then refused by its chunk is gathered.
    missed: Vec<u8>,
    items: Vec<Item>,
    /// The most datagrams one message of the last receive carried: GRO coalesces only
    /// what arrives together (a sender using GSO, a NIC under load), so a message is
    /// planned that many, not a full 64 KiB, lest one datagram short shift every later
    /// message of the receive off its predictions.
    coalesced: usize,
    counts: DirectCounts,
}

// SAFETY: the raw pointers in `iovs` and `plan` point into this struct's own buffers and
// into the engine's pool memory, which it owns; the receiver is used by one thread at a
// time.
unsafe impl Send for DirectReceiver {}

impl std::fmt::Debug for DirectReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectReceiver")
            .field("rx", &self.rx)
            .field("batch", &self.batch)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl DirectReceiver {
    /// Receives with `rx` into `engine`'s chunks, up to `batch` messages (GRO: up to
    /// 64 KiB each) per `recvmmsg`. Without a handler that allows it
    /// ([`ChunkAssembler::lands_directly`]) every packet is received into scratch and
    /// pushed.
    pub fn new(rx: UdpReceiver, engine: ChunkAssembler, batch: usize) -> Self {
        let batch = batch.clamp(1, rx.batch_len());
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
            counts: DirectCounts::default(),
            rx,
            engine,
            batch,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &ChunkAssembler {
        &self.engine
    }

    /// The engine, e.g. to set its clock or flush it.
    pub fn engine_mut(&mut self) -> &mut ChunkAssembler {
        &mut self.engine
    }

    /// The socket.
    pub fn receiver(&self) -> &UdpReceiver {
        &self.rx
    }

    /// Counters so far.
    pub fn counts(&self) -> DirectCounts {
        self.counts
    }

    /// Waits, after a receive found nothing, for data (false) or the waker (true), with
    /// the socket's wake-up coalescing ([`UdpReceiver::wait_for_data`]).
    pub fn wait(&mut self) -> io::Result<bool> {
        self.rx.wait_for_data()
    }

    /// Receives one batch (waiting, interruptibly, when `wait` and none is queued) and
    /// runs it through the engine; chunks that leave its window are appended to `out`.
    pub fn recv(&mut self, out: &mut Vec<FinishedChunk>, wait: bool) -> io::Result<DirectRecv> {
        let per_msg = if self.rx.gro() { self.coalesced } else { 1 };
        if self
            .engine
            .expected_payload()
            .is_some_and(|n| n >= LANDING_MIN_PAYLOAD_BYTES)
        {
            self.engine.plan(self.batch * per_msg, &mut self.plan);
        } else {
            self.plan.clear();
        }
        self.lay_out();
        let n = match self
            .rx
            .recv_vectored(&mut self.iovs, IOVS_PER_MSG, &self.iov_lens, wait)?
        {
            Some(n) => n,
            None => return Ok(DirectRecv::Woken),
        };
        if n > 0 {
            self.counts.batches += 1;
        }
        self.sort(n);
        Ok(DirectRecv::Batch(self.run(out)))
    }

    /// Gives each message its share of the plan and builds its scatter list: per
    /// predicted datagram its header into scratch and its payload at its place, then
    /// room for a whole datagram more.
    fn lay_out(&mut self) {
        self.assigned.clear();
        self.iov_lens.clear();
        let per_msg = if self.rx.gro() { self.coalesced } else { 1 };
        let mut next = 0;
        for i in 0..self.batch {
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
    /// other one is gathered into staging now, before any write.
    fn sort(&mut self, n: usize) {
        self.items.clear();
        let mut staged = 0;
        if n > 0 {
            self.coalesced = 1;
        }
        for i in 0..n {
            let m = self.rx.message(i);
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
            if seg > self.rx.max_packet() {
                self.counts.truncated += segments;
                continue;
            }
            self.counts.datagrams += segments;
            self.coalesced = self.coalesced.max((segments as usize).min(MAX_SEGMENTS));
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
                        item = self
                            .engine
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
    fn run(&mut self, out: &mut Vec<FinishedChunk>) -> Flow {
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
                    match self
                        .engine
                        .land(header_bytes, facts, &self.plan[landing], out)
                    {
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
                            self.engine.push(buf, out)
                        }
                    }
                }
                Item::Staged(ref range) => {
                    self.counts.copied += 1;
                    self.engine.push(&self.staging[range.clone()], out)
                }
                Item::Scratch(ref range) => {
                    self.counts.copied += 1;
                    self.engine.push(&self.overflow[range.clone()], out)
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
            // of the engine's pool memory, both alive while the receiver is; nothing
            // holds a mutable reference to them during this read.
            let src = unsafe { std::slice::from_raw_parts(iov.iov_base as *const u8, iov.iov_len) };
            dst[a - want.start..b - want.start].copy_from_slice(&src[a - s..b - s]);
        }
        if pos >= want.end {
            break;
        }
    }
}
