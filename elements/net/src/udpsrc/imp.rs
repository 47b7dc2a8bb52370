//! `fhudpsrc` implementation: a thin adapter from [`crate::recv::UdpReceiver`] to a
//! GStreamer live push source.

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firehose_core::alloc;
use firehose_core::props::WhenFull;
use firehose_core::src::prelude::*;
use firehose_core::src::{
    self as live, LiveControl, PacketOutput, PoolProps, PoolSettings, PoolSize,
};
use firehose_core::stats::{self, names, StatsInterval, StatsTimer};
use firehose_core::{PacketInfo, PoolConfig, SlotArena, SlotPool};

use crate::recv::{Recv, RecvCounts, UdpReceiver};
use crate::socket_settings::{insert_after, SocketSettings};

firehose_core::debug_category!(CAT, "fhudpsrc", "Firehose UDP source");

const DEFAULT_BATCH_SIZE: u32 = 64;
/// Slab bytes per batch: small enough to stay in a CPU's L2 cache until downstream reads
/// it (in `firehose bench spead` under a quarter core, 4 MiB batches lost 15–27 % at
/// 8 Gb/s of 8972-byte packets where 256–512 KiB ones lost nothing).
const DEFAULT_BATCH_BYTES: u32 = 256 << 10;
/// The pool properties: 64 MiB in slots of one batch slab each.
const POOL: PoolProps = PoolProps {
    what: "pool",
    size_blurb: "Bytes of preallocated, pre-faulted pool memory (at least 2 batches)",
    default: PoolSize::Bytes(64 << 20),
    default_slot_bytes: DEFAULT_BATCH_BYTES as u64,
    memory: true,
    hugepages_alias: true,
    count_alias: None,
};

#[derive(Debug, Clone)]
struct Settings {
    socket: SocketSettings,
    batch_size: u32,
    batch_bytes: u32,
    timestamps: bool,
    when_full: WhenFull,
    pool: PoolSettings,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            socket: SocketSettings::default(),
            batch_size: DEFAULT_BATCH_SIZE,
            batch_bytes: DEFAULT_BATCH_BYTES,
            timestamps: false,
            when_full: WhenFull::Auto,
            pool: PoolSettings::new(&POOL),
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::counters! {
    /// Counters read by the `stats` property from any thread.
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
        /// Read from the kernel when stats are posted, and at stop.
        kernel_drops: names::DROPS_KERNEL,
        drops_pool: names::DROPS_POOL,
        truncated: names::TRUNCATED,
        empty: names::EMPTY,
    }
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
    when_full: WhenFull,
    /// The interface of `multicast-iface`, watched while nothing arrives: a capture
    /// whose interface went away or down says so (an element error).
    watch: Option<firehose_core::netif::LinkWatch>,
}

#[derive(Default)]
pub struct UdpSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// The unlock flag, the receiver's waker and the pool.
    live: LiveControl,
    /// Kept after stop for the final `stats` read.
    pool: Mutex<Option<SlotPool>>,
    counters: Counters,
    /// Says on the bus when the pool runs dry.
    dry: live::DryWarning,
    /// `output`, `caps`, and what was negotiated: batches or one buffer per datagram.
    output: PacketOutput,
    /// `readable-metas`, and whether downstream may read them (the allocation query).
    readable: firehose_core::meta::readable::ReadableOutput,
}

impl UdpSrc {
    fn stats(&self) -> gst::Structure {
        let mut s = self.counters.structure();
        live::append_slot_pool(&mut s, lock(&self.pool).as_ref());
        s
    }

    fn post_stats(&self, state: &State) {
        self.counters.kernel_drops.set(state.rx.kernel_drops());
        stats::post(self.obj().upcast_ref(), self.stats());
    }

