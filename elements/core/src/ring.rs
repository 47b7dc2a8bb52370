//! A receive ring's slot accounting, for sources whose device writes into memory we
//! lend it: RDMA receive work requests (`fhibvsrc`), the AF_XDP fill ring (`fhxdpsrc`).
//! No GStreamer types except [`lend_batch`], which wraps a batch as one `gst::Memory`.
//!
//! One registered memory region (an RDMA memory region, an AF_XDP UMEM) is cut into `N`
//! equal receive slots. Each slot is in
//! exactly one of three hands:
//! - **free**: owned by the host, neither posted nor referenced — the only slots that may
//!   be posted;
//! - **posted**: a receive work request on the queue pair points at it; the NIC may
//!   write it at any time;
//! - **held**: a completion delivered a frame into it and a downstream buffer refers to
//!   it; it becomes free only when that buffer lets go ([`ReceiveRing::release`], or
//!   dropping the memory made by [`lend_batch`]).
//!
//! Completions are polled and slots re-posted in batches: [`ReceiveRing::take_for_post`]
//! hands out free slots only once at least a batch of them has gathered (or the NIC is
//! about to run dry), so one `ibv_post_recv` chain covers many slots.

use crate::memory::MemoryRegion;
use crate::sync::lock;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Which hand a slot is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotOwner {
    /// Owned by the host, free to post.
    Free,
    /// Posted to the NIC.
    Nic,
    /// Filled and referenced downstream.
    Downstream,
}

/// A slot accounting mistake: a completion for a slot that was not posted, or a
/// release of a slot that was not held. Either is a bug (or a NIC reporting a stale
/// work-request id); the ring's state is left unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The slot index is outside the ring.
    OutOfRange(u32),
    /// The operation needs the slot in hand `expected`, but it was in `found`.
    WrongOwner {
        /// The slot.
        slot: u32,
        /// The hand the operation needs.
        expected: SlotOwner,
        /// The hand it was in.
        found: SlotOwner,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange(s) => write!(f, "receive slot {s} is outside the ring"),
            Self::WrongOwner {
                slot,
                expected,
                found,
            } => write!(f, "receive slot {slot} is {found:?}, expected {expected:?}"),
        }
    }
}

impl std::error::Error for RingError {}

/// Slot counts by hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCounts {
    /// Free slots.
    pub free: usize,
    /// Slots posted to the NIC.
    pub posted: usize,
    /// Slots held downstream.
    pub held: usize,
}

/// The accounting of `N` receive slots of `slot_size` bytes in one region.
#[derive(Debug)]
pub struct ReceiveRing {
    owner: Vec<SlotOwner>,
    /// Free slots, oldest release first (FIFO keeps recently used memory cooling down
    /// and makes reuse order predictable).
    free: std::collections::VecDeque<u32>,
    slot_size: usize,
    posted: usize,
    batch: usize,
}

impl ReceiveRing {
    /// `slots` free slots of `slot_size` bytes, re-posted `batch` at a time.
    pub fn new(slots: u32, slot_size: usize, batch: usize) -> Self {
        Self {
            owner: vec![SlotOwner::Free; slots as usize],
            free: (0..slots).collect(),
            slot_size,
            posted: 0,
            batch: batch.max(1),
        }
    }

