//! The receive loop, generic over the device ([`RxDevice`]): post free ring slots in
//! batches, poll completions in batches, parse the frames, and lend each run of
//! delivered slots downstream as one `gst::Memory` with a
//! [`firehose_core::PacketBatchMeta`]. The real device is [`crate::device::VerbsDevice`];
//! tests drive the same engine with a fake that writes canned frames into the posted
//! slots of a real [`MemoryRegion`].
//!
//! Rules the engine keeps:
//! - **One lock and one allocation pair per batch, none per packet.** The ring is locked
//!   once per posted chain and once per delivered run; the run's slot list and packet
//!   list are the only allocations (they travel with the buffer).
//! - **A lent memory covers only its own slots.** A run is a sequence of completions in
//!   *adjacent* slots (the receive queue completes in post order, and the ring hands
//!   slots out in order, so runs are long); a completion in a non-adjacent slot starts
//!   the next buffer. So the memory never spans a slot the NIC may be writing, and
//!   [`lend_batch`]'s "all slots in range are held" holds exactly.
//! - **Rejected completions go straight back.** Error status, truncated, malformed or
//!   filtered frames are counted and their slots returned to free at once (and the run
//!   ends there, since its memory must not span them).
//! - **The NIC never starves.** When lending a run would leave fewer than `reserve`
//!   slots with the NIC or free to post (downstream holds the rest), the run's frames
//!   are dropped and counted as `drops-pool` and its slots re-posted: the live
//!   `when-full=drop` policy, counted here instead of lost silently in the NIC.
//! - **Every slot comes back.** Dropping the engine first drops the device (which
//!   destroys the QP, so nothing is posted any more), then returns every slot still
//!   marked posted to free; slots held downstream return when their buffers go.

use std::fmt;
use std::sync::{Arc, Mutex};

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::ring::{lend_batch, ReceiveRing, RingError, SharedRing};
use firehose_core::stats::names;
use firehose_core::sync::lock;
use firehose_core::{MemoryRegion, PacketInfo};

use firehose_core::endpoint::{EndpointCounters, Tally as EndpointTally};
use firehose_core::frame::accept::{packet_entry_dest, Rejected, UdpFilter as Filter};
use firehose_core::meta::dest::PacketDest;

/// One receive buffer to hand to the device: a receive WR with one SGE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostSlot {
    /// Ring slot index (the WR's `wr_id`).
    pub slot: u32,
    /// Device address of the slot: region base + ring offset.
    pub addr: u64,
    /// Bytes the device may write.
    pub len: u32,
}

/// How a receive completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionStatus {
    /// A frame of `byte_len` bytes is in the slot.
    #[default]
    Success,
    /// The frame did not fit the slot (`IBV_WC_LOC_LEN_ERR`).
    TooLong,
    /// Any other failed status (the `ibv_wc_status` code).
    Error(u32),
}

/// One polled completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The ring slot (`wr_id`).
    pub slot: u32,
    /// Outcome.
    pub status: CompletionStatus,
    /// Bytes written (on success).
    pub byte_len: u32,
}

/// A failed device call: which verb and its `errno`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceError {
    /// The verb that failed, e.g. `"ibv_post_recv"`.
    pub call: &'static str,
    /// Its error number.
    pub errno: i32,
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (errno {})",
            self.call,
            crate::verbs::strerror(self.errno),
            self.errno
        )
    }
}

impl std::error::Error for DeviceError {}

/// A post that failed part way: the first `posted` slots of the chain were posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostError {
    /// How many of the chain's WRs the device accepted (those before `bad_wr`).
    pub posted: usize,
    /// Why the rest were refused.
    pub error: DeviceError,
}

/// The operations the engine needs from a receive device.
pub trait RxDevice {
    /// Posts `slots` as one chain of receive work requests (`wr_id` = slot).
    fn post(&mut self, slots: &[PostSlot]) -> Result<(), PostError>;
    /// Polls up to `out.len()` completions into `out`; returns how many.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, DeviceError>;
}

