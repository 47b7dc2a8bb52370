//! The chunk engine: places messages (SPEAD heaps, numbered FPGA packets, …) by index
//! into large pooled chunks, driven by a [`PacketHandler`].
//!
//! A chunk is one pool slot of `slots_per_chunk × slot_size` bytes; slot `i` holds the
//! message the handler placed at index `i`. For every packet the [`ChunkAssembler`]
//! 1. asks the handler to [`parse`](PacketHandler::parse) it (`None`: `malformed`);
//! 2. looks the message up in a fixed-size in-flight table; on its first packet asks the
//!    handler for a [`header`](PacketHandler::header) placement:
//!    - a chunk older than the window (`max_chunks` consecutive chunk ids ending at the
//!      newest seen) → dropped, `too-old`; a whole window's worth of such messages in a
//!      row, for chunks near each other, means the sender restarted its counter, and
//!      the window starts again (`resyncs`);
//!    - a chunk far ahead ([`FAR_WINDOWS`] windows, at least [`FAR_CHUNKS`] chunks) →
//!      dropped, `too-far`, until [`JUMP_CONFIRM`] messages in a row ask for chunks
//!      there and the window has been quiet for [`JUMP_QUIET_NS`] (a lying or random
//!      id, or a flood of agreeing ones while the real stream flows, must not end every
//!      open chunk);
//!    - a later packet of a message dropped as too old or too far, while no message
//!      has completed in the window (it opened at a bad packet) or the window is quiet:
//!      [`JUMP_CONFIRM`] such messages near each other move the window there
//!      (`resyncs`; see `ChunkAssembler::revive`);
//!    - a chunk newer than the newest → the window advances and chunks that fall out of
//!      it are emitted, oldest first;
//!    - [`Placement::Drop`] → `drops-handler`; [`Placement::End`] → every open chunk is
//!      emitted and [`Flow::End`] returned;
//! 3. lets the handler write the [`payload`](PacketHandler::payload) straight into the
//!    chunk at `index × slot_size + message_offset`, after checking it fits the slot
//!    (anything that would overflow is `malformed` and never written);
//! 4. counts the bytes the packet adds to its message (a repeated or overlapping packet
//!    adds only what no earlier one covered; one that adds nothing is `duplicated`);
//!    when they reach its length, asks
//!    [`completion`](PacketHandler::completion) whether to set its presence bit. Messages
//!    still open when their chunk leaves the window end incomplete (`heaps-incomplete`).
//!
//! Chunks get their pool slot when their first message is placed (so a wholly lost
//! chunk is never emitted: its id is missing downstream) and are emitted as
//! [`FinishedChunk`]s, which become `gst::Buffer`s with a [`ChunkMeta`] without a copy.
//! A chunk is emitted as soon as the message of every one of its slots has ended
//! (complete, or ended early), since nothing more can be written to it, and every older
//! chunk in the window has been emitted (chunks leave in id order, and one that
//! arrives late within the window is still placed); otherwise when it leaves the
//! window. Emitting early only saves latency (a complete chunk no longer waits for
//! `max_chunks` newer ones).
//! An emitted chunk stays in the window, so late packets of its messages still count
//! as `duplicated` or `too-old`.
//!
//! Nothing on the per-packet path allocates or locks: the table, the slot states and the
//! presence bits are allocated once; the pool lock is taken once per chunk. Every packet
//! is either written (`packets`) or counted in exactly one of `malformed`, `too-old`,
//! `duplicated`, `drops-handler` and `drops-pool`.

mod config;
mod finished;
mod host;
mod landing;
#[cfg(test)]
mod landing_tests;
pub mod settings;
mod table;

#[cfg(test)]
mod tests;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use crate::landing::LANDING_MAX_CHUNK_BYTES;
pub use config::{ChunkConfig, ChunkStats, Flow};
pub use finished::FinishedChunk;
pub use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
pub use host::{feed_buffer, ChunkHost, StatsMirror};

use crate::handler::{MessageEnd, PacketFacts, PacketHandler, Placement};
use firehose_core::memory;
use firehose_core::pool::{Slot, SlotPool};
use table::{DropReason, FifoRing, MessageTable, Route};

/// What one slot of an open chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotStatus {
    Empty,
    Open,
    Ended { present: bool, complete: bool },
}

#[derive(Clone, Copy, Debug)]
struct SlotState {
    status: SlotStatus,
    message_id: u64,
    bytes: usize,
    /// The furthest end of a payload written so far: nothing beyond it has been
    /// written, so a receive may land a payload there on a guess.
    end: usize,
    len: Option<usize>,
    /// The byte ranges written so far, so that a repeated or overlapping packet adds
    /// only the bytes it newly covers: a replayed packet must not complete a message
    /// whose other packets are still missing.
    ranges: Ranges,
}

const EMPTY_SLOT: SlotState = SlotState {
    status: SlotStatus::Empty,
    message_id: 0,
    bytes: 0,
    end: 0,
    len: None,
    ranges: Ranges::EMPTY,
};

/// Disjoint pieces a message may be in at once. In-order packets make one piece (each
/// extends it); each gap left by reordering or loss takes one more. A packet that would
/// start a piece beyond these is dropped (`malformed`): its message ends incomplete
/// rather than be counted complete with a hole, and replayed packets from ahead in a
/// message cannot make room for themselves.
const RANGES: usize = 4;

