//! The upload engine: host buffers to device blocks through a ring of asynchronous
//! copies, each closed by an event. No GStreamer types: the engine is driven by
//! `fhcudaupload` with the CUDA backend ([`crate::driver`]) and by the tests with the
//! host backend ([`crate::testing`]), which completes transfers late and out of order.
//!
//! The rules it keeps:
//! - at most `max_in_flight` transfers are queued; a submit that finds the ring full
//!   waits for the oldest (the time is counted as stall time: back-pressure);
//! - the host memory a transfer reads (the input itself, or its bounce slot) is held
//!   until that transfer's event has completed, and only then dropped (returned to its
//!   pool);
//! - transfers come out in the order they went in, whatever order they complete in;
//! - dropping the engine waits for every queued transfer first, so nothing it holds is
//!   freed while the device may still read it.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use firehose_core::provider::MemoryProvider;
use firehose_core::stats::names;
use firehose_core::sync::lock;
use firehose_core::{MemoryKind, PoolConfig, Slot, SlotPool};

/// A device address (a `CUdeviceptr`).
pub type DevicePtr = u64;

/// An event of a backend, made once and recorded again for each transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event(pub u64);

/// What a backend call failed with: the text names the call and the cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError(pub String);

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackendError {}

/// The few device operations an upload needs: one stream, device blocks, events.
///
/// Methods take `&self` because device blocks are freed from whichever thread drops
/// the last buffer holding them; implementations synchronise internally.
pub trait Backend: Send + Sync + fmt::Debug {
    /// A device block of `len` bytes.
    fn alloc(&self, len: usize) -> Result<DevicePtr, BackendError>;
    /// Frees a block from [`Backend::alloc`].
    fn free(&self, ptr: DevicePtr, len: usize);
    /// Queues a copy of `len` bytes from `src` to `dst` on the stream.
    ///
    /// # Safety
    /// `src..src + len` stays readable and unchanged until an event recorded after this
    /// call has completed; `dst..dst + len` lies inside one block from [`Backend::alloc`].
    unsafe fn copy_to_device(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError>;
    /// A new event.
    fn create_event(&self) -> Result<Event, BackendError>;
    /// Destroys an event from [`Backend::create_event`] (not pending).
    fn destroy_event(&self, event: Event);
    /// Records `event` on the stream: it completes once every copy queued before it has.
    fn record(&self, event: Event) -> Result<(), BackendError>;
    /// Whether `event` has completed (without waiting).
    fn is_complete(&self, event: Event) -> Result<bool, BackendError>;
    /// Waits until `event` has completed.
    fn wait(&self, event: Event) -> Result<(), BackendError>;
    /// The stream's handle (a `CUstream`), for applications that order their own work
    /// after ours; 0 for the default stream or a backend without streams.
    fn stream_handle(&self) -> u64 {
        0
    }
}

/// Host memory a transfer reads: the input buffer, held until its copy has completed.
///
/// # Safety
/// [`HostBytes::bytes`] returns the same address and length for the life of the value,
/// however it is moved, and nothing writes those bytes while it lives (a mapped
/// `gst::Buffer`, a pool slot, a boxed slice): the device reads them asynchronously.
pub unsafe trait HostBytes: Send {
    /// The bytes.
    fn bytes(&self) -> &[u8];
    /// Whether they are page-locked and registered with the driver, so the device can
    /// read them directly; otherwise they go through a bounce slot.
    fn pinned(&self) -> bool;
}

// SAFETY: a slot's bytes live in its pool's region, which does not move, and the slot
// is the only handle to them.
unsafe impl HostBytes for Slot {
    fn bytes(&self) -> &[u8] {
        self.as_ref()
    }
    fn pinned(&self) -> bool {
        self.kind() == MemoryKind::Pinned
    }
}

/// How the bytes of one input go to the device.
#[derive(Clone, Copy, Debug)]
pub enum Layout<'a> {
    /// The input as it is.
    Whole,
    /// Only these byte ranges (the payloads of a packet batch), gathered back to back
    /// into one block, followed by their offsets table (see [`PayloadTable`]).
    Payloads(&'a [Range<usize>]),
}

/// Where the offsets table of a `layout=payloads` block lies.
///
/// The block holds the payloads back to back from offset 0, then (at `table_offset`, a
/// multiple of 16) `packets + 1` little-endian `u32`s: payload `i` spans
/// `table[i]..table[i + 1]`. A kernel reads the table from the block itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadTable {
    /// Payloads in the block.
    pub packets: u32,
    /// Bytes of payload (the table's last entry).
    pub payload_bytes: u32,
    /// Byte offset of the table in the block.
    pub table_offset: u32,
}

