//! `fhxdpsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is an AF_XDP socket ([`crate::engine`] sets it up): start-up, the batch
//! receive loop, stats and teardown. The base owns batch-size, the pool properties,
//! output, caps, readable metas, stats, live control and the copy into memory
//! downstream proposes (the NIC writes into the UMEM: [`ReceiveInto::Device`]).

use std::sync::Mutex;

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::endpoint::{self as endpoint, Endpoint, EndpointCounters};
use firehose_core::property::OrDefault;
use firehose_core::ring::{lend_batch, SharedRing};
use firehose_core::src::prelude::*;
use firehose_core::src::{
    Batch, BatchSize, CountAlias, FilterProps, FilterSettings, OldSlotName, Open, PacketSrcExt,
    PacketSrcImpl, PoolProps, PoolSettings, PoolSize, Receive, ReceiveInto, SlotProps, SlotSize,
};
use firehose_core::stats::{self, names, Counter};
use firehose_core::sync::lock;

use super::{XdpMode, ZeroCopy};
use crate::engine::receive::{RxError, Tally, Wait, XdpReceiver};
use crate::engine::{self, AttachMode, BindMode, ErrorKind, Notice};

firehose_core::debug_category!(CAT, "fhxdpsrc", "Firehose AF_XDP source");

const DEFAULT_ADDRESS: &str = "0.0.0.0";
const DEFAULT_PORT: u32 = 7148;
const DEFAULT_FRAMES: u32 = 16384;
const DEFAULT_FRAME_SIZE: u32 = 4096;
const DEFAULT_BUSY_POLL_BUDGET: u32 = 64;
/// Sleep after an empty RX ring instead of blocking in poll() (0 = block). Measured in
/// `firehose bench bypass`: 100 µs took the receiver from 0.62× to 0.36× of fhudpsrc's CPU
/// per GB, because the kernel then wakes no one per packet.
const DEFAULT_POLL_US: u32 = 100;

/// The pool properties: today's 16384 frames of 4096 bytes by default.
const POOL: PoolProps = PoolProps {
    what: "UMEM",
    size_blurb: "Bytes of UMEM, in frames of slot-size bytes (rounded down to a power of two \
                 of frames, at least 64): the fill and RX ring sizes and the most frames lent \
                 downstream at once",
    default: PoolSize::Bytes(DEFAULT_FRAMES as u64 * DEFAULT_FRAME_SIZE as u64),
    default_slot_bytes: DEFAULT_FRAME_SIZE as u64,
    memory: true,
    hugepages_alias: true,
    count_alias: Some(CountAlias {
        name: "frames",
        min: 64,
        max: 1 << 20,
    }),
};

/// The port and address the XDP program redirects.
static FILTER: FilterProps = FilterProps {
    port_nick: "Port",
    port_blurb: "UDP destination port to capture; all other traffic goes to the kernel",
    port_min: 0,
    port_default: DEFAULT_PORT,
    address_blurb: "Destination IP to capture (IPv4 or IPv6); 0.0.0.0 = any, both families",
    address_default: Some(DEFAULT_ADDRESS),
};
/// A slot is a UMEM frame (`frame-size` before `slot-size`).
static SLOT: SlotProps = SlotProps {
    blurb: "Bytes per UMEM frame, 2048 or 4096. On an interface whose MTU does not fit one \
            frame less 256 B of headroom (jumbo frames), the capture runs in multi-buffer \
            mode (Linux 6.6+): the kernel splits a long datagram over several frames and the \
            element joins them (stats joined, unjoined)",
    min: 2048,
    max: 4096,
    default: DEFAULT_FRAME_SIZE,
    old: Some(OldSlotName {
        name: "frame-size",
        nick: "Frame size",
        what: "bytes per UMEM frame",
    }),
};

