//! `fhibvsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is [`RxEngine`]: settings; open = probe → interface/device/port →
//! hugepage region → queue pair, steering rule and registration → post → RTR →
//! multicast join; receive = the engine's poll loop; stats. The base owns batch-size,
//! the pool properties, output, caps, readable metas, stats, live control and the copy
//! into memory downstream proposes (the NIC writes into the registered region:
//! [`ReceiveInto::Device`]).

use firehose_core::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firehose_core::endpoint::{self as endpoint, Endpoint, EndpointCounters};
use firehose_core::property::OrDefault;
use firehose_core::ring::SharedRing;
use firehose_core::src::prelude::*;
use firehose_core::src::{
    Batch, BatchSize, CountAlias, FilterProps, FilterSettings, Open, PacketSrcExt, PacketSrcImpl,
    PoolProps, PoolSettings, PoolSize, Receive, ReceiveInto, SlotProps, SlotSize,
};
use firehose_core::stats::names;
use firehose_core::transport::{Discarded, InPlaceTransport, Received};
use firehose_core::wake::{self, Waker};
use firehose_core::{MemoryRegion, PacketInfo};

use crate::device::{QueueConfig, VerbsDevice};
use crate::engine::{EngineConfig, RxCounters, RxEngine, Step};
use crate::netif::{self, Target};
use crate::probe::{self, RdmaUnavailable};
use firehose_core::frame::accept::UdpFilter;
use firehose_core::multicast::Membership;

firehose_core::debug_category!(CAT, "fhibvsrc", "Firehose RDMA raw-packet source");

const DEFAULT_ADDRESS: &str = "0.0.0.0";
const DEFAULT_PORT: u32 = 7148;
const DEFAULT_SLOTS: u32 = 8192;
const DEFAULT_SLOT_SIZE: u32 = 9728;
/// Most receive slots (`pool-size` / `slot-size`).
const MAX_SLOTS: u32 = 1 << 20;
/// The pool properties: today's 8192 slots of 9728 bytes by default.
const POOL: PoolProps = PoolProps {
    what: "receive region",
    size_blurb: "Bytes of the registered receive region, in slots of slot-size bytes (one \
                 frame each; at least 2, at most 1048576 slots)",
    default: PoolSize::Bytes(DEFAULT_SLOTS as u64 * DEFAULT_SLOT_SIZE as u64),
    default_slot_bytes: DEFAULT_SLOT_SIZE as u64,
    memory: true,
    hugepages_alias: true,
    count_alias: Some(CountAlias {
        name: "slots",
        min: 2,
        max: MAX_SLOTS,
    }),
};
/// Empty polls spun before the receive loop starts sleeping between polls.
const IDLE_SPINS: u32 = 2048;
/// Sleep between empty polls once idle: bounds the latency added to a quiet stream
/// and the CPU burnt on it (no completion channel yet, see the docs).
const IDLE_SLEEP: Duration = Duration::from_micros(50);

/// The port and address a flow rule steers to the queue.
static FILTER: FilterProps = FilterProps {
    port_nick: "Port",
    port_blurb: "UDP destination port to steer to this queue",
    port_min: 1,
    port_default: DEFAULT_PORT,
    address_blurb:
        "Destination IP (unicast or multicast group) to steer to this queue; 0.0.0.0 = any",
    address_default: Some(DEFAULT_ADDRESS),
};
/// A receive slot: one frame.
static SLOT: SlotProps = SlotProps {
    blurb: "Bytes per receive slot: the largest Ethernet frame accepted",
    min: 64,
    max: 65536,
    default: DEFAULT_SLOT_SIZE,
    old: None,
};

#[derive(Debug, Clone)]
struct Settings {
    filter: FilterSettings,
    interface: Option<String>,
    device: Option<String>,
    slot: SlotSize,
}

firehose_core::property_group! {
    Settings as _s {
        group filter;
        interface: OrDefault => glib::ParamSpecString::builder("interface")
            .nick("Interface")
            .blurb("Network interface (its MAC and RDMA device; multicast is joined on it)")
            .mutable_ready()
            .build();
        device: OrDefault => glib::ParamSpecString::builder("device")
            .nick("Device")
            .blurb("RDMA device (e.g. mlx5_0; empty = the first, see ibv_devices)")
            .mutable_ready()
            .build();
        group slot;
    }
}

impl Settings {
    /// Receive slots: `pool-size` over `slot-size` (or the deprecated `slots`).
    fn slots(&self, pool: &PoolSettings) -> u64 {
        pool.count(self.slot.bytes.into())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            filter: FilterSettings::new(&FILTER),
            interface: None,
            device: None,
            slot: SlotSize::new(&SLOT),
        }
    }
}

