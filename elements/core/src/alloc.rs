//! The consumer chooses the memory: an element that needs a memory kind (shared segments
//! for the shared-memory transport, pinned pages for the GPU upload) proposes a
//! [`ProviderAllocator`] in its `propose_allocation` ([`propose`]); a source that owns a
//! pool finds it in its `decide_allocation` ([`proposed_provider`]) and cuts its pool
//! from that provider ([`crate::SlotPool::with_provider`]), so the kernel or the NIC
//! writes straight into the memory the consumer wants. This is GStreamer's standard
//! allocation query: no custom query, nothing called across elements but the query.
//!
//! The allocator is a plain `GstAllocator` to C and Python (its type name,
//! `GstFhProviderAllocator`, says whose it is); its `alloc` serves an element that
//! does not keep a pool of its own (`GstBaseSrc`'s default with no pool: `audiotestsrc`,
//! `filesrc`): a region of the provider's kind, which goes back to a small free list of
//! the allocator when the memory is freed ([`SPARE_REGIONS`] at most: never more than were in use at once), so that a stream
//! of such buffers reuses a bounded set of regions (shared segments: no `memfd_create`,
//! `mmap` or `munmap` per buffer) instead of mapping one per buffer.

use crate::stats::names;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use crate::memory::MemoryRegion;
use crate::provider::MemoryProvider;

/// Most freed regions a [`ProviderAllocator`] keeps for reuse; one freed when this many
/// are kept is unmapped.
pub const SPARE_REGIONS: usize = 128;

/// Regions freed by the allocator's memories, kept for the next `alloc` of a like size.
#[derive(Default)]
struct Spare {
    regions: Mutex<Vec<MemoryRegion>>,
    /// Regions mapped by the provider, and allocations served from the free list.
    made: AtomicU64,
    reused: AtomicU64,
}

impl Spare {
    /// A kept region of at least `len` bytes and not more than twice that (plus a page):
    /// a small allocation does not pin a large region.
    fn take(&self, len: usize) -> Option<MemoryRegion> {
        let mut v = crate::sync::lock(&self.regions);
        let most = len
            .saturating_mul(2)
            .saturating_add(crate::memory::page_size());
        let i = v.iter().rposition(|r| r.len() >= len && r.len() <= most)?;
        Some(v.swap_remove(i))
    }

    fn put(&self, region: MemoryRegion) {
        let mut v = crate::sync::lock(&self.regions);
        if v.len() < SPARE_REGIONS {
            v.push(region);
        }
    }
}

mod imp {
    use super::*;

    /// The provider behind a [`super::ProviderAllocator`]; set once, right after
    /// construction.
    #[derive(Default)]
    pub struct ProviderAllocator {
        pub(super) provider: OnceLock<Arc<dyn MemoryProvider>>,
        pub(super) spare: Arc<Spare>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for ProviderAllocator {
        const NAME: &'static str = "GstFhProviderAllocator";
        // Each plugin links its own copy of this crate: the second one loaded registers
        // "GstFhProviderAllocator-1" instead of failing, and allocators of either copy
        // are recognised by name and by the provider they carry as qdata.
        const ALLOW_NAME_CONFLICT: bool = true;
        type Type = super::ProviderAllocator;
        type ParentType = gst::Allocator;
    }

    impl ObjectImpl for ProviderAllocator {}
    impl GstObjectImpl for ProviderAllocator {}

    // SAFETY: `alloc` returns a new GstMemory it owns (or NULL on failure) and never
    // touches `params` beyond reading it; `free` is never reached, since the memories it
    // returns are wrapped ones that free themselves.
    unsafe impl AllocatorImpl for ProviderAllocator {
        unsafe fn alloc(
            &self,
            size: usize,
            _params: &gst::AllocationParams,
        ) -> *mut gst::ffi::GstMemory {
            let Some(provider) = self.provider.get() else {
                return std::ptr::null_mut();
            };
            let spare = &self.spare;
            let region = match spare.take(size.max(1)) {
                Some(r) => {
                    spare.reused.fetch_add(1, Ordering::Relaxed);
                    Ok(r)
                }
                None => provider.allocate(size.max(1)).inspect(|_| {
                    spare.made.fetch_add(1, Ordering::Relaxed);
                }),
            };
            match region {
                Ok(region) => {
                    let mem = gst::Memory::from_mut_slice(RegionBytes {
                        region: Some(region),
                        size,
                        spare: Arc::downgrade(spare),
                    });
                    // Our reference goes to the caller, as alloc must hand it over.
                    glib::translate::IntoGlibPtr::into_glib_ptr(mem)
                }
                Err(_) => std::ptr::null_mut(),
            }
        }
    }