#[derive(Debug, Clone)]
struct Settings {
    interface: Option<String>,
    queue: u32,
    filter: FilterSettings,
    extra_ports: Option<String>,
    mode: XdpMode,
    zero_copy: ZeroCopy,
    busy_poll: u32,
    poll_interval: u32,
    busy_poll_budget: u32,
    slot: SlotSize,
}

firehose_core::property_group! {
    Settings as _s {
        interface: OrDefault => glib::ParamSpecString::builder("interface")
            .nick("Interface")
            .blurb("Network interface to capture on (required)")
            .mutable_ready()
            .build();
        queue => glib::ParamSpecUInt::builder("queue")
            .nick("Queue")
            .blurb("Receive queue of the interface to bind (steer the stream there, e.g. with ethtool -N)")
            .default_value(0)
            .mutable_ready()
            .build();
        group filter;
        extra_ports: OrDefault => glib::ParamSpecString::builder("extra-ports")
            .nick("Extra ports")
            .blurb("More UDP destination ports to capture at address, comma-separated (not with endpoints, which gives each endpoint its port)")
            .mutable_ready()
            .build();
        mode => glib::ParamSpecEnum::builder::<XdpMode>("mode")
            .nick("XDP mode")
            .blurb("Where the XDP program runs: auto, native (in the driver) or generic (on the skb)")
            .mutable_ready()
            .build();
        zero_copy => glib::ParamSpecEnum::builder::<ZeroCopy>("zero-copy")
            .nick("Zero-copy")
            .blurb("Bind the socket in zero-copy mode: auto (fall back to copy), on, off")
            .mutable_ready()
            .build();
        busy_poll => glib::ParamSpecUInt::builder("busy-poll")
            .nick("Busy poll")
            .blurb("0: sleep in poll() until packets arrive. N: spin on the socket and ask the kernel to busy-poll the queue for N µs per call (SO_PREFER_BUSY_POLL, SO_BUSY_POLL); uses a whole core")
            .default_value(0)
            .mutable_ready()
            .build();
        poll_interval => glib::ParamSpecUInt::builder("poll-interval")
            .nick("Poll interval")
            .blurb("Microseconds to sleep after an empty RX ring instead of blocking in poll() (0 = block until packets arrive); the RX ring must hold what arrives meanwhile")
            .maximum(100_000)
            .default_value(DEFAULT_POLL_US)
            .mutable_ready()
            .build();
        busy_poll_budget => glib::ParamSpecUInt::builder("busy-poll-budget")
            .nick("Busy poll budget")
            .blurb("Packets per busy-poll round (SO_BUSY_POLL_BUDGET)")
            .minimum(1)
            .maximum(65535)
            .default_value(DEFAULT_BUSY_POLL_BUDGET)
            .mutable_ready()
            .build();
        group slot;
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            interface: None,
            queue: 0,
            filter: FilterSettings::new(&FILTER),
            extra_ports: None,
            mode: XdpMode::Auto,
            zero_copy: ZeroCopy::Auto,
            busy_poll: 0,
            poll_interval: DEFAULT_POLL_US,
            busy_poll_budget: DEFAULT_BUSY_POLL_BUDGET,
            slot: SlotSize::new(&SLOT),
        }
    }
}

impl Settings {
    /// UMEM frames: as set through the deprecated `frames`, or `pool-size` over
    /// `slot-size` rounded down to a power of two (the rings need one).
    fn frames(&self, pool: &PoolSettings) -> u64 {
        match pool.size() {
            PoolSize::Count(n) => n,
            PoolSize::Bytes(_) => match pool.count(self.slot.bytes.into()) {
                0 => 0,
                n => 1 << n.ilog2(),
            },
        }
    }
}

firehose_core::counters! {
    /// Mirrored from getsockopt(XDP_STATISTICS).
    struct KernelCounters {
        rx_dropped: names::RX_DROPPED,
        rx_invalid_descs: names::RX_INVALID_DESCS,
        rx_ring_full: names::RX_RING_FULL,
        rx_fill_ring_empty: names::RX_FILL_RING_EMPTY_DESCS,
    }
}

