//! Payload memory for heaps: preallocated pools only, no allocation while receiving.
//!
//! - A multi-packet heap gets one slot of the smallest size class that holds it
//!   (16 KiB, 64 KiB, … ×4 …, up to `max-heap-size`); when that class is empty the
//!   next larger one serves. The slot becomes the heap buffer's memory with no copy.
//! - Single-packet heaps (the common case for small heaps, descriptors and the stop
//!   heap) are copied one after another into an arena slot, so a short heap does not
//!   hold a whole slot of a class while it waits downstream.

use firehose_core::gstmem::slot_into_memory;
use firehose_core::provider::{Anonymous, MemoryProvider};
use firehose_core::{
    HugepagePolicy, PoolConfig, PoolStats, RegionError, Slot, SlotArena, SlotPool,
};

/// The smallest size class.
pub const SMALLEST_CLASS: usize = 16 << 10;
/// Bytes per arena slot (holds many single-packet heaps; larger than any UDP payload).
pub const ARENA_SLOT: usize = 256 << 10;
/// Arena slots (at most; automatic pool size): 8 MiB of single-packet heaps in flight.
pub const ARENA_SLOTS: usize = 32;
/// Heaps per class beyond the window when the pool size is automatic: room for what
/// is queued downstream.
pub(crate) const AUTO_SPARE: usize = 4;

/// The slot sizes for heaps of up to `max_heap_size` bytes.
pub fn class_sizes(max_heap_size: usize) -> Vec<usize> {
    let max = max_heap_size.max(1);
    let mut v = Vec::new();
    let mut s = SMALLEST_CLASS;
    while s < max {
        v.push(s);
        s *= 4;
    }
    v.push(max);
    v
}

/// How `pool_size` bytes are spent: (arena slots, heaps of every class).
///
/// 0 = automatic: [`ARENA_SLOTS`] arena slots, and the window plus [`AUTO_SPARE`] heaps
/// per class. Otherwise an eighth (at most [`ARENA_SLOTS`] slots, at least 2) goes to
/// the arena and the rest buys the same number of heaps of every class, at least 2.
pub(crate) fn layout(max_heap_size: usize, window: usize, pool_size: u64) -> (usize, usize) {
    if pool_size == 0 {
        return (ARENA_SLOTS, window + AUTO_SPARE);
    }
    let arena = ((pool_size / 8 / ARENA_SLOT as u64) as usize).clamp(2, ARENA_SLOTS);
    let rest = pool_size.saturating_sub((arena * ARENA_SLOT) as u64);
    let per_set: u64 = class_sizes(max_heap_size).iter().map(|&s| s as u64).sum();
    (arena, ((rest / per_set.max(1)) as usize).max(2))
}

pub(crate) struct Pools {
    classes: Vec<SlotPool>,
    arena_pool: SlotPool,
    arena: Option<SlotArena>,
    fallback: Option<String>,
    /// What the pools were made for, to make them again from another provider.
    max_heap_size: usize,
    layout: (usize, usize),
}

impl Pools {
    /// Allocates (and pre-faults) every pool in anonymous memory under `hugepages`.
    pub fn new(
        max_heap_size: usize,
        layout: (usize, usize),
        hugepages: HugepagePolicy,
    ) -> Result<Self, RegionError> {
        Self::with_provider(max_heap_size, layout, &Anonymous(hugepages))
    }

    /// Allocates (and pre-faults) every pool from `provider`: `layout` is (arena slots,
    /// heaps per class).
    pub fn with_provider(
        max_heap_size: usize,
        layout: (usize, usize),
        provider: &dyn MemoryProvider,
    ) -> Result<Self, RegionError> {
        let (arena_slots, slots) = layout;
        let pool = |slot_size, slots| {
            let config = PoolConfig {
                slot_size,
                slots,
                hugepages: HugepagePolicy::Off,
            };
            SlotPool::with_provider(&config, provider)
        };
        let classes = class_sizes(max_heap_size)
            .into_iter()
            .map(|s| pool(s, slots))
            .collect::<Result<Vec<_>, _>>()?;
        let arena_pool = pool(ARENA_SLOT, arena_slots)?;
        let fallback = classes
            .iter()
            .chain([&arena_pool])
            .find_map(|p| p.fallback_reason().map(str::to_owned));
        Ok(Self {
            classes,
            arena_pool,
            arena: None,
            fallback,
            max_heap_size,
            layout,
        })
    }

    /// The same pools, made again from `provider`.
    pub fn remake(&self, provider: &dyn MemoryProvider) -> Result<Self, RegionError> {
        Self::with_provider(self.max_heap_size, self.layout, provider)
    }

