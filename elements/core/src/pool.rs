//! A fixed-slot pool over one [`MemoryRegion`].
//!
//! Slots are handed out as RAII [`Slot`]s that give themselves back on drop, so a slot
//! wrapped in a `gst::Memory` returns to the pool when the last reference to that memory
//! (sub-memories included) is gone. One lock is taken per acquire and per release: the
//! pool is used once per *batch*, never per packet.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::memory::{HugepagePolicy, MemoryKind, MemoryRegion, RegionError};
use crate::provider::{Anonymous, MemoryProvider};

/// How to build a pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Bytes per slot (rounded up to a multiple of 64 so slots stay cache-line aligned).
    pub slot_size: usize,
    /// Number of slots.
    pub slots: usize,
    /// Hugepage policy for the backing region.
    pub hugepages: HugepagePolicy,
}

/// A snapshot of a pool's accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slots in the pool.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_size: usize,
    /// Slots currently handed out.
    pub in_use: usize,
    /// The most slots ever handed out at once.
    pub high_water: usize,
    /// How many times an acquire found the pool empty.
    pub exhausted: u64,
}

struct Inner {
    region: MemoryRegion,
    slot_size: usize,
    slots: usize,
    free: Mutex<Vec<u32>>,
    returned: Condvar,
    /// Threads waiting in [`SlotPool::acquire_blocking`] (changed and read under `free`'s
    /// lock): a slot returned when nobody waits makes no `futex` call.
    waiting: AtomicUsize,
    in_use: AtomicUsize,
    high_water: AtomicUsize,
    exhausted: AtomicU64,
}

/// A pool of equal, preallocated slots. Cheap to clone (shared).
#[derive(Clone)]
pub struct SlotPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SlotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPool")
            .field("stats", &self.stats())
            .field("kind", &self.kind())
            .finish()
    }
}

impl SlotPool {
    /// Whether `other` is this pool (a clone of it), not another with the same shape.
    pub fn is(&self, other: &SlotPool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Allocates and pre-faults `slots * slot_size` bytes of anonymous memory under
    /// `config.hugepages`.
    pub fn new(config: &PoolConfig) -> Result<Self, RegionError> {
        Self::with_provider(config, &Anonymous(config.hugepages))
    }

    /// Allocates and pre-faults `slots * slot_size` bytes from `provider` (whose kind
    /// wins over `config.hugepages`): how a source receives into memory an element
    /// downstream asked for ([`crate::alloc`]).
    pub fn with_provider(
        config: &PoolConfig,
        provider: &dyn MemoryProvider,
    ) -> Result<Self, RegionError> {
        let slot_size = config.slot_size.max(1).next_multiple_of(64);
        let slots = config.slots.max(1);
        let region: MemoryRegion = provider.allocate(slot_size * slots)?;
        // Hand out low slots first: they were the most recently touched.
        let free: Vec<u32> = (0..slots as u32).rev().collect();
        Ok(Self {
            inner: Arc::new(Inner {
                region,
                slot_size,
                slots,
                free: Mutex::new(free),
                returned: Condvar::new(),
                waiting: AtomicUsize::new(0),
                in_use: AtomicUsize::new(0),
                high_water: AtomicUsize::new(0),
                exhausted: AtomicU64::new(0),
            }),
        })
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size
    }

    /// What backs the pool.
    pub fn kind(&self) -> MemoryKind {
        self.inner.region.kind()
    }

    /// The shared segment's descriptor, for a pool of [`MemoryKind::Shared`] memory.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.region.fd()
    }

    /// Why hugepages were not used under `hugepages=auto`, if they were not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.region.fallback_reason()
    }

    /// Takes a free slot, or `None` (counted as `exhausted`) when all are in use.
    pub fn try_acquire(&self) -> Option<Slot> {
        let idx = crate::sync::lock(&self.inner.free).pop();
        match idx {
            Some(i) => Some(self.hand_out(i)),
            None => {
                self.inner.exhausted.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Waits for a free slot until one is returned or `cancel` becomes true.
    ///
    /// The wait re-checks `cancel` at least every `poll` even if nobody calls
    /// [`SlotPool::wake_waiters`], so a lost wake-up can delay but never hang a caller.
    pub fn acquire_blocking(&self, cancel: &AtomicBool, poll: Duration) -> Option<Slot> {
        let mut free = crate::sync::lock(&self.inner.free);
        let mut counted = false;
        loop {
            if let Some(i) = free.pop() {
                drop(free);
                return Some(self.hand_out(i));
            }
            if !counted {
                self.inner.exhausted.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            if cancel.load(Ordering::Acquire) {
                return None;
            }
            self.inner.waiting.fetch_add(1, Ordering::Relaxed);
            free = self
                .inner
                .returned
                .wait_timeout(free, poll)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            self.inner.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Wakes every thread blocked in [`SlotPool::acquire_blocking`] so it can see its
    /// cancel flag.
    pub fn wake_waiters(&self) {
        let _guard = crate::sync::lock(&self.inner.free);
        self.inner.returned.notify_all();
    }

    /// The pool's accounting now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            slots: self.inner.slots,
            slot_size: self.inner.slot_size,
            in_use: self.inner.in_use.load(Ordering::Relaxed),
            high_water: self.inner.high_water.load(Ordering::Relaxed),
            exhausted: self.inner.exhausted.load(Ordering::Relaxed),
        }
    }

    fn hand_out(&self, index: u32) -> Slot {
        let n = self.inner.in_use.fetch_add(1, Ordering::Relaxed) + 1;
        self.inner.high_water.fetch_max(n, Ordering::Relaxed);
        Slot {
            inner: self.inner.clone(),
            index,
            len: self.inner.slot_size,
        }
    }
}

/// One slot of a [`SlotPool`], exclusively owned; returns itself to the pool on drop.
///
/// `len` is the number of valid bytes (initially the whole slot); `AsRef<[u8]>` shows
/// only those, so a slot wrapped as `gst::Memory` has the size of what was written.
pub struct Slot {
    inner: Arc<Inner>,
    index: u32,
    len: usize,
}

impl Slot {
    /// Capacity of the slot in bytes.
    pub fn capacity(&self) -> usize {
        self.inner.slot_size
    }

    /// Valid bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no byte is valid.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the number of valid bytes (clamped to the capacity).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.inner.slot_size);
    }

    /// Index of the slot in its pool.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// What backs the slot.
    pub fn kind(&self) -> MemoryKind {
        self.inner.region.kind()
    }

    /// The whole slot, for filling (e.g. as recvmmsg's iovecs).
    pub fn as_mut_full(&mut self) -> &mut [u8] {
        // SAFETY: slot `index` lies within the region, and the pool gives each index to
        // exactly one live Slot, so this is the only reference to these bytes.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.inner
                    .region
                    .as_ptr()
                    .add(self.index as usize * self.inner.slot_size),
                self.inner.slot_size,
            )
        }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: as in as_mut_full; shared access through &self.
        unsafe {
            std::slice::from_raw_parts(
                self.inner
                    .region
                    .as_ptr()
                    .add(self.index as usize * self.inner.slot_size),
                self.len,
            )
        }
    }
}