firehose_core::counters! {
    /// The engine's counters (read from any thread); `fhcudaupload`'s stats.
    pub struct EngineStats {
        /// Bytes copied to the device (payload and tables).
        bytes: names::BYTES,
        /// Transfers completed.
        transfers: names::TRANSFERS,
        /// Inputs copied through a pinned bounce slot first (not pinned, or gathered).
        bounce_copies: names::BOUNCE_COPIES,
        /// Most transfers queued at once.
        in_flight_high_water: names::IN_FLIGHT_HIGH_WATER,
        /// Nanoseconds a submit waited for a free place in the ring.
        stall_ns: names::STALL_TIME_NS,
        /// Packet ranges that lay outside their buffer (left out, not copied).
        malformed: names::MALFORMED,
    }
}

/// Device blocks given back, kept for the next transfers of the same size: a
/// `cuMemAlloc` per buffer would cost more than the copy of a small one.
struct DevicePool {
    backend: Arc<dyn Backend>,
    free: Mutex<Vec<(DevicePtr, usize)>>,
    /// Blocks kept at most (the rest are freed).
    keep: usize,
    /// Set when the engine is dropped: blocks coming back are freed, not kept, so a
    /// stopped element holds no device memory beyond what downstream still holds.
    closed: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for DevicePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePool")
            .field("free", &lock(&self.free).len())
            .finish()
    }
}

impl DevicePool {
    fn take(self: &Arc<Self>, len: usize) -> Result<DeviceBlock, BackendError> {
        let found = {
            let mut free = lock(&self.free);
            free.iter()
                .position(|&(_, cap)| cap >= len)
                .map(|i| free.swap_remove(i))
        };
        let (ptr, capacity) = match found {
            Some(b) => b,
            None => (self.backend.alloc(len)?, len),
        };
        Ok(DeviceBlock {
            ptr,
            capacity,
            owner: Owner::Pool(self.clone()),
        })
    }

    fn give_back(&self, ptr: DevicePtr, capacity: usize) {
        let mut free = lock(&self.free);
        if free.len() < self.keep && !self.closed.load(std::sync::atomic::Ordering::Acquire) {
            free.push((ptr, capacity));
        } else {
            drop(free);
            self.backend.free(ptr, capacity);
        }
    }
}

impl DevicePool {
    /// Frees the blocks kept, and every block that comes back from now on.
    fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        let kept = std::mem::take(&mut *lock(&self.free));
        for (ptr, cap) in kept {
            self.backend.free(ptr, cap);
        }
    }
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        self.close();
    }
}

/// Who owns a [`DeviceBlock`]'s memory.
enum Owner {
    /// The engine's device pool (the block goes back there).
    Pool(Arc<DevicePool>),
    /// Someone else (a [`BlockSource`]): dropping the owner releases the memory.
    External {
        owner: Box<dyn std::any::Any + Send>,
        stream: u64,
    },
    /// [`DeviceBlock::take_owner`] took it.
    Taken,
}

/// One device block, owned; given back to the engine's device pool (or freed once the
/// engine is gone) on drop, or, for a block of a [`BlockSource`], released with its
/// owner.
pub struct DeviceBlock {
    ptr: DevicePtr,
    capacity: usize,
    owner: Owner,
}

impl fmt::Debug for DeviceBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBlock({:#x}, {} bytes)", self.ptr, self.capacity)
    }
}

