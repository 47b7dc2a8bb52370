//! `fhibvsrc` implementation: settings, the device probe at start, stats.

use firehose_core::sync::lock;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use firehose_core::caps as fcaps;
use firehose_core::props::Hugepages;
use firehose_core::stats::{self, names, Counter};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use crate::probe::{self, RdmaUnavailable};

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

/// Counters read by the `stats` property from any thread.
#[derive(Default)]
struct Counters {
    packets: Counter,
    bytes: Counter,
    batches: Counter,
    drops_pool: Counter,
    malformed: Counter,
    truncated: Counter,
    filtered: Counter,
}

#[derive(Default)]
pub struct IbvSrc {
    settings: Mutex<Settings>,
    counters: Counters,
}

impl IbvSrc {
    fn stats(&self) -> gst::Structure {
        let c = &self.counters;
        let s = lock(&self.settings);
        stats::structure(&[
            (names::PACKETS, c.packets.get()),
            (names::BYTES, c.bytes.get()),
            (names::BATCHES, c.batches.get()),
            (names::DROPS_POOL, c.drops_pool.get()),
            (names::MALFORMED, c.malformed.get()),
            (names::TRUNCATED, c.truncated.get()),
            (names::FILTERED, c.filtered.get()),
            (names::POOL_SLOTS, u64::from(s.slots)),
        ])
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
                "packets, bytes, batches, drops-pool, malformed, truncated, filtered, pool-slots",
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
        let _address: IpAddr = s.address.parse().map_err(|_| {
            gst::error_msg!(
                gst::ResourceError::Settings,
                (
                    "address {:?} is not an IPv4 or IPv6 address; give the destination IP or multicast group",
                    s.address
                )
            )
        })?;
        let devices = probe::probe().map_err(|e: RdmaUnavailable| {
            gst::error_msg!(gst::ResourceError::NotFound, ("{}", e), ["{:?}", e])
        })?;
        let device = probe::select(&devices, s.device.as_deref())
            .map_err(|e| gst::error_msg!(gst::ResourceError::NotFound, ("{}", e)))?;
        gst::info!(
            CAT,
            imp = self,
            "RDMA devices {:?}, using {}",
            devices,
            device
        );
        for c in [
            &self.counters.packets,
            &self.counters.bytes,
            &self.counters.batches,
            &self.counters.drops_pool,
            &self.counters.malformed,
            &self.counters.truncated,
            &self.counters.filtered,
        ] {
            c.reset();
        }
        // The raw-packet QP receive path is not implemented (and has never run on
        // hardware): refuse rather than pretend to capture.
        Err(gst::error_msg!(
            gst::CoreError::NotImplemented,
            (
                "RDMA device {} found, but the fhibvsrc receive path (raw-packet QP, flow steering) is not implemented yet; use fhudpsrc",
                device
            )
        ))
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
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
        // start() never succeeds until the receive path exists.
        Err(gst::FlowError::NotNegotiated)
    }
}
