//! `fhudpsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is [`crate::recv::UdpReceiver`]. The base owns batch-size, the pool,
//! output, caps, readable metas, stats and live control; this file holds the socket
//! properties, `batch-bytes`, `timestamps`, `when-full` and how one batch is received.

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::sync::lock;
use std::sync::{Arc, Mutex};

use firehose_core::endpoint::{stats_value, EndpointCounters, STATS_FIELD as ENDPOINTS_FIELD};
use std::time::Duration;

use firehose_core::props::WhenFull;
use firehose_core::src::prelude::*;
use firehose_core::src::{
    self as live, Batch, BatchSize, Open, PacketSrcExt, PacketSrcImpl, PoolProps, PoolSize, Receive,
};
use firehose_core::stats::names;
use firehose_core::{PacketInfo, SlotArena, SlotPool};

use crate::recv::{Recv, RecvCounts, UdpReceiver};
use crate::socket_settings::SocketSettings;

firehose_core::debug_category!(CAT, "fhudpsrc", "Firehose UDP source");

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
    batch_bytes: u32,
    timestamps: bool,
    when_full: WhenFull,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            socket: SocketSettings::default(),
            batch_bytes: DEFAULT_BATCH_BYTES,
            timestamps: false,
            when_full: WhenFull::Auto,
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group socket;
        batch_bytes => glib::ParamSpecUInt::builder("batch-bytes")
            .nick("Batch bytes")
            .blurb("Most buffer bytes one batch may fill (0 = no limit): lowers batch-size so that a batch stays in the CPU cache until downstream reads it; with GRO each message takes 64 KiB")
            .maximum(64 << 20)
            .default_value(DEFAULT_BATCH_BYTES)
            .mutable_ready()
            .build();
        timestamps => glib::ParamSpecBoolean::builder("timestamps")
            .nick("Kernel timestamps")
            .blurb(
                "Record each datagram's kernel receive time (SO_TIMESTAMPNS) in the batch \
                 meta (a clock read and a control message per datagram); off, each datagram \
                 gets the time its batch was read (one clock read per batch)",
            )
            .default_value(false)
            .mutable_ready()
            .build();
        when_full => glib::ParamSpecEnum::builder::<WhenFull>("when-full")
            .nick("When full")
            .blurb("When every pool slot is in use downstream: drop (count drops-pool) or block; auto drops (a network source is live)")
            .mutable_ready()
            .build();
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
        /// Datagrams to a destination not in the endpoint list.
        filtered: names::FILTERED,
    }
}

impl Counters {
    fn add(&self, c: &RecvCounts) {
        self.packets.add(c.packets);
        self.bytes.add(c.bytes);
        self.truncated.add(c.truncated);
        self.empty.add(c.empty);
        self.filtered.add(c.filtered);
    }
}

struct State {
    rx: UdpReceiver,
    /// The slot being filled by successive batches, and the pool it came from (a pool
    /// the base replaced, for memory downstream proposed, is not filled further).
    arena: Option<(SlotArena, SlotPool)>,
    /// Where datagrams go when the pool is empty under when-full=drop, to be counted.
    scratch: Vec<u8>,
    /// Reused list of the datagrams dropped into `scratch`.
    lost: Vec<PacketInfo>,
    /// Initial capacity of each batch's packet list.
    batch_hint: usize,
    when_full: WhenFull,
    /// The interface of `multicast-iface`, watched while nothing arrives: a capture
    /// whose interface went away or down says so (an element error).
    watch: Option<firehose_core::netif::LinkWatch>,
}

#[derive(Default)]
pub struct UdpSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    counters: Counters,
    /// The socket's per-endpoint counters, outside `state` (which the streaming thread
    /// holds while it waits); kept after stop so that the last stats still show them.
    endpoints: Mutex<Option<Arc<EndpointCounters>>>,
    /// Says on the bus when the pool runs dry.
    dry: live::DryWarning,
}