firehose_core::counters! {
    /// Counters the engine updates and the element reads for `stats`.
    pub struct RxCounters {
        /// Datagrams delivered downstream.
        packets: names::PACKETS,
        /// UDP payload bytes delivered.
        bytes: names::BYTES,
        /// Buffers produced.
        batches: names::BATCHES,
        /// Good frames dropped to keep the NIC supplied with slots.
        drops_pool: names::DROPS_POOL,
        /// Frames that are not UDP over IP or do not parse.
        malformed: names::MALFORMED,
        /// Frames longer than a slot, or IP fragments.
        truncated: names::TRUNCATED,
        /// UDP for another address or port.
        filtered: names::FILTERED,
        /// UDP datagrams with no payload.
        empty: names::EMPTY,
        /// Completions with an error status other than "too long".
        completion_errors: COMPLETION_ERRORS,
    }
}

/// Element-local counter name: completions with an error status other than "too long".
pub const COMPLETION_ERRORS: &str = "completion-errors";

/// Engine settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Receive slots in the region.
    pub slots: u32,
    /// Bytes per slot.
    pub slot_size: u32,
    /// Completions polled, and slots posted, at a time.
    pub batch: u32,
    /// Slots that must stay with the NIC (posted or about to be) after a run is lent;
    /// below that, runs are dropped as `drops-pool`. See [`EngineConfig::default_reserve`].
    pub reserve: u32,
    /// The software check of what the steering rules selected.
    pub filter: Filter,
}

impl EngineConfig {
    /// The reserve `fhibvsrc` uses: an eighth of the ring but at least a batch (so one
    /// full chain can always be posted), and at most half the ring (so downstream can
    /// always hold the other half).
    pub fn default_reserve(slots: u32, batch: u32) -> u32 {
        (slots / 8).max(batch).min(slots / 2).max(1)
    }
}