/// What exists between start and stop.
struct State {
    engine: RxEngine<VerbsDevice>,
    /// Dropped after the engine (field order), leaving the groups last.
    _memberships: Vec<Membership>,
    /// The interface received on, watched while idle: gone, replaced or down is an
    /// element error naming it.
    watch: Option<firehose_core::netif::LinkWatch>,
}

/// The `fhibvsrc` element's state: settings, counters, and the receive engine while
/// started.
#[derive(Default)]
pub struct IbvSrc {
    settings: Mutex<Settings>,
    counters: Arc<RxCounters>,
    /// Held for the whole receive loop: `stats` and `unlock` never take it.
    state: Mutex<Option<State>>,
    /// The ring, for `stats` (its own lock is only held briefly).
    ring: Mutex<Option<SharedRing>>,
    /// Packets and bytes per endpoint, kept after stop for the final `stats` read.
    endpoints: Mutex<Option<Arc<EndpointCounters>>>,
}

impl IbvSrc {
    fn stats(&self) -> gst::Structure {
        let pool = self.obj().pool_settings();
        let slots = lock(&self.settings).slots(&pool);
        let held = lock(&self.ring)
            .as_ref()
            .map_or(0, |r| lock(r).counts().held as u64);
        let mut s = self.counters.structure();
        s.set(names::POOL_IN_USE, held);
        s.set(names::POOL_SLOTS, slots);
        // Always there (empty before the first start), so tools can rely on it.
        let endpoints = endpoint::stats_value(lock(&self.endpoints).as_deref());
        s.set_value(endpoint::STATS_FIELD, endpoints);
        s
    }

    /// The settings, the endpoints to steer and the device to receive on: checked
    /// (before the probe, so a setting's error is reported where RDMA is missing too),
    /// and the RDMA devices probed (an error says what is missing).
    fn target(&self) -> Result<(Settings, Vec<Endpoint>, Target), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let endpoints = Self::endpoints(&s)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let devices = probe::probe().map_err(|e: RdmaUnavailable| {
            gst::error_msg!(gst::ResourceError::NotFound, ("{}", e), ["{:?}", e])
        })?;
        let target = netif::resolve(
            std::path::Path::new(netif::SYSFS),
            &devices,
            s.interface.as_deref(),
            s.device.as_deref(),
        )
        .map_err(|e| gst::error_msg!(gst::ResourceError::NotFound, ("{}", e)))?;
        gst::info!(
            CAT,
            imp = self,
            "RDMA devices {:?}, using {:?}",
            devices,
            target
        );
        Ok((s, endpoints, target))
    }

    /// The endpoints of `s` (`endpoints`, or `address` on `port`), checked for what
    /// flow rules steer.
    fn endpoints(s: &Settings) -> Result<Vec<Endpoint>, String> {
        let list = s.filter.endpoint_list(&[])?;
        crate::flow::endpoint_addresses(&list)?;
        Ok(list)
    }

    /// Sets up everything between the probe and the first poll.
    fn open_queue(
        &self,
        s: &Settings,
        open: &Open,
        endpoints: &[Endpoint],
        target: &Target,
    ) -> Result<State, gst::ErrorMessage> {
        let slots = match u32::try_from(s.slots(&open.pool)) {
            Ok(n) if (2..=MAX_SLOTS).contains(&n) => n,
            _ => {
                return Err(gst::error_msg!(
                    gst::ResourceError::Settings,
                    (
                        "pool-size {} B makes {} slots of {} B: set pool-size to between 2 and {} slots' worth",
                        open.pool.bytes(s.slot.bytes.into()),
                        s.slots(&open.pool),
                        s.slot.bytes,
                        MAX_SLOTS
                    )
                ))
            }
        };
        let bytes = slots as usize * s.slot.bytes as usize;
        // Registered (pinned) with the device: above the locked-memory limit
        // ibv_reg_mr fails, after the allocation and pre-fault. Say so first.
        firehose_core::memory::check_lockable(bytes).map_err(|e| {
            gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e), ["{:?}", e])
        })?;
        let region = MemoryRegion::allocate(bytes, open.pool.policy()).map_err(|e| {
            gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e), ["{:?}", e])
        })?;
        if let Some(why) = region.fallback_reason() {
            gst::warning!(CAT, imp = self, "receive region in normal pages: {}", why);
        }
        let region = Arc::new(region);
        let rules = crate::flow::endpoint_rules(endpoints, target.mac, target.port)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let dev = VerbsDevice::open(
            &QueueConfig {
                device: target.device.clone(),
                port: target.port,
                slots,
                batch: open.batch_size,
            },
            region.clone(),
            &rules,
        )
        .map_err(|e| gst::error_msg!(gst::ResourceError::OpenRead, ("{}", e), ["{:?}", e]))?;
        gst::info!(
            CAT,
            imp = self,
            "raw-packet QP {} on {} port {} ({}), steering {}",
            dev.qp_num(),
            target.device,
            target.port,
            target.interface,
            endpoints
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let base = dev.base();
        let cfg = EngineConfig {
            slots,
            slot_size: s.slot.bytes,
            batch: open.batch_size,
            reserve: EngineConfig::default_reserve(slots, open.batch_size),
            filter: UdpFilter::endpoints(endpoints),
        };
        // New per start: the counts begin at zero, and `stats` after stop reads the last.
        let counters = Arc::new(EndpointCounters::new(endpoints));
        *lock(&self.endpoints) = Some(counters.clone());
        let mut engine = RxEngine::new(dev, region, base, cfg, self.counters.clone())
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?
            .with_endpoints(counters);
        engine.fill().map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenRead,
                (
                    "posting the first receives failed: {}; check ibv_devinfo and the kernel log",
                    e
                )
            )
        })?;
        engine
            .device_mut()
            .ready_to_receive()
            .map_err(|e| gst::error_msg!(gst::ResourceError::OpenRead, ("{}", e), ["{:?}", e]))?;
        let join_failed = |e: &dyn std::fmt::Display| {
            gst::error_msg!(
                gst::ResourceError::OpenRead,
                (
                    "{} on {}; check that the interface is up and has an IPv4 address, and that net.ipv4.igmp_max_memberships allows the groups",
                    e,
                    target.interface
                )
            )
        };
        let ifindex =
            firehose_core::netif::iface_index(&target.interface).map_err(|e| join_failed(&e))?;
        let memberships =
            firehose_core::multicast::join_all(endpoints, ifindex).map_err(|e| join_failed(&e))?;
        *lock(&self.ring) = Some(engine.ring().clone());
        let watch = Some(firehose_core::netif::LinkWatch::new(
            &target.interface,
            ifindex,
        ));
        Ok(State {
            engine,
            _memberships: memberships,
            watch,
        })
    }
}