impl DeviceBlock {
    /// A block of `capacity` bytes at `ptr` that `owner` keeps alive (and releases when
    /// dropped): memory another library allocated, such as a `GstCudaMemory`.
    pub fn external(ptr: DevicePtr, capacity: usize, owner: Box<dyn std::any::Any + Send>) -> Self {
        Self {
            ptr,
            capacity,
            owner: Owner::External { owner, stream: 0 },
        }
    }

    /// Its device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Its size in bytes (at least what the transfer wrote).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The stream of the backend that filled it.
    pub fn stream_handle(&self) -> u64 {
        match &self.owner {
            Owner::Pool(p) => p.backend.stream_handle(),
            Owner::External { stream, .. } => *stream,
            Owner::Taken => 0,
        }
    }

    /// Whether a [`BlockSource`] gave it (it has an owner to take).
    pub fn is_external(&self) -> bool {
        matches!(self.owner, Owner::External { .. })
    }

    /// The owner of an external block (which then keeps the memory alive); `None` for a
    /// block of the engine's pool.
    pub fn take_owner(mut self) -> Option<Box<dyn std::any::Any + Send>> {
        match std::mem::replace(&mut self.owner, Owner::Taken) {
            Owner::External { owner, .. } => Some(owner),
            other => {
                self.owner = other;
                None
            }
        }
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        if let Owner::Pool(pool) = &self.owner {
            pool.give_back(self.ptr, self.capacity);
        }
    }
}

/// Where the device blocks of transfers come from instead of the engine's own pool
/// (`fhcudaupload` with libgstcuda: `GstCudaMemory` from its buffer pool).
pub trait BlockSource: Send + Sync {
    /// A block of at least `len` bytes, or `None` to use the engine's own pool.
    fn block(&self, len: usize) -> Result<Option<DeviceBlock>, BackendError>;
}

/// A completed transfer: the device block, the bytes it holds, and the caller's tag.
#[derive(Debug)]
pub struct Uploaded<T> {
    /// The device block; its first `size` bytes are the data.
    pub block: DeviceBlock,
    /// Bytes of data in the block (with the table, under `layout=payloads`).
    pub size: usize,
    /// The offsets table under [`Layout::Payloads`].
    pub payloads: Option<PayloadTable>,
    /// What the caller submitted with the input (timestamps, metas…).
    pub tag: T,
}

/// What keeps the host side of a transfer alive until its event completes: held for
/// its `Drop` (which returns the memory to its pool), never read.
#[allow(dead_code)]
enum Held<H> {
    /// The input itself (pinned: the device reads it).
    Input(H),
    /// A bounce slot the input was copied into (the input is already released).
    Bounce(Slot),
}

struct InFlight<H, T> {
    held: Held<H>,
    event: Event,
    out: Uploaded<T>,
}

/// What the engine is made with.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Transfers queued at most (at least 1).
    pub max_in_flight: usize,
    /// Where bounce slots come from: page-locked, registered memory.
    pub bounce_provider: Arc<dyn MemoryProvider>,
    /// The counters to update (the element keeps them across restarts).
    pub stats: Arc<EngineStats>,
}

/// Why a submit failed.
#[derive(Debug)]
pub enum UploadError {
    /// The backend failed; the stream is no longer usable.
    Backend(BackendError),
    /// The bounce pool could not be made.
    Bounce(String),
}

impl fmt::Display for UploadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Backend(e) => write!(f, "{e}"),
            Self::Bounce(e) => write!(f, "could not make the pinned bounce pool: {e}"),
        }
    }
}

impl std::error::Error for UploadError {}

impl From<BackendError> for UploadError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

