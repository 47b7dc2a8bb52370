//! Heap reassembly: SPEAD packets in, heaps out, as spead2's receiver does it.
//!
//! [`Reassembler::push`] takes one packet (a datagram, or one packet of a batch) and
//! calls back with every heap that it completes or pushes out of the window. A heap's
//! payload is pool memory wrapped as a `gst::Memory` with no further copy; its
//! [`HeapInfo`] says what is in it. No GStreamer type is used besides that memory.
//!
//! Behaviour (spead2's unless noted):
//! - **Window.** At most `max_heaps` heaps are under construction per substream
//!   (`substreams` = N: heap cnt mod N picks the substream, one per interleaved sender).
//!   A packet of a new heap, when the window is full, evicts a heap; an evicted heap is
//!   incomplete. Ours: the heap evicted is the one touched longest ago among those
//!   that have received one packet, else among all (spead2: the one started first).
//! - **Probation** (ours). With incomplete heaps dropped (the default), a heap's first
//!   packet (with HEAP_LENGTH, up to [`PROBATION_PLACE_BYTES`] bytes) does not enter the
//!   window: it is held apart (module `probation`) until a second packet of the heap that
//!   continues it arrives, then the heap enters the window with both. Held heaps push
//!   out only each other, oldest first (at most [`PROBATION_PLACES`] of them in
//!   [`PROBATION_BYTES`], no pool memory), so a flood of partial heaps with other
//!   counters never evicts a heap under construction, and a heap is lost to one only
//!   if that many heaps or bytes of them start between its first two packets. The
//!   heap the stream is expected to send next (a slot reserved for it by landing)
//!   enters the window at once, and so does the heap that follows the last heap that
//!   proved itself (received a second packet) by the step between the last two such
//!   heaps' counters: an honest in-order stream's heaps skip probation. Only that one
//!   counter does, and it moves only when a heap proves itself, so guessing it gains
//!   an attacker one window entry per heap that proved itself (the stream's, or its
//!   own, which entered the window with their second packet anyway); such a heap is
//!   kept in a full window as a heap of two packets is (least recently touched goes).
//!   Other heaps' first packets are copied twice more (into the ring and out).
//! - **Order.** By default a packet must continue its heap where the previous one ended
//!   (the first packet of a heap must be at offset 0); any other is dropped and counted
//!   in `out_of_order_dropped`. With `allow_out_of_order` the received byte ranges are
//!   tracked and packets may come in any order.
//! - **Duplicates and overlaps.** A packet whose bytes all arrived already is a
//!   duplicate (`duplicates`); one that overlaps received bytes only in part cannot come
//!   from a correct sender and is `malformed` (ours: spead2 drops both without telling
//!   them apart, and in order mode calls both out of order). Either way the packet is
//!   dropped and the bytes first received stay. A packet for a heap that recently
//!   completed counts as a duplicate (ours: spead2 would start the heap again); a late
//!   packet for a heap recently evicted counts in `out_of_order_dropped`.
//! - **Incomplete heaps** are dropped and counted in `heaps_incomplete`, or with
//!   [`Incomplete::Deliver`] delivered with `complete = false` and the ranges that
//!   arrived (the rest of the payload is zeroed). A heap without HEAP_LENGTH ends only
//!   when evicted or flushed; it is complete if it has no gap (spead2's "contiguous").
//! - **Size bound.** A HEAP_LENGTH above `max_heap_size` drops every packet of that heap
//!   (`too_large`); nothing is ever sized from an untrusted length beyond the bound. A
//!   heap without HEAP_LENGTH grows (moved to a larger slot) up to the bound, then is
//!   given up the same way.
//! - **Malformed** (`malformed`): anything [`Packet::parse`] rejects; HEAP_LENGTH or
//!   flavour changing within a heap; PAYLOAD_OFFSET + PAYLOAD_LENGTH or an item address
//!   beyond HEAP_LENGTH; partial overlaps; more than 32768 item pointers in a heap; a
//!   DESCRIPTOR whose value does not parse (the heap itself is still delivered).
//! - **Single-packet heaps** (HEAP_LENGTH = the packet's payload) skip the window: the
//!   payload is copied into an arena slot shared with other small heaps.
//! - **Descriptors** in DESCRIPTOR items are parsed and accumulated (latest per id);
//!   every heap carries a shared snapshot of all of them.
//! - **Descriptor heaps** (ours). A complete heap whose only items are descriptors is
//!   learnt and counted in `descriptor_heaps`, not delivered, unless
//!   [`Config::deliver_descriptor_heaps`]: what it says reaches the consumer with the
//!   next heap's descriptors (as spead2's `ItemGroup.update` of such a heap changes only
//!   descriptors). It costs no pool memory and no description, so a flood of them costs
//!   a lookup per descriptor (issue 18). spead2 yields them, as this does when asked.
//! - **Stop.** A packet with STREAM_CTRL = stop ends the stream at once: every heap
//!   under construction is flushed (oldest first), then the stop heap is reported
//!   (`stream_ctrl = Some(STOP)`, built from that packet alone), and the record of
//!   recent heaps is forgotten so a restarted sender's heaps are not taken for
//!   duplicates.
//! - **No allocation per packet.** Payload memory comes from pools allocated by
//!   [`Reassembler::new`]; window entries and their lists are reused. A heap allocates
//!   only its description (items, ranges). When no pool slot is free the packet is
//!   dropped and counted in `drops_pool`.

