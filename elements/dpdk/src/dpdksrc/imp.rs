//! `fhdpdksrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport polls one DPDK receive queue. The base owns batch-size, the pool
//! properties, output, caps, readable metas, stats, live control and the copy into
//! memory downstream proposes (the NIC writes into DPDK's mbufs:
//! [`ReceiveInto::Device`]).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::endpoint::{
    self as endpoint, Endpoint, EndpointCounters, Tally as EndpointTally,
};
use firehose_core::frame::accept::{accept, Rejected, UdpFilter as Filter};
use firehose_core::meta::dest::PacketDest;
use firehose_core::src::prelude::*;
use firehose_core::src::{
    Batch, BatchSize, CountAlias, FilterProps, FilterSettings, LiveControl, OldSlotName, Open,
    PacketSrcExt, PacketSrcImpl, PoolProps, PoolSettings, PoolSize, Receive, ReceiveInto,
    SlotProps, SlotSize,
};
use firehose_core::stats::names;
use firehose_core::sync::lock;
use firehose_core::transport::{Discarded, InPlaceTransport, Received};
use firehose_core::wake::{self, Waker};
use firehose_core::{PacketAddr, PacketInfo};

use crate::dpdk::{self, Pool, Port, PortConfig, PortLinkWatch, Session};
use crate::props::{EalProps, EalSettings};
use crate::sys;

firehose_core::debug_category!(CAT, "fhdpdksrc", "Firehose DPDK source");

const DEFAULT_PORT: u32 = 5004;
const DEFAULT_MBUFS: u32 = 16384;
const DEFAULT_MBUF_CACHE: u32 = 256;
/// RTE_MBUF_DEFAULT_BUF_SIZE: 2048 bytes of frame plus the 128-byte headroom.
const DEFAULT_MBUF_SIZE: u32 = 2048 + sys::RTE_PKTMBUF_HEADROOM;
const DEFAULT_RX_DESC: u32 = 4096;
/// Largest burst: bounds the per-element arrays allocated at start.
const MAX_BATCH: u32 = 512;
const DEFAULT_POLL_US: u32 = 20;
/// The pool properties: today's 16384 mbufs of 2176 bytes by default. No `memory`:
/// the EAL decides what backs the pool (hugepages unless `--no-huge`).
const POOL: PoolProps = PoolProps {
    what: "mbuf pool",
    size_blurb: "Bytes of the receive mbuf pool, in mbufs of slot-size bytes (at least 64): \
                 the receive descriptors plus every batch held downstream",
    default: PoolSize::Bytes(DEFAULT_MBUFS as u64 * DEFAULT_MBUF_SIZE as u64),
    default_slot_bytes: DEFAULT_MBUF_SIZE as u64,
    memory: false,
    hugepages_alias: false,
    count_alias: Some(CountAlias {
        name: "mbufs",
        min: 64,
        max: u32::MAX,
    }),
};

static EAL: EalProps = EalProps {
    vdev_example: "net_af_packet0,iface=eth1,framecnt=4096",
    port_example: "net_af_packet0",
};
/// The port and address kept; the port's other traffic is counted as filtered.
static FILTER: FilterProps = FilterProps {
    port_nick: "UDP port",
    port_blurb: "UDP destination port to accept (0 = any); others count as filtered",
    port_min: 0,
    port_default: DEFAULT_PORT,
    address_blurb: "Destination IP address to accept (unset = any); others count as filtered",
    address_default: None,
};
/// A slot is an mbuf's data room (`mbuf-size` before `slot-size`).
static SLOT: SlotProps = SlotProps {
    blurb: "Data room per mbuf in bytes, 128 bytes of headroom included (frames must fit)",
    min: 512,
    max: 65535,
    default: DEFAULT_MBUF_SIZE,
    old: Some(OldSlotName {
        name: "mbuf-size",
        nick: "Mbuf size",
        what: "data room per mbuf",
    }),
};

#[derive(Debug, Clone)]
struct Settings {
    eal: EalSettings,
    queue: u32,
    filter: FilterSettings,
    mbuf_cache: u32,
    slot: SlotSize,
    rx_descriptors: u32,
    promiscuous: bool,
    poll_interval: u32,
}