/// Disjoint, sorted byte ranges of a message, at most [`RANGES`]; fixed size, so the
/// slot states stay allocated once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ranges {
    r: [(usize, usize); RANGES],
    n: u8,
}

impl Ranges {
    const EMPTY: Ranges = Ranges {
        r: [(0, 0); RANGES],
        n: 0,
    };

    /// True when `start..end` touches a range held, or a new one still fits. The last
    /// place is kept for the message's start: packets from further in (replays,
    /// reordering) cannot fill every place before the first packet arrives, after
    /// which packets in order only extend its piece.
    fn room(&self, start: usize, end: usize) -> bool {
        let n = usize::from(self.n);
        n + 1 < RANGES
            || (n < RANGES && start == 0)
            || self.r[..n].iter().any(|&(a, b)| b >= start && a <= end)
    }

    /// Bytes of `start..end` not yet covered.
    fn fresh(&self, start: usize, end: usize) -> usize {
        let covered: usize = self.r[..usize::from(self.n)]
            .iter()
            .map(|&(a, b)| b.min(end).saturating_sub(a.max(start)))
            .sum();
        end - start - covered
    }

    /// Adds `start..end`, merging it with the ranges it touches.
    fn add(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        let n = usize::from(self.n);
        let (mut s, mut e) = (start, end);
        let mut kept = [(0, 0); RANGES];
        let mut k = 0;
        for &(a, b) in &self.r[..n] {
            if b < s || a > e {
                kept[k] = (a, b);
                k += 1;
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        // Only reached with room (see `room`): k < RANGES.
        debug_assert!(k < RANGES);
        let at = kept[..k].iter().position(|&(a, _)| a > s).unwrap_or(k);
        kept.copy_within(at..k, at + 1);
        kept[at] = (s, e);
        self.r = kept;
        self.n = (k + 1) as u8;
    }
}

/// A chunk in the window.
struct OpenChunk {
    id: u64,
    /// `None` when the pool had no free slot (its packets count as `drops-pool`) or
    /// when the chunk was emitted early (`emitted`).
    slot: Option<Slot>,
    opened_at: Option<u64>,
    packets: u64,
    bytes: u64,
    /// Slots whose message has ended: at `slots_per_chunk` nothing more can be
    /// written, so the chunk is emitted without waiting to leave the window.
    ended: usize,
    /// Emitted already; stays in the window so that late packets of its messages are
    /// still told apart (duplicates, too old) until it leaves.
    emitted: bool,
}

/// Messages dropped as too old or too far that showed a later packet, for chunks near
/// each other, while the window was unproven or quiet: see [`ChunkAssembler::revive`].
#[derive(Clone, Copy, Debug)]
struct Revive {
    /// The chunk id of the first of them.
    near: u64,
    /// The highest of them, so that its many packets (and those of lower ones) count
    /// once as a message.
    message_id: u64,
    /// How many distinct messages.
    messages: usize,
    /// Their later packets less those of messages elsewhere (a majority vote: one
    /// from elsewhere does not end the run, more of them than of these do).
    votes: usize,
}

/// Most votes a [`Revive`] run holds: four times the messages it needs.
const REVIVE_VOTES_MAX: usize = 4 * JUMP_CONFIRM;

/// Why a placement did not give a slot.
enum Unplaced {
    /// The message is dropped: its later packets too, without a new placement.
    Drop(DropReason),
    /// This packet alone lies about where its payload goes (`malformed`): dropped
    /// without a trace, so it cannot cost the real packets of its message anything.
    Lies,
    /// The handler says this packet alone is not data ([`Placement::Ignore`]).
    Ignored,
    End,
}

/// Places the packets of a stream into chunks with a [`PacketHandler`].
pub struct ChunkAssembler {
    cfg: ChunkConfig,
    handler: Box<dyn PacketHandler>,
    pool: SlotPool,
    /// `Some`: wait for a free pool slot (until the flag is set) instead of dropping.
    block: Option<Arc<AtomicBool>>,
    /// Open chunks, at `chunk_id % max_chunks` (ids in the window are consecutive).
    window: Vec<Option<OpenChunk>>,
    /// Slot states: window entry `w`'s slots at `w × slots_per_chunk ..`.
    states: Vec<SlotState>,
    /// Per-packet presence bits, `words_per_chunk` words per window entry.
    packet_bits: Vec<u64>,
    words_per_chunk: usize,
    packets_per_slot: usize,
    /// The newest chunk id placed so far.
    head: Option<u64>,
    table: MessageTable,
    in_flight: FifoRing,
    dropped: FifoRing,
    stamp: u64,
    clock: Option<u64>,
    ended: bool,
    /// Messages placed too old in a row, for chunks near each other (see
    /// [`ChunkStats::resyncs`]).
    stale_run: usize,
    /// The chunk id of the first of those messages.
    stale_near: u64,
    /// Messages in a row whose chunk lay beyond the whole window, near the first of
    /// them (its chunk id, how many): see [`JUMP_CONFIRM`].
    jump: Option<(u64, usize)>,
    /// The clock when a packet was last placed in the window ([`JUMP_QUIET_NS`]).
    last_placed: Option<u64>,
    /// Dropped messages of a stream elsewhere, seen again while the window is unproven
    /// or quiet (see [`ChunkAssembler::revive`]).
    revive: Option<Revive>,
    /// A message has completed since the window opened (or, for messages without a
    /// length, been put together from several packets): a stream is in it.
    proven: bool,
    /// Copy payloads with streaming stores ([`STREAMING_MIN_CHUNK_BYTES`]).
    streaming: bool,
    /// The handler allows receiving straight into chunks ([`ChunkAssembler::plan`]).
    can_land: bool,
    /// Receiving straight into chunks is on (see [`ChunkAssembler::set_landing`]).
    direct: bool,
    /// What the stream looked like so far, for [`ChunkAssembler::plan`].
    shape: crate::landing::Shape,
    /// A pool slot taken ahead for the chunk after the newest (its id), so payloads
    /// of that chunk's first messages can land in it before it opens.
    reserved: Option<(u64, Slot)>,
    stats: ChunkStats,
}

/// Where an accepted payload goes in a chunk, found by [`ChunkAssembler::check`].
struct Target {
    /// Byte offset in the chunk.
    at: usize,
    /// Payload bytes.
    n: usize,
    /// Its per-packet presence bit, if tracked.
    bit: Option<usize>,
    /// Bytes of the message it covers for the first time.
    fresh: usize,
}

/// Chunks larger than this are filled with streaming stores ([`memory::copy_streaming`])
/// when the handler copies payloads unchanged
/// ([`PacketHandler::copies_payload_unchanged`]). Such a chunk has left the caches by the
/// time its slot is filled again, so a cached copy first reads every destination line
/// from memory. On the development VM the cost per byte jumped between 4 and 6 MiB
/// chunks; up to this size a cached copy costs no more, and leaves the chunk in cache
/// for a consumer that reads it soon. Figures in docs/benchmarks.md.
pub const STREAMING_MIN_CHUNK_BYTES: usize = 4 << 20;

/// Messages in a row, for chunks near each other far ahead of the newest one, that move
/// the window there. Why 8: a stream that jumped (a paused sender, a timestamp-placed
/// stream after a gap) loses its first 7 messages there; a packet with a lying id
/// between the messages of the real stream never gets that far.
pub const JUMP_CONFIRM: usize = 8;
/// And only once the window has been quiet this long (by the engine's clock, the
/// running time of the receive): no packet placed in it for 20 ms. Why: far ids that
/// agree with each other cost an attacker nothing to send, many in a row between two
/// packets of the real stream; but while that stream flows, its packets keep landing
/// in the window, and a stream that really moved on (a paused sender, a restart) left
/// it quiet. Without a clock (buffers without timestamps) the count alone decides.
pub const JUMP_QUIET_NS: u64 = 20_000_000;
/// How many windows ahead of the newest chunk is far (see [`JUMP_CONFIRM`]): chunks
/// lost whole within that distance move the window at once, as spead2's does.
pub const FAR_WINDOWS: u64 = 4;
/// The least distance, in chunks, that is far.
pub const FAR_CHUNKS: u64 = 64;

/// Payloads shorter than this are copied as usual even into large chunks: the partial
/// lines at their ends (cached stores, so read from memory first) weigh more: on the
/// development VM, streaming stores were slower than a cached copy with a prefetch for
/// the payloads of 1472-byte SPEAD packets and faster for those of 8972-byte ones.
pub const STREAMING_MIN_PAYLOAD_BYTES: usize = 4096;

impl std::fmt::Debug for ChunkAssembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkAssembler")
            .field("config", &self.cfg)
            .field("head", &self.head)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ChunkAssembler {
    /// An engine placing with `handler` into chunks from `pool`, whose slots must hold
    /// at least [`ChunkConfig::chunk_bytes`].
    pub fn new(
        cfg: ChunkConfig,
        handler: Box<dyn PacketHandler>,
        pool: SlotPool,
    ) -> Result<Self, String> {
        cfg.validate()?;
        if pool.slot_size() < cfg.chunk_bytes() {
            return Err(format!(
                "pool slots of {} bytes cannot hold a chunk of {} bytes",
                pool.slot_size(),
                cfg.chunk_bytes()
            ));
        }
        let packets_per_slot = cfg.packets_per_slot();
        let can_land = handler.copies_payload_unchanged() && handler.parses_header_alone();
        let words_per_chunk = (cfg.slots_per_chunk * packets_per_slot).div_ceil(64);
        Ok(Self {
            window: (0..cfg.max_chunks).map(|_| None).collect(),
            states: vec![EMPTY_SLOT; cfg.max_chunks * cfg.slots_per_chunk],
            packet_bits: vec![0; cfg.max_chunks * words_per_chunk],
            words_per_chunk,
            packets_per_slot,
            head: None,
            table: MessageTable::new(2 * cfg.max_messages),
            in_flight: FifoRing::new(cfg.max_messages),
            dropped: FifoRing::new(cfg.max_messages),
            stamp: 0,
            clock: None,
            last_placed: None,
            revive: None,
            proven: false,
            ended: false,
            stale_run: 0,
            stale_near: 0,
            jump: None,
            streaming: handler.copies_payload_unchanged()
                && cfg.chunk_bytes() > STREAMING_MIN_CHUNK_BYTES,
            can_land,
            direct: can_land && cfg.chunk_bytes() <= LANDING_MAX_CHUNK_BYTES,
            shape: crate::landing::Shape::default(),
            reserved: None,
            stats: ChunkStats::default(),
            block: None,
            handler,
            pool,
            cfg,
        })
    }

    /// Waits for a free pool slot when a chunk opens, until `cancel` is set (then, and
    /// with `None`, the chunk's packets are dropped as `drops-pool`).
    pub fn set_blocking(&mut self, cancel: Option<Arc<AtomicBool>>) {
        self.block = cancel;
    }

    /// Sets the clock value recorded by chunks opened from now on (e.g. the running time
    /// of the current input buffer, in nanoseconds).
    pub fn set_clock(&mut self, now: Option<u64>) {
        self.clock = now;
    }

    /// The configuration.
    pub fn config(&self) -> &ChunkConfig {
        &self.cfg
    }

    /// The pool chunks come from.
    pub fn pool(&self) -> &SlotPool {
        &self.pool
    }

    /// Takes chunks from `pool` from now on (downstream proposed another kind of
    /// memory). Chunks already open keep their slots, which return to the old pool; the
    /// slot taken ahead is given back so that the next chunk comes from `pool`. Refused
    /// when `pool`'s slots cannot hold a chunk.
    pub fn replace_pool(&mut self, pool: SlotPool) -> Result<(), String> {
        if pool.slot_size() < self.cfg.chunk_bytes() {
            return Err(format!(
                "pool slots of {} bytes cannot hold a chunk of {} bytes",
                pool.slot_size(),
                self.cfg.chunk_bytes()
            ));
        }
        self.reserved = None;
        self.pool = pool;
        Ok(())
    }

    /// The counters so far.
    pub fn stats(&self) -> ChunkStats {
        self.stats
    }

    /// Feeds one packet; chunks that leave the window are appended to `out`, oldest
    /// first.
    pub fn push(&mut self, packet: &[u8], out: &mut Vec<FinishedChunk>) -> Flow {
        if self.ended {
            self.stats.drops_handler += 1;
            return Flow::End;
        }
        let Some(facts) = self.handler.parse(packet) else {
            self.stats.malformed += 1;
            return Flow::Continue;
        };
        let pos = match self.route(packet, &facts, out) {
            Ok(pos) => pos,
            Err(flow) => return flow,
        };
        self.write(pos, packet, &facts, out);
        Flow::Continue
    }

    /// True when the packet's payload lies within a slot and within its message as the
    /// packet itself describes them. (Whether it lies within the packet is checked where
    /// it is copied: a landed payload is not in the bytes the engine is shown.)
    fn fits_alone(&self, facts: &PacketFacts) -> bool {
        let p = &facts.payload;
        let end = facts.message_offset.checked_add(p.len());
        p.start <= p.end
            && end.is_some_and(|e| e <= self.cfg.slot_size)
            && facts
                .message_len
                .is_none_or(|l| l <= self.cfg.slot_size && end.is_some_and(|e| e <= l))
    }

    /// The slot position of the packet's message, placing it on its first packet; `Err`
    /// when the packet is dropped (and counted) or ends the stream.
    fn route(
        &mut self,
        packet: &[u8],
        facts: &PacketFacts,
        out: &mut Vec<FinishedChunk>,
    ) -> Result<usize, Flow> {
        match self.table.get(facts.message_id) {
            Some((Route::Slot(pos), _)) => {
                // A packet of a live message: the stream is here, not far ahead.
                self.jump = None;
                self.last_placed = self.clock;
                Ok(pos as usize)
            }
            Some((Route::Dropped(reason), _)) => {
                if matches!(reason, DropReason::TooOld | DropReason::TooFar) {
                    if let Some(pos) = self.revive(packet, facts, out) {
                        return Ok(pos);
                    }
                }
                self.stats.count(reason);
                Err(Flow::Continue)
            }
            None => match self.place(packet, facts, out) {
                Ok(pos) => Ok(pos),
                Err(Unplaced::Drop(reason)) => {
                    self.stats.count(reason);
                    self.remember_drop(facts.message_id, reason);
                    Err(Flow::Continue)
                }
                Err(Unplaced::Lies) => {
                    self.stats.malformed += 1;
                    Err(Flow::Continue)
                }
                Err(Unplaced::Ignored) => {
                    self.stats.drops_handler += 1;
                    Err(Flow::Continue)
                }
                Err(Unplaced::End) => {
                    // The ending message is the handler's to consume, not data.
                    self.stats.drops_handler += 1;
                    self.flush(out);
                    self.ended = true;
                    Err(Flow::End)
                }
            },
        }
    }

    /// Counts `n` packets the host could not hand over (e.g. a batch entry outside its
    /// buffer) as `malformed`, so they are accounted like every other packet.
    pub fn count_malformed(&mut self, n: u64) {
        self.stats.malformed += n;
    }

    /// Emits every open chunk, oldest first (end of stream), and starts afresh.
    pub fn flush(&mut self, out: &mut Vec<FinishedChunk>) {
        if let Some(head) = self.head.take() {
            let oldest = head.saturating_sub(self.cfg.max_chunks as u64 - 1);
            for id in oldest..=head {
                self.retire(id, Some(&mut *out));
            }
        }
        self.forget();
    }

    /// Drops every open chunk unseen (a flush): their slots return to the pool.
    pub fn reset(&mut self) {
        if let Some(head) = self.head.take() {
            let oldest = head.saturating_sub(self.cfg.max_chunks as u64 - 1);
            for id in oldest..=head {
                self.retire(id, None);
            }
        }
        self.forget();
        self.ended = false;
    }

    fn forget(&mut self) {
        self.stale_run = 0;
        self.jump = None;
        self.last_placed = None;
        self.revive = None;
        self.proven = false;
        self.reserved = None;
        self.shape = crate::landing::Shape::default();
        self.table.clear();
        self.in_flight.clear();
        self.dropped.clear();
    }

    /// A too-old message for `chunk_id`: counts it into the run of too-old messages
    /// for chunks near each other (within two windows of the run's first; a message
    /// elsewhere starts a new run), and says whether the run now means a restarted
    /// sender ([`ChunkAssembler::resync_after`] of them). Why near each other: a
    /// restarted sender's messages go on from its new counter, chunk after chunk; old
    /// or spoofed ids flooding in between the real stream's packets are spread over
    /// everything behind it, and however many there are they must not restart the
    /// window (a flood at 35 times the stream's packet rate did, before).
    fn stale_agrees(&mut self, chunk_id: u64) -> bool {
        let near = 2 * self.cfg.max_chunks as u64;
        if self.stale_run == 0 || chunk_id.abs_diff(self.stale_near) >= near {
            self.stale_near = chunk_id;
            self.stale_run = 0;
        }
        self.stale_run += 1;
        self.stale_run >= self.resync_after()
    }

    /// Too-old messages in a row that mean the sender restarted: a window's worth.
    fn resync_after(&self) -> usize {
        self.cfg.max_chunks * self.cfg.slots_per_chunk
    }

    /// First packet of a message: decides its slot and registers it.
    fn place(
        &mut self,
        packet: &[u8],
        facts: &PacketFacts,
        out: &mut Vec<FinishedChunk>,
    ) -> Result<usize, Unplaced> {
        let (chunk_id, index) = match self.handler.header(packet, facts) {
            Placement::Place { chunk_id, index } => (chunk_id, index),
            Placement::Drop => return Err(Unplaced::Drop(DropReason::Handler)),
            Placement::Ignore => return Err(Unplaced::Ignored),
            Placement::End => return Err(Unplaced::End),
        };
        if index >= self.cfg.slots_per_chunk {
            return Err(Unplaced::Drop(DropReason::Malformed));
        }
        // Every bound a packet can be checked against alone comes before anything that
        // moves the window or opens a chunk: a lying packet touches no state. Not even
        // the memory of dropped messages: a message length beyond the slot is the
        // packet's own claim, and remembering its message as dropped would let one
        // spoofed packet discard every real packet of that message.
        if !self.fits_alone(facts) {
            return Err(Unplaced::Lies);
        }
        let w = match self.chunk(chunk_id, out) {
            Ok(w) => w,
            Err(DropReason::TooOld) if self.stale_agrees(chunk_id) => {
                // A window's worth of messages in a row, all too old: the sender has
                // restarted its counter. Without this every later message would be too
                // old for ever; instead the window starts again from this one.
                self.flush(out);
                self.stats.resyncs += 1;
                self.chunk(chunk_id, out).map_err(Unplaced::Drop)?
            }
            Err(reason) => return Err(Unplaced::Drop(reason)),
        };
        self.stale_run = 0;
        self.jump = None;
        self.last_placed = self.clock;
        let pos = w * self.cfg.slots_per_chunk + index;
        let st = self.states[pos];
        match st.status {
            SlotStatus::Empty => {}
            // Ended messages are no longer in the table; a packet of one lands here.
            SlotStatus::Ended { complete, .. } if st.message_id == facts.message_id => {
                return Err(Unplaced::Drop(if complete {
                    DropReason::Duplicated
                } else {
                    DropReason::TooOld
                }));
            }
            // Another message already has the slot: two senders, a wrapped counter or
            // a placement that is not one-to-one.
            _ => return Err(Unplaced::Drop(DropReason::Malformed)),
        }
        self.states[pos] = SlotState {
            status: SlotStatus::Open,
            message_id: facts.message_id,
            bytes: 0,
            end: 0,
            len: facts.message_len,
            ranges: Ranges::EMPTY,
        };
        self.stamp += 1;
        self.table
            .insert(facts.message_id, Route::Slot(pos as u32), self.stamp);
        if let Some((key, stamp)) = self.in_flight.push((facts.message_id, self.stamp)) {
            // One message too many in flight: the oldest still open ends here.
            if let Some((Route::Slot(p), s)) = self.table.get(key) {
                if s == stamp {
                    self.end_message(p as usize, false);
                    self.emit_ready(out);
                }
            }
        }
        Ok(pos)
    }

    /// Remembers a dropped message so its later packets are dropped without a new
    /// placement (a handler may only be able to place from a message's first packet).
    fn remember_drop(&mut self, message_id: u64, reason: DropReason) {
        self.stamp += 1;
        self.table
            .insert(message_id, Route::Dropped(reason), self.stamp);
        if let Some((key, stamp)) = self.dropped.push((message_id, self.stamp)) {
            if let Some((Route::Dropped(_), s)) = self.table.get(key) {
                if s == stamp {
                    self.table.remove(key);
                }
            }
        }
    }

    /// The window entry of `chunk_id`, advancing the window or opening it as needed.
    fn chunk(&mut self, chunk_id: u64, out: &mut Vec<FinishedChunk>) -> Result<usize, DropReason> {
        let max = self.cfg.max_chunks as u64;
        let w = (chunk_id % max) as usize;
        match self.head {
            Some(head) if chunk_id <= head => {
                if head - chunk_id >= max {
                    return Err(DropReason::TooOld);
                }
                if let Some(open) = &self.window[w] {
                    debug_assert_eq!(open.id, chunk_id, "window ids are consecutive");
                    // An emitted chunk's slots have all ended: `place` tells a late
                    // packet's message apart by its slot state.
                    return if open.slot.is_some() || open.emitted {
                        Ok(w)
                    } else {
                        Err(DropReason::Pool)
                    };
                }
            }
            Some(head) => {
                if chunk_id - head >= self.far() && !self.confirm_jump(chunk_id) {
                    return Err(DropReason::TooFar);
                }
                // Every chunk that no longer fits behind the new head leaves, in order.
                let keep_from = chunk_id - (max - 1).min(chunk_id);
                let oldest = head.saturating_sub(max - 1);
                for id in oldest..keep_from.min(head + 1) {
                    self.retire(id, Some(&mut *out));
                }
                self.head = Some(chunk_id);
                // Complete chunks that waited for an older one that just left.
                self.emit_ready(out);
            }
            None => self.head = Some(chunk_id),
        }
        self.open(chunk_id, w)
    }

    /// How far ahead of the newest chunk a message's chunk must lie to be held back
    /// ([`JUMP_CONFIRM`]): [`FAR_WINDOWS`] windows, at least [`FAR_CHUNKS`] chunks.
    /// Nearer jumps (whole chunks lost) move the window at once.
    fn far(&self) -> u64 {
        (FAR_WINDOWS * self.cfg.max_chunks as u64).max(FAR_CHUNKS)
    }

    /// A message for `chunk_id`, [`ChunkAssembler::far`] ahead: true once [`JUMP_CONFIRM`]
    /// messages in a row asked for chunks within a window of each other (the stream
    /// really moved on: a sender that paused, or restarted ahead); until then each is
    /// dropped, so a lone packet with a random or lying id cannot end every open chunk.
    fn confirm_jump(&mut self, chunk_id: u64) -> bool {
        let max = self.cfg.max_chunks as u64;
        let (to, run) = match self.jump {
            Some((to, run)) if chunk_id.abs_diff(to) < max => (to, run + 1),
            _ => (chunk_id, 1),
        };
        if run >= JUMP_CONFIRM && self.quiet() {
            self.jump = None;
            return true;
        }
        self.jump = Some((to, run));
        false
    }

    /// True when no packet has been placed in the window for [`JUMP_QUIET_NS`]: the
    /// real stream is not there any more. Without a clock, always.
    fn quiet(&self) -> bool {
        match (self.clock, self.last_placed) {
            (Some(now), Some(last)) => now.saturating_sub(last) >= JUMP_QUIET_NS,
            _ => true,
        }
    }

    /// A later packet of a message dropped as too old or too far: the sign of a stream
    /// elsewhere, heeded only while the window is *unproven* (no message has completed
    /// in it since it opened: it opens at the first packet seen, which may be a bad one
    /// when a flood is already running as the capture starts) or *quiet* (by the clock:
    /// no packet placed in it for [`JUMP_QUIET_NS`]; a stream that moved on while bad
    /// packets between its own broke the runs that [`JUMP_CONFIRM`] and the resync
    /// count need). Neither holds while a stream flows in the window, so nothing here can
    /// move a window that holds one. The messages of a stream come in several packets;
    /// a flood of lying ids is single packets, a message each, and partial heaps that
    /// never complete, so it cannot prove a window it opened, and gives few such votes.
    /// Once [`JUMP_CONFIRM`] distinct messages for chunks near each other have shown a
    /// later packet, their packets outvoting those of messages elsewhere, the window
    /// starts again at this one's chunk (`resyncs`; the open chunks are emitted) and
    /// this packet is placed: its slot position is returned.
    fn revive(
        &mut self,
        packet: &[u8],
        facts: &PacketFacts,
        out: &mut Vec<FinishedChunk>,
    ) -> Option<usize> {
        let heeded = !self.proven || (self.clock.is_some() && self.quiet());
        if !heeded {
            self.revive = None;
            return None;
        }
        // A handler that places from a message's first packet only says Drop here: such
        // streams keep the count rules alone.
        let Placement::Place { chunk_id, index } = self.handler.header(packet, facts) else {
            return None;
        };
        if index >= self.cfg.slots_per_chunk || !self.fits_alone(facts) {
            return None;
        }
        let near = self.cfg.max_chunks as u64;
        let fresh = Revive {
            near: chunk_id,
            message_id: facts.message_id,
            messages: 1,
            votes: 1,
        };
        let r = match self.revive {
            None => fresh,
            Some(mut r) if chunk_id.abs_diff(r.near) < near => {
                // Capped, so that one long message's packets cannot outlast any number
                // of packets elsewhere.
                r.votes = (r.votes + 1).min(REVIVE_VOTES_MAX);
                // A new message only when its id is past the last one counted: a stream
                // moves forward, and two messages replayed in turn stay two.
                if facts.message_id > r.message_id {
                    r.message_id = facts.message_id;
                    r.messages += 1;
                }
                r
            }
            Some(r) if r.votes > 1 => Revive {
                votes: r.votes - 1,
                ..r
            },
            Some(_) => fresh,
        };
        if r.messages < JUMP_CONFIRM {
            self.revive = Some(r);
            return None;
        }
        self.flush(out);
        self.stats.resyncs += 1;
        // The window opens at this packet's chunk: no packet in between can open it.
        self.place(packet, facts, out).ok()
    }

    fn open(&mut self, chunk_id: u64, w: usize) -> Result<usize, DropReason> {
        // The slot taken ahead for this chunk may already hold payloads that landed.
        let reserved = match self.reserved.take() {
            Some((id, slot)) if id == chunk_id => Some(slot),
            other => {
                self.reserved = other;
                None
            }
        };
        let slot = reserved.or_else(|| match &self.block {
            None => self.pool.try_acquire(),
            Some(cancel) => self
                .pool
                .acquire_blocking(cancel, Duration::from_millis(100)),
        });
        let ok = slot.is_some();
        self.window[w] = Some(OpenChunk {
            id: chunk_id,
            slot,
            opened_at: self.clock,
            packets: 0,
            bytes: 0,
            ended: 0,
            emitted: false,
        });
        if ok {
            Ok(w)
        } else {
            Err(DropReason::Pool)
        }
    }

    /// Takes chunk `id` out of the window (if open): ends its open messages, then emits
    /// it into `out` (or drops it with `None`) unless it was emitted already.
    fn retire(&mut self, id: u64, out: Option<&mut Vec<FinishedChunk>>) {
        let w = (id % self.cfg.max_chunks as u64) as usize;
        if self.window[w].as_ref().is_none_or(|c| c.id != id) {
            return;
        }
        let spc = self.cfg.slots_per_chunk;
        for pos in w * spc..(w + 1) * spc {
            if self.states[pos].status == SlotStatus::Open {
                self.end_message(pos, false);
            }
        }
        if let Some(out) = out {
            out.extend(self.finish(w));
        }
        self.states[w * spc..(w + 1) * spc].fill(EMPTY_SLOT);
        self.packet_bits[w * self.words_per_chunk..(w + 1) * self.words_per_chunk].fill(0);
        self.window[w] = None;
    }

    /// Emits, oldest first, the chunks at the old end of the window whose slots have all
    /// ended; stops at the first chunk that may still get data, opened or not, so that
    /// chunks leave in id order and a chunk arriving late within the window is still
    /// placed.
    fn emit_ready(&mut self, out: &mut Vec<FinishedChunk>) {
        let Some(head) = self.head else {
            return;
        };
        let max = self.cfg.max_chunks as u64;
        for id in head.saturating_sub(max - 1)..=head {
            let w = (id % max) as usize;
            match &self.window[w] {
                Some(c) if c.emitted => {}
                Some(c) if c.slot.is_some() && c.ended == self.cfg.slots_per_chunk => {
                    out.extend(self.finish(w));
                }
                _ => return,
            }
        }
    }

    /// The chunk at window entry `w` as a [`FinishedChunk`], its memory taken from the
    /// window; `None` if it has no memory (pool) or was emitted already.
    fn finish(&mut self, w: usize) -> Option<FinishedChunk> {
        let open = self.window[w].as_mut()?;
        let mut slot = open.slot.take()?;
        if self.streaming {
            // Streaming stores are weakly ordered: all of them before the chunk leaves.
            memory::store_fence();
        }
        open.emitted = true;
        let spc = self.cfg.slots_per_chunk;
        let mut present = vec![0u64; spc.div_ceil(64)];
        let mut slots_present = 0;
        let mut slot_bytes = Vec::with_capacity(spc);
        for i in 0..spc {
            let st = &self.states[w * spc + i];
            slot_bytes.push(st.bytes as u64);
            if let SlotStatus::Ended { present: true, .. } = st.status {
                present[i / 64] |= 1 << (i % 64);
                slots_present += 1;
            }
        }
        let packet_present =
            self.packet_bits[w * self.words_per_chunk..(w + 1) * self.words_per_chunk].to_vec();
        slot.set_len(self.cfg.chunk_bytes());
        self.stats.chunks += 1;
        if slots_present < spc {
            self.stats.chunks_incomplete += 1;
        }
        Some(FinishedChunk {
            slot,
            info: ChunkInfo {
                chunk_id: open.id,
                slots: spc,
                slot_size: self.cfg.slot_size,
                present,
                slots_present,
                packets_per_slot: self.packets_per_slot,
                packet_present,
                packets: open.packets,
                bytes: open.bytes,
            },
            opened_at: open.opened_at,
            slot_bytes,
        })
    }

    /// Writes one packet of the open message at `pos`.
    fn write(
        &mut self,
        pos: usize,
        packet: &[u8],
        facts: &PacketFacts,
        out: &mut Vec<FinishedChunk>,
    ) {
        if facts.payload.start > facts.payload.end || facts.payload.end > packet.len() {
            self.stats.malformed += 1;
            return;
        }
        let Some(t) = self.check(pos, facts) else {
            return;
        };
        let spc = self.cfg.slots_per_chunk;
        let Some(slot) = self.window[pos / spc]
            .as_mut()
            .and_then(|c| c.slot.as_mut())
        else {
            return;
        };
        let chunk = slot.as_mut_full();
        let dest = &mut chunk[t.at..t.at + t.n];
        let stream = self.streaming && t.n >= STREAMING_MIN_PAYLOAD_BYTES;
        if !(stream && memory::copy_streaming(dest, &packet[facts.payload.clone()])) {
            self.handler.payload(packet, facts, dest);
            // The next packet most likely lands right after this one: later in the
            // message, or at the start of the next slot when this one is full. A chunk
            // larger than this core's share of the caches has left them by the time its
            // slot is filled again, and without this each copy waits on memory line by
            // line.
            memory::prefetch_following(chunk, t.at + t.n, t.n);
        }
        self.account(pos, facts, &t, out);
    }

    /// Checks that a packet of the open message at `pos` fits its slot, is not a
    /// duplicate and has chunk memory to go to; counts it where not.
    fn check(&mut self, pos: usize, facts: &PacketFacts) -> Option<Target> {
        let spc = self.cfg.slots_per_chunk;
        let (w, index) = (pos / spc, pos % spc);
        let st = &mut self.states[pos];
        let n = facts.payload.len();
        if st.len.is_none() {
            st.len = facts.message_len.filter(|&l| l <= self.cfg.slot_size);
        }
        let end = facts.message_offset.checked_add(n);
        let fits = end.is_some_and(|e| e <= self.cfg.slot_size && st.len.is_none_or(|l| e <= l));
        if !fits {
            self.stats.malformed += 1;
            return None;
        }
        // A packet seen twice: its presence bit is already set, or it covers no byte
        // not written already. One that would split its message into more pieces
        // than are tracked is dropped (see `RANGES`).
        let bit = (self.packets_per_slot > 0).then(|| {
            let k = facts.message_offset / self.cfg.packet_payload_size;
            w * self.words_per_chunk * 64 + index * self.packets_per_slot + k
        });
        let seen = bit.is_some_and(|b| self.packet_bits[b / 64] >> (b % 64) & 1 == 1);
        let fresh = st
            .ranges
            .fresh(facts.message_offset, facts.message_offset + n);
        if seen || (n > 0 && fresh == 0) || st.len.is_some_and(|l| st.bytes + fresh > l) {
            self.stats.duplicated += 1;
            return None;
        }
        if n > 0
            && !st
                .ranges
                .room(facts.message_offset, facts.message_offset + n)
        {
            self.stats.malformed += 1;
            return None;
        }
        match self.window[w].as_ref() {
            None => {
                self.stats.malformed += 1;
                None
            }
            Some(open) if open.slot.is_none() => {
                self.stats.drops_pool += 1;
                None
            }
            Some(_) => Some(Target {
                at: index * self.cfg.slot_size + facts.message_offset,
                n,
                bit,
                fresh,
            }),
        }
    }

    /// Counts a payload now in place (copied, or landed there), and ends its message
    /// when complete.
    fn account(
        &mut self,
        pos: usize,
        facts: &PacketFacts,
        t: &Target,
        out: &mut Vec<FinishedChunk>,
    ) {
        let spc = self.cfg.slots_per_chunk;
        if let Some(open) = self.window[pos / spc].as_mut() {
            open.packets += 1;
            open.bytes += t.n as u64;
        }
        // The stream is alive: a run of too-old messages is not a restarted sender but
        // stale or spoofed ids between its packets (a big message gets one placement
        // for a hundred packets; without this the run would only break on those).
        self.stale_run = 0;
        let st = &mut self.states[pos];
        // A message with no length never completes; new bytes for one that had some
        // (a message put together from several packets here, which a flood's single
        // packets never do) prove the window instead. Messages with a length prove it
        // by completing (partial multi-packet floods must not).
        if st.len.is_none() && st.bytes > 0 && t.fresh > 0 {
            self.proven = true;
        }
        st.bytes += t.fresh;
        st.ranges
            .add(facts.message_offset, facts.message_offset + t.n);
        st.end = st.end.max(facts.message_offset + t.n);
        let (len, bytes) = (st.len, st.bytes);
        self.stats.packets += 1;
        self.stats.bytes += t.n as u64;
        if let Some(b) = t.bit {
            self.packet_bits[b / 64] |= 1 << (b % 64);
        }
        if self.direct {
            self.shape.learn(
                facts.message_id,
                facts.message_offset,
                facts.payload.start,
                facts.payload.len(),
                len,
            );
        }
        if len.is_some_and(|l| bytes >= l) {
            self.end_message(pos, true);
            self.emit_ready(out);
        }
    }

    /// Ends the open message at `pos`: the handler decides its presence.
    fn end_message(&mut self, pos: usize, complete: bool) {
        let spc = self.cfg.slots_per_chunk;
        let st = self.states[pos];
        let chunk_id = self.window[pos / spc].as_ref().map_or(0, |c| c.id);
        let present = self.handler.completion(&MessageEnd {
            message_id: st.message_id,
            chunk_id,
            index: pos % spc,
            bytes_received: st.bytes,
            message_len: st.len,
            complete,
        });
        self.states[pos].status = SlotStatus::Ended { present, complete };
        if let Some(c) = self.window[pos / spc].as_mut() {
            c.ended += 1;
        }
        self.table.remove(st.message_id);
        if complete {
            self.proven = true;
            self.stats.heaps += 1;
        } else {
            self.stats.heaps_incomplete += 1;
        }
    }
}

/// Chunk placement as an engine over any transport: each datagram of a batch goes to
/// [`ChunkAssembler::push`]; one outside the batch's memory is counted as malformed.
impl firehose_core::transport::Engine for ChunkAssembler {
    type Output = FinishedChunk;

    fn feed(
        &mut self,
        data: &[u8],
        packets: &[firehose_core::PacketInfo],
        out: &mut Vec<FinishedChunk>,
    ) -> bool {
        for p in packets {
            match firehose_core::transport::datagram(data, p) {
                Some(d) => {
                    if self.push(d, out) == Flow::End {
                        return false;
                    }
                }
                None => self.count_malformed(1),
            }
        }
        true
    }

    fn finish(&mut self, out: &mut Vec<FinishedChunk>) {
        self.flush(out);
    }
}