    /// Slots in the ring.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Whether the ring has no slots.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// Byte offset of `slot` in the registered region (the receive WR's address is the
    /// region's base plus this).
    pub fn offset(&self, slot: u32) -> usize {
        slot as usize * self.slot_size
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Which hand `slot` is in.
    pub fn owner(&self, slot: u32) -> Option<SlotOwner> {
        self.owner.get(slot as usize).copied()
    }

    /// Counts by hand; they always add up to [`Self::len`].
    pub fn counts(&self) -> RingCounts {
        RingCounts {
            free: self.free.len(),
            posted: self.posted,
            held: self.owner.len() - self.free.len() - self.posted,
        }
    }

    /// Moves up to one batch of free slots to the NIC and appends their indices to `out`
    /// (to be posted as one chain of receive WRs, `wr_id` = slot index). Posts nothing
    /// while fewer than a batch are free, unless the NIC has nothing posted at all
    /// (then whatever is free goes, so reception never stalls for want of a full batch).
    /// Returns how many were taken.
    pub fn take_for_post(&mut self, out: &mut Vec<u32>) -> usize {
        if self.free.len() < self.batch && self.posted > 0 {
            return 0;
        }
        let n = self.free.len().min(self.batch);
        for _ in 0..n {
            let s = self.free.pop_front().expect("counted above");
            self.owner[s as usize] = SlotOwner::Nic;
            out.push(s);
        }
        self.posted += n;
        n
    }

    /// Undoes [`Self::take_for_post`] for slots whose post failed: back to free, at the
    /// front so they are tried first next time.
    pub fn unpost(&mut self, slots: &[u32]) -> Result<(), RingError> {
        for &s in slots {
            self.expect(s, SlotOwner::Nic)?;
        }
        for &s in slots.iter().rev() {
            self.owner[s as usize] = SlotOwner::Free;
            self.free.push_front(s);
        }
        self.posted -= slots.len();
        Ok(())
    }

    /// Takes back every slot the device holds, once it can no longer write them (its
    /// queue pair or socket is gone): they become free, at the front, lowest first, as
    /// [`ReceiveRing::unpost`] leaves them. No allocation: it runs at stop and drop.
    pub fn reclaim_posted(&mut self) {
        for s in (0..self.owner.len()).rev() {
            if self.owner[s] == SlotOwner::Nic {
                self.owner[s] = SlotOwner::Free;
                self.free.push_front(s as u32);
            }
        }
        self.posted = 0;
    }

    /// A completion for `slot` (its `wr_id`): the NIC is done with it and it is now
    /// held downstream until released.
    pub fn complete(&mut self, slot: u32) -> Result<(), RingError> {
        self.expect(slot, SlotOwner::Nic)?;
        self.owner[slot as usize] = SlotOwner::Downstream;
        self.posted -= 1;
        Ok(())
    }

    /// A completion for `slot` whose frame is not delivered (error status, malformed,
    /// not for us): straight back to free.
    pub fn complete_unused(&mut self, slot: u32) -> Result<(), RingError> {
        self.complete(slot)?;
        self.release(slot)
    }

    /// The last downstream reference to `slot` is gone: it may be posted again.
    pub fn release(&mut self, slot: u32) -> Result<(), RingError> {
        self.expect(slot, SlotOwner::Downstream)?;
        self.owner[slot as usize] = SlotOwner::Free;
        self.free.push_back(slot);
        Ok(())
    }

    fn expect(&self, slot: u32, expected: SlotOwner) -> Result<(), RingError> {
        let found = self.owner(slot).ok_or(RingError::OutOfRange(slot))?;
        if found != expected {
            return Err(RingError::WrongOwner {
                slot,
                expected,
                found,
            });
        }
        Ok(())
    }
}

/// A ring shared between the receive thread and the buffers it pushed.
pub type SharedRing = Arc<Mutex<ReceiveRing>>;

/// Completed slots lent downstream as one `gst::Memory` (see [`lend_batch`]); all of
/// them go back to the ring under one lock when the last reference goes.
struct LentBatch {
    ring: SharedRing,
    region: Arc<MemoryRegion>,
    range: std::ops::Range<usize>,
    slots: Vec<u32>,
}

impl AsRef<[u8]> for LentBatch {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `range` lies inside `region` (checked in `lend_batch`), which this
        // value keeps alive; the slots in it are `Downstream`, so the device does not
        // write them while this shared view exists.
        unsafe {
            std::slice::from_raw_parts(self.region.as_ptr().add(self.range.start), self.range.len())
        }
    }
}

impl Drop for LentBatch {
    fn drop(&mut self) {
        // One lock for the whole batch. A poisoned lock still releases, or slots leak.
        let mut ring = lock(&self.ring);
        for &s in &self.slots {
            let r = ring.release(s);
            debug_assert!(r.is_ok(), "release of lent slot failed: {r:?}");
        }
    }
}