firehose_core::property_group! {
    Settings as _s {
        group eal;
        queue => glib::ParamSpecUInt::builder("queue")
            .nick("Queue")
            .blurb("Receive queue to poll (queues below it are set up but not read)")
            .maximum(1023)
            .mutable_ready()
            .build();
        group filter;
        mbuf_cache => glib::ParamSpecUInt::builder("mbuf-cache")
            .nick("Mbuf cache")
            .blurb("Per-lcore mbuf cache (used by EAL threads only; 0 = none)")
            .maximum(512)
            .default_value(DEFAULT_MBUF_CACHE)
            .mutable_ready()
            .build();
        group slot;
        rx_descriptors => glib::ParamSpecUInt::builder("rx-descriptors")
            .nick("Receive descriptors")
            .blurb("Receive ring size (adjusted to the device's limits)")
            .minimum(32)
            .maximum(32768)
            .default_value(DEFAULT_RX_DESC)
            .mutable_ready()
            .build();
        promiscuous => glib::ParamSpecBoolean::builder("promiscuous")
            .nick("Promiscuous")
            .blurb("Receive frames for any MAC address")
            .default_value(false)
            .mutable_ready()
            .build();
        poll_interval => glib::ParamSpecUInt::builder("poll-interval")
            .nick("Poll interval")
            .blurb(
                "Microseconds to sleep after an empty burst (0 = busy-poll a whole \
                 core; the device ring must hold what arrives meanwhile)",
            )
            .maximum(100_000)
            .default_value(DEFAULT_POLL_US)
            .mutable_ready()
            .build();
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            eal: EalSettings::new(&EAL),
            queue: 0,
            filter: FilterSettings::new(&FILTER),
            mbuf_cache: DEFAULT_MBUF_CACHE,
            slot: SlotSize::new(&SLOT),
            rx_descriptors: DEFAULT_RX_DESC,
            promiscuous: false,
            poll_interval: DEFAULT_POLL_US,
        }
    }
}

impl Settings {
    /// Mbufs: `pool-size` over `slot-size` (or the deprecated `mbufs`), at least 64.
    fn mbufs(&self, pool: &PoolSettings) -> u32 {
        let n = pool.count(self.slot.bytes.into());
        u32::try_from(n).unwrap_or(u32::MAX).max(64)
    }
}

firehose_core::counters! {
    /// Mirrored from the port's `rte_eth_stats`.
    struct NicCounters {
        imissed: names::IMISSED,
        ierrors: names::IERRORS,
        rx_nombuf: names::RX_NOMBUF,
    }
}

/// The mbufs of one batch, lent downstream as one memory over the part of the pool they
/// span; dropping it gives them all back to DPDK in one call.
struct LentMbufs {
    /// Keeps the pool (and so the memory `ptr` points into) alive.
    _pool: Arc<Pool>,
    ptr: usize,
    len: usize,
    mbufs: Vec<*mut sys::rte_mbuf>,
}

// SAFETY: the mbufs are owned by this value alone (taken from the receive burst and
// handed to no one else); freeing them from another thread is allowed, since the pool's
// ring is multi-producer and non-EAL threads bypass the per-lcore caches.
unsafe impl Send for LentMbufs {}

impl AsRef<[u8]> for LentMbufs {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: [ptr, ptr+len) lies inside the pool's one contiguous, mapped range
        // (checked by `Pool::new`), which `_pool` keeps alive. The payload ranges listed
        // in the batch meta are in mbufs this value owns, so nothing writes them while it
        // exists; bytes between them belong to other mbufs and may be rewritten by the
        // device, which is why downstream reads only the listed ranges (GStreamer reads
        // through the raw pointer; no Rust reference to those bytes is kept here).
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for LentMbufs {
    fn drop(&mut self) {
        // SAFETY: each mbuf is owned by this value and freed exactly once, here, into a
        // pool that `_pool` keeps alive.
        unsafe { sys::rte_pktmbuf_free_bulk(self.mbufs.as_mut_ptr(), self.mbufs.len() as u32) };
    }
}

struct State {
    /// Declared before `pool` and `session`: the port is closed first (its queues give
    /// their mbufs back), then the pool reference and the devices go.
    port: Port,
    pool: Arc<Pool>,
    _session: Session,
    queue: u16,
    burst: u16,
    filter: Filter,
    poll: Duration,
    /// The receive burst, reused.
    rx: Vec<*mut sys::rte_mbuf>,
    /// Mbufs rejected by the filter in this burst, freed together.
    rejected: Vec<*mut sys::rte_mbuf>,
    /// Absolute payload address of each kept packet, parallel to the batch's infos.
    addrs: Vec<usize>,
    /// The port's link, checked while bursts come back empty.
    watch: PortLinkWatch,
    /// What the queue counted since start.
    tally: Tally,
    /// This burst's packets and bytes per endpoint, added to `endpoints` once per burst.
    endpoint_tally: EndpointTally,
    /// Packets and bytes per endpoint since start, read by `stats`.
    endpoints: Arc<EndpointCounters>,
}

// SAFETY: the raw mbuf pointers in the scratch arrays are only used by the thread that
// holds the state lock.
unsafe impl Send for State {}

/// The `fhdpdksrc` element.
#[derive(Default)]
pub struct DpdkSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// The open port's id, for `stats` reads from other threads; cleared (under this
    /// lock) before the port is closed.
    nic: Mutex<Option<u16>>,
    /// The queue's counts, mirrored after each burst.
    counters: firehose_core::stats::Mirror<{ Tally::COUNT }>,
    nic_counters: NicCounters,
    /// Packets and bytes per endpoint, kept after stop for the final `stats` read.
    endpoints: Mutex<Option<Arc<EndpointCounters>>>,
}