/// How the running capture ended up configured, for stats and logs.
#[derive(Clone, Copy, Debug)]
struct Mode {
    xdp: &'static str,
    bind: &'static str,
    memory: &'static str,
}

#[derive(Default)]
pub struct XdpSrc {
    settings: Mutex<Settings>,
    /// The receive loop while started.
    state: Mutex<Option<XdpReceiver>>,
    /// The slot accounting, kept after stop for the final `stats` read.
    ring: Mutex<Option<SharedRing>>,
    mode: Mutex<Option<Mode>>,
    /// The receive loop's counts, mirrored once per batch.
    counters: stats::Mirror<{ Tally::COUNT }>,
    kernel: KernelCounters,
    /// Most frames held downstream at once.
    high_water: Counter,
    /// Packets and bytes per endpoint, kept after stop for the final `stats` read.
    endpoints: Mutex<Option<std::sync::Arc<EndpointCounters>>>,
}

impl XdpSrc {
    fn stats(&self) -> gst::Structure {
        let k = &self.kernel;
        let counts = lock(&self.ring).as_ref().map(|r| {
            let r = lock(r);
            (r.counts(), r.len())
        });
        let (counts, slots) = counts.unwrap_or_default();
        let mut s = stats::structure(&self.counters.fields(Tally::NAMES));
        s.set(names::DROPS_POOL, k.rx_dropped.get());
        s.set(names::DROPS_KERNEL, k.rx_ring_full.get());
        for (name, v) in k.fields() {
            s.set(name, v);
        }
        s.set(names::POOL_SLOTS, slots as u64);
        s.set(names::POOL_IN_USE, counts.held as u64);
        s.set(names::POOL_HIGH_WATER, self.high_water.get());
        s.set("pool-posted", counts.posted as u64);
        // Known once started; `none` before, so the keys never depend on the state.
        let mode = *lock(&self.mode);
        let none = stats::NOT_KNOWN;
        s.set("xdp-mode", mode.map_or(none, |m| m.xdp));
        s.set("bind-mode", mode.map_or(none, |m| m.bind));
        s.set("memory", mode.map_or(none, |m| m.memory));
        // Always there (empty before the first start), so tools can rely on it.
        let endpoints = endpoint::stats_value(lock(&self.endpoints).as_deref());
        s.set_value(endpoint::STATS_FIELD, endpoints);
        s
    }

    /// Mirrors the socket's `XDP_STATISTICS` (a failed read is logged).
    fn set_kernel_stats(&self, k: std::io::Result<libc::xdp_statistics>) {
        match k {
            Ok(k) => {
                let c = &self.kernel;
                c.rx_dropped.set(k.rx_dropped);
                c.rx_invalid_descs.set(k.rx_invalid_descs);
                c.rx_ring_full.set(k.rx_ring_full);
                c.rx_fill_ring_empty.set(k.rx_fill_ring_empty_descs);
            }
            Err(e) => gst::warning!(CAT, imp = self, "XDP_STATISTICS failed: {e}"),
        }
    }

    /// The endpoints `s` describes: `endpoints`, or `address` on `port` and each of
    /// `extra-ports`; checked for what the XDP program can redirect.
    fn endpoints(s: &Settings) -> Result<Vec<Endpoint>, String> {
        // fhxdpsrc has no multicast-source: sources come with each item of the list.
        let list = s.filter.endpoint_list(&[])?;
        let listed = s
            .filter
            .endpoints
            .as_deref()
            .is_some_and(|l| !l.trim().is_empty());
        let list = engine::with_extra_ports(list, listed, s.filter.port, s.extra_ports.as_deref())?;
        engine::check_endpoints(&list)?;
        Ok(list)
    }

