//! The segments a producer can name: every memfd region cut for it, by upstream's pool
//! (from the provider `fhshmsink` proposes) or by its own copy pool, recorded with its
//! address range and a duplicate of its descriptor, and forgotten when it is unmapped.
//! No GStreamer.
//!
//! Why a registry: a buffer arriving at the sink says nothing of where its memory came
//! from but its address. Each region registers itself here when it is made (by
//! [`SegmentProvider`], the provider the sink proposes upstream) and leaves when it is
//! unmapped (a release hook on the region), so an address maps to (segment, offset)
//! exactly while the segment exists. The sink's streaming thread keeps a [`Lookup`]
//! copy, refreshed only when the registry's generation moves: no lock per buffer.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use firehose_core::memory::{MemoryKind, MemoryRegion, RegionError};
use firehose_core::provider::{MemoryProvider, SharedSegment};

/// One live segment.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Its id on the wire.
    pub id: u32,
    /// Address of its first byte in this process.
    pub base: usize,
    /// Its size in bytes.
    pub len: usize,
    /// Its memfd (a duplicate, so that it can be passed on while the region lives).
    pub fd: Arc<OwnedFd>,
}

#[derive(Debug, Default)]
struct Inner {
    live: Vec<Segment>,
    next_id: u32,
}

/// The live segments of one producer.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
    generation: AtomicU64,
}

impl Registry {
    /// A new, empty registry.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Changes whenever a segment comes or goes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The live segments now.
    pub fn live(&self) -> Vec<Segment> {
        firehose_core::sync::lock(&self.inner).live.clone()
    }

    fn add(&self, base: usize, len: usize, fd: OwnedFd) -> u32 {
        let mut g = firehose_core::sync::lock(&self.inner);
        let id = g.next_id;
        g.next_id = g.next_id.wrapping_add(1);
        g.live.push(Segment {
            id,
            base,
            len,
            fd: Arc::new(fd),
        });
        self.generation.fetch_add(1, Ordering::AcqRel);
        id
    }

    fn remove(&self, id: u32) {
        firehose_core::sync::lock(&self.inner)
            .live
            .retain(|s| s.id != id);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Shared memfd segments that record themselves in a [`Registry`]: the provider
/// `fhshmsink` proposes upstream and cuts its own copy pool from.
#[derive(Debug, Clone)]
pub struct SegmentProvider {
    inner: SharedSegment,
    registry: Weak<Registry>,
}

impl SegmentProvider {
    /// Segments named `name` in `/proc/<pid>/fd`, recorded in `registry`.
    pub fn new(name: &str, registry: &Arc<Registry>) -> Self {
        Self {
            inner: SharedSegment::new(name),
            registry: Arc::downgrade(registry),
        }
    }
}

impl MemoryProvider for SegmentProvider {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Shared
    }

    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError> {
        let region = self.inner.allocate(len)?;
        let Some(registry) = self.registry.upgrade() else {
            // The sink is gone: plain shared memory, nobody to name it to.
            return Ok(region);
        };
        let fd = region
            .fd()
            .expect("a shared segment has a descriptor")
            .try_clone_to_owned()
            .map_err(|e| RegionError::Provider {
                reason: format!("could not duplicate a segment's descriptor: {e} (ulimit -n?)"),
            })?;
        let id = registry.add(region.as_ptr() as usize, region.len(), fd);
        let weak = Arc::downgrade(&registry);
        Ok(region.on_release(Box::new(move |_, _| {
            if let Some(r) = weak.upgrade() {
                r.remove(id);
            }
        })))
    }
}

/// The streaming thread's copy of the registry: address → (segment, offset).
#[derive(Debug, Default)]
pub struct Lookup {
    generation: u64,
    ranges: Vec<(usize, usize, u32)>,
    synced: bool,
}

impl Lookup {
    /// Re-reads `registry` if it changed; the live segments when it did (for the caller
    /// to announce and retire), `None` when nothing changed.
    pub fn refresh(&mut self, registry: &Registry) -> Option<Vec<Segment>> {
        let g = registry.generation();
        if self.synced && g == self.generation {
            return None;
        }
        let live = registry.live();
        self.ranges.clear();
        self.ranges
            .extend(live.iter().map(|s| (s.base, s.base + s.len, s.id)));
        self.generation = g;
        self.synced = true;
        Some(live)
    }

    /// The segment and offset of `len` bytes at `ptr`, if they lie wholly in one.
    pub fn find(&self, ptr: usize, len: usize) -> Option<(u32, u64)> {
        let end = ptr.checked_add(len)?;
        self.ranges
            .iter()
            .find(|&&(b, e, _)| ptr >= b && end <= e)
            .map(|&(b, _, id)| (id, (ptr - b) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};

    #[test]
    fn pools_cut_from_the_provider_are_named_while_they_live() {
        let reg = Registry::new();
        let provider = SegmentProvider::new("fhshm-test", &reg);
        let mut lookup = Lookup::default();
        assert_eq!(lookup.refresh(&reg).unwrap().len(), 0);
        assert!(lookup.refresh(&reg).is_none(), "nothing changed");
        let pool = SlotPool::with_provider(
            &PoolConfig {
                slot_size: 4096,
                slots: 4,
                hugepages: HugepagePolicy::Off,
            },
            &provider,
        )
        .unwrap();
        let live = lookup.refresh(&reg).expect("a segment came");
        assert_eq!(live.len(), 1);
        let mut slot = pool.try_acquire().unwrap();
        let p = slot.as_mut_full().as_ptr() as usize;
        let (id, off) = lookup.find(p, 100).expect("in the segment");
        assert_eq!(id, live[0].id);
        assert_eq!(off, p as u64 - live[0].base as u64);
        assert!(lookup.find(p, 1 << 30).is_none(), "runs past the segment");
        assert!(lookup.find(usize::MAX - 1, 10).is_none());
        assert_eq!(
            crate::wire::file_size(std::os::fd::AsFd::as_fd(&*live[0].fd)).unwrap(),
            live[0].len as u64
        );
        drop(slot);
        drop(pool);
        assert!(lookup.refresh(&reg).unwrap().is_empty(), "unmapped: gone");
        assert!(lookup.find(p, 100).is_none());
    }
}