/// What to do with one received frame.
enum Verdict {
    /// Deliver: payload address, length, sender, where it was sent with the length of
    /// the frame's headers before the payload, and the index of its endpoint.
    Keep(usize, u32, PacketAddr, PacketDest, usize),
    Filtered,
    Malformed,
    Empty,
}

/// The Ethernet multicast MACs of the groups of `list`, each once: what the port's
/// multicast filter must pass (IPv4 `01:00:5e` + 23 bits, IPv6 `33:33` + 32 bits).
fn multicast_macs(list: &[Endpoint]) -> Vec<[u8; 6]> {
    let mut macs: Vec<[u8; 6]> = Vec::new();
    for e in list.iter().filter(|e| e.addr.is_multicast()) {
        let mac = match e.addr {
            IpAddr::V4(g) => firehose_core::frame::build::multicast_mac(g),
            IpAddr::V6(g) => {
                let o = g.octets();
                [0x33, 0x33, o[12], o[13], o[14], o[15]]
            }
        };
        if !macs.contains(&mac) {
            macs.push(mac);
        }
    }
    macs
}

/// Parses the frame in `m` and applies the filter.
///
/// # Safety
/// `m` must be a valid mbuf from a receive burst, owned by the caller.
unsafe fn classify(m: *mut sys::rte_mbuf, filter: &Filter) -> Verdict {
    // SAFETY: per the function contract; the frame lies at buf_addr + data_off for
    // data_len bytes (one segment, checked first).
    let frame = unsafe {
        let mb = &*m;
        if mb.nb_segs != 1 {
            // Scattered receive is never enabled; a chained frame is not ours to parse.
            return Verdict::Malformed;
        }
        std::slice::from_raw_parts(
            (mb.buf_addr as *const u8).add(usize::from(mb.data_off)),
            usize::from(mb.data_len),
        )
    };
    match accept(frame, filter) {
        Ok(a) => Verdict::Keep(
            frame.as_ptr() as usize + a.payload_offset,
            a.len,
            a.src,
            PacketDest {
                dst: a.dst,
                header_len: u16::try_from(a.payload_offset).unwrap_or(0),
            },
            a.endpoint,
        ),
        // A DPDK port takes all of the interface's traffic: ARP and the like are
        // expected, not errors.
        Err(Rejected::NotUdp | Rejected::Filtered) => Verdict::Filtered,
        Err(Rejected::Malformed | Rejected::Truncated) => Verdict::Malformed,
        Err(Rejected::Empty) => Verdict::Empty,
    }
}

impl DpdkSrc {
    fn stats(&self) -> gst::Structure {
        self.refresh_nic();
        let nic = self.nic_counters.fields();
        let mut s = firehose_core::stats::structure(&self.counters.fields(Tally::NAMES));
        s.set("drops-nic", nic.iter().map(|&(_, v)| v).sum::<u64>());
        for (name, v) in nic {
            s.set(name, v);
        }
        // Always there (empty before the first start), so tools can rely on it.
        let endpoints = endpoint::stats_value(lock(&self.endpoints).as_deref());
        s.set_value(endpoint::STATS_FIELD, endpoints);
        s
    }