impl AsRef<[u8]> for Slot {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for Slot {
    fn as_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.as_mut_full()[..len]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut free = crate::sync::lock(&self.inner.free);
        free.push(self.index);
        self.inner.in_use.fetch_sub(1, Ordering::Relaxed);
        // Read under the lock: a waiter counts itself under it before it waits, so
        // either it is counted here or it finds this slot when it looks. One wake-up
        // per waiter: slots returned beyond as many as wait need none (a producer that
        // waits for its consumer's releases gets them in bursts).
        let waiting = free.len() <= self.inner.waiting.load(Ordering::Relaxed);
        drop(free);
        if waiting {
            self.inner.returned.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(slots: usize) -> SlotPool {
        SlotPool::new(&PoolConfig {
            slot_size: 1000,
            slots,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap()
    }

    #[test]
    fn slots_are_disjoint_and_return_on_drop() {
        let p = pool(3);
        assert_eq!(p.slot_size(), 1024);
        let mut a = p.try_acquire().unwrap();
        let mut b = p.try_acquire().unwrap();
        a.as_mut_full().fill(1);
        b.as_mut_full().fill(2);
        assert!(a.as_ref().iter().all(|&x| x == 1));
        assert!(b.as_ref().iter().all(|&x| x == 2));
        assert_eq!(p.stats().in_use, 2);
        drop(a);
        assert_eq!(p.stats().in_use, 1);
        drop(b);
        let s = p.stats();
        assert_eq!((s.in_use, s.high_water, s.exhausted), (0, 2, 0));
    }

    #[test]
    fn exhaustion_is_counted() {
        let p = pool(2);
        let a = p.try_acquire().unwrap();
        let _b = p.try_acquire().unwrap();
        assert!(p.try_acquire().is_none());
        assert!(p.try_acquire().is_none());
        assert_eq!(p.stats().exhausted, 2);
        drop(a);
        assert!(p.try_acquire().is_some());
    }

    #[test]
    fn blocking_acquire_gets_a_returned_slot() {
        let p = pool(1);
        let a = p.try_acquire().unwrap();
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            let cancel = AtomicBool::new(false);
            p2.acquire_blocking(&cancel, Duration::from_secs(5))
                .is_some()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        assert!(t.join().unwrap());
    }

    #[test]
    fn every_waiter_is_woken_by_a_returned_slot_not_by_its_poll() {
        // Waiters poll every 30 s: only a wake-up gets them their slots within the test.
        let p = pool(4);
        let held: Vec<Slot> = (0..4).map(|_| p.try_acquire().unwrap()).collect();
        let start = std::time::Instant::now();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let cancel = AtomicBool::new(false);
                    p.acquire_blocking(&cancel, Duration::from_secs(30))
                        .is_some()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        // Returned in a burst: as many wake-ups as waiters, whatever the order.
        drop(held);
        for w in waiters {
            assert!(w.join().unwrap());
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "woken, not polled"
        );
    }

    #[test]
    fn blocking_acquire_is_cancelled() {
        let p = pool(1);
        let _a = p.try_acquire().unwrap();
        let cancel = Arc::new(AtomicBool::new(false));
        let (p2, c2) = (p.clone(), cancel.clone());
        let t = std::thread::spawn(move || p2.acquire_blocking(&c2, Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        cancel.store(true, Ordering::Release);
        p.wake_waiters();
        assert!(t.join().unwrap().is_none());
    }

    #[test]
    fn len_limits_the_visible_bytes() {
        let p = pool(1);
        let mut a = p.try_acquire().unwrap();
        a.set_len(10);
        assert_eq!(a.as_ref().len(), 10);
        a.set_len(1 << 20);
        assert_eq!(a.len(), a.capacity());
    }
}