/// The upload engine over a backend; `H` holds input bytes, `T` tags outputs.
pub struct Engine<H: HostBytes, T> {
    backend: Arc<dyn Backend>,
    devices: Arc<DevicePool>,
    ring: VecDeque<InFlight<H, T>>,
    /// Transfers waited for (by a full ring) but not yet taken by [`Engine::pop_ready`].
    done: VecDeque<Uploaded<T>>,
    /// Events not recorded now.
    events: Vec<Event>,
    max_in_flight: usize,
    bounce_provider: Arc<dyn MemoryProvider>,
    bounce: Option<SlotPool>,
    stats: Arc<EngineStats>,
    /// Where device blocks come from, when not from `devices`.
    source: Option<Arc<dyn BlockSource>>,
}

impl<H: HostBytes, T> fmt::Debug for Engine<H, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("in_flight", &self.ring.len())
            .field("done", &self.done.len())
            .field("max_in_flight", &self.max_in_flight)
            .finish()
    }
}

/// Bounce slots are at least this large, so that a stream of growing buffers does not
/// remake the pool each time.
const MIN_BOUNCE_SLOT: usize = 1 << 20;

impl<H: HostBytes, T> Engine<H, T> {
    /// An engine on `backend`; makes its events now.
    pub fn new(backend: Arc<dyn Backend>, config: &EngineConfig) -> Result<Self, UploadError> {
        let max_in_flight = config.max_in_flight.max(1);
        let mut events = Vec::with_capacity(max_in_flight);
        for _ in 0..max_in_flight {
            match backend.create_event() {
                Ok(e) => events.push(e),
                Err(e) => {
                    for ev in events {
                        backend.destroy_event(ev);
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(Self {
            devices: Arc::new(DevicePool {
                backend: backend.clone(),
                free: Mutex::new(Vec::new()),
                // Blocks downstream holds plus those in flight, and a few spare.
                keep: max_in_flight * 2 + 4,
                closed: Default::default(),
            }),
            backend,
            ring: VecDeque::with_capacity(max_in_flight),
            done: VecDeque::with_capacity(max_in_flight),
            events,
            max_in_flight,
            bounce_provider: config.bounce_provider.clone(),
            bounce: None,
            stats: config.stats.clone(),
            source: None,
        })
    }

    /// Takes the device blocks of the next transfers from `source` (`None`: from the
    /// engine's own pool again).
    pub fn set_block_source(&mut self, source: Option<Arc<dyn BlockSource>>) {
        self.source = source;
    }

    /// A device block of at least `len` bytes: from the block source if there is one
    /// and it gives one, otherwise from the pool.
    fn take_block(&self, len: usize) -> Result<DeviceBlock, BackendError> {
        if let Some(source) = &self.source {
            if let Some(mut b) = source.block(len)? {
                if b.capacity < len {
                    return Err(BackendError(format!(
                        "a device block of {} bytes was given for {len} bytes",
                        b.capacity
                    )));
                }
                if let Owner::External { stream, .. } = &mut b.owner {
                    *stream = self.backend.stream_handle();
                }
                return Ok(b);
            }
        }
        self.devices.take(len)
    }

    /// The counters (shared, readable while the engine runs).
    pub fn stats(&self) -> Arc<EngineStats> {
        self.stats.clone()
    }

    /// Transfers queued now.
    pub fn in_flight(&self) -> usize {
        self.ring.len()
    }

    /// The event of the oldest transfer when it is the next result and not known to be
    /// complete: what a thread that pushes results waits on (outside any lock: the event
    /// may be recorded again meanwhile, which only makes the wait longer).
    pub fn next_event(&self) -> Option<Event> {
        if !self.done.is_empty() {
            return None;
        }
        self.ring.front().map(|f| f.event)
    }

    /// Whether a result is waiting in [`Engine::pop_ready`] already.
    pub fn has_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The bounce pool, once one was needed (its stats say how many slots are held).
    pub fn bounce_pool(&self) -> Option<&SlotPool> {
        self.bounce.as_ref()
    }

    /// Queues the upload of `host` laid out as `layout`, tagged `tag`. Waits first for
    /// the oldest transfer when `max_in_flight` are queued (counted as stall time); its
    /// result waits in [`Engine::pop_ready`].
    pub fn submit(&mut self, host: H, layout: Layout<'_>, tag: T) -> Result<(), UploadError> {
        if self.ring.len() >= self.max_in_flight {
            let t0 = Instant::now();
            self.complete_front(true)?;
            self.stats.stall_ns.add(t0.elapsed().as_nanos() as u64);
        }
        let (held, block, size, payloads) = match layout {
            Layout::Whole if host.pinned() => {
                let len = host.bytes().len();
                let block = self.take_block(len.max(1))?;
                let src = host.bytes().as_ptr();
                // Zero-length copies are skipped by the backends.
                // SAFETY: `host` is HostBytes (stable, unchanged while held) and is held
                // in the ring until the event recorded below completes; the block is
                // at least `len` bytes.
                unsafe { self.backend.copy_to_device(block.ptr, src, len)? };
                (Held::Input(host), block, len, None)
            }
            Layout::Whole => {
                let bytes = host.bytes();
                let mut slot = self.bounce_slot(bytes.len())?;
                slot.as_mut_full()[..bytes.len()].copy_from_slice(bytes);
                slot.set_len(bytes.len());
                drop(host);
                let (block, len) = self.copy_from_bounce(&slot)?;
                (Held::Bounce(slot), block, len, None)
            }
            Layout::Payloads(ranges) => {
                let (slot, table) = self.gather(host.bytes(), ranges)?;
                drop(host);
                let (block, len) = self.copy_from_bounce(&slot)?;
                (Held::Bounce(slot), block, len, Some(table))
            }
        };
        let event = self.events.pop().expect("one free event per ring place");
        if let Err(e) = self.backend.record(event) {
            self.events.push(event);
            // The copy may be queued without an event: wait for the stream before the
            // host memory goes (the backend is broken; a leak beats a use after free).
            std::mem::forget(held);
            return Err(e.into());
        }
        self.stats.bytes.add(size as u64);
        self.ring.push_back(InFlight {
            held,
            event,
            out: Uploaded {
                block,
                size,
                payloads,
                tag,
            },
        });
        let n = self.ring.len() as u64;
        if n > self.stats.in_flight_high_water.get() {
            self.stats.in_flight_high_water.set(n);
        }
        Ok(())
    }

    /// Queues the copy of a filled bounce slot (counted) into a device block; the caller
    /// holds the slot in the ring until the event recorded next completes.
    fn copy_from_bounce(&mut self, slot: &Slot) -> Result<(DeviceBlock, usize), UploadError> {
        self.stats.bounce_copies.add(1);
        let len = slot.len();
        let block = self.take_block(len.max(1))?;
        // SAFETY: the caller holds the slot (stable pool memory) in the ring until the
        // event recorded after this copy completes; the block holds `len` bytes.
        unsafe {
            self.backend
                .copy_to_device(block.ptr, slot.as_ref().as_ptr(), len)?
        };
        Ok((block, len))
    }

    /// The oldest transfer if it has completed (in submission order: a later transfer
    /// that completed first waits for the earlier ones).
    pub fn pop_ready(&mut self) -> Result<Option<Uploaded<T>>, UploadError> {
        if let Some(u) = self.done.pop_front() {
            return Ok(Some(u));
        }
        if self.complete_front(false)? {
            return Ok(self.done.pop_front());
        }
        Ok(None)
    }

    /// Waits for every queued transfer (EOS): all of them are then in
    /// [`Engine::pop_ready`].
    pub fn drain(&mut self) -> Result<(), UploadError> {
        while !self.ring.is_empty() {
            self.complete_front(true)?;
        }
        Ok(())
    }

    /// Waits for every queued transfer and drops the results (flush): the device may
    /// not be stopped mid-copy, so the host memory is held until it is done.
    pub fn discard(&mut self) -> Result<(), UploadError> {
        let r = self.drain();
        self.done.clear();
        r
    }

    /// Completes the front transfer if its event has (or, with `block`, once it has):
    /// releases its host memory and moves its result to `done`. True if it did.
    fn complete_front(&mut self, block: bool) -> Result<bool, UploadError> {
        let Some(front) = self.ring.front() else {
            return Ok(false);
        };
        if block {
            self.backend.wait(front.event)?;
        } else if !self.backend.is_complete(front.event)? {
            return Ok(false);
        }
        let f = self.ring.pop_front().expect("front exists");
        self.events.push(f.event);
        // The host memory goes back to its pool only now, after its event.
        drop(f.held);
        self.stats.transfers.add(1);
        self.done.push_back(f.out);
        Ok(true)
    }

    /// A bounce slot of at least `len` bytes (a new, larger pool when the current one's
    /// slots are too small: the old one goes when its last slot comes back).
    fn bounce_slot(&mut self, len: usize) -> Result<Slot, UploadError> {
        let fits = self.bounce.as_ref().is_some_and(|p| p.slot_size() >= len);
        if !fits {
            let config = PoolConfig {
                slot_size: len.max(MIN_BOUNCE_SLOT).next_power_of_two(),
                // One per ring place, and one being filled.
                slots: self.max_in_flight + 1,
                hugepages: firehose_core::HugepagePolicy::Off,
            };
            let pool = SlotPool::with_provider(&config, &*self.bounce_provider)
                .map_err(|e| UploadError::Bounce(e.to_string()))?;
            self.bounce = Some(pool);
        }
        let pool = self.bounce.as_ref().expect("made above");
        // The ring holds at most max_in_flight slots, and one place was made free
        // before this call, so a slot is free.
        pool.try_acquire()
            .ok_or_else(|| UploadError::Bounce("no free bounce slot".into()))
    }

    /// Gathers `ranges` of `bytes` back to back into a bounce slot, followed by the
    /// offsets table. Ranges outside `bytes` are counted as malformed and left out.
    fn gather(
        &mut self,
        bytes: &[u8],
        ranges: &[Range<usize>],
    ) -> Result<(Slot, PayloadTable), UploadError> {
        let valid = |r: &Range<usize>| r.start <= r.end && r.end <= bytes.len();
        let (mut n, mut total) = (0usize, 0usize);
        for r in ranges {
            if valid(r) {
                n += 1;
                total += r.len();
            } else {
                self.stats.malformed.add(1);
            }
        }
        let table_offset = total.next_multiple_of(16);
        let len = table_offset + (n + 1) * 4;
        let table = PayloadTable {
            packets: u32::try_from(n)
                .map_err(|_| UploadError::Bounce("too many packets".into()))?,
            payload_bytes: u32::try_from(total)
                .map_err(|_| UploadError::Bounce("payloads over 4 GiB".into()))?,
            table_offset: u32::try_from(table_offset)
                .map_err(|_| UploadError::Bounce("payloads over 4 GiB".into()))?,
        };
        let mut slot = self.bounce_slot(len)?;
        let out = slot.as_mut_full();
        let mut at = 0usize;
        let mut t = table_offset;
        for r in ranges.iter().filter(|r| valid(r)) {
            out[t..t + 4].copy_from_slice(&(at as u32).to_le_bytes());
            t += 4;
            out[at..at + r.len()].copy_from_slice(&bytes[r.clone()]);
            at += r.len();
        }
        out[t..t + 4].copy_from_slice(&(at as u32).to_le_bytes());
        out[total..table_offset].fill(0);
        slot.set_len(len);
        Ok((slot, table))
    }
}

impl<H: HostBytes, T> Drop for Engine<H, T> {
    fn drop(&mut self) {
        // The device may still read what the ring holds: wait, then let it go.
        while let Some(f) = self.ring.pop_front() {
            if self.backend.wait(f.event).is_ok() {
                drop(f.held);
            } else {
                // A broken stream may still read it: leak rather than free.
                std::mem::forget(f.held);
            }
            self.events.push(f.event);
        }
        for e in self.events.drain(..) {
            self.backend.destroy_event(e);
        }
        // Results not taken go with the engine; their blocks are freed, not kept.
        self.devices.close();
        self.done.clear();
    }
}
