//! `fhibvsrc` implementation: settings; start = probe → interface/device/port →
//! hugepage region → queue pair, steering rule and registration → post → RTR →
//! multicast join; create = the engine's poll loop; stats.

use firehose_core::sync::lock;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use firehose_core::caps as fcaps;
use firehose_core::props::Hugepages;
use firehose_core::ring::SharedRing;
use firehose_core::stats::{self, names, StatsTimer};
use firehose_core::MemoryRegion;
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use crate::device::{QueueConfig, VerbsDevice};
use crate::engine::{EngineConfig, RxCounters, RxEngine, Step};
use crate::netif::{self, Membership, Target};
use crate::probe::{self, RdmaUnavailable};
use firehose_core::frame::accept::UdpFilter;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "fhibvsrc",
        gst::DebugColorFlags::empty(),
        Some("Firehose RDMA raw-packet source"),
    )
});

const DEFAULT_ADDRESS: &str = "0.0.0.0";
const DEFAULT_PORT: u32 = 7148;
const DEFAULT_SLOTS: u32 = 8192;
const DEFAULT_SLOT_SIZE: u32 = 9728;
const DEFAULT_BATCH_SIZE: u32 = 64;
/// Element-local counter: completions with an error status other than "too long".
const COMPLETION_ERRORS: &str = "completion-errors";
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
    slots: u32,
    slot_size: u32,
    batch_size: u32,
    hugepages: Hugepages,
    stats_interval: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            address: DEFAULT_ADDRESS.into(),
            port: DEFAULT_PORT,
            interface: None,
            device: None,
            slots: DEFAULT_SLOTS,
            slot_size: DEFAULT_SLOT_SIZE,
            batch_size: DEFAULT_BATCH_SIZE,
            hugepages: Hugepages::Auto,
            stats_interval: stats::DEFAULT_INTERVAL_MS,
        }
    }
}

/// What exists between start and stop.
struct State {
    engine: RxEngine<VerbsDevice>,
    /// Dropped after the engine (field order), leaving the group last.
    _membership: Option<Membership>,
    timer: StatsTimer,
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
    flushing: AtomicBool,
}

impl IbvSrc {
    fn stats(&self) -> gst::Structure {
        let c = &self.counters;
        let slots = u64::from(lock(&self.settings).slots);
        let held = lock(&self.ring)
            .as_ref()
            .map_or(0, |r| lock(r).counts().held as u64);
        stats::structure(&[
            (names::PACKETS, c.packets.get()),
            (names::BYTES, c.bytes.get()),
            (names::BATCHES, c.batches.get()),
            (names::DROPS_POOL, c.drops_pool.get()),
            (names::MALFORMED, c.malformed.get()),
            (names::TRUNCATED, c.truncated.get()),
            (names::FILTERED, c.filtered.get()),
            (names::EMPTY, c.empty.get()),
            (COMPLETION_ERRORS, c.completion_errors.get()),
            (names::POOL_IN_USE, held),
            (names::POOL_SLOTS, slots),
        ])
    }

    /// Sets up everything between the probe and the first poll.
    fn open(
        &self,
        s: &Settings,
        address: Ipv4Addr,
        target: &Target,
    ) -> Result<State, gst::ErrorMessage> {
        let bytes = s.slots as usize * s.slot_size as usize;
        let region = MemoryRegion::allocate(bytes, s.hugepages.into()).map_err(|e| {
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
                slots: s.slots,
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
            slots: s.slots,
            slot_size: s.slot_size,
            batch: s.batch_size,
            reserve: EngineConfig::default_reserve(s.slots, s.batch_size),
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
        Ok(State {
            engine,
            _membership: membership,
            timer: StatsTimer::new(s.stats_interval),
        })
    }
}

#[glib::object_subclass]
impl ObjectSubclass for IbvSrc {
    const NAME: &'static str = "GstFhIbvSrc";
    type Type = super::IbvSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for IbvSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
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
                glib::ParamSpecUInt::builder("slots")
                    .nick("Slots")
                    .blurb("Receive slots in the registered region (one frame each)")
                    .minimum(2)
                    .maximum(1 << 20)
                    .default_value(DEFAULT_SLOTS)
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
                glib::ParamSpecUInt::builder("batch-size")
                    .nick("Batch size")
                    .blurb("Completions polled, and slots re-posted, per batch (one buffer per batch)")
                    .minimum(1)
                    .maximum(4096)
                    .default_value(DEFAULT_BATCH_SIZE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
                    .nick("Hugepages")
                    .blurb("Receive region in hugepages: auto (fall back with a warning), require, off")
                    .mutable_ready()
                    .build(),
            ];
            v.extend(stats::properties(
                "packets, bytes, batches, drops-pool, malformed, truncated, filtered, empty, completion-errors, pool-in-use, pool-slots",
            ));
            v
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
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
            "slots" => s.slots = value.get().unwrap(),
            "slot-size" => s.slot_size = value.get().unwrap(),
            "batch-size" => s.batch_size = value.get().unwrap(),
            "hugepages" => s.hugepages = value.get().unwrap(),
            "stats-interval" => s.stats_interval = value.get().unwrap(),
            other => unreachable!("unknown property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        match pspec.name() {
            "address" => s.address.to_value(),
            "port" => (s.port as i32).to_value(),
            "interface" => s.interface.to_value(),
            "device" => s.device.to_value(),
            "slots" => s.slots.to_value(),
            "slot-size" => s.slot_size.to_value(),
            "batch-size" => s.batch_size.to_value(),
            "hugepages" => s.hugepages.to_value(),
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

impl GstObjectImpl for IbvSrc {}

impl ElementImpl for IbvSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "Firehose RDMA raw-packet source",
                "Source/Network",
                "Receives UDP through an RDMA raw-packet queue pair into a registered region (libibverbs loaded at run time)",
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
                &fcaps::packets_caps(),
            )
            .unwrap()]
        });
        TEMPLATES.as_ref()
    }
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
        self.flushing.store(false, Ordering::Release);
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
        Ok(())
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::Release);
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let caps = fcaps::packets_caps();
        Some(match filter {
            Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
            None => caps,
        })
    }
}

impl PushSrcImpl for IbvSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let mut idle = 0u32;
        loop {
            if self.flushing.load(Ordering::Acquire) {
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
                    return Ok(CreateSuccess::NewBuffer(batch.into_buffer(pts)));
                }
                Ok(Step::Busy) => idle = 0,
                Ok(Step::Idle) => {
                    idle = idle.saturating_add(1);
                    if idle < IDLE_SPINS {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(IDLE_SLEEP);
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
    }
}