mod entry;
mod finish;
pub(crate) mod items;
mod landing;
#[cfg(test)]
mod landing_tests;
mod pools;
mod probation;
mod ranges;
#[cfg(test)]
mod tests;
mod window;

use std::collections::HashSet;

use firehose_core::gstmem::slot_into_memory;
use firehose_core::stats::names;
use firehose_core::{HugepagePolicy, MemoryKind, PoolStats, RegionError, Slot};

use self::entry::{per_packet, Added, Limits, Payload, MAX_HEAP_ITEMS};
use self::finish::{whole, zero_gaps, Learned, Parts};
use self::pools::Pools;
use self::probation::{Fit, Probation};
use self::window::Substream;
use crate::descset::{DescriptorSet, DescriptorTable};
use crate::heap::HeapInfo;
use crate::wire::{ctrl, Packet};
use firehose_chunk::landing::Shape;

pub use self::landing::Emitted;
pub use self::pools::{class_sizes, ARENA_SLOT, ARENA_SLOTS, SMALLEST_CLASS};
pub use self::probation::{
    BYTES as PROBATION_BYTES, PLACES as PROBATION_PLACES, PLACE_BYTES as PROBATION_PLACE_BYTES,
};

/// What to do with heaps that end incomplete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Incomplete {
    /// Drop them (counted in `heaps_incomplete`): spead2's default.
    #[default]
    Drop,
    /// Deliver them with `complete = false` and the byte ranges that arrived.
    Deliver,
}

/// How to reassemble.
#[derive(Clone, Debug)]
pub struct Config {
    /// Heaps under construction per substream (spead2's `max_heaps`; at least 1).
    pub max_heaps: usize,
    /// Windows, one per `heap cnt mod substreams` (at least 1).
    pub substreams: usize,
    /// Accept a heap's packets in any order.
    pub allow_out_of_order: bool,
    /// What happens to incomplete heaps.
    pub incomplete: Incomplete,
    /// Largest heap payload accepted, in bytes.
    pub max_heap_size: usize,
    /// Bytes of payload memory (0 = automatic). See [`Reassembler::new`].
    pub pool_size: u64,
    /// Hugepages for the payload memory.
    pub hugepages: HugepagePolicy,
    /// Most descriptors kept, each change of one counting again
    /// ([`crate::descset`]).
    pub max_descriptors: usize,
    /// A stop heap ends the stream: every heap under construction is ended (spead2's
    /// behaviour). False when stop heaps are not trusted (`stop-is-eos=false`): the stop
    /// heap is reported and nothing else changes, so a spoofed one costs no heap.
    pub stop_ends: bool,
    /// Deliver heaps that carry only descriptors (spead2 yields them); false learns
    /// their descriptors and counts them in `descriptor_heaps`.
    pub deliver_descriptor_heaps: bool,
}

/// The default `max_heap_size`: 17 MiB, so that a stream of 16 MiB data items (a
/// common size, which spead2's receiver takes) fits with its descriptors and other items
/// in the same heap.
pub const DEFAULT_MAX_HEAP_SIZE: usize = 17 << 20;

impl Default for Config {
    fn default() -> Self {
        Self {
            max_heaps: 4,
            substreams: 1,
            allow_out_of_order: false,
            incomplete: Incomplete::Drop,
            max_heap_size: DEFAULT_MAX_HEAP_SIZE,
            pool_size: 0,
            hugepages: HugepagePolicy::Auto,
            max_descriptors: crate::descset::DEFAULT_MAX_DESCRIPTORS,
            stop_ends: true,
            deliver_descriptor_heaps: false,
        }
    }
}