    /// Receives until one batch is ready (as a memory over the bytes it used, plus its
    /// datagrams), the wait is interrupted, or an error occurs.
    fn receive(&self, state: &mut State) -> Result<(gst::Memory, Vec<PacketInfo>), gst::FlowError> {
        loop {
            if self.live.is_flushing() {
                return Err(gst::FlowError::Flushing);
            }
            let need = state.rx.per_msg();
            if state.arena.as_ref().is_none_or(|a| a.remaining() < need) {
                state.arena = None;
                // A network source is live: `auto` drops.
                let slot = if state.when_full.blocks(true) {
                    Some(
                        state
                            .pool
                            .acquire_blocking(self.live.flag(), Duration::from_millis(100))
                            .ok_or(gst::FlowError::Flushing)?,
                    )
                } else {
                    state.pool.try_acquire()
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
                    self.check_link(state)?;
                }
                Err(e) => return Err(self.read_failed(&e)),
            }
        }
    }

    /// With nothing to read: an element error if the watched interface is gone or down.
    fn check_link(&self, state: &mut State) -> Result<(), gst::FlowError> {
        let Some(watch) = state.watch.as_mut() else {
            return Ok(());
        };
        watch.check(std::time::Instant::now()).map_err(|e| {
            gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
            gst::FlowError::Error
        })
    }

    /// Posts the element error for a failed receive; the flow error to return.
    fn read_failed(&self, e: &std::io::Error) -> gst::FlowError {
        gst::element_imp_error!(self, gst::ResourceError::Read, ("recvmmsg failed: {}", e));
        gst::FlowError::Error
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

firehose_core::element_subclass!(UdpSrc, "GstFhUdpSrc", gst_base::PushSrc);

impl ObjectImpl for UdpSrc {
    firehose_core::properties!(|| {
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
                .blurb(
                    "Record each datagram's kernel receive time (SO_TIMESTAMPNS) in the batch \
                     meta (a clock read and a control message per datagram); off, each datagram \
                     gets the time its batch was read (one clock read per batch)",
                )
                .default_value(false)
                .mutable_ready()
                .build()],
        );
        v.extend([
            glib::ParamSpecEnum::builder::<WhenFull>("when-full")
                .nick("When full")
                .blurb("When every pool slot is in use downstream: drop (count drops-pool) or block; auto drops (a network source is live)")
                .mutable_ready()
                .build(),
        ]);
        v.extend(PacketOutput::param_specs());
        v.extend(POOL.param_specs());
        v.extend(stats::properties(&Counters::describe("pool-*, memory")));
        v
    });

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        if self.output.set(value, pspec) {
            return;
        }
        let mut s = lock(&self.settings);
        if s.socket.set(value, pspec) || s.pool.set(value, pspec) {
            return;
        }
        match pspec.name() {
            "batch-size" => s.batch_size = value.get().unwrap(),
            "batch-bytes" => s.batch_bytes = value.get().unwrap(),
            "timestamps" => s.timestamps = value.get().unwrap(),
            "when-full" => s.when_full = value.get().unwrap(),
            other => s.stats_interval.set(other, value),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        if let Some(v) = self.output.get(pspec) {
            return v;
        }
        let s = lock(&self.settings);
        if let Some(v) = s.socket.get(pspec) {
            return v;
        }
        // Sized in bytes only: the slot (batch slab) size is known at start.
        if let Some(v) = s.pool.get(pspec, u64::from(s.batch_bytes).max(1)) {
            return v;
        }
        match pspec.name() {
            "batch-size" => s.batch_size.to_value(),
            "batch-bytes" => s.batch_bytes.to_value(),
            "timestamps" => s.timestamps.to_value(),
            "when-full" => s.when_full.to_value(),
            other => s.stats_interval.value(other),
        }
    }

    firehose_core::live_src_constructed!(true);
}

impl ElementImpl for UdpSrc {
    firehose_core::live_src_send_event!(live);

    firehose_core::element_metadata!(
        "Firehose UDP source",
        "Source/Network",
        "Receives UDP with recvmmsg and GRO into pooled memory, one buffer per batch \
         (application/x-firehose-packets) or, to stock elements, one per datagram",
    );

    firehose_core::pad_templates!(live::output::packets_src_template());
}