    /// Mirrors the port's drop counters while it is open.
    fn refresh_nic(&self) {
        let nic = lock(&self.nic);
        if let Some(id) = *nic {
            let s = dpdk::port_stats(id);
            self.nic_counters.imissed.set(s.imissed);
            self.nic_counters.ierrors.set(s.ierrors);
            self.nic_counters.rx_nombuf.set(s.rx_nombuf);
        }
    }

    /// The endpoints of `s`: `endpoints`, or `address` on `port` (unset address, port
    /// 0: any). SSM sources cannot be matched (the software filter sees no sender
    /// list), so they are refused rather than ignored.
    fn endpoints(s: &Settings) -> Result<Vec<Endpoint>, String> {
        let list = s.filter.endpoint_list(&[])?;
        if let Some(e) = list.iter().find(|e| !e.sources.is_empty()) {
            return Err(format!(
                "endpoint {e} names SSM sources, which fhdpdksrc cannot filter on (it \
                 sends no IGMP either); leave the sources out, or use fhudpsrc for \
                 source-specific multicast"
            ));
        }
        Ok(list)
    }

    /// Opens the EAL session, the port and its pool, and starts the port's queue.
    fn open_state(&self, open: &Open) -> Result<State, gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let endpoints = Self::endpoints(&s)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let session = Session::open(&s.eal.eal_args).map_err(|e| e.to_gst())?;
        let data_room = u16::try_from(s.slot.bytes).unwrap_or(u16::MAX);
        let mut port = Port::claim(&s.eal.dpdk_port).map_err(|e| e.to_gst())?;
        let pool = Pool::new(
            "rx",
            s.mbufs(&open.pool),
            s.mbuf_cache,
            data_room,
            port.is_virtual(),
        )
        .map_err(|e| e.to_gst())?;
        if pool.span().len() > u32::MAX as usize {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                ("The receive pool spans more than 4 GiB, beyond the batch meta's offsets: \
                  lower pool-size")
            ));
        }
        let cfg = PortConfig {
            queue: s.queue as u16,
            rx_desc: s.rx_descriptors as u16,
            tx_desc: 512,
            promiscuous: s.promiscuous,
        };
        port.start(&cfg, &pool).map_err(|e| e.to_gst())?;
        if !s.promiscuous {
            match port.accept_multicast(&multicast_macs(&endpoints)) {
                Ok(how) => gst::debug!(CAT, imp = self, "multicast groups: {how}"),
                Err(e) => gst::element_imp_warning!(
                    self,
                    gst::ResourceError::Settings,
                    (
                        "{}: the multicast groups of endpoints may not arrive; set \
                         promiscuous=true",
                        e
                    )
                ),
            }
        }
        gst::info!(
            CAT,
            imp = self,
            "receiving {} on {:?} (bus {}) queue {}, {} mbufs of {} B, devices {:?}",
            endpoints
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(","),
            port,
            port.bus(),
            s.queue,
            s.mbufs(&open.pool),
            data_room,
            session.vdevs()
        );
        let burst = open.batch_size.min(MAX_BATCH) as usize;
        // New per start: the counts begin at zero, and `stats` after stop reads the last.
        let counters = Arc::new(EndpointCounters::new(&endpoints));
        *lock(&self.endpoints) = Some(counters.clone());
        let watch = PortLinkWatch::new(port.id(), &s.eal.dpdk_port, &s.eal.eal_args);
        Ok(State {
            watch,
            port,
            pool,
            _session: session,
            queue: s.queue as u16,
            burst: burst as u16,
            filter: Filter::endpoints(&endpoints),
            endpoint_tally: EndpointTally::new(endpoints.len()),
            endpoints: counters,
            poll: Duration::from_micros(s.poll_interval.into()),
            rx: vec![std::ptr::null_mut(); burst],
            rejected: Vec::with_capacity(burst),
            addrs: Vec::with_capacity(burst),
            tally: Tally::default(),
        })
    }

    /// Receives one batch: a memory over its frames (each frame's headers included),
    /// the datagrams and where each was sent.
    fn fill(
        &self,
        st: &mut State,
        live: &LiveControl,
    ) -> Result<(gst::Memory, Vec<PacketInfo>, Vec<PacketDest>), gst::FlowError> {
        let got = st.burst(live.flag(), true, &mut |d| live.nap(d), &mut |t| {
            self.counters.update(&t.fields())
        });
        let b = match got {
            Ok(Some(b)) => b,
            Ok(None) | Err(Stopped::Interrupted) => return Err(gst::FlowError::Flushing),
            Err(Stopped::Link(e)) => {
                return Err(firehose_core::element::read_error(&*self.obj(), e))
            }
        };
        let mem = gst::Memory::from_slice(LentMbufs {
            _pool: st.pool.clone(),
            ptr: b.lo,
            len: b.hi - b.lo,
            mbufs: b.kept,
        });
        Ok((mem, b.packets, b.dests))
    }
}