firehose_core::counts! {
    /// What happened to the packets and heaps so far (see the module doc for each
    /// case), declared once: the struct, the names in `stats` and the list in the
    /// `stats` blurb of the elements that run it.
    pub struct Counts {
        /// Packets pushed.
        packets: names::PACKETS,
        /// Heaps delivered (complete ones, and incomplete ones under `Deliver`; the stop
        /// heap, which carries no data, is not counted).
        heaps: names::HEAPS,
        /// Payload bytes of the heaps counted in `heaps`.
        bytes: names::BYTES,
        /// Heaps that ended incomplete (dropped or delivered).
        heaps_incomplete: names::HEAPS_INCOMPLETE,
        /// Packets (or descriptors) that were malformed.
        malformed: names::MALFORMED,
        /// Packets of heaps above `max_heap_size`.
        too_large: names::TOO_LARGE,
        /// Packets not at their heap's next offset (in-order mode), or too late.
        out_of_order_dropped: names::OUT_OF_ORDER_DROPPED,
        /// Packets whose bytes had all arrived already.
        duplicates: names::DUPLICATED,
        /// Packets dropped because no pool slot was free.
        drops_pool: names::DROPS_POOL,
        /// Descriptors refused because `max_descriptors` were known (new ids, or new
        /// versions of known ones).
        descriptors_dropped: names::DESCRIPTORS_DROPPED,
        /// Complete heaps that carried only descriptors, learnt and not delivered (see
        /// [`Config::deliver_descriptor_heaps`]); not counted in `heaps`.
        descriptor_heaps: names::DESCRIPTOR_HEAPS,
    }
}

impl Counts {
    /// Counts what was wrong with a finished heap's descriptors.
    fn learned(&mut self, learned: Learned) {
        self.malformed += learned.malformed;
        self.descriptors_dropped += learned.refused;
    }
}

/// A finished heap.
#[derive(Debug)]
pub struct Heap {
    /// The payload (HEAP_LENGTH bytes; for a heap without it, the bytes up to the
    /// furthest one received), in pool memory.
    pub payload: gst::Memory,
    /// What is in it.
    pub info: HeapInfo,
    /// The stamp given with the heap's first packet (e.g. its buffer's PTS).
    pub stamp: Option<u64>,
}

/// The reassembly engine (see the module documentation).
pub struct Reassembler {
    incomplete: Incomplete,
    limits: Limits,
    pools: Pools,
    subs: Vec<Substream>,
    /// Heaps that have received one packet (module `probation`).
    probation: Probation,
    seq: u64,
    counts: Counts,
    descriptors: DescriptorTable,
    /// Pointers of a single-packet heap (reused).
    scratch: Vec<u64>,
    scratch_seen: HashSet<u64>,
    /// Receiving straight into heaps ([`Reassembler::set_landing`]), for heaps of at
    /// most `landing_max_heap` bytes.
    landing: bool,
    landing_max_heap: usize,
    /// What the stream looked like so far (for [`Reassembler::plan`]).
    shape: Shape,
    /// A pool slot taken ahead for the heap expected next, which packets may be
    /// received into before its first one is taken.
    reserved: Option<(u64, Slot)>,
    /// See [`Config::stop_ends`].
    stop_ends: bool,
    /// See [`Config::deliver_descriptor_heaps`].
    deliver_descriptor_heaps: bool,
    /// The last heap that received a second packet, and the step from the one before
    /// (what [`Self::expects`] predicts from).
    proven: Option<u64>,
    proven_step: u64,
    /// The last heaps whose first packet found no pool memory (their later packets are
    /// counted in `drops_pool` too, not as out of order).
    starved: Box<[Option<u64>; STARVED]>,
    starved_at: usize,
}

/// How many starved heaps are remembered: more than a window holds at once.
const STARVED: usize = 16;

