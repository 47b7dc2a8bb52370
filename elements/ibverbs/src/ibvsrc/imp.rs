//! `fhibvsrc` implementation: settings; start = probe → interface/device/port →
//! hugepage region → queue pair, steering rule and registration → post → RTR →
//! multicast join; create = the engine's poll loop; stats.

use firehose_core::sync::lock;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firehose_core::ring::SharedRing;
use firehose_core::src::prelude::*;
use firehose_core::src::{
    self as live, CountAlias, LiveControl, PoolProps, PoolSettings, PoolSize,
};
use firehose_core::stats::{self, names, StatsInterval, StatsTimer};
use firehose_core::MemoryRegion;

use crate::device::{QueueConfig, VerbsDevice};
use crate::engine::{EngineConfig, RxCounters, RxEngine, Step};
use crate::netif::{self, Membership, Target};
use crate::probe::{self, RdmaUnavailable};
use firehose_core::frame::accept::UdpFilter;

firehose_core::debug_category!(CAT, "fhibvsrc", "Firehose RDMA raw-packet source");

const DEFAULT_ADDRESS: &str = "0.0.0.0";
const DEFAULT_PORT: u32 = 7148;
const DEFAULT_SLOTS: u32 = 8192;
const DEFAULT_SLOT_SIZE: u32 = 9728;
const DEFAULT_BATCH_SIZE: u32 = 64;
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

#[derive(Debug, Clone)]
struct Settings {
    address: String,
    port: u32,
    interface: Option<String>,
    device: Option<String>,
    pool: PoolSettings,
    slot_size: u32,
    batch_size: u32,
    stats_interval: StatsInterval,
}

impl Settings {
    /// Receive slots: `pool-size` over `slot-size` (or the deprecated `slots`).
    fn slots(&self) -> u64 {
        self.pool.count(self.slot_size.into())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            address: DEFAULT_ADDRESS.into(),
            port: DEFAULT_PORT,
            interface: None,
            device: None,
            pool: PoolSettings::new(&POOL),
            slot_size: DEFAULT_SLOT_SIZE,
            batch_size: DEFAULT_BATCH_SIZE,
            stats_interval: StatsInterval::default(),
        }
    }
}

/// What exists between start and stop.
struct State {
    engine: RxEngine<VerbsDevice>,
    /// Dropped after the engine (field order), leaving the group last.
    _membership: Option<Membership>,
    timer: StatsTimer,
    /// The interface received on, watched while idle: gone, replaced or down is an
    /// element error naming it.
    watch: Option<firehose_core::netif::LinkWatch>,
}

/// The `fhibvsrc` element's state: settings, counters, and the receive engine while
/// started.
#[derive(Default)]
pub struct IbvSrc {
    /// `output`, `caps`, and what was negotiated: batches or one buffer per datagram.
    output: firehose_core::src::PacketOutput,
    /// Copies each batch into the memory downstream asked for, if it did (the NIC
    /// cannot write there).
    copy: firehose_core::alloc::CopyOut,
    /// `readable-metas`, and whether downstream may read them (the allocation query).
    readable: firehose_core::meta::readable::ReadableOutput,
    settings: Mutex<Settings>,
    counters: Arc<RxCounters>,
    /// Held for the whole receive loop: `stats` and `unlock` never take it.
    state: Mutex<Option<State>>,
    /// The ring, for `stats` (its own lock is only held briefly).
    ring: Mutex<Option<SharedRing>>,
    live: LiveControl,
}

impl IbvSrc {
    fn stats(&self) -> gst::Structure {
        let slots = lock(&self.settings).slots();
        let held = lock(&self.ring)
            .as_ref()
            .map_or(0, |r| lock(r).counts().held as u64);
        let mut s = self.counters.structure();
        self.copy.append_stats(&mut s);
        s.set(names::POOL_IN_USE, held);
        s.set(names::POOL_SLOTS, slots);
        s
    }