firehose_core::counts! {
    /// What the receive queue counted since start, with the stats names `fhdpdksrc`
    /// reports them under.
    struct Tally {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
        filtered: names::FILTERED,
        malformed: names::MALFORMED,
        empty: names::EMPTY,
    }
}

/// One batch of datagrams in the pool's memory, its mbufs owned until freed or lent.
struct Burst {
    /// The part of the pool the batch spans (frame headers included).
    lo: usize,
    hi: usize,
    kept: Vec<*mut sys::rte_mbuf>,
    /// Offsets relative to `lo`.
    packets: Vec<PacketInfo>,
    dests: Vec<PacketDest>,
}

/// Why [`State::burst`] returned without a batch.
enum Stopped {
    /// `stop` was raised, or a nap was cut short.
    Interrupted,
    /// The port's link went away or down.
    Link(String),
}

impl State {
    /// Polls until a burst yields at least one datagram for us (`None` at once without
    /// `wait` when none does), `stop` is raised or `nap` (between empty bursts) is cut
    /// short. `counted` is handed the running tally after each burst (rejected frames
    /// included): `stats` stays current while only rejected frames come.
    fn burst(
        &mut self,
        stop: &AtomicBool,
        wait: bool,
        nap: &mut dyn FnMut(Duration) -> bool,
        counted: &mut dyn FnMut(&Tally),
    ) -> Result<Option<Burst>, Stopped> {
        let id = self.port.id();
        loop {
            if stop.load(Ordering::Acquire) {
                return Err(Stopped::Interrupted);
            }
            // SAFETY: a started port and set-up queue; `rx` has room for `burst` pointers.
            let n = usize::from(unsafe {
                sys::rte_eth_rx_burst(id, self.queue, self.rx.as_mut_ptr(), self.burst)
            });
            if n == 0 {
                if !wait {
                    return Ok(None);
                }
                self.watch
                    .check(std::time::Instant::now())
                    .map_err(Stopped::Link)?;
                if self.poll.is_zero() {
                    std::hint::spin_loop();
                } else if !nap(self.poll) {
                    return Err(Stopped::Interrupted);
                }
                continue;
            }
            let rx_time_ns = firehose_core::batch::unix_ns();
            self.rejected.clear();
            self.addrs.clear();
            let mut packets = Vec::with_capacity(n);
            let mut dests = Vec::with_capacity(n);
            let mut kept = Vec::with_capacity(n);
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            let mut t = Tally::default();
            for &m in &self.rx[..n] {
                // SAFETY: `m` came from this burst and is owned here.
                match unsafe { classify(m, &self.filter) } {
                    Verdict::Keep(addr, len, src, dest, endpoint) => {
                        self.endpoint_tally.count(endpoint, u64::from(len));
                        // From the frame's start: its headers lie in the lent memory
                        // too, for a recorder to write as they were.
                        lo = lo.min(addr - usize::from(dest.header_len));
                        dests.push(dest);
                        hi = hi.max(addr + len as usize);
                        t.bytes += u64::from(len);
                        self.addrs.push(addr);
                        packets.push(PacketInfo {
                            offset: 0,
                            len,
                            rx_time_ns,
                            src,
                        });
                        kept.push(m);
                    }
                    Verdict::Filtered => {
                        t.filtered += 1;
                        self.rejected.push(m);
                    }
                    Verdict::Malformed => {
                        t.malformed += 1;
                        self.rejected.push(m);
                    }
                    Verdict::Empty => {
                        t.empty += 1;
                        self.rejected.push(m);
                    }
                }
            }
            if !self.rejected.is_empty() {
                // SAFETY: these mbufs are owned here and referenced nowhere else.
                unsafe {
                    sys::rte_pktmbuf_free_bulk(
                        self.rejected.as_mut_ptr(),
                        self.rejected.len() as u32,
                    )
                };
            }
            t.packets = packets.len() as u64;
            t.batches = u64::from(!kept.is_empty());
            self.tally.add(&t);
            // Once per burst: one atomic add per endpoint that had a packet.
            self.endpoints.add(&mut self.endpoint_tally);
            counted(&self.tally);
            if kept.is_empty() {
                continue;
            }
            for (p, &addr) in packets.iter_mut().zip(&self.addrs) {
                // The pool span is checked to fit in u32 at start.
                p.offset = (addr - lo) as u32;
            }
            return Ok(Some(Burst {
                lo,
                hi,
                kept,
                packets,
                dests,
            }));
        }
    }
}