impl Reassembler {
    /// Builds the engine and allocates (pre-faults) its payload memory: size classes
    /// 16 KiB ×4 … up to `max_heap_size`, each holding the same number of heaps, and
    /// arena slots of [`ARENA_SLOT`] bytes for single-packet heaps. With `pool_size` 0,
    /// every class holds `max_heaps × substreams + 4` heaps and the arena has
    /// [`ARENA_SLOTS`] slots; otherwise an eighth of `pool_size` (2 to [`ARENA_SLOTS`]
    /// slots) is arena and the rest is split over the classes (at least 2 heaps each).
    pub fn new(config: &Config) -> Result<Self, RegionError> {
        let max_heaps = config.max_heaps.max(1);
        let substreams = config.substreams.max(1);
        let max_heap_size = config.max_heap_size.max(1);
        let layout = pools::layout(max_heap_size, max_heaps * substreams, config.pool_size);
        Ok(Self {
            incomplete: config.incomplete,
            limits: Limits {
                max_heap_size,
                allow_out_of_order: config.allow_out_of_order,
            },
            pools: Pools::new(max_heap_size, layout, config.hugepages)?,
            subs: (0..substreams).map(|_| Substream::new(max_heaps)).collect(),
            // Delivered incomplete heaps are wanted even in part: each enters the
            // window at its first packet.
            probation: Probation::new(config.incomplete == Incomplete::Drop),
            seq: 0,
            counts: Counts::default(),
            descriptors: DescriptorTable::new(config.max_descriptors),
            scratch: Vec::new(),
            scratch_seen: HashSet::new(),
            landing: false,
            landing_max_heap: 0,
            shape: Shape::default(),
            reserved: None,
            stop_ends: config.stop_ends,
            deliver_descriptor_heaps: config.deliver_descriptor_heaps,
            proven: None,
            proven_step: 1,
            starved: Box::new([None; STARVED]),
            starved_at: 0,
        })
    }

    /// Largest heap payload accepted, in bytes.
    pub fn max_heap_size(&self) -> usize {
        self.limits.max_heap_size
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Every descriptor seen so far.
    pub fn descriptors(&self) -> DescriptorSet {
        self.descriptors.snapshot()
    }

    /// How many distinct descriptors are known (no snapshot taken: read per buffer).
    pub fn descriptor_count(&self) -> usize {
        self.descriptors.len()
    }

    /// The payload pools' accounting, added up over every pool.
    pub fn pool_stats(&self) -> PoolStats {
        self.pools.stats()
    }

    /// Bytes of payload memory allocated.
    pub fn pool_bytes(&self) -> u64 {
        self.pools.bytes()
    }

    /// What backs the payload memory.
    pub fn memory_kind(&self) -> MemoryKind {
        self.pools.kind()
    }

    /// Cuts the payload memory of heaps opened from now on from `provider` (downstream
    /// proposed another kind of memory): the same pools, made again. Heaps under
    /// construction keep their slots (which return to the old pools); the slot taken
    /// ahead for the next heap is given back.
    pub fn use_provider(
        &mut self,
        provider: &dyn firehose_core::provider::MemoryProvider,
    ) -> Result<(), RegionError> {
        self.pools = self.pools.remake(provider)?;
        self.reserved = None;
        Ok(())
    }

    /// Why hugepages were not used under [`HugepagePolicy::Auto`], if they were not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.pools.fallback_reason()
    }

    /// Heaps under construction now.
    pub fn in_progress(&self) -> usize {
        self.subs
            .iter()
            .map(|s| s.entries.iter().filter(|e| e.active).count())
            .sum::<usize>()
            + self.probation.len()
    }

    /// Takes one packet (`data` is exactly one packet); `stamp` is remembered for the
    /// heap it starts. Calls `emit` with every heap this completes or evicts.
    pub fn push(&mut self, data: &[u8], stamp: Option<u64>, emit: &mut impl FnMut(Heap)) {
        self.counts.packets += 1;
        let Ok(p) = Packet::parse(data) else {
            self.counts.malformed += 1;
            return;
        };
        let header_len = data.len() - p.payload.len();
        let taken = self.accept(&p, header_len, Payload::Bytes(p.payload), stamp, emit);
        debug_assert!(taken, "a packet's own bytes are always taken");
    }