    /// Sets up everything between the probe and the first poll.
    fn open(
        &self,
        s: &Settings,
        address: Ipv4Addr,
        target: &Target,
    ) -> Result<State, gst::ErrorMessage> {
        let slots = match u32::try_from(s.slots()) {
            Ok(n) if (2..=MAX_SLOTS).contains(&n) => n,
            _ => {
                return Err(gst::error_msg!(
                    gst::ResourceError::Settings,
                    (
                        "pool-size {} B makes {} slots of {} B: set pool-size to between 2 and {} slots' worth",
                        s.pool.bytes(s.slot_size.into()),
                        s.slots(),
                        s.slot_size,
                        MAX_SLOTS
                    )
                ))
            }
        };
        let bytes = slots as usize * s.slot_size as usize;
        // Registered (pinned) with the device: above the locked-memory limit
        // ibv_reg_mr fails, after the allocation and pre-fault. Say so first.
        firehose_core::memory::check_lockable(bytes).map_err(|e| {
            gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e), ["{:?}", e])
        })?;
        let region = MemoryRegion::allocate(bytes, s.pool.policy()).map_err(|e| {
            gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e), ["{:?}", e])
        })?;
        if let Some(why) = region.fallback_reason() {
            gst::warning!(CAT, imp = self, "receive region in normal pages: {}", why);
        }
        let region = Arc::new(region);
        let port = s.port as u16;
        let rule = crate::flow::flow_rule(address, port, target.mac, target.port);
        let dev = VerbsDevice::open(
            &QueueConfig {
                device: target.device.clone(),
                port: target.port,
                slots,
                batch: s.batch_size,
            },
            region.clone(),
            &[rule],
        )
        .map_err(|e| gst::error_msg!(gst::ResourceError::OpenRead, ("{}", e), ["{:?}", e]))?;
        gst::info!(
            CAT,
            imp = self,
            "raw-packet QP {} on {} port {} ({}), steering {}:{}",
            dev.qp_num(),
            target.device,
            target.port,
            target.interface,
            address,
            port
        );
        let base = dev.base();
        let cfg = EngineConfig {
            slots,
            slot_size: s.slot_size,
            batch: s.batch_size,
            reserve: EngineConfig::default_reserve(slots, s.batch_size),
            filter: UdpFilter::port(
                port,
                (!address.is_unspecified()).then_some(IpAddr::V4(address)),
            ),
        };
        let mut engine = RxEngine::new(dev, region, base, cfg, self.counters.clone())
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
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
        let membership = if address.is_multicast() {
            Some(netif::join_multicast(address, &target.interface).map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    (
                        "joining multicast group {} on {} failed: {}; check that the interface is up and has an IPv4 address",
                        address,
                        target.interface,
                        e
                    )
                )
            })?)
        } else {
            None
        };
        *lock(&self.ring) = Some(engine.ring().clone());
        let watch = firehose_core::netif::iface_index(&target.interface)
            .ok()
            .map(|index| firehose_core::netif::LinkWatch::new(&target.interface, index));
        Ok(State {
            engine,
            _membership: membership,
            timer: s.stats_interval.timer(),
            watch,
        })
    }
}

firehose_core::element_subclass!(IbvSrc, "GstFhIbvSrc", gst_base::PushSrc);

impl ObjectImpl for IbvSrc {
    firehose_core::properties!(|| {
        let mut v = vec![
            glib::ParamSpecString::builder("address")
                .nick("Address")
                .blurb("Destination IP (unicast or multicast group) to steer to this queue; 0.0.0.0 = any")
                .default_value(Some(DEFAULT_ADDRESS))
                .mutable_ready()
                .build(),
            glib::ParamSpecInt::builder("port")
                .nick("Port")
                .blurb("UDP destination port to steer to this queue")
                .minimum(1)
                .maximum(65535)
                .default_value(DEFAULT_PORT as i32)
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("interface")
                .nick("Interface")
                .blurb("Network interface (its MAC and RDMA device; multicast is joined on it)")
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("device")
                .nick("Device")
                .blurb("RDMA device (e.g. mlx5_0; empty = the first, see ibv_devices)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("slot-size")
                .nick("Slot size")
                .blurb("Bytes per receive slot: the largest Ethernet frame accepted")
                .minimum(64)
                .maximum(65536)
                .default_value(DEFAULT_SLOT_SIZE)
                .mutable_ready()
                .build(),
            live::batch_size(
                "Completions polled, and slots re-posted, per batch (one buffer per batch)",
                4096,
                DEFAULT_BATCH_SIZE,
            ),
        ];
        v.extend(firehose_core::src::PacketOutput::param_specs());
        v.extend(POOL.param_specs());
        v.extend(stats::properties(&RxCounters::describe(
            "pool-in-use, pool-slots",
        )));
        v
    });

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        if self.output.set(value, pspec) {
            return;
        }
        let mut s = lock(&self.settings);
        if s.pool.set(value, pspec) {
            return;
        }
        let opt = |v: Option<String>| v.filter(|x| !x.is_empty());
        match pspec.name() {
            "address" => {
                s.address = value
                    .get::<Option<String>>()
                    .unwrap()
                    .unwrap_or_else(|| DEFAULT_ADDRESS.into())
            }
            "port" => s.port = value.get::<i32>().unwrap() as u32,
            "interface" => s.interface = opt(value.get().unwrap()),
            "device" => s.device = opt(value.get().unwrap()),
            "slot-size" => s.slot_size = value.get().unwrap(),
            "batch-size" => s.batch_size = value.get().unwrap(),
            other => s.stats_interval.set(other, value),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if let Some(v) = self.output.get(pspec) {
            return v;
        }
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        if let Some(v) = s.pool.get(pspec, s.slot_size.into()) {
            return v;
        }
        match pspec.name() {
            "address" => s.address.to_value(),
            "port" => (s.port as i32).to_value(),
            "interface" => s.interface.to_value(),
            "device" => s.device.to_value(),
            "slot-size" => s.slot_size.to_value(),
            "batch-size" => s.batch_size.to_value(),
            other => s.stats_interval.value(other),
        }
    }

    firehose_core::live_src_constructed!(true);
}

impl ElementImpl for IbvSrc {
    firehose_core::live_src_send_event!(live);