/// The receive queue alone, for an engine that takes each batch where the NIC wrote it
/// in the mbufs (`fhspeadsrc transport="fhdpdksrc …"`): the mbufs go back to the pool
/// as soon as the engine has copied the payloads out.
struct InPlace {
    st: State,
    waker: Arc<Waker>,
}

impl InPlaceTransport for InPlace {
    fn receive_in_place(
        &mut self,
        stop: &AtomicBool,
        wait: bool,
        consume: &mut dyn FnMut(&[u8], &[PacketInfo]),
    ) -> std::io::Result<Received> {
        let waker = self.waker.clone();
        let got = self.st.burst(
            stop,
            wait,
            &mut |d| matches!(wake::nap(&waker, d.as_nanos() as u64), Ok(false)),
            &mut |_| {},
        );
        let mut b = match got {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Received::Nothing),
            Err(Stopped::Interrupted) => return Ok(Received::Interrupted),
            Err(Stopped::Link(e)) => return Err(std::io::Error::other(e)),
        };
        let used = b.hi - b.lo;
        // SAFETY: [lo, hi) lies inside the pool's one contiguous, mapped range (checked
        // by `Pool::new`), which the state keeps alive; the listed datagrams are in
        // mbufs owned here until freed below, so nothing writes them meanwhile. Bytes
        // between them belong to other mbufs; engines read only the listed ranges.
        let data = unsafe { std::slice::from_raw_parts(b.lo as *const u8, used) };
        consume(data, &b.packets);
        // SAFETY: each mbuf is owned here and freed exactly once, into the live pool.
        unsafe { sys::rte_pktmbuf_free_bulk(b.kept.as_mut_ptr(), b.kept.len() as u32) };
        Ok(Received::Batch { used })
    }

    fn discarded(&self) -> Discarded {
        let t = &self.st.tally;
        Discarded {
            truncated: 0,
            empty: t.empty,
            other: t.filtered + t.malformed,
        }
    }

    /// The NIC's drops: no receive descriptor (`imissed`) or no mbuf (`rx_nombuf`).
    fn device_drops(&mut self) -> u64 {
        let s = dpdk::port_stats(self.st.port.id());
        s.imissed + s.rx_nombuf
    }
}

firehose_core::packet_src! {
    DpdkSrc = "GstFhDpdkSrc", own properties settings = Settings::default();
    "Firehose DPDK source", "Source/Network",
    "Receives UDP from a DPDK port (kernel bypass), one buffer per burst, \
     the mbufs lent downstream without a copy";
}

impl PacketSrcImpl for DpdkSrc {
    const BATCH_SIZE: BatchSize = BatchSize::up_to(
        MAX_BATCH,
        "Most frames per rte_eth_rx_burst, pushed as one buffer",
    );
    const POOL: &'static PoolProps = &POOL;
    const RECEIVE_INTO: ReceiveInto = ReceiveInto::Device {
        why: "the NIC writes into DPDK's mbufs",
    };

    const STATS: &'static [&'static [&'static str]] = &[
        Tally::NAMES,
        &["drops-nic (imissed + ierrors + rx-nombuf from rte_eth_stats)"],
        NicCounters::NAMES,
        &[endpoint::STATS_FIELD],
    ];