    /// Takes a parsed packet whose payload is `payload` (its header `header_len` bytes):
    /// adds it, drops and counts it, or ends the stream. False, with nothing changed,
    /// when a landed payload is not where the packet belongs (or the packet is one that
    /// is only ever copied: a single-packet heap, the stop heap).
    fn accept(
        &mut self,
        p: &Packet<'_>,
        header_len: usize,
        payload: Payload<'_>,
        stamp: Option<u64>,
        emit: &mut impl FnMut(Heap),
    ) -> bool {
        let landed = matches!(payload, Payload::Landed { .. });
        let len = payload.len();
        if p.heap_length
            .is_some_and(|l| l > self.limits.max_heap_size as u64)
        {
            self.counts.too_large += 1;
            return true;
        }
        if p.stream_ctrl == Some(ctrl::STOP) {
            if landed {
                return false;
            }
            self.stop(p, stamp, emit);
            return true;
        }
        let s = (p.heap_cnt % self.subs.len() as u64) as usize;
        if let Some(i) = self.subs[s].find(p.heap_cnt) {
            return self.add_to(s, i, p, header_len, payload, emit);
        }
        if let Some(place) = self.probation.find(p.heap_cnt) {
            if landed {
                return false;
            }
            match self
                .probation
                .fit(place, p, !self.limits.allow_out_of_order)
            {
                Fit::Continues => self.admit(place, s, p, header_len, payload, emit),
                Fit::Duplicate => self.counts.duplicates += 1,
                Fit::Malformed => self.counts.malformed += 1,
                Fit::OutOfOrder => self.counts.out_of_order_dropped += 1,
            }
            return true;
        }
        match self.subs[s].recently(p.heap_cnt) {
            Some(true) => {
                self.counts.duplicates += 1;
                return true;
            }
            Some(false) => {
                self.counts.out_of_order_dropped += 1;
                return true;
            }
            None => {}
        }
        let end = p.payload_offset.saturating_add(len as u64);
        if p.heap_length.is_none() && end > self.limits.max_heap_size as u64 {
            self.counts.too_large += 1;
            return true;
        }
        if !self.limits.allow_out_of_order && p.payload_offset != 0 {
            // A later packet of a heap whose start found no pool memory: the loss is the
            // pool's, and counted as such.
            if self.starved.contains(&Some(p.heap_cnt)) {
                self.counts.drops_pool += 1;
            } else {
                self.counts.out_of_order_dropped += 1;
            }
            return true;
        }
        if p.heap_length == Some(len as u64) {
            if landed {
                return false;
            }
            self.single(p, stamp, emit);
            return true;
        }
        // The first packet of a heap: held apart until a second packet of the heap
        // arrives, unless it is the heap the stream is expected to send next (its slot
        // reserved), or cannot be held.
        let vouched = self.expects(p.heap_cnt);
        let expected = vouched
            || self
                .reserved
                .as_ref()
                .is_some_and(|(c, _)| *c == p.heap_cnt);
        if !landed && !expected && p.heap_length.is_some() && self.probation.takes(p) {
            let f = p.flavour;
            let length = p.heap_length.unwrap_or(0);
            if p.n_items() > MAX_HEAP_ITEMS
                || p.items()
                    .any(|ip| !ip.is_immediate() && ip.value(f) > length)
            {
                self.counts.malformed += 1;
            } else {
                // Heaps held longest ago may be pushed out (lost) to make room.
                self.counts.heaps_incomplete += self.probation.hold(p, stamp);
            }
            return true;
        }
        let opened = self.open(s, p, header_len, payload, stamp, emit);
        if vouched {
            if let Some(i) = self.subs[s].find(p.heap_cnt) {
                self.subs[s].entries[i].vouched = true;
            }
        }
        opened
    }

    /// True for the heap counter `cnt` that follows the last heap that proved itself
    /// (see the module documentation: probation).
    fn expects(&self, cnt: u64) -> bool {
        self.proven
            .and_then(|last| last.checked_add(self.proven_step))
            == Some(cnt)
    }

    /// Heap `cnt` received its second packet: the next heap expected follows it.
    fn prove(&mut self, cnt: u64) {
        if let Some(last) = self.proven {
            if cnt > last {
                self.proven_step = cnt - last;
            }
        }
        self.proven = Some(cnt);
    }

    /// Adds packet `p` to the heap in entry `i` of window `s` (see [`Self::accept`]).
    fn add_to(
        &mut self,
        s: usize,
        i: usize,
        p: &Packet<'_>,
        header_len: usize,
        payload: Payload<'_>,
        emit: &mut impl FnMut(Heap),
    ) -> bool {
        let len = payload.len();
        let e = &mut self.subs[s].entries[i];
        match e.add(p, payload, &self.limits, &self.pools, &mut self.counts) {
            Added::Missed => return false,
            Added::Accepted => {
                self.seq += 1;
                e.touched = self.seq;
                e.packets = e.packets.saturating_add(1);
                let proved = e.packets == 2;
                self.learn(p, header_len, len);
                if proved {
                    self.prove(p.heap_cnt);
                }
            }
            Added::Dropped => {}
        }
        if self.subs[s].entries[i].is_complete() {
            self.end(s, i, emit);
        }
        true
    }