impl UdpSrc {
    /// Receives until one batch is ready (as a memory over the bytes it used, plus its
    /// datagrams), the wait is interrupted, or an error occurs.
    fn fill(
        &self,
        state: &mut State,
        rx: &Receive<'_>,
    ) -> Result<(gst::Memory, Vec<PacketInfo>), gst::FlowError> {
        let pool = rx.pool()?;
        loop {
            if rx.live.is_flushing() {
                return Err(gst::FlowError::Flushing);
            }
            // A fresh slot always qualifies (slots of proposed memory may be smaller);
            // one that cannot take the next message never does.
            let (want, one) = (state.rx.next_slab(), state.rx.per_msg());
            let usable = |(a, p): &(SlotArena, SlotPool)| {
                a.remaining() >= want.min(a.capacity()).max(one) && p.is(pool)
            };
            if !state.arena.as_ref().is_some_and(usable) {
                state.arena = None;
                // A network source is live: `auto` drops.
                let slot = if state.when_full.blocks(true) {
                    Some(
                        pool.acquire_blocking(rx.live.flag(), Duration::from_millis(100))
                            .ok_or(gst::FlowError::Flushing)?,
                    )
                } else {
                    pool.try_acquire()
                };
                match slot {
                    Some(slot) => state.arena = Some((SlotArena::new(slot), pool.clone())),
                    None => {
                        self.drop_queued(state)?;
                        continue;
                    }
                }
            }
            let (arena, _) = state.arena.as_mut().expect("arena set above");
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
        watch
            .check(std::time::Instant::now())
            .map_err(|e| firehose_core::element::read_error(&*self.obj(), e))
    }

    /// Posts the element error for a failed receive; the flow error to return.
    fn read_failed(&self, e: &std::io::Error) -> gst::FlowError {
        firehose_core::element::read_error(&*self.obj(), format_args!("recvmmsg failed: {e}"))
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
                self.counters.filtered.add(counts.filtered);
                Ok(())
            }
            Err(e) => Err(self.read_failed(&e)),
        }
    }
}

firehose_core::packet_src! {
    UdpSrc = "GstFhUdpSrc", own properties settings = Settings::default();
    "Firehose UDP source", "Source/Network",
    "Receives UDP with recvmmsg and GRO into pooled memory, one buffer per batch \
     (application/x-firehose-packets) or, to stock elements, one per datagram";
}

impl PacketSrcImpl for UdpSrc {
    const BATCH_SIZE: BatchSize = BatchSize::up_to(
        1024,
        "Most datagrams received by one recvmmsg and pushed as one buffer",
    );
    const POOL: &'static PoolProps = &POOL;
    const STATS: &'static [&'static [&'static str]] = &[Counters::NAMES, &[ENDPOINTS_FIELD]];

    /// Sized in bytes only: the slot (batch slab) size is known at start.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        u64::from(lock(&self.settings).batch_bytes).max(1)
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let batch_size = open.batch_size;
        let s = lock(&self.settings).clone();
        self.dry.reset();
        let (mut rx, report) = s.socket.open(
            self.obj().upcast_ref(),
            *CAT,
            s.timestamps,
            batch_size as usize,
            s.batch_bytes as usize,
        )?;
        let slab = rx.slab_size();
        gst::info!(
            CAT,
            imp = self,
            "bound {:?}, rcvbuf {} B, gro {}, {} messages per batch, slots of {} B",
            report.local,
            report.buffer_granted,
            report.gro,
            rx.batch_len(),
            slab,
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
        *lock(&self.endpoints) = Some(rx.endpoint_counters());
        self.obj().live().set_waker(rx.waker());
        *lock(&self.state) = Some(State {
            arena: None,
            scratch: vec![0u8; slab],
            lost: Vec::with_capacity(batch_size as usize * 8),
            batch_hint: batch_size as usize,
            rx,
            when_full: s.when_full,
            watch,
        });
        if port_changed {
            self.obj().notify("port");
        }
        Ok(slab)
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let (mem, packets) = self.fill(state, rx)?;
        // Where each datagram was sent (IP_PKTINFO): recordings write the real address.
        let dests = state.rx.take_dests();
        drop(guard);
        // One clock read per batch: the running time at which the batch was complete.
        let pts = self.obj().current_running_time();
        self.counters.batches.add(1);
        self.dry.check(
            self.obj().upcast_ref(),
            self.counters.drops_pool.get(),
            "the receive pool",
            "pool-size",
        );
        Ok(if rx.list() {
            // One GstBuffer per datagram, each a sub-memory of the one slot: no copy,
            // but the per-buffer cost that stock elements need; each with its sender
            // (retrieve-sender-address), as udpsrc's.
            Batch::List(rx.output.list_from(&mem, &packets, pts))
        } else {
            Batch::Buffer(batch_buffer_with_dests(
                mem,
                packets,
                dests,
                pts,
                rx.readable,
            ))
        })
    }

    fn counters(&self) -> gst::Structure {
        let mut s = self.counters.structure();
        // Always there (empty before the first start), so tools can rely on it.
        let endpoints = stats_value(lock(&self.endpoints).as_deref());
        s.set_value(ENDPOINTS_FIELD, endpoints);
        s
    }

    fn refresh_counters(&self) {
        if let Some(state) = lock(&self.state).as_ref() {
            self.counters.kernel_drops.set(state.rx.kernel_drops());
        }
    }

    fn close(&self) {
        if let Some(state) = lock(&self.state).take() {
            self.counters.kernel_drops.set(state.rx.kernel_drops());
        }
    }
}