    /// A free slot of at least `size` bytes, or `None` when every class that could hold
    /// it is in use.
    pub fn slot(&self, size: usize) -> Option<Slot> {
        self.classes
            .iter()
            .filter(|p| p.slot_size() >= size)
            .find_map(SlotPool::try_acquire)
    }

    /// `bytes` copied into pool memory of their own (the arena, or a class slot when
    /// the arena has no room), or `None` when no pool has room.
    pub fn copy(&mut self, bytes: &[u8]) -> Option<gst::Memory> {
        let len = bytes.len();
        if len <= ARENA_SLOT {
            if self.arena.as_ref().is_none_or(|a| a.remaining() < len) {
                self.arena = self.arena_pool.try_acquire().map(SlotArena::new);
            }
            if let Some(a) = self.arena.as_mut() {
                a.spare_mut()[..len].copy_from_slice(bytes);
                return Some(a.commit(len));
            }
        }
        let mut slot = self.slot(len)?;
        slot.as_mut_full()[..len].copy_from_slice(bytes);
        slot.set_len(len);
        Some(slot_into_memory(slot))
    }

    /// The accounting of every pool, added up.
    pub fn stats(&self) -> PoolStats {
        self.classes
            .iter()
            .chain([&self.arena_pool])
            .map(SlotPool::stats)
            .fold(PoolStats::default(), |a, s| PoolStats {
                slots: a.slots + s.slots,
                slot_size: a.slot_size.max(s.slot_size),
                in_use: a.in_use + s.in_use,
                high_water: a.high_water + s.high_water,
                exhausted: a.exhausted + s.exhausted,
            })
    }

    /// What backs the pools (`system` or `hugepage`).
    pub fn kind(&self) -> firehose_core::MemoryKind {
        self.arena_pool.kind()
    }

    /// Why hugepages were not used under `hugepages=auto`, if they were not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Bytes of pool memory allocated.
    pub fn bytes(&self) -> u64 {
        self.classes
            .iter()
            .chain([&self.arena_pool])
            .map(|p| {
                let s = p.stats();
                (s.slots * s.slot_size) as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_up_to_the_max() {
        assert_eq!(class_sizes(1000), vec![1000]);
        assert_eq!(class_sizes(16 << 10), vec![16 << 10]);
        assert_eq!(
            class_sizes(1 << 20),
            vec![16 << 10, 64 << 10, 256 << 10, 1 << 20]
        );
        assert_eq!(
            class_sizes(3 << 20),
            vec![16 << 10, 64 << 10, 256 << 10, 1 << 20, 3 << 20]
        );
    }

    #[test]
    fn pool_size_layout() {
        assert_eq!(layout(1 << 20, 4, 0), (ARENA_SLOTS, 8));
        let set: u64 = (16 << 10) + (64 << 10) + (256 << 10) + (1 << 20);
        // 64 MiB: 8 MiB of arena, the rest in sets of classes.
        let p = 64u64 << 20;
        assert_eq!(
            layout(1 << 20, 4, p),
            (32, ((p - (8 << 20)) / set) as usize)
        );
        // 10 sets and their eighth: a smaller arena.
        let p = 10 * set * 8 / 7;
        assert_eq!(layout(1 << 20, 4, p).1, 10);
        assert_eq!(layout(1 << 20, 4, 1), (2, 2));
    }

    #[test]
    fn falls_back_to_larger_classes_then_gives_up() {
        gst::init().unwrap();
        let p = Pools::new(64 << 10, (2, 2), HugepagePolicy::Off).unwrap();
        let held: Vec<Slot> = (0..4).map(|_| p.slot(100).unwrap()).collect();
        assert_eq!(held[2].capacity(), 64 << 10, "the larger class serves");
        assert!(p.slot(100).is_none());
        assert!(p.slot((64 << 10) + 1).is_none(), "nothing holds that");
        drop(held);
        assert!(p.slot(100).is_some());
    }

    #[test]
    fn small_copies_share_arena_slots() {
        gst::init().unwrap();
        let mut p = Pools::new(64 << 10, (2, 2), HugepagePolicy::Off).unwrap();
        let a = p.copy(b"abc").unwrap();
        let b = p.copy(b"defg").unwrap();
        assert_eq!(a.map_readable().unwrap().as_slice(), b"abc");
        assert_eq!(b.map_readable().unwrap().as_slice(), b"defg");
        assert_eq!(p.stats().in_use, 1, "one arena slot for both");
        let big = p.copy(&vec![7u8; ARENA_SLOT + 1]);
        assert!(big.is_none(), "larger than the arena and every class");
    }
}