    /// The engine configuration `s` describes.
    fn config(s: &Settings, open: &Open) -> Result<engine::Config, gst::ErrorMessage> {
        let bad = |m: String| gst::error_msg!(gst::ResourceError::Settings, ("{}", m));
        let interface = s.interface.clone().ok_or_else(|| {
            gst::error_msg!(
                gst::ResourceError::NotFound,
                ("no interface set: set interface=<name> to the network interface to \
                  capture on (see ip link)")
            )
        })?;
        Ok(engine::Config {
            interface,
            queue: s.queue,
            endpoints: Self::endpoints(s).map_err(bad)?,
            attach: match s.mode {
                XdpMode::Auto => AttachMode::Auto,
                XdpMode::Native => AttachMode::Native,
                XdpMode::Generic => AttachMode::Generic,
            },
            bind: match s.zero_copy {
                ZeroCopy::Auto => BindMode::Auto,
                ZeroCopy::On => BindMode::ZeroCopy,
                ZeroCopy::Off => BindMode::Copy,
            },
            busy_poll: s.busy_poll,
            busy_poll_budget: s.busy_poll_budget,
            frames: u32::try_from(s.frames(&open.pool)).unwrap_or(u32::MAX),
            frame_size: s.slot.bytes,
            batch_size: open.batch_size,
            hugepages: open.pool.policy(),
        })
    }

    fn open_capture(
        &self,
        s: &Settings,
        open: &Open,
        waker: Option<std::sync::Arc<firehose_core::wake::Waker>>,
    ) -> Result<(XdpReceiver, Mode), gst::ErrorMessage> {
        let cfg = Self::config(s, open)?;
        let cap = engine::open(&cfg, &mut |n| match n {
            Notice::Warning(m) => {
                gst::element_imp_warning!(self, gst::ResourceError::Settings, ("{}", m))
            }
            Notice::Debug(m) => gst::debug!(CAT, imp = self, "{m}"),
        })
        .map_err(|e| {
            use gst::ResourceError as R;
            let kind = match e.kind {
                ErrorKind::NotFound => R::NotFound,
                ErrorKind::Settings => R::Settings,
                ErrorKind::NotAuthorized => R::NotAuthorized,
                ErrorKind::Busy => R::Busy,
                ErrorKind::NoSpace => R::NoSpaceLeft,
                ErrorKind::Open => R::OpenRead,
            };
            gst::error_msg!(kind, ("{}", e.message))
        })?;
        // The caller's (an engine's element) or this element's own, which its unlock fires.
        let waker = match waker {
            Some(w) => w,
            None => self.obj().live().new_waker().map_err(|e| {
                gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
            })?,
        };
        let mode = Mode {
            xdp: cap.xdp_mode,
            bind: cap.bind_mode,
            memory: cap.region.kind().as_str(),
        };
        gst::info!(
            CAT,
            imp = self,
            "capturing UDP to {} on {} queue {}: XDP {}, AF_XDP {} mode, {} frames \
             of {} B ({})",
            cfg.endpoints
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(","),
            cfg.interface,
            s.queue,
            mode.xdp,
            mode.bind,
            cfg.frames,
            s.slot.bytes,
            mode.memory
        );
        let wait = if s.busy_poll > 0 {
            Wait::BusyPoll
        } else if s.poll_interval > 0 {
            Wait::Nap(std::time::Duration::from_micros(s.poll_interval.into()))
        } else {
            Wait::Block
        };
        let rx = XdpReceiver::new(
            cap,
            &cfg.interface,
            cfg.frames,
            s.slot.bytes,
            open.batch_size,
            wait,
            waker,
        );
        Ok((rx, mode))
    }

    /// Mirrors what the receive loop counted.
    fn mirror(&self, rx: &XdpReceiver) {
        self.counters.update(&rx.tally().fields());
        self.high_water.set(rx.held_high_water());
    }