/// Wraps the completed `slots` (already [`ReceiveRing::complete`]d) as one read-only
/// `gst::Memory` over `region[range]`, without a copy. Packet offsets in the batch meta
/// are then relative to `range.start`. The slots are released to `ring`, all under one
/// lock, when the last reference to the memory (or to any memory shared from it) is
/// dropped; `region` stays mapped until then. `range` must hold only the batch's own
/// slots (a run of adjacent slots, from the lowest to the end of the highest): a slot
/// inside it that the NIC or kernel still owns would be written while downstream maps
/// the memory.
///
/// Panics if `range` is not inside `region`.
pub fn lend_batch(
    ring: &SharedRing,
    region: &Arc<MemoryRegion>,
    range: std::ops::Range<usize>,
    slots: Vec<u32>,
) -> gst::Memory {
    assert!(range.start <= range.end && range.end <= region.len());
    gst::Memory::from_slice(LentBatch {
        ring: ring.clone(),
        region: region.clone(),
        range,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(r: &ReceiveRing) {
        let c = r.counts();
        assert_eq!(c.free + c.posted + c.held, r.len());
        let by_hand = |o| {
            (0..r.len() as u32)
                .filter(|&s| r.owner(s) == Some(o))
                .count()
        };
        assert_eq!(c.free, by_hand(SlotOwner::Free));
        assert_eq!(c.posted, by_hand(SlotOwner::Nic));
        assert_eq!(c.held, by_hand(SlotOwner::Downstream));
    }

    #[test]
    fn posts_in_batches_and_offsets_follow_slots() {
        let mut r = ReceiveRing::new(10, 2048, 4);
        let mut out = vec![];
        assert_eq!(r.take_for_post(&mut out), 4);
        assert_eq!(r.take_for_post(&mut out), 4);
        // Only 2 free and the NIC still has 8 posted: wait for a full batch.
        assert_eq!(r.take_for_post(&mut out), 0);
        assert_eq!(out, (0..8).collect::<Vec<_>>());
        assert_eq!(r.offset(3), 3 * 2048);
        check(&r);
        assert_eq!(
            r.counts(),
            RingCounts {
                free: 2,
                posted: 8,
                held: 0
            }
        );
    }

    #[test]
    fn never_reposts_a_slot_held_downstream() {
        let mut r = ReceiveRing::new(4, 64, 4);
        let mut out = vec![];
        r.take_for_post(&mut out);
        for s in 0..4 {
            r.complete(s).unwrap();
        }
        check(&r);
        // NIC dry, everything held downstream: nothing may be posted.
        out.clear();
        assert_eq!(r.take_for_post(&mut out), 0);
        r.release(2).unwrap();
        // NIC dry: a partial batch goes at once, and only the released slot.
        assert_eq!(r.take_for_post(&mut out), 1);
        assert_eq!(out, vec![2]);
        assert_eq!(r.owner(0), Some(SlotOwner::Downstream));
        check(&r);
    }

    #[test]
    fn misuse_is_an_error_and_changes_nothing() {
        let mut r = ReceiveRing::new(3, 64, 1);
        assert_eq!(
            r.complete(0),
            Err(RingError::WrongOwner {
                slot: 0,
                expected: SlotOwner::Nic,
                found: SlotOwner::Free
            })
        );
        assert_eq!(r.release(9), Err(RingError::OutOfRange(9)));
        let mut out = vec![];
        r.take_for_post(&mut out);
        r.complete(0).unwrap();
        r.release(0).unwrap();
        assert!(r.release(0).is_err(), "double release");
        assert!(r.complete(0).is_err(), "completion of a slot not posted");
        check(&r);
        assert_eq!(r.counts().free, 3);
    }

    #[test]
    fn unused_completions_and_failed_posts_return_to_free() {
        let mut r = ReceiveRing::new(4, 64, 2);
        let mut out = vec![];
        r.take_for_post(&mut out);
        r.complete_unused(out[0]).unwrap();
        assert_eq!(r.owner(out[0]), Some(SlotOwner::Free));
        let mut more = vec![];
        r.take_for_post(&mut more);
        assert_eq!(more, vec![2, 3]);
        r.unpost(&more).unwrap();
        assert_eq!(r.owner(2), Some(SlotOwner::Free));
        assert!(r.unpost(&[2]).is_err());
        check(&r);
        let mut again = vec![];
        r.take_for_post(&mut again);
        assert_eq!(again, vec![2, 3], "failed posts are retried first");
    }

    #[test]
    fn reclaim_takes_back_only_what_the_device_holds() {
        let mut r = ReceiveRing::new(6, 64, 2);
        let mut out = vec![];
        r.take_for_post(&mut out);
        r.take_for_post(&mut out);
        r.complete(out[1]).unwrap(); // held downstream: stays held
        r.reclaim_posted();
        assert_eq!(r.counts().posted, 0);
        assert_eq!(r.owner(out[1]), Some(SlotOwner::Downstream));
        for &s in out.iter().filter(|&&s| s != out[1]) {
            assert_eq!(r.owner(s), Some(SlotOwner::Free), "slot {s}");
        }
        check(&r);
        let mut again = vec![];
        r.take_for_post(&mut again);
        assert_eq!(
            again,
            vec![0, 2],
            "reclaimed slots come first, lowest first"
        );
    }

    #[test]
    fn lent_slots_release_on_drop() {
        gst::init().unwrap();
        let region =
            Arc::new(MemoryRegion::allocate(2 * 64, crate::memory::HugepagePolicy::Off).unwrap());
        let ring: SharedRing = Arc::new(Mutex::new(ReceiveRing::new(2, 64, 2)));
        let mut out = vec![];
        ring.lock().unwrap().take_for_post(&mut out);
        for s in [0, 1] {
            ring.lock().unwrap().complete(s).unwrap();
        }
        assert!(ring.lock().unwrap().complete(1).is_err());
        let a = lend_batch(&ring, &region, 0..64, vec![0]);
        let b = lend_batch(&ring, &region, 64..128, vec![1]);
        assert_eq!(ring.lock().unwrap().counts().held, 2);
        drop(a);
        assert_eq!(ring.lock().unwrap().owner(0), Some(SlotOwner::Free));
        assert_eq!(ring.lock().unwrap().owner(1), Some(SlotOwner::Downstream));
        drop(b);
        assert_eq!(ring.lock().unwrap().counts().free, 2);
    }

    /// A long pseudo-random run of post / complete / release: the invariants hold at
    /// every step and a slot is never posted while held.
    #[test]
    fn random_walk_keeps_invariants() {
        let mut r = ReceiveRing::new(32, 64, 8);
        let mut held: Vec<u32> = vec![];
        let mut posted: std::collections::VecDeque<u32> = Default::default();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 3 {
                0 => {
                    let mut out = vec![];
                    r.take_for_post(&mut out);
                    for s in &out {
                        assert!(!held.contains(s), "slot {s} posted while held");
                    }
                    posted.extend(out);
                }
                1 => {
                    if let Some(s) = posted.pop_front() {
                        r.complete(s).unwrap();
                        held.push(s);
                    }
                }
                _ => {
                    if !held.is_empty() {
                        let s = held.swap_remove((x >> 8) as usize % held.len());
                        r.release(s).unwrap();
                    }
                }
            }
            let c = r.counts();
            assert_eq!((c.posted, c.held), (posted.len(), held.len()));
        }
        check(&r);
    }

    #[test]
    fn a_lent_batch_releases_every_slot_when_its_last_reference_goes() {
        gst::init().unwrap();
        let region =
            Arc::new(MemoryRegion::allocate(8 * 2048, crate::memory::HugepagePolicy::Off).unwrap());
        // SAFETY: the region is freshly allocated and not shared yet.
        unsafe { region.as_ptr().add(2 * 2048).write(0xab) };
        let ring: SharedRing = Arc::new(Mutex::new(ReceiveRing::new(8, 2048, 8)));
        let mut posted = vec![];
        lock(&ring).take_for_post(&mut posted);
        assert_eq!(posted.len(), 8);
        for s in [2, 3] {
            lock(&ring).complete(s).unwrap();
        }
        let mem = lend_batch(&ring, &region, 2 * 2048..4 * 2048, vec![2, 3]);
        assert_eq!(mem.size(), 2 * 2048);
        assert_eq!(mem.map_readable().unwrap()[0], 0xab);
        let shared = mem.share(10..20);
        drop(mem);
        assert_eq!(
            lock(&ring).counts().held,
            2,
            "a shared part keeps the batch"
        );
        drop(shared);
        let c = lock(&ring).counts();
        assert_eq!((c.free, c.posted, c.held), (2, 6, 0));
    }
}