    /// An mbuf.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        lock(&self.settings).slot.bytes.into()
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        self.counters.reset();
        self.nic_counters.reset();
        let state = self.open_state(open)?;
        *lock(&self.nic) = Some(state.port.id());
        // The naps between empty bursts sleep in ppoll on it, so unlock() cuts them short.
        self.obj().live().new_waker().map_err(|e| {
            gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
        })?;
        *lock(&self.state) = Some(state);
        // A copy into proposed memory takes a batch in one slot.
        Ok(firehose_core::alloc::CopyOut::SLOT_BYTES)
    }

    /// The receive queue alone, for an engine fed from the mbufs in place.
    fn open_in_place(
        &self,
        open: &Open,
        waker: Arc<Waker>,
    ) -> Result<Box<dyn InPlaceTransport>, gst::ErrorMessage> {
        let st = self.open_state(open)?;
        Ok(Box::new(InPlace { st, waker }))
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let st = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let (mem, packets, dests) = self.fill(st, rx.live)?;
        drop(guard);
        let pts = self.obj().current_running_time();
        Ok(batch_buffer_with_dests(mem, packets, dests, pts, rx.readable).into())
    }

    fn counters(&self) -> gst::Structure {
        self.stats()
    }

    fn close(&self) {
        self.refresh_nic();
        let state = {
            let mut nic = lock(&self.nic);
            *nic = None;
            lock(&self.state).take()
        };
        // Port stop + close, then the pool reference and the hot-plugged devices.
        drop(state);
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
        assert_eq!((s.filter.port, s.queue), (DEFAULT_PORT + 1, 1));
        assert_eq!(
            (s.slot.bytes, s.eal.dpdk_port.as_str()),
            (DEFAULT_MBUF_SIZE + 1, "0-test")
        );
        assert_eq!(s.filter.address.as_deref(), Some("value-test"));
    }

    fn list(s: &str) -> Vec<Endpoint> {
        firehose_core::endpoint::parse_list(s, 5004, &[]).unwrap()
    }

    #[test]
    fn each_group_gets_its_mac_once() {
        let macs = multicast_macs(&list(
            "239.1.2.3:5004,239.1.2.3:5005,10.0.0.1,224.129.2.3,[ff15::1:2:3]:9",
        ));
        assert_eq!(
            macs,
            [
                [0x01, 0x00, 0x5e, 1, 2, 3],
                // 224.129.2.3 shares 239.1.2.3's MAC (23 bits), so it is listed once.
                [0x33, 0x33, 0, 2, 0, 3]
            ]
        );
    }

    #[test]
    fn endpoints_come_from_the_list_or_address_and_port() {
        gst::init().unwrap();
        let mut s = Settings::default();
        let any = DpdkSrc::endpoints(&s).unwrap();
        assert_eq!(any[0].socket_addr(), "0.0.0.0:5004".parse().unwrap());
        s.filter.endpoints = Some("239.1.2.0+2:7148".into());
        assert_eq!(DpdkSrc::endpoints(&s).unwrap().len(), 3);
        s.filter.endpoints = Some("232.1.1.1:7148@10.0.0.1".into());
        let e = DpdkSrc::endpoints(&s).unwrap_err();
        assert!(e.contains("SSM sources"), "{e}");
        s.filter.endpoints = Some("239.1.2.0".into());
        s.filter.address = Some("10.0.0.1".into());
        assert!(DpdkSrc::endpoints(&s).unwrap_err().contains("both address"));
    }

    /// The software filter with an endpoint list: each datagram finds its endpoint, and
    /// the tally reaches the shared counters once per burst.
    #[test]
    fn the_filter_finds_each_endpoint_and_the_tally_counts_it() {
        let l = list("239.1.2.0+1:7148,10.0.0.1:9000");
        let f = Filter::endpoints(&l);
        let c = EndpointCounters::new(&l);
        let mut t = EndpointTally::new(l.len());
        for (ip, port, want) in [
            ("239.1.2.1", 7148, Some(1)),
            ("10.0.0.1", 9000, Some(2)),
            ("239.1.2.0", 7148, Some(0)),
            ("239.1.2.1", 7148, Some(1)),
            ("239.1.2.2", 7148, None),
            ("10.0.0.1", 7148, None),
        ] {
            let got = f.find(ip.parse().unwrap(), port);
            assert_eq!(got, want, "{ip}:{port}");
            if let Some(i) = got {
                t.count(i, 100);
            }
        }
        c.add(&mut t);
        assert_eq!(
            c.snapshot(),
            [
                ("239.1.2.0:7148", 1, 100),
                ("239.1.2.1:7148", 2, 200),
                ("10.0.0.1:9000", 1, 100)
            ]
        );
    }
}