    firehose_core::element_metadata!(
        "Firehose RDMA raw-packet source",
        "Source/Network",
        "Receives UDP through an RDMA raw-packet queue pair into a registered region (libibverbs loaded at run time)",
    );

    firehose_core::pad_templates!(live::output::packets_src_template());
}

impl BaseSrcImpl for IbvSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let address: IpAddr = s.address.parse().map_err(|_| {
            gst::error_msg!(
                gst::ResourceError::Settings,
                (
                    "address {:?} is not an IPv4 or IPv6 address; give the destination IP or multicast group",
                    s.address
                )
            )
        })?;
        let IpAddr::V4(address) = address else {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                (
                    "address {} is IPv6, but fhibvsrc steers IPv4 only (as spead2's ibverbs receiver); use fhudpsrc for IPv6",
                    address
                )
            ));
        };
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
        self.counters.reset();
        self.live.start();
        self.readable.start(s.pool.readable_metas);
        // The idle naps between polls sleep in ppoll on it, so unlock() cuts them short.
        self.live.new_waker().map_err(|e| {
            gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
        })?;
        let state = self.open(&s, address, &target)?;
        *lock(&self.state) = Some(state);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Dropping the state destroys the QP, flows and MR, reclaims the posted slots
        // and leaves the multicast group; slots held downstream return when their
        // buffers go (the region stays mapped until then).
        *lock(&self.state) = None;
        *lock(&self.ring) = None;
        self.live.stop();
        Ok(())
    }

    firehose_core::live_src_base!(live, output: output);
    firehose_core::decide_allocation_copies!(
        copy,
        "the NIC writes into its registered receive region"
    );
}

impl PushSrcImpl for IbvSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        self.live.create(|| {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            let mut idle = 0u32;
            loop {
                if self.live.is_flushing() {
                    return Err(gst::FlowError::Flushing);
                }
                let step = state.engine.fill().and_then(|_| {
                    // One clock read per poll, stamped on every packet of its batch.
                    state.engine.step(firehose_core::batch::unix_ns())
                });
                match step {
                    Ok(Step::Batch(batch)) => {
                        let pts = self.obj().current_running_time();
                        if state.timer.due(Instant::now()) {
                            stats::post(self.obj().upcast_ref(), self.stats());
                        }
                        let buf = batch.into_buffer(pts, self.readable.wanted());
                        return Ok(self.output.push(self.copy.out(buf)));
                    }
                    Ok(Step::Busy) => idle = 0,
                    Ok(Step::Idle) => {
                        idle = idle.saturating_add(1);
                        if idle < IDLE_SPINS {
                            std::hint::spin_loop();
                        } else {
                            if !self.live.nap(IDLE_SLEEP) {
                                return Err(gst::FlowError::Flushing);
                            }
                            if let Some(Err(e)) = state.watch.as_mut().map(|w| w.check(Instant::now()))
                            {
                                gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
                                return Err(gst::FlowError::Error);
                            }
                            if state.timer.due(Instant::now()) {
                                stats::post(self.obj().upcast_ref(), self.stats());
                            }
                        }
                    }
                    Err(e) => {
                        gst::element_imp_error!(
                            self,
                            gst::ResourceError::Read,
                            ("RDMA receive failed: {}; check the device with ibv_devinfo and the kernel log (dmesg)", e),
                            ["{:?}", e]
                        );
                        return Err(gst::FlowError::Error);
                    }
                }
            }
        })
    }
}
