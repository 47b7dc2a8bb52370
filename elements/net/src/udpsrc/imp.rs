//! `fhudpsrc` implementation: a thin adapter from [`crate::recv::UdpReceiver`] to a
//! GStreamer live push source.

use firehose_core::batch::batch_buffer;
use firehose_core::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use firehose_core::alloc::{self, Proposal};
use firehose_core::props::{Hugepages, WhenFull};
use firehose_core::stats::{self, names, Counter, StatsTimer};
use firehose_core::{caps as fcaps, PacketInfo, PoolConfig, SlotArena, SlotPool};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use super::Output;
use crate::recv::{Recv, RecvCounts, UdpReceiver};
use crate::socket_settings::{insert_after, SocketSettings};
use firehose_core::wake::Waker;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "fhudpsrc",
        gst::DebugColorFlags::empty(),
        Some("Firehose UDP source"),
    )
});

const DEFAULT_BATCH_SIZE: u32 = 64;
/// Slab bytes per batch: small enough to stay in a CPU's L2 cache until downstream reads
/// it (in `firehose bench spead` under a quarter core, 4 MiB batches lost 15–27 % at
/// 8 Gb/s of 8972-byte packets where 256–512 KiB ones lost nothing).
const DEFAULT_BATCH_BYTES: u32 = 256 << 10;
const DEFAULT_POOL_SIZE: u64 = 64 << 20;

#[derive(Debug, Clone)]
struct Settings {
    socket: SocketSettings,
    batch_size: u32,
    batch_bytes: u32,
    timestamps: bool,
    output: Output,
    caps: Option<gst::Caps>,
    when_full: WhenFull,
    hugepages: Hugepages,
    pool_size: u64,
    stats_interval: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            socket: SocketSettings::default(),
            batch_size: DEFAULT_BATCH_SIZE,
            batch_bytes: DEFAULT_BATCH_BYTES,
            timestamps: true,
            output: Output::Batch,
            caps: None,
            when_full: WhenFull::Drop,
            hugepages: Hugepages::Auto,
            pool_size: DEFAULT_POOL_SIZE,
            stats_interval: firehose_core::stats::DEFAULT_INTERVAL_MS,
        }
    }
}

/// Counters read by the `stats` property from any thread.
#[derive(Default)]
struct Counters {
    packets: Counter,
    bytes: Counter,
    batches: Counter,
    drops_pool: Counter,
    truncated: Counter,
    empty: Counter,
}

impl Counters {
    fn add(&self, c: &RecvCounts) {
        self.packets.add(c.packets);
        self.bytes.add(c.bytes);
        self.truncated.add(c.truncated);
        self.empty.add(c.empty);
    }
}

struct State {
    rx: UdpReceiver,
    pool: SlotPool,
    /// The slot being filled by successive batches.
    arena: Option<SlotArena>,
    /// Where datagrams go when the pool is empty under when-full=drop, to be counted.
    scratch: Vec<u8>,
    /// Reused list of the datagrams dropped into `scratch`.
    lost: Vec<PacketInfo>,
    /// Initial capacity of each batch's packet list.
    batch_hint: usize,
    timer: StatsTimer,
    output: Output,
    when_full: WhenFull,
}

#[derive(Default)]
pub struct UdpSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Kept outside `state`, which the streaming thread holds while it waits.
    waker: Mutex<Option<Arc<Waker>>>,
    pool: Mutex<Option<SlotPool>>,
    kernel_drops: Counter,
    flushing: AtomicBool,
    counters: Counters,
}

impl UdpSrc {
    fn stats(&self) -> gst::Structure {
        let c = &self.counters;
        let pool = self
            .pool
            .lock()
            .unwrap()
            .as_ref()
            .map(|p| p.stats())
            .unwrap_or_default();
        let mut s = stats::structure(&[
            (names::PACKETS, c.packets.get()),
            (names::BYTES, c.bytes.get()),
            (names::BATCHES, c.batches.get()),
            (names::DROPS_KERNEL, self.kernel_drops.get()),
            (names::DROPS_POOL, c.drops_pool.get()),
            (names::TRUNCATED, c.truncated.get()),
            (names::EMPTY, c.empty.get()),
            (names::POOL_SLOTS, pool.slots as u64),
            (names::POOL_IN_USE, pool.in_use as u64),
            (names::POOL_HIGH_WATER, pool.high_water as u64),
            (names::POOL_EXHAUSTED, pool.exhausted),
        ]);
        if let Some(p) = lock(&self.pool).as_ref() {
            s.set("memory", p.kind().as_str());
        }
        s
    }