    /// A second packet, `p`, arrived for the heap held in probation at `place`: the heap
    /// enters window `s` with its first packet, then `p` is added.
    fn admit(
        &mut self,
        place: usize,
        s: usize,
        p: &Packet<'_>,
        header_len: usize,
        payload: Payload<'_>,
        emit: &mut impl FnMut(Heap),
    ) {
        let (held, stamp) = self.probation.take(place);
        let first = Packet::parse(&held).expect("a held packet is one that parsed");
        let first_header = held.len() - first.payload.len();
        self.open(
            s,
            &first,
            first_header,
            Payload::Bytes(first.payload),
            stamp,
            emit,
        );
        match self.subs[s].find(p.heap_cnt) {
            Some(i) => {
                self.add_to(s, i, p, header_len, payload, emit);
            }
            // No pool memory for it (counted), and the packet with it.
            None if self.starved.contains(&Some(p.heap_cnt)) => self.counts.drops_pool += 1,
            None => self.counts.out_of_order_dropped += 1,
        }
        self.probation.give_back(held);
    }

    /// Starts a heap in window `s` with packet `p`, its first (in order mode, at offset
    /// 0), evicting a heap if the window is full (see [`Self::accept`]).
    fn open(
        &mut self,
        s: usize,
        p: &Packet<'_>,
        header_len: usize,
        payload: Payload<'_>,
        stamp: Option<u64>,
        emit: &mut impl FnMut(Heap),
    ) -> bool {
        let len = payload.len();
        let end = p.payload_offset.saturating_add(len as u64);
        // Bounded by max_heap_size: either HEAP_LENGTH (checked above) or `end`.
        let need = p.heap_length.unwrap_or(end).max(1) as usize;
        if let Payload::Landed { at, .. } = payload {
            // A landed packet starts a heap only in the slot reserved for it, at its place.
            let offset = p.payload_offset as usize;
            let Some((cnt, slot)) = self.reserved.as_mut() else {
                return false;
            };
            if *cnt != p.heap_cnt
                || slot.capacity() < need
                || slot.as_mut_full().get(offset..).map(<[u8]>::as_ptr) != Some(at)
            {
                return false;
            }
        }
        let i = self.free_entry(s, emit);
        let slot = match self.reserved.take() {
            Some((cnt, slot)) if cnt == p.heap_cnt && slot.capacity() >= need => slot,
            other => {
                self.reserved = other;
                // With the pool used up, the slot reserved for another heap serves
                // (nothing accepted is in it): landing never costs a heap its memory.
                match self.pools.slot(need).or_else(|| {
                    self.reserved
                        .take_if(|(_, s)| s.capacity() >= need)
                        .map(|(_, s)| s)
                }) {
                    Some(slot) => slot,
                    None => {
                        self.counts.drops_pool += 1;
                        self.starved[self.starved_at % STARVED] = Some(p.heap_cnt);
                        self.starved_at += 1;
                        return true;
                    }
                }
            }
        };
        self.seq += 1;
        let e = &mut self.subs[s].entries[i];
        e.start(p, self.seq, stamp, slot);
        if e.add(p, payload, &self.limits, &self.pools, &mut self.counts) == Added::Accepted {
            e.packets = 1;
            self.learn(p, header_len, len);
        }
        let e = &mut self.subs[s].entries[i];
        if e.is_complete() {
            self.end(s, i, emit);
        } else if e.received == 0 && e.pointers.is_empty() && !e.too_large {
            // The packet was rejected: do not keep an empty heap in the window.
            e.active = false;
            e.slot = None;
        }
        true
    }

    /// Learns the stream's shape from a packet just accepted into a heap of the window.
    fn learn(&mut self, p: &Packet<'_>, header_len: usize, len: usize) {
        let heap_length = p.heap_length.map(|l| l as usize);
        self.shape.learn(
            p.heap_cnt,
            p.payload_offset as usize,
            header_len,
            len,
            heap_length,
        );
    }

    /// Ends every heap under construction (end of stream), oldest first, through the
    /// incomplete policy.
    pub fn flush(&mut self, emit: &mut impl FnMut(Heap)) {
        let mut open: Vec<(u64, usize, usize)> = Vec::new();
        for (s, sub) in self.subs.iter().enumerate() {
            for (i, e) in sub.entries.iter().enumerate() {
                if e.active {
                    open.push((e.seq, s, i));
                }
            }
        }
        open.sort_unstable();
        for (_, s, i) in open {
            self.end(s, i, emit);
        }
        // Heaps of one packet (and a HEAP_LENGTH larger) are incomplete.
        self.counts.heaps_incomplete += self.probation.clear() as u64;
    }