    /// A whole region as a memory's bytes (its first `size`); the region goes back to
    /// the allocator's free list when the memory is freed.
    struct RegionBytes {
        /// Always `Some` until drop.
        region: Option<MemoryRegion>,
        size: usize,
        spare: Weak<Spare>,
    }

    impl RegionBytes {
        fn ptr(&self) -> *mut u8 {
            self.region
                .as_ref()
                .map_or(std::ptr::null_mut(), |r| r.as_ptr())
        }
    }

    impl AsRef<[u8]> for RegionBytes {
        fn as_ref(&self) -> &[u8] {
            // SAFETY: the region is mapped for `len() >= size` bytes and owned here.
            unsafe { std::slice::from_raw_parts(self.ptr(), self.size) }
        }
    }

    impl AsMut<[u8]> for RegionBytes {
        fn as_mut(&mut self) -> &mut [u8] {
            // SAFETY: as above; `&mut self` is the only access.
            unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.size) }
        }
    }

    impl Drop for RegionBytes {
        fn drop(&mut self) {
            // The memory is freed: nobody reads these bytes any more, so the region may
            // serve the next allocation (kept mapped, and for a shared segment still
            // named to the processes it was passed to).
            if let (Some(r), Some(spare)) = (self.region.take(), self.spare.upgrade()) {
                spare.put(r);
            }
        }
    }
}

glib::wrapper! {
    /// A `GstAllocator` that carries a [`MemoryProvider`] through the allocation query.
    pub struct ProviderAllocator(ObjectSubclass<imp::ProviderAllocator>) @extends gst::Allocator, gst::Object;
}

impl ProviderAllocator {
    /// An allocator for `provider`'s memory.
    pub fn new(provider: Arc<dyn MemoryProvider>) -> Self {
        let a: Self = glib::Object::new();
        // SAFETY: the qdata under this key is always an `Arc<dyn MemoryProvider>`.
        unsafe { a.set_qdata(provider_quark(), provider.clone()) };
        let _ = a.imp().provider.set(provider);
        a
    }

    /// Regions its `alloc` had the provider map, and allocations it served from regions
    /// freed before (the free list of [`SPARE_REGIONS`]).
    pub fn regions(&self) -> (u64, u64) {
        let s = &self.imp().spare;
        (
            s.made.load(Ordering::Relaxed),
            s.reused.load(Ordering::Relaxed),
        )
    }

    /// The provider it carries.
    pub fn provider(&self) -> Arc<dyn MemoryProvider> {
        self.imp()
            .provider
            .get()
            .cloned()
            .expect("set by ProviderAllocator::new")
    }
}

/// The qdata key under which a [`ProviderAllocator`] keeps its provider.
fn provider_quark() -> glib::Quark {
    glib::Quark::from_str("firehose-memory-provider")
}

/// The provider `allocator` carries, if it is a [`ProviderAllocator`] of any copy of
/// this crate (each plugin links its own: the type of the other copy is another GType,
/// named with a `-1`).
fn provider_of(allocator: &gst::Allocator) -> Option<Arc<dyn MemoryProvider>> {
    if !allocator
        .type_()
        .name()
        .starts_with("GstFhProviderAllocator")
    {
        return None;
    }
    // SAFETY: allocators of that type keep an `Arc<dyn MemoryProvider>` under this key
    // (ProviderAllocator::new), the same type in every copy of this crate.
    unsafe {
        allocator
            .qdata::<Arc<dyn MemoryProvider>>(provider_quark())
            .map(|p| p.as_ref().clone())
    }
}