/// Why the engine stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// A device call failed.
    Device(DeviceError),
    /// A completion named a slot that was not posted (a device or accounting bug).
    Ring(RingError),
    /// The region is smaller than `slots × slot_size`, or a setting is zero.
    Config(&'static str),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device(e) => e.fmt(f),
            Self::Ring(e) => write!(f, "receive ring accounting error: {e}"),
            Self::Config(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<DeviceError> for EngineError {
    fn from(e: DeviceError) -> Self {
        Self::Device(e)
    }
}

impl From<RingError> for EngineError {
    fn from(e: RingError) -> Self {
        Self::Ring(e)
    }
}

/// A run of delivered slots, lent as one memory, and the datagrams in it (offsets
/// relative to the memory).
#[derive(Debug)]
pub struct Batch {
    /// The slots' bytes, no copy; the slots return to the ring when it is dropped.
    pub memory: gst::Memory,
    /// The datagrams, in arrival order.
    pub packets: Vec<PacketInfo>,
    /// Where each was sent; its frame headers lie in `memory` before its payload.
    pub dests: Vec<PacketDest>,
}

impl Batch {
    /// The batch as an `application/x-firehose-packets` buffer (`readable`: with the
    /// meta every language reads too).
    pub fn into_buffer(self, pts: Option<gst::ClockTime>, readable: bool) -> gst::Buffer {
        batch_buffer_with_dests(self.memory, self.packets, self.dests, pts, readable)
    }
}

/// What one [`RxEngine::step`] did.
#[derive(Debug)]
pub enum Step {
    /// A run of frames to push.
    Batch(Batch),
    /// Completions were handled but nothing is to be pushed (all rejected or dropped).
    Busy,
    /// The device had no completion.
    Idle,
}

/// The receive engine over one device, one region and its ring.
pub struct RxEngine<D: RxDevice> {
    /// `Some` until drop, which destroys the device before reclaiming posted slots.
    dev: Option<D>,
    ring: SharedRing,
    region: Arc<MemoryRegion>,
    base: u64,
    slot_size: usize,
    reserve: usize,
    filter: Filter,
    counters: Arc<RxCounters>,
    /// Polled completions; `next..end` are not handled yet.
    wcs: Vec<Completion>,
    next: usize,
    end: usize,
    /// Scratch for one post: slot indices, then their WR descriptions.
    take: Vec<u32>,
    posts: Vec<PostSlot>,
    /// The endpoint and payload bytes of each datagram of the run being built, counted
    /// once the run is lent (a run dropped to keep the NIC supplied is not delivered).
    run_endpoints: Vec<(usize, u64)>,
    /// The lent run's packets and bytes per endpoint, added to `endpoints` per run.
    endpoint_tally: EndpointTally,
    /// Packets and bytes per endpoint since start, read by `stats`.
    endpoints: Arc<EndpointCounters>,
}

impl<D: RxDevice> RxEngine<D> {
    /// An engine over `region`, whose byte 0 has device address `base` (for verbs:
    /// the region's virtual address, which the MR covers). Nothing is posted yet: call
    /// [`Self::fill`].
    pub fn new(
        dev: D,
        region: Arc<MemoryRegion>,
        base: u64,
        cfg: EngineConfig,
        counters: Arc<RxCounters>,
    ) -> Result<Self, EngineError> {
        if cfg.slots == 0 || cfg.slot_size == 0 || cfg.batch == 0 {
            return Err(EngineError::Config(
                "slots, slot-size and batch-size must be positive",
            ));
        }
        if (cfg.slots as usize).saturating_mul(cfg.slot_size as usize) > region.len() {
            return Err(EngineError::Config(
                "the receive region is smaller than slots × slot-size",
            ));
        }
        let batch = cfg.batch.min(cfg.slots) as usize;
        Ok(Self {
            dev: Some(dev),
            ring: Arc::new(Mutex::new(ReceiveRing::new(
                cfg.slots,
                cfg.slot_size as usize,
                batch,
            ))),
            region,
            base,
            slot_size: cfg.slot_size as usize,
            reserve: cfg.reserve.clamp(1, cfg.slots) as usize,
            filter: cfg.filter,
            counters,
            wcs: vec![Completion::default(); batch],
            next: 0,
            end: 0,
            take: Vec::with_capacity(batch),
            posts: Vec::with_capacity(batch),
            run_endpoints: Vec::with_capacity(batch),
            endpoint_tally: EndpointTally::default(),
            endpoints: Arc::new(EndpointCounters::new(&[])),
        })
    }

    /// Counts delivered packets and bytes per endpoint of the filter's list into
    /// `counters` (made for that list), once per lent run.
    pub fn with_endpoints(mut self, counters: Arc<EndpointCounters>) -> Self {
        self.endpoint_tally = EndpointTally::new(counters.snapshot().len());
        self.endpoints = counters;
        self
    }

    /// The slot ring (for stats and tests).
    pub fn ring(&self) -> &SharedRing {
        &self.ring
    }

    /// The device.
    pub fn device_mut(&mut self) -> &mut D {
        self.dev.as_mut().expect("the device lives until drop")
    }

    /// Posts free slots, one chain per batch, for as long as the ring hands out
    /// batches (all of them at start; afterwards whenever a batch has been released).
    /// Slots of a chain the device refused go back to free. Returns how many were
    /// posted.
    pub fn fill(&mut self) -> Result<usize, EngineError> {
        let mut total = 0;
        loop {
            self.take.clear();
            if lock(&self.ring).take_for_post(&mut self.take) == 0 {
                return Ok(total);
            }
            self.posts.clear();
            for &slot in &self.take {
                self.posts.push(PostSlot {
                    slot,
                    addr: self.base + (slot as usize * self.slot_size) as u64,
                    len: self.slot_size as u32,
                });
            }
            let dev = self.dev.as_mut().expect("the device lives until drop");
            match dev.post(&self.posts) {
                Ok(()) => total += self.take.len(),
                Err(e) => {
                    let posted = e.posted.min(self.take.len());
                    lock(&self.ring).unpost(&self.take[posted..])?;
                    return Err(e.error.into());
                }
            }
        }
    }

    /// Polls (when the previous poll is used up) and handles completions until one run
    /// is ready or the polled completions are used up. `rx_time_ns` is stamped on each
    /// delivered packet (one clock read per poll, by the caller).
    pub fn step(&mut self, rx_time_ns: u64) -> Result<Step, EngineError> {
        if self.next == self.end {
            let dev = self.dev.as_mut().expect("the device lives until drop");
            let n = dev.poll(&mut self.wcs)?.min(self.wcs.len());
            self.next = 0;
            self.end = n;
            if n == 0 {
                return Ok(Step::Idle);
            }
        }
        let c = &self.counters;
        let mut slots: Vec<u32> = Vec::with_capacity(self.end - self.next);
        let mut packets: Vec<PacketInfo> = Vec::with_capacity(self.end - self.next);
        let mut dests: Vec<PacketDest> = Vec::with_capacity(self.end - self.next);
        let mut bytes = 0u64;
        self.run_endpoints.clear();
        let mut ring = lock(&self.ring);
        while self.next < self.end {
            let wc = self.wcs[self.next];
            if slots
                .last()
                .is_some_and(|&last| wc.slot != last.wrapping_add(1))
            {
                break; // not adjacent: the next run
            }
            self.next += 1;
            ring.complete(wc.slot)?;
            let off = ring.offset(wc.slot);
            let verdict = match wc.status {
                CompletionStatus::Success if wc.byte_len as usize > self.slot_size => {
                    Err(Rejected::Truncated)
                }
                CompletionStatus::Success => {
                    // SAFETY: the slot lies inside the region (the ring has
                    // `slots` × `slot_size` ≤ region.len() bytes, checked in `new`) and
                    // byte_len ≤ slot_size; it was just completed, so the device has
                    // finished writing it and will not write it again before it is
                    // re-posted, which only this thread does.
                    let frame = unsafe {
                        std::slice::from_raw_parts(
                            self.region.as_ptr().add(off),
                            wc.byte_len as usize,
                        )
                    };
                    packet_entry_dest(frame, 0, &self.filter, rx_time_ns)
                }
                CompletionStatus::TooLong => Err(Rejected::Truncated),
                CompletionStatus::Error(_) => {
                    c.completion_errors.add(1);
                    ring.release(wc.slot)?;
                    if slots.is_empty() {
                        continue;
                    }
                    break;
                }
            };
            match verdict {
                Ok((mut p, d, endpoint)) => {
                    // Offsets are relative to the run's memory, which starts at its
                    // first slot (runs are at most a batch, so this fits in u32).
                    let first = slots.first().copied().unwrap_or(wc.slot);
                    p.offset += ((wc.slot - first) as usize * self.slot_size) as u32;
                    bytes += u64::from(p.len);
                    self.run_endpoints.push((endpoint, u64::from(p.len)));
                    slots.push(wc.slot);
                    packets.push(p);
                    dests.push(d);
                }
                Err(r) => {
                    match r {
                        // The flow rule admits UDP only: anything else is malformed.
                        Rejected::Malformed | Rejected::NotUdp => c.malformed.add(1),
                        Rejected::Truncated => c.truncated.add(1),
                        Rejected::Filtered => c.filtered.add(1),
                        Rejected::Empty => c.empty.add(1),
                    }
                    ring.release(wc.slot)?;
                    if !slots.is_empty() {
                        break; // the run's memory must not span a free slot
                    }
                }
            }
        }
        let Some(&first) = slots.first() else {
            return Ok(Step::Busy);
        };
        let counts = ring.counts();
        if counts.posted + counts.free < self.reserve {
            // Downstream holds too much: keep the NIC supplied, count the loss.
            for &s in &slots {
                ring.release(s)?;
            }
            c.drops_pool.add(packets.len() as u64);
            return Ok(Step::Busy);
        }
        drop(ring);
        let start = first as usize * self.slot_size;
        let end = start + slots.len() * self.slot_size;
        c.packets.add(packets.len() as u64);
        c.bytes.add(bytes);
        c.batches.add(1);
        for &(e, b) in &self.run_endpoints {
            self.endpoint_tally.count(e, b);
        }
        self.endpoints.add(&mut self.endpoint_tally);
        let memory = lend_batch(&self.ring, &self.region, start..end, slots);
        Ok(Step::Batch(Batch {
            memory,
            packets,
            dests,
        }))
    }
}

impl<D: RxDevice> Drop for RxEngine<D> {
    fn drop(&mut self) {
        // The device first: once its QP is destroyed nothing is posted any more, and
        // the slots the ring still marks posted (including completions polled but not
        // handled) can be reclaimed.
        drop(self.dev.take());
        lock(&self.ring).reclaim_posted();
    }
}