    /// Discards every heap under construction (counted as incomplete) and the record
    /// of recent heaps, as after a flush or seek. Descriptors are kept: they describe
    /// the stream, not its position.
    pub fn reset(&mut self) {
        for sub in &mut self.subs {
            for e in sub.entries.iter_mut().filter(|e| e.active) {
                e.active = false;
                e.slot = None;
                if !e.too_large {
                    self.counts.heaps_incomplete += 1;
                }
            }
            sub.forget();
        }
        self.counts.heaps_incomplete += self.probation.clear() as u64;
        // The stream's position changed: nothing learnt about what comes next holds.
        self.shape = Shape::default();
        self.reserved = None;
        self.proven = None;
    }

    /// An entry of window `s` for a new heap: a free one, or the oldest heap's after
    /// evicting it (before its memory is sought, since eviction may free some).
    fn free_entry(&mut self, s: usize, emit: &mut impl FnMut(Heap)) -> usize {
        let entries = &self.subs[s].entries;
        if let Some(i) = entries.iter().position(|e| !e.active) {
            return i;
        }
        // Least recently touched, not oldest: a heap still receiving stays, whatever
        // number of one-packet heaps (lying or random counters) arrive between its
        // packets; a heap that stopped receiving is the first to go, as before. Heaps
        // that have received one packet go before heaps that have received more (most
        // such heaps are held in probation and never get here; these are heaps without
        // HEAP_LENGTH or with a first packet too large to hold).
        let i = (0..entries.len())
            .min_by_key(|&i| {
                let e = &entries[i];
                (e.packets > 1 || e.vouched, e.touched)
            })
            .expect("a window has at least one entry");
        self.end(s, i, emit);
        i
    }

    /// Ends the heap in entry `i` of window `s`: delivers it if complete (or under
    /// `Deliver`), else drops it; counts either way.
    fn end(&mut self, s: usize, i: usize, emit: &mut impl FnMut(Heap)) {
        let sub = &mut self.subs[s];
        let e = &mut sub.entries[i];
        e.active = false;
        if e.too_large {
            // Counted packet by packet already; nothing to deliver.
            let cnt = e.cnt;
            sub.remember(cnt, false);
            return;
        }
        let len = e.heap_length.unwrap_or(e.extent);
        let complete = e.received == len && e.max_address <= len as u64;
        let cnt = e.cnt;
        sub.remember(cnt, complete);
        let e = &mut sub.entries[i];
        if !complete {
            self.counts.heaps_incomplete += 1;
            if self.incomplete == Incomplete::Drop {
                e.slot = None;
                return;
            }
        }
        let Some(mut slot) = e.slot.take() else {
            return;
        };
        if !complete {
            zero_gaps(&mut slot.as_mut_full()[..len], e.ranges.as_slice());
        }
        slot.set_len(len);
        if complete && !self.deliver_descriptor_heaps {
            let parts = Parts {
                heap_cnt: cnt,
                flavour: e.flavour.expect("an active entry has a flavour"),
                pointers: &e.pointers,
                payload: &slot.as_ref()[..len],
                complete,
                received: Vec::new(),
                stream_ctrl: e.stream_ctrl,
            };
            if let Some(learned) = finish::descriptors_only(&parts, &mut self.descriptors) {
                self.counts.learned(learned);
                self.counts.descriptor_heaps += 1;
                return;
            }
        }
        let received = if complete {
            whole(len)
        } else {
            e.ranges.as_slice().to_vec()
        };
        let (info, learned) = finish::build(
            Parts {
                heap_cnt: cnt,
                flavour: e.flavour.expect("an active entry has a flavour"),
                pointers: &e.pointers,
                payload: slot.as_ref(),
                complete,
                received,
                stream_ctrl: e.stream_ctrl,
            },
            &mut self.descriptors,
        );
        self.counts.learned(learned);
        self.counts.heaps += 1;
        self.counts.bytes += len as u64;
        emit(Heap {
            payload: slot_into_memory(slot),
            info,
            stamp: e.stamp,
        });
    }