/// Adds `provider`'s allocator to an allocation query, first (from a downstream element's
/// `propose_allocation`).
pub fn propose(query: &mut gst::query::Allocation, provider: Arc<dyn MemoryProvider>) {
    let allocator = ProviderAllocator::new(provider);
    let params = gst::AllocationParams::default();
    query.add_allocation_param(Some(&allocator), params);
    if query.allocation_params().len() > 1 {
        query.set_nth_allocation_param(0, Some(&allocator), params);
    }
}

/// Has `pad` answer the allocation queries that reach it with `provider`, as a consumer
/// element's `propose_allocation` does: for tests, and for an application that wants a
/// source to receive into a kind of memory with a stock element (appsink) downstream.
pub fn propose_on(pad: &gst::Pad, provider: Arc<dyn MemoryProvider>) -> Option<gst::PadProbeId> {
    pad.add_probe(
        gst::PadProbeType::QUERY_DOWNSTREAM,
        move |_, info| match info.query_mut().map(|q| q.view_mut()) {
            Some(gst::QueryViewMut::Allocation(q)) => {
                propose(q, provider.clone());
                gst::PadProbeReturn::Handled
            }
            _ => gst::PadProbeReturn::Ok,
        },
    )
}

/// What downstream proposed in an answered allocation query: a provider to cut the pool
/// from, or the name of a foreign allocator this source cannot receive into (to say so).
#[derive(Debug)]
pub enum Proposal {
    /// Nothing, or system memory: the source keeps its own memory.
    Nothing,
    /// A Firehose memory provider.
    Provider(Arc<dyn MemoryProvider>),
    /// Another allocator (by name): the source cannot have the kernel write into it.
    Foreign(String),
}

/// Reads downstream's proposal from an answered allocation query (in a source's
/// `decide_allocation`).
pub fn proposed_provider(query: &gst::query::Allocation) -> Proposal {
    let mut foreign = None;
    for (allocator, _) in query.allocation_params() {
        let Some(allocator) = allocator else { continue };
        if let Some(p) = provider_of(&allocator) {
            return Proposal::Provider(p);
        }
        let name = memory_type(&allocator);
        if name.as_deref() != Some("SystemMemory") && foreign.is_none() {
            let name = name.as_deref().unwrap_or("no memory type");
            foreign = Some(format!("{} ({name})", allocator.type_().name()));
        }
    }
    foreign.map_or(Proposal::Nothing, Proposal::Foreign)
}