    /// The flow error for a receive that ended without a batch (an element error first,
    /// unless it was cut short by unlock).
    fn receive_error(&self, e: RxError) -> gst::FlowError {
        match e {
            RxError::Interrupted => gst::FlowError::Flushing,
            RxError::Link(e) => firehose_core::element::read_error(&*self.obj(), e),
            RxError::Poll(e) => firehose_core::element::read_error(
                &*self.obj(),
                format_args!("poll on the AF_XDP socket failed: {e}"),
            ),
        }
    }
}

firehose_core::packet_src! {
    XdpSrc = "GstFhXdpSrc", own properties settings = Settings::default();
    "Firehose AF_XDP source", "Source/Network",
    "Captures UDP to chosen ports with its own XDP program and an AF_XDP socket, \
     lending UMEM frames downstream, one buffer per batch";
}

impl PacketSrcImpl for XdpSrc {
    const BATCH_SIZE: BatchSize = BatchSize::up_to(
        4096,
        "Most frames taken from the RX ring, and pushed as one buffer, per batch",
    );
    const POOL: &'static PoolProps = &POOL;
    const RECEIVE_INTO: ReceiveInto = ReceiveInto::Device {
        why: "the NIC writes into its AF_XDP UMEM",
    };

    const STATS: &'static [&'static [&'static str]] = &[
        Tally::NAMES,
        &[names::DROPS_POOL, names::DROPS_KERNEL],
        KernelCounters::NAMES,
        &[
            "pool-*",
            "xdp-mode",
            "bind-mode",
            "memory",
            endpoint::STATS_FIELD,
        ],
    ];

    /// A UMEM frame.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        lock(&self.settings).slot.bytes.into()
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        self.counters.reset();
        self.kernel.reset();
        self.high_water.reset();
        let (state, mode) = self.open_capture(&s, open, None)?;
        *lock(&self.ring) = Some(state.capture().ring.clone());
        *lock(&self.endpoints) = Some(state.endpoint_counters().clone());
        *lock(&self.mode) = Some(mode);
        *lock(&self.state) = Some(state);
        // A lent batch spans at most this much; a copy slot holds one.
        Ok(firehose_core::alloc::CopyOut::SLOT_BYTES)
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let st = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let got = st.receive(rx.live.flag(), true, &mut |t, k| {
            self.counters.update(&t.fields());
            self.set_kernel_stats(k);
        });
        self.mirror(st);
        let b = got
            .map_err(|e| self.receive_error(e))?
            .ok_or(gst::FlowError::Flushing)?;
        let cap = st.capture();
        let mem = lend_batch(&cap.ring, &cap.region, b.range, b.slots);
        drop(guard);
        // One clock read per batch: the running time at which the batch was complete.
        let pts = self.obj().current_running_time();
        Ok(batch_buffer_with_dests(mem, b.packets, b.dests, pts, rx.readable).into())
    }

    fn counters(&self) -> gst::Structure {
        self.stats()
    }

    fn refresh_counters(&self) {
        if let Some(st) = lock(&self.state).as_ref() {
            self.set_kernel_stats(st.capture().sock.statistics());
        }
    }

    /// The AF_XDP receive loop alone, for an engine fed from the UMEM in place.
    fn open_in_place(
        &self,
        open: &Open,
        waker: std::sync::Arc<firehose_core::wake::Waker>,
    ) -> Result<Box<dyn firehose_core::transport::InPlaceTransport>, gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let (rx, _) = self.open_capture(&s, open, Some(waker))?;
        Ok(Box::new(rx))
    }

    fn close(&self) {
        if let Some(st) = lock(&self.state).take() {
            self.set_kernel_stats(st.capture().sock.statistics());
            st.close();
        }
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
            (s.filter.port, s.poll_interval),
            (DEFAULT_PORT + 1, DEFAULT_POLL_US + 1)
        );
        assert_eq!(s.filter.address.as_deref(), Some("0.0.0.0-test"));
        assert_eq!(s.slot.bytes, DEFAULT_FRAME_SIZE - 1);
    }
}