    /// A heap that is whole in one packet: no window entry, payload into the arena.
    fn single(&mut self, p: &Packet<'_>, stamp: Option<u64>, emit: &mut impl FnMut(Heap)) {
        let len = p.payload.len();
        let f = p.flavour;
        if p.n_items() > MAX_HEAP_ITEMS
            || p.items()
                .any(|ip| !ip.is_immediate() && ip.value(f) > len as u64)
        {
            self.counts.malformed += 1;
            return;
        }
        self.collect_pointers(p);
        let s = (p.heap_cnt % self.subs.len() as u64) as usize;
        if !self.deliver_descriptor_heaps {
            let parts = Parts {
                heap_cnt: p.heap_cnt,
                flavour: f,
                pointers: &self.scratch,
                payload: p.payload,
                complete: true,
                received: Vec::new(),
                stream_ctrl: p.stream_ctrl,
            };
            if let Some(learned) = finish::descriptors_only(&parts, &mut self.descriptors) {
                self.counts.learned(learned);
                self.counts.descriptor_heaps += 1;
                self.subs[s].remember(p.heap_cnt, true);
                return;
            }
        }
        let Some(payload) = self.pools.copy(p.payload) else {
            self.counts.drops_pool += 1;
            return;
        };
        let (info, learned) = finish::build(
            Parts {
                heap_cnt: p.heap_cnt,
                flavour: f,
                pointers: &self.scratch,
                payload: p.payload,
                complete: true,
                received: whole(len),
                stream_ctrl: p.stream_ctrl,
            },
            &mut self.descriptors,
        );
        self.counts.learned(learned);
        self.counts.heaps += 1;
        self.counts.bytes += len as u64;
        self.subs[s].remember(p.heap_cnt, true);
        emit(Heap {
            payload,
            info,
            stamp,
        });
    }

    /// The stream ends: flush, then report the stop heap (this packet's payload).
    fn stop(&mut self, p: &Packet<'_>, stamp: Option<u64>, emit: &mut impl FnMut(Heap)) {
        let s = (p.heap_cnt % self.subs.len() as u64) as usize;
        if let Some(i) = self.subs[s].find(p.heap_cnt).filter(|_| self.stop_ends) {
            // Earlier packets of the stop heap itself: superseded by this report. (Not
            // when stop heaps are not trusted: a forged one may carry a real heap's
            // counter.)
            let e = &mut self.subs[s].entries[i];
            e.active = false;
            e.slot = None;
        }
        if self.stop_ends {
            self.probation.forget(p.heap_cnt);
            self.flush(emit);
            for sub in &mut self.subs {
                sub.forget();
            }
            // A restarted sender starts a new stream.
            self.shape = Shape::default();
            self.reserved = None;
            self.proven = None;
        }
        let len = p.payload.len();
        let complete = p.heap_length == Some(len as u64);
        // The stop heap must be reported even with every pool slot in use: it is one
        // tiny allocation per stream.
        let payload = self
            .pools
            .copy(p.payload)
            .unwrap_or_else(|| gst::Memory::from_slice(p.payload.to_vec()));
        self.collect_pointers(p);
        let (info, learned) = finish::build(
            Parts {
                heap_cnt: p.heap_cnt,
                flavour: p.flavour,
                pointers: &self.scratch,
                payload: p.payload,
                complete,
                received: if complete { whole(len) } else { Vec::new() },
                stream_ctrl: p.stream_ctrl,
            },
            &mut self.descriptors,
        );
        // Not counted in `heaps`: it carries no data, and usually becomes EOS.
        self.counts.learned(learned);
        emit(Heap {
            payload,
            info,
            stamp,
        });
    }

    /// The heap pointers of one packet, without repeats, into `scratch`.
    fn collect_pointers(&mut self, p: &Packet<'_>) {
        self.scratch.clear();
        if !self.scratch_seen.is_empty() {
            self.scratch_seen.clear();
        }
        for ip in p.items().filter(|&ip| !per_packet(ip, p.flavour)) {
            items::push_unique(&mut self.scratch, &mut self.scratch_seen, ip.0);
        }
    }
}

/// Heap reassembly as an engine over any transport: each datagram of a batch goes to
/// [`Reassembler::push`], stamped with its receive time; one outside the batch's memory
/// is counted as malformed. The stream ends at a stop heap when
/// [`Config::stop_ends`] (the stop heap itself is delivered).
impl firehose_core::transport::Engine for Reassembler {
    type Output = Heap;

    fn feed(
        &mut self,
        data: &[u8],
        packets: &[firehose_core::PacketInfo],
        out: &mut Vec<Heap>,
    ) -> bool {
        for p in packets {
            let Some(d) = firehose_core::transport::datagram(data, p) else {
                self.counts.packets += 1;
                self.counts.malformed += 1;
                continue;
            };
            let mut stopped = false;
            let stop_ends = self.stop_ends;
            self.push(d, Some(p.rx_time_ns), &mut |h: Heap| {
                stopped |= stop_ends && h.info.stream_ctrl == Some(ctrl::STOP);
                out.push(h);
            });
            if stopped {
                return false;
            }
        }
        true
    }

    fn finish(&mut self, out: &mut Vec<Heap>) {
        self.flush(&mut |h| out.push(h));
    }
}