firehose_core::packet_src! {
    IbvSrc = "GstFhIbvSrc", own properties settings = Settings::default();
    "Firehose RDMA raw-packet source", "Source/Network",
    "Receives UDP through an RDMA raw-packet queue pair into a registered region (libibverbs loaded at run time)";
}

impl PacketSrcImpl for IbvSrc {
    const BATCH_SIZE: BatchSize = BatchSize::up_to(
        4096,
        "Completions polled, and slots re-posted, per batch (one buffer per batch)",
    );
    const POOL: &'static PoolProps = &POOL;
    const RECEIVE_INTO: ReceiveInto = ReceiveInto::Device {
        why: "the NIC writes into its registered receive region",
    };

    const STATS: &'static [&'static [&'static str]] = &[
        RxCounters::NAMES,
        &[names::POOL_IN_USE, names::POOL_SLOTS, endpoint::STATS_FIELD],
    ];

    /// A receive slot.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        lock(&self.settings).slot.bytes.into()
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let (s, endpoints, target) = self.target()?;
        self.counters.reset();
        // The idle naps between polls sleep in ppoll on it, so unlock() cuts them short.
        self.obj().live().new_waker().map_err(|e| {
            gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
        })?;
        let state = self.open_queue(&s, open, &endpoints, &target)?;
        *lock(&self.state) = Some(state);
        // A copy into proposed memory takes a batch in one slot.
        Ok(firehose_core::alloc::CopyOut::SLOT_BYTES)
    }

    fn close(&self) {
        // Dropping the state destroys the QP, flows and MR, reclaims the posted slots
        // and leaves the multicast group; slots held downstream return when their
        // buffers go (the region stays mapped until then).
        *lock(&self.state) = None;
        *lock(&self.ring) = None;
    }

    fn counters(&self) -> gst::Structure {
        self.stats()
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let got = next_batch(state, rx.live.flag(), &mut |d| rx.live.nap(d), &mut || {
            rx.post_stats_if_due()
        });
        match got {
            Ok(batch) => {
                let pts = self.obj().current_running_time();
                Ok(batch.into_buffer(pts, rx.readable).into())
            }
            Err(Stopped::Interrupted) => Err(gst::FlowError::Flushing),
            Err(Stopped::Link(e)) => Err(firehose_core::element::read_error(&*self.obj(), e)),
            Err(Stopped::Device(e)) => {
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::Read,
                    ("RDMA receive failed: {}; check the device with ibv_devinfo and the kernel log (dmesg)", e),
                    ["{:?}", e]
                );
                Err(gst::FlowError::Error)
            }
        }
    }

    /// The receive queue alone, for an engine that takes each batch where the NIC wrote
    /// it in the registered ring (`fhspeadsrc transport="fhibvsrc …"`).
    fn open_in_place(
        &self,
        open: &Open,
        waker: Arc<Waker>,
    ) -> Result<Box<dyn InPlaceTransport>, gst::ErrorMessage> {
        let (s, endpoints, target) = self.target()?;
        self.counters.reset();
        let state = self.open_queue(&s, open, &endpoints, &target)?;
        Ok(Box::new(InPlace {
            state,
            waker,
            counters: self.counters.clone(),
        }))
    }
}