    fn post_stats(&self, state: &State) {
        self.kernel_drops.set(state.rx.kernel_drops());
        stats::post(self.obj().upcast_ref(), self.stats());
    }

    /// Receives until one batch is ready (as a memory over the bytes it used, plus its
    /// datagrams), the wait is interrupted, or an error occurs.
    fn receive(&self, state: &mut State) -> Result<(gst::Memory, Vec<PacketInfo>), gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            let need = state.rx.per_msg();
            if state.arena.as_ref().is_none_or(|a| a.remaining() < need) {
                state.arena = None;
                let slot = match state.when_full {
                    WhenFull::Drop => state.pool.try_acquire(),
                    WhenFull::Block => Some(
                        state
                            .pool
                            .acquire_blocking(&self.flushing, Duration::from_millis(100))
                            .ok_or(gst::FlowError::Flushing)?,
                    ),
                };
                match slot {
                    Some(slot) => state.arena = Some(SlotArena::new(slot)),
                    None => {
                        self.drop_queued(state)?;
                        continue;
                    }
                }
            }
            let arena = state.arena.as_mut().expect("arena set above");
            let mut packets = Vec::with_capacity(state.batch_hint);
            match state.rx.recv_batch(arena.spare_mut(), &mut packets, true) {
                Ok(Recv::Woken) => return Err(gst::FlowError::Flushing),
                Ok(Recv::Batch { used, counts }) => {
                    self.counters.add(&counts);
                    if !packets.is_empty() {
                        return Ok((arena.commit(used), packets));
                    }
                }
                Err(e) => return Err(self.read_failed(&e)),
            }
        }
    }

    /// Posts the element error for a failed receive; the flow error to return.
    fn read_failed(&self, e: &std::io::Error) -> gst::FlowError {
        gst::element_imp_error!(self, gst::ResourceError::Read, ("recvmmsg failed: {}", e));
        gst::FlowError::Error
    }

    /// Cuts the pool from `provider` (what the element downstream proposed in the
    /// allocation query) unless it already is of its kind; the old pool's memory goes
    /// when the buffers still using it are dropped.
    fn use_provider(
        &self,
        provider: &dyn firehose_core::MemoryProvider,
    ) -> Result<(), gst::LoggableError> {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        if state.pool.kind() == provider.kind() {
            return Ok(());
        }
        let stats = state.pool.stats();
        let config = PoolConfig {
            slot_size: stats.slot_size,
            slots: stats.slots,
            hugepages: lock(&self.settings).hugepages.into(),
        };
        let pool = SlotPool::with_provider(&config, provider).map_err(|e| {
            gst::element_imp_error!(
                self,
                gst::ResourceError::NoSpaceLeft,
                (
                    "could not make the pool of {} memory that downstream asked for: {}",
                    provider.kind().as_str(),
                    e
                )
            );
            gst::loggable_error!(*CAT, "no pool of the proposed memory")
        })?;
        gst::info!(
            CAT,
            imp = self,
            "receiving into {} memory, as downstream proposed",
            pool.kind().as_str()
        );
        state.arena = None;
        state.pool = pool.clone();
        *lock(&self.pool) = Some(pool);
        Ok(())
    }

    /// The pool is empty: counts what is queued on the socket now as `drops-pool` (so
    /// the loss is visible at once, and the socket buffer is kept for later datagrams),
    /// then waits for more data before the caller looks for a free slot again.
    fn drop_queued(&self, state: &mut State) -> Result<(), gst::FlowError> {
        state.lost.clear();
        let r = state
            .rx
            .recv_batch(&mut state.scratch, &mut state.lost, false);
        let r = match r {
            Ok(Recv::Batch { counts, .. }) if counts == RecvCounts::default() => {
                match state.rx.wait() {
                    Ok(true) => return Err(gst::FlowError::Flushing),
                    Ok(false) => return Ok(()),
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        match r {
            Ok(Recv::Woken) => Err(gst::FlowError::Flushing),
            Ok(Recv::Batch { counts, .. }) => {
                self.counters.drops_pool.add(counts.packets);
                self.counters.truncated.add(counts.truncated);
                self.counters.empty.add(counts.empty);
                Ok(())
            }
            Err(e) => Err(self.read_failed(&e)),
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for UdpSrc {
    const NAME: &'static str = "GstFhUdpSrc";
    type Type = super::UdpSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for UdpSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut v = SocketSettings::properties();
            insert_after(
                &mut v,
                "buffer-size",
                [
                    glib::ParamSpecUInt::builder("batch-size")
                        .nick("Batch size")
                        .blurb("Most datagrams received by one recvmmsg and pushed as one buffer")
                        .minimum(1)
                        .maximum(1024)
                        .default_value(DEFAULT_BATCH_SIZE)
                        .mutable_ready()
                        .build(),
                    glib::ParamSpecUInt::builder("batch-bytes")
                        .nick("Batch bytes")
                        .blurb("Most buffer bytes one batch may fill (0 = no limit): lowers batch-size so that a batch stays in the CPU cache until downstream reads it; with GRO each message takes 64 KiB")
                        .maximum(64 << 20)
                        .default_value(DEFAULT_BATCH_BYTES)
                        .mutable_ready()
                        .build(),
                ],
            );
            insert_after(
                &mut v,
                "gro",
                [glib::ParamSpecBoolean::builder("timestamps")
                    .nick("Kernel timestamps")
                    .blurb("Record each datagram's kernel receive time (SO_TIMESTAMPNS) in the batch meta")
                    .default_value(true)
                    .mutable_ready()
                    .build()],
            );
            v.extend([
                glib::ParamSpecEnum::builder::<Output>("output")
                    .nick("Output")
                    .blurb("batch: one buffer per batch (fast); list: one buffer per datagram in a buffer list (for stock elements)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Caps>("caps")
                    .nick("Caps")
                    .blurb("Caps of the datagrams with output=list (e.g. application/x-rtp,…)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder::<WhenFull>("when-full")
                    .nick("When full")
                    .blurb("When every pool slot is in use downstream: drop (count drops-pool) or block")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
                    .nick("Hugepages")
                    .blurb("Pool memory in hugepages: auto (fall back with a warning), require, off")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("pool-size")
                    .nick("Pool size")
                    .blurb("Bytes of preallocated, pre-faulted pool memory (at least 2 batches)")
                    .minimum(1)
                    .default_value(DEFAULT_POOL_SIZE)
                    .mutable_ready()
                    .build(),
            ]);
            v.extend(firehose_core::stats::properties(
                "packets, bytes, batches, drops-kernel, drops-pool, truncated, empty, pool-*",
            ));
            v
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        if s.socket.set(value, pspec) {
            return;
        }
        match pspec.name() {
            "batch-size" => s.batch_size = value.get().unwrap(),
            "batch-bytes" => s.batch_bytes = value.get().unwrap(),
            "timestamps" => s.timestamps = value.get().unwrap(),
            "output" => s.output = value.get().unwrap(),
            "caps" => s.caps = value.get().unwrap(),
            "when-full" => s.when_full = value.get().unwrap(),
            "hugepages" => s.hugepages = value.get().unwrap(),
            "pool-size" => s.pool_size = value.get().unwrap(),
            "stats-interval" => s.stats_interval = value.get().unwrap(),
            other => unreachable!("unknown property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        if let Some(v) = s.socket.get(pspec) {
            return v;
        }
        match pspec.name() {
            "batch-size" => s.batch_size.to_value(),
            "batch-bytes" => s.batch_bytes.to_value(),
            "timestamps" => s.timestamps.to_value(),
            "output" => s.output.to_value(),
            "caps" => s.caps.to_value(),
            "when-full" => s.when_full.to_value(),
            "hugepages" => s.hugepages.to_value(),
            "pool-size" => s.pool_size.to_value(),
            "stats-interval" => s.stats_interval.to_value(),
            other => unreachable!("unknown property {other}"),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.set_live(true);
        obj.set_format(gst::Format::Time);
    }
}

impl GstObjectImpl for UdpSrc {}

impl ElementImpl for UdpSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "Firehose UDP source",
                "Source/Network",
                "Receives UDP with recvmmsg and GRO into pooled memory, one buffer per batch",
                "Firehose developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &gst::Caps::new_any(),
            )
            .unwrap()]
        });
        TEMPLATES.as_ref()
    }
}

impl BaseSrcImpl for UdpSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let (rx, report) = s.socket.open(
            self.obj().upcast_ref(),
            *CAT,
            s.timestamps,
            s.batch_size as usize,
            s.batch_bytes as usize,
        )?;
        let slab = rx.slab_size();
        let slots = (s.pool_size as usize / slab).max(2);
        let pool = SlotPool::new(&PoolConfig {
            slot_size: slab,
            slots,
            hugepages: s.hugepages.into(),
        })
        .map_err(|e| gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e)))?;
        if let Some(reason) = pool.fallback_reason() {
            gst::element_imp_warning!(self, gst::ResourceError::Settings, ("{}", reason));
        }
        gst::info!(
            CAT,
            imp = self,
            "bound {:?}, rcvbuf {} B, gro {}, {} messages per batch, {} slots of {} B ({})",
            report.local,
            report.buffer_granted,
            report.gro,
            rx.batch_len(),
            slots,
            pool.slot_size(),
            pool.kind().as_str()
        );
        let port_changed = lock(&self.settings).socket.set_bound_port(&report);
        for c in [
            &self.counters.packets,
            &self.counters.bytes,
            &self.counters.batches,
            &self.counters.drops_pool,
            &self.counters.truncated,
            &self.counters.empty,
            &self.kernel_drops,
        ] {
            c.reset();
        }
        self.flushing.store(false, Ordering::Release);
        *lock(&self.waker) = Some(rx.waker());
        *lock(&self.pool) = Some(pool.clone());
        *lock(&self.state) = Some(State {
            arena: None,
            scratch: vec![0u8; slab],
            lost: Vec::with_capacity(s.batch_size as usize * 8),
            batch_hint: s.batch_size as usize,
            rx,
            pool,
            timer: StatsTimer::new(s.stats_interval),
            output: s.output,
            when_full: s.when_full,
        });
        if port_changed {
            self.obj().notify("port");
        }
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(state) = lock(&self.state).take() {
            self.kernel_drops.set(state.rx.kernel_drops());
        }
        *lock(&self.waker) = None;
        // The pool stays reachable for the final `stats` read; slots still held
        // downstream keep its memory alive until they are dropped.
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    /// An element downstream that needs its memory (shared segments, pinned pages)
    /// proposes its provider ([`firehose_core::alloc`]): the pool is cut from it, so the
    /// kernel's copy lands there. Another allocator cannot be received into: say so.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        match alloc::proposed_provider(query) {
            Proposal::Provider(p) => self.use_provider(&*p)?,
            Proposal::Foreign(name) => gst::element_imp_warning!(
                self,
                gst::ResourceError::Settings,
                (
                    "downstream proposes memory from {}, which fhudpsrc cannot receive into; \
                     it receives into its own pool and downstream copies if it must",
                    name
                )
            ),
            Proposal::Nothing => {}
        }
        self.parent_decide_allocation(query)
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let s = lock(&self.settings);
        let caps = match s.output {
            Output::Batch => fcaps::packets_caps(),
            Output::List => s.caps.clone().unwrap_or_else(gst::Caps::new_any),
        };
        Some(match filter {
            Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
            None => caps,
        })
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::Release);
        if let Some(w) = lock(&self.waker).as_ref() {
            w.wake();
        }
        if let Some(p) = lock(&self.pool).as_ref() {
            p.wake_waiters();
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(w) = lock(&self.waker).as_ref() {
            w.clear();
        }
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }
}

impl PushSrcImpl for UdpSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let (mem, packets) = self.receive(state)?;
        // One clock read per batch: the running time at which the batch was complete.
        let pts = self.obj().current_running_time();
        self.counters.batches.add(1);
        if state.timer.due(Instant::now()) {
            self.post_stats(state);
        }
        let output = state.output;
        drop(guard);

        match output {
            Output::Batch => Ok(CreateSuccess::NewBuffer(batch_buffer(mem, packets, pts))),
            Output::List => {
                // One GstBuffer per datagram, each a sub-memory of the one slot: no copy,
                // but the per-buffer cost that stock elements need.
                let mut list = gst::BufferList::new_sized(packets.len());
                let l = list.get_mut().expect("new list is writable");
                for p in &packets {
                    let mut b = gst::Buffer::new();
                    let bm = b.get_mut().expect("new buffer is writable");
                    bm.append_memory(mem.share(p.range()));
                    bm.set_pts(pts);
                    l.add(b);
                }
                Ok(CreateSuccess::NewBufferList(list))
            }
        }
    }
}