impl BaseSrcImpl for UdpSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        self.dry.reset();
        let (mut rx, report) = s.socket.open(
            self.obj().upcast_ref(),
            *CAT,
            s.timestamps,
            s.batch_size as usize,
            s.batch_bytes as usize,
        )?;
        let slab = rx.slab_size();
        let slots = (s.pool.count(slab as u64) as usize).max(2);
        let pool = SlotPool::new(&PoolConfig {
            slot_size: slab,
            slots,
            hugepages: s.pool.policy(),
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
        // Joined on a named interface: watched (checked when a wait finds nothing).
        let watch = s.socket.multicast_iface.as_deref().and_then(|name| {
            let index = firehose_core::netif::iface_index(name).ok()?;
            Some(firehose_core::netif::LinkWatch::new(name, index))
        });
        if watch.is_some() {
            rx.set_idle_return(Some(firehose_core::netif::LinkWatch::EVERY));
        }
        let port_changed = lock(&self.settings).socket.set_bound_port(&report);
        self.counters.reset();
        self.live.start();
        self.readable.start(s.pool.readable_metas);
        self.live.set_waker(rx.waker());
        self.live.set_pool(pool.clone());
        *lock(&self.pool) = Some(pool.clone());
        *lock(&self.state) = Some(State {
            arena: None,
            scratch: vec![0u8; slab],
            lost: Vec::with_capacity(s.batch_size as usize * 8),
            batch_hint: s.batch_size as usize,
            rx,
            pool,
            timer: s.stats_interval.timer(),
            when_full: s.when_full,
            watch,
        });
        if port_changed {
            self.obj().notify("port");
        }
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(state) = lock(&self.state).take() {
            self.counters.kernel_drops.set(state.rx.kernel_drops());
        }
        self.live.stop();
        // The pool stays reachable for the final `stats` read; slots still held
        // downstream keep its memory alive until they are dropped.
        Ok(())
    }

    /// An element downstream that needs its memory (shared segments, pinned pages)
    /// proposes its provider ([`firehose_core::alloc`]): the pool is cut from it, so the
    /// kernel's copy lands there. Another allocator cannot be received into: say so.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        self.readable.decide(self.obj().upcast_ref(), Some(query));
        // Called from the streaming thread before it receives: the state is free.
        if let Some(state) = lock(&self.state).as_mut() {
            if let Some(pool) = alloc::decide_pool(self.obj().upcast_ref(), query, &state.pool)? {
                gst::info!(
                    CAT,
                    imp = self,
                    "receiving into {} memory, as downstream proposed",
                    pool.kind().as_str()
                );
                state.arena = None;
                state.pool = pool.clone();
                self.live.set_pool(pool.clone());
                *lock(&self.pool) = Some(pool);
            }
        }
        self.parent_decide_allocation(query)
    }

    firehose_core::live_src_base!(live, output: output);
}

impl PushSrcImpl for UdpSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        self.live.create(|| {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            let (mem, packets) = self.receive(state)?;
            // Where each datagram was sent (IP_PKTINFO): recordings write the real address.
            let dests = state.rx.take_dests();
            // One clock read per batch: the running time at which the batch was complete.
            let pts = self.obj().current_running_time();
            self.counters.batches.add(1);
            self.dry.check(
                self.obj().upcast_ref(),
                self.counters.drops_pool.get(),
                "the receive pool",
                "pool-size",
            );
            if state.timer.due(Instant::now()) {
                self.post_stats(state);
            }
            let readable = self.readable.wanted();
            drop(guard);

            if self.output.is_list() {
                // One GstBuffer per datagram, each a sub-memory of the one slot: no copy,
                // but the per-buffer cost that stock elements need.
                // Each with its sender (retrieve-sender-address), as udpsrc's.
                Ok(CreateSuccess::NewBufferList(
                    self.output.list_from(&mem, &packets, pts),
                ))
            } else {
                Ok(CreateSuccess::NewBuffer(batch_buffer_with_dests(
                    mem, packets, dests, pts, readable,
                )))
            }
        })
    }
}