/// The memory type `allocator` names, if it names one: stock `shmsink`'s allocator leaves
/// it NULL, which `gst::Allocator::memory_type` does not expect (it reads the string
/// without a check and crashes).
fn memory_type(allocator: &gst::Allocator) -> Option<String> {
    use glib::translate::ToGlibPtr;
    let a: *const gst::ffi::GstAllocator = allocator.to_glib_none().0;
    // SAFETY: `a` is a live allocator for the duration of this call (we hold a
    // reference); `mem_type` is a public field, NULL or a NUL-terminated string that
    // lives as long as the allocator.
    unsafe {
        let p = (*a).mem_type;
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Says that `element` cannot receive into the foreign allocator `name` downstream
/// proposed.
fn warn_foreign(element: &gst::Element, name: &str) {
    gst::element_warning!(
        element,
        gst::ResourceError::Settings,
        (
            "downstream proposes memory from {}, which {} cannot receive into; it receives \
             into its own pool and downstream copies if it must",
            name,
            element.name()
        )
    );
}

/// The provider an element that owns memory of kind `current` should switch to after
/// downstream's answer `query`: `None` to keep its memory (nothing proposed, the same kind
/// already, or a foreign allocator, which gets a warning on `element` saying why it is not
/// used).
pub fn decide_provider(
    element: &gst::Element,
    query: &gst::query::Allocation,
    current: crate::MemoryKind,
) -> Option<Arc<dyn MemoryProvider>> {
    match proposed_provider(query) {
        Proposal::Provider(p) if p.kind() != current => Some(p),
        Proposal::Foreign(name) => {
            warn_foreign(element, &name);
            None
        }
        _ => None,
    }
}

/// The element error (and the loggable error to return) for a provider that could not
/// make the memory downstream asked for.
pub fn provider_failed(
    element: &gst::Element,
    provider: &dyn MemoryProvider,
    e: impl std::fmt::Display,
) -> gst::LoggableError {
    gst::element_error!(
        element,
        gst::ResourceError::NoSpaceLeft,
        (
            "could not make the pool of {} memory that downstream asked for: {}",
            provider.kind().as_str(),
            e
        )
    );
    gst::loggable_error!(gst::CAT_RUST, "no pool of the proposed memory")
}

/// A source's answer to downstream's proposal for its pool `current` (from its
/// `decide_allocation`): a new pool of the same slots cut from the proposed provider, or
/// `None` to keep `current` ([`decide_provider`]). A provider that cannot make the pool
/// is an element error naming the memory and the cause.
pub fn decide_pool(
    element: &gst::Element,
    query: &gst::query::Allocation,
    current: &crate::SlotPool,
) -> Result<Option<crate::SlotPool>, gst::LoggableError> {
    let Some(provider) = decide_provider(element, query, current.kind()) else {
        return Ok(None);
    };
    let stats = current.stats();
    let config = crate::PoolConfig {
        slot_size: stats.slot_size,
        slots: stats.slots,
        // The provider decides what backs the region.
        hugepages: crate::HugepagePolicy::Off,
    };
    crate::SlotPool::with_provider(&config, &*provider)
        .map(Some)
        .map_err(|e| provider_failed(element, &*provider, e))
}

/// For an element that is not a GstBaseSrc (which runs the query itself) but owns the
/// pool its output is cut from (the depayloaders in chunk or heap mode): asks the
/// elements downstream of `srcpad` how they want buffers of `caps` allocated, once the
/// caps are set. `None` when nobody answered.
pub fn query_downstream(
    srcpad: &gst::Pad,
    caps: &gst::Caps,
) -> Option<gst::query::Allocation<gst::Query>> {
    let mut query = gst::query::Allocation::new(Some(caps), false);
    srcpad.peer_query(&mut query).then_some(query)
}

/// For a source that cannot receive into the memory downstream proposed (its device
/// owns its receive memory): a pool of the proposed kind and the copy of each outgoing
/// buffer into one of its slots, counted. The copy is the one the brief allows: once, in
/// the source, instead of downstream copying again.
#[derive(Debug)]
pub struct CopyInto {
    pool: crate::SlotPool,
    copied: crate::stats::Counter,
    dropped: crate::stats::Counter,
}

impl CopyInto {
    /// What a source that cannot receive into downstream's memory does with an answered
    /// allocation query: `Some` (and a warning on `element` saying it copies) when a
    /// provider was proposed, with `slots` slots of `slot_size` bytes (its own batch
    /// size); `None` otherwise (a foreign allocator gets the warning of
    /// [`decide_pool`]). A provider that cannot make the pool is an element error.
    pub fn decide(
        element: &gst::Element,
        query: &gst::query::Allocation,
        why: &str,
        slot_size: usize,
        slots: usize,
    ) -> Result<Option<Self>, gst::LoggableError> {
        let provider = match proposed_provider(query) {
            Proposal::Provider(p) => p,
            Proposal::Foreign(name) => {
                warn_foreign(element, &name);
                return Ok(None);
            }
            Proposal::Nothing => return Ok(None),
        };
        let kind = provider.kind();
        let config = crate::PoolConfig {
            slot_size,
            slots: slots.max(2),
            hugepages: crate::HugepagePolicy::Off,
        };
        let pool = crate::SlotPool::with_provider(&config, &*provider)
            .map_err(|e| provider_failed(element, &*provider, e))?;
        gst::element_warning!(
            element,
            gst::ResourceError::Settings,
            (
                "downstream asks for {} memory, which {} cannot receive into ({}): each buffer is \
                 copied once into it (bytes-copied in stats)",
                kind.as_str(),
                element.name(),
                why
            )
        );
        Ok(Some(Self {
            pool,
            copied: Default::default(),
            dropped: Default::default(),
        }))
    }

    /// `buf`'s bytes copied into one slot of the proposed memory, with its metas and
    /// timestamps; `None` when no slot is free or `buf` does not fit one (counted as
    /// dropped: the caller counts it as a pool drop).
    pub fn copy(&self, buf: &gst::BufferRef) -> Option<gst::Buffer> {
        let map = buf.map_readable().ok()?;
        let Some(mut slot) = self
            .pool
            .try_acquire()
            .filter(|s| s.capacity() >= map.len())
        else {
            self.dropped.add(1);
            return None;
        };
        slot.as_mut_full()[..map.len()].copy_from_slice(&map);
        slot.set_len(map.len());
        let mut out = crate::gstmem::slot_into_buffer(slot);
        let o = out.get_mut().expect("a new buffer is writable");
        let _ = buf.copy_into(
            o,
            gst::BufferCopyFlags::FLAGS
                | gst::BufferCopyFlags::TIMESTAMPS
                | gst::BufferCopyFlags::META,
            ..,
        );
        self.copied.add(map.len() as u64);
        Some(out)
    }

    /// Bytes copied so far (`bytes-copied` in stats: [`crate::stats::names::BYTES_COPIED`]).
    pub fn bytes_copied(&self) -> u64 {
        self.copied.get()
    }

    /// Buffers that found no free slot (counted by the source as `drops-pool`).
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    /// The pool copies go into (its stats, its memory kind).
    pub fn pool(&self) -> &crate::SlotPool {
        &self.pool
    }
}

/// What a source that cannot receive into downstream's memory keeps: the [`CopyInto`]
/// its last allocation decision made, if any, applied to every outgoing buffer.
#[derive(Debug, Default)]
pub struct CopyOut {
    copy: std::sync::Mutex<Option<CopyInto>>,
    /// Whether `copy` is set: read first, so that a source nobody asked to copy takes no
    /// lock per batch.
    active: std::sync::atomic::AtomicBool,
    /// Bytes of buffers that found no free slot and went out uncopied (counted, not
    /// dropped: downstream then copies, as it would without a proposal).
    uncopied: crate::stats::Counter,
}

impl CopyOut {
    /// Bytes per slot of the copy pool by default: a batch of 64 jumbo frames (a larger
    /// batch goes out uncopied, counted).
    pub const SLOT_BYTES: usize = 1 << 20;
    /// Slots of the copy pool: buffers downstream may hold at once.
    pub const SLOTS: usize = 16;

    /// From `decide_allocation`: copies from now on, into slots of `slot_bytes` (the
    /// source's largest buffer), if downstream proposed a provider (saying so in a
    /// warning that gives `why` the source cannot receive into it).
    pub fn decide(
        &self,
        element: &gst::Element,
        query: &gst::query::Allocation,
        why: &str,
        slot_bytes: usize,
    ) -> Result<(), gst::LoggableError> {
        let c = CopyInto::decide(element, query, why, slot_bytes, Self::SLOTS)?;
        let mut guard = self.copy.lock().unwrap_or_else(|e| e.into_inner());
        self.active
            .store(c.is_some(), std::sync::atomic::Ordering::Release);
        *guard = c;
        Ok(())
    }

    /// `buf`, copied into downstream's memory when it asked for some and a slot is free;
    /// as it is otherwise (counted in `bytes-uncopied` when it asked).
    pub fn out(&self, buf: gst::Buffer) -> gst::Buffer {
        if !self.active.load(std::sync::atomic::Ordering::Acquire) {
            return buf;
        }
        let guard = self.copy.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = guard.as_ref() else {
            return buf;
        };
        c.copy(&buf).unwrap_or_else(|| {
            self.uncopied.add(buf.size() as u64);
            buf
        })
    }

    /// Adds `bytes-copied`, `bytes-uncopied` and `memory-copied-into` to `s`: 0, 0 and
    /// `none` while nothing is copied (downstream proposed no memory), so that the keys
    /// are the same whichever way the source runs.
    pub fn append_stats(&self, s: &mut gst::Structure) {
        match self.copy.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(c) => {
                s.set(crate::stats::names::BYTES_COPIED, c.bytes_copied());
                s.set(names::BYTES_UNCOPIED, self.uncopied.get());
                s.set("memory-copied-into", c.pool().kind().as_str());
            }
            None => {
                s.set(crate::stats::names::BYTES_COPIED, 0u64);
                s.set("bytes-uncopied", 0u64);
                s.set("memory-copied-into", crate::stats::NOT_KNOWN);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HugepagePolicy;
    use crate::provider::{Anonymous, SharedSegment};
    use crate::MemoryKind;

    #[test]
    fn a_proposed_provider_comes_back_from_the_query() {
        gst::init().unwrap();
        let caps = gst::Caps::new_empty_simple("application/x-test");
        let mut q = gst::query::Allocation::new(Some(&caps), true);
        assert!(matches!(proposed_provider(&q), Proposal::Nothing));
        propose(&mut q, Arc::new(SharedSegment::new("firehose-test")));
        match proposed_provider(&q) {
            Proposal::Provider(p) => assert_eq!(p.kind(), MemoryKind::Shared),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn memory_allocated_one_at_a_time_reuses_one_region() {
        gst::init().unwrap();
        let a = ProviderAllocator::new(Arc::new(SharedSegment::new("firehose-test")));
        let mut first = None;
        for i in 0..300u32 {
            let mut m = a.alloc(4000, None).unwrap();
            {
                let mut map = m.get_mut().unwrap().map_writable().unwrap();
                map[..4].copy_from_slice(&i.to_le_bytes());
                first.get_or_insert(map.as_ptr() as usize);
                assert_eq!(map.as_ptr() as usize, first.unwrap(), "the same region");
            }
        }
        assert_eq!(a.regions(), (1, 299), "one region made, reused 299 times");
        // Several alive at once: as many regions as are alive, and no more after.
        let held: Vec<gst::Memory> = (0..10).map(|_| a.alloc(4000, None).unwrap()).collect();
        drop(held);
        let held: Vec<gst::Memory> = (0..10).map(|_| a.alloc(4000, None).unwrap()).collect();
        assert_eq!(a.regions().0, 10);
        // A much larger size is not served from small regions, nor a small one from it.
        let big = a.alloc(1 << 20, None).unwrap();
        assert_eq!(a.regions().0, 11);
        drop(big);
        let _small = a.alloc(100, None).unwrap();
        assert_eq!(a.regions().0, 12, "100 B does not pin the 1 MiB region");
        drop(held);
    }

    /// An allocator that, like stock `shmsink`'s, names no memory type.
    mod untyped {
        use gst::glib;
        use gst::subclass::prelude::*;

        #[derive(Default)]
        pub struct Untyped;

        #[glib::object_subclass]
        impl ObjectSubclass for Untyped {
            const NAME: &'static str = "GstFhTestUntypedAllocator";
            type Type = super::UntypedAllocator;
            type ParentType = gst::Allocator;
        }

        impl ObjectImpl for Untyped {}
        impl GstObjectImpl for Untyped {}
        // SAFETY: the default implementations (the parent's) are kept; nothing allocates.
        unsafe impl AllocatorImpl for Untyped {}
    }

    glib::wrapper! {
        pub struct UntypedAllocator(ObjectSubclass<untyped::Untyped>) @extends gst::Allocator, gst::Object;
    }

    #[test]
    fn an_allocator_without_a_memory_type_is_foreign_not_a_crash() {
        gst::init().unwrap();
        let a: UntypedAllocator = glib::Object::new();
        let mut q = gst::query::Allocation::new(None, true);
        q.add_allocation_param(Some(a.upcast_ref::<gst::Allocator>()), Default::default());
        match proposed_provider(&q) {
            Proposal::Foreign(name) => {
                assert_eq!(name, "GstFhTestUntypedAllocator (no memory type)")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_foreign_allocator_is_named() {
        gst::init().unwrap();
        let mut q = gst::query::Allocation::new(None, true);
        let sys = gst::Allocator::find(None::<&str>).unwrap();
        q.add_allocation_param(Some(&sys), gst::AllocationParams::default());
        assert!(
            matches!(proposed_provider(&q), Proposal::Nothing),
            "system memory is ours to use"
        );
    }

    #[test]
    fn a_source_gets_a_pool_of_the_proposed_kind_with_the_same_slots() {
        gst::init().unwrap();
        let el = gst::ElementFactory::make("fakesrc").build().unwrap();
        let current = crate::SlotPool::new(&crate::PoolConfig {
            slot_size: 4096,
            slots: 3,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut q = gst::query::Allocation::new(None, true);
        assert!(decide_pool(&el, &q, &current).unwrap().is_none());
        propose(&mut q, Arc::new(SharedSegment::new("firehose-test")));
        let pool = decide_pool(&el, &q, &current).unwrap().expect("a new pool");
        assert_eq!(pool.kind(), MemoryKind::Shared);
        assert_eq!((pool.stats().slots, pool.slot_size()), (3, 4096));
        assert!(pool.fd().is_some(), "a shared pool hands out its segment");
        assert!(current.fd().is_none());
        // Already of the proposed kind: kept.
        assert!(decide_pool(&el, &q, &pool).unwrap().is_none());
    }

    #[test]
    fn a_source_that_cannot_receive_into_it_copies_once_with_its_metas() {
        gst::init().unwrap();
        let el = gst::ElementFactory::make("fakesrc").build().unwrap();
        let mut q = gst::query::Allocation::new(None, true);
        assert!(CopyInto::decide(&el, &q, "test", 4096, 2)
            .unwrap()
            .is_none());
        propose(&mut q, Arc::new(SharedSegment::new("firehose-test")));
        let c = CopyInto::decide(&el, &q, "its device owns the memory", 4096, 2)
            .unwrap()
            .expect("copies");
        let mut buf = gst::Buffer::from_slice(vec![7u8; 1000]);
        buf.get_mut()
            .unwrap()
            .set_pts(gst::ClockTime::from_seconds(3));
        crate::meta::message::register();
        let m = crate::meta::message::Message {
            id: 9,
            complete: true,
            bytes_expected: 1000,
            bytes_received: 1000,
        };
        crate::meta::message::add(buf.get_mut().unwrap(), &m);
        let out = c.copy(&buf).unwrap();
        assert_eq!(
            crate::gstmem::buffer_memory_kind(&out),
            Some(MemoryKind::Shared)
        );
        assert_eq!(out.map_readable().unwrap().as_slice(), &[7u8; 1000][..]);
        assert_eq!(out.pts(), Some(gst::ClockTime::from_seconds(3)));
        assert_eq!(crate::meta::message::read(&out).map(|m| m.id), Some(9));
        assert_eq!(c.bytes_copied(), 1000);
        // Two slots: the third buffer held at once finds none and is counted.
        let second = c.copy(&buf).unwrap();
        assert!(c.copy(&buf).is_none());
        assert_eq!(c.dropped(), 1);
        drop((out, second));
        assert!(
            c.copy(&gst::Buffer::from_slice(vec![0u8; 5000])).is_none(),
            "too big for a slot"
        );
    }

    #[test]
    fn copy_out_passes_buffers_through_until_a_provider_is_proposed() {
        gst::init().unwrap();
        let el = gst::ElementFactory::make("fakesrc").build().unwrap();
        let out = CopyOut::default();
        let buf = gst::Buffer::from_slice(vec![1u8; 10]);
        assert_eq!(
            crate::gstmem::buffer_memory_kind(&out.out(buf.clone())),
            None
        );
        let mut q = gst::query::Allocation::new(None, true);
        propose(&mut q, Arc::new(SharedSegment::new("firehose-test")));
        out.decide(&el, &q, "test", CopyOut::SLOT_BYTES).unwrap();
        let copied = out.out(buf);
        assert_eq!(
            crate::gstmem::buffer_memory_kind(&copied),
            Some(MemoryKind::Shared)
        );
        let mut s = gst::Structure::new_empty("s");
        out.append_stats(&mut s);
        assert_eq!(s.get::<u64>(crate::stats::names::BYTES_COPIED), Ok(10));
    }

    #[test]
    fn the_allocator_allocates_the_providers_kind() {
        gst::init().unwrap();
        let a = ProviderAllocator::new(Arc::new(Anonymous(HugepagePolicy::Off)));
        let mem = a.alloc(1000, None).unwrap();
        assert_eq!(mem.size(), 1000);
        assert_eq!(crate::gstmem::memory_kind(&mem), Some(MemoryKind::System));
    }
}