/// Why [`next_batch`] returned without a batch.
enum Stopped {
    /// `stop` was raised, or a nap was cut short.
    Interrupted,
    /// The interface went away, was replaced or went down.
    Link(String),
    /// The device failed.
    Device(crate::engine::EngineError),
}

/// Polls until a run of frames is ready: spins a while after an empty poll, then naps
/// (`nap`, false when cut short) and watches the link, calling `idle` each nap.
fn next_batch(
    state: &mut State,
    stop: &AtomicBool,
    nap: &mut dyn FnMut(Duration) -> bool,
    idle: &mut dyn FnMut(),
) -> Result<crate::engine::Batch, Stopped> {
    let mut idle_polls = 0u32;
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(Stopped::Interrupted);
        }
        let step = state.engine.fill().and_then(|_| {
            // One clock read per poll, stamped on every packet of its batch.
            state.engine.step(firehose_core::batch::unix_ns())
        });
        match step.map_err(Stopped::Device)? {
            Step::Batch(batch) => return Ok(batch),
            Step::Busy => idle_polls = 0,
            Step::Idle => {
                idle_polls = idle_polls.saturating_add(1);
                if idle_polls < IDLE_SPINS {
                    std::hint::spin_loop();
                    continue;
                }
                if !nap(IDLE_SLEEP) {
                    return Err(Stopped::Interrupted);
                }
                if let Some(Err(e)) = state.watch.as_mut().map(|w| w.check(Instant::now())) {
                    return Err(Stopped::Link(e));
                }
                idle();
            }
        }
    }
}

/// The receive queue alone, for an engine fed in place: each run of slots is read where
/// the NIC wrote it, then its slots go straight back to be posted again.
struct InPlace {
    state: State,
    waker: Arc<Waker>,
    counters: Arc<RxCounters>,
}

impl InPlaceTransport for InPlace {
    fn receive_in_place(
        &mut self,
        stop: &AtomicBool,
        wait: bool,
        consume: &mut dyn FnMut(&[u8], &[PacketInfo]),
    ) -> std::io::Result<Received> {
        let waker = self.waker.clone();
        let mut empty = false;
        // Without `wait`, the first nap means nothing is queued.
        let got = next_batch(
            &mut self.state,
            stop,
            &mut |d| {
                empty = !wait;
                wait && matches!(wake::nap(&waker, d.as_nanos() as u64), Ok(false))
            },
            &mut || {},
        );
        let batch = match got {
            Ok(b) => b,
            Err(Stopped::Interrupted) if empty => return Ok(Received::Nothing),
            Err(Stopped::Interrupted) => return Ok(Received::Interrupted),
            Err(Stopped::Link(e)) => return Err(std::io::Error::other(e)),
            Err(Stopped::Device(e)) => return Err(std::io::Error::other(format!("{e}"))),
        };
        let map = batch
            .memory
            .map_readable()
            .map_err(|_| std::io::Error::other("could not map a receive run"))?;
        consume(map.as_slice(), &batch.packets);
        Ok(Received::Batch { used: map.len() })
        // The run's slots go back to the ring as `batch` drops here.
    }

    fn discarded(&self) -> Discarded {
        let c = &self.counters;
        Discarded {
            truncated: c.truncated.get(),
            empty: c.empty.get(),
            other: c.malformed.get() + c.filtered.get() + c.completion_errors.get(),
        }
    }

    /// Good frames dropped to keep the NIC supplied with slots.
    fn device_drops(&mut self) -> u64 {
        self.counters.drops_pool.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_properties_round_trip() {
        gst::init().unwrap();
        let mut s = Settings::default();
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!(
            (s.filter.port, s.slot.bytes),
            (DEFAULT_PORT + 1, DEFAULT_SLOT_SIZE + 1)
        );
        assert_eq!(s.filter.address.as_deref(), Some("0.0.0.0-test"));
        assert_eq!(s.device.as_deref(), Some("value-test"));
    }
}
