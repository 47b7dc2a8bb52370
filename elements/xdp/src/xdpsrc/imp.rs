//! `fhxdpsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is an AF_XDP socket ([`crate::engine`] sets it up): start-up, the batch
//! receive loop, stats and teardown. The base owns batch-size, the pool properties,
//! output, caps, readable metas, stats, live control and the copy into memory
//! downstream proposes (the NIC writes into the UMEM: [`ReceiveInto::Device`]).

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use firehose_core::batch::batch_buffer_with_dests;
use firehose_core::ring::{lend_batch, SharedRing};
use firehose_core::src::prelude::*;
use firehose_core::src::{
    Batch, BatchSize, CountAlias, LiveControl, Open, PacketSrcExt, PacketSrcImpl, PoolProps,
    PoolSettings, PoolSize, Receive, ReceiveInto,
};
use firehose_core::stats::{self, names, Counter};
use firehose_core::sync::lock;
use firehose_core::{MemoryRegion, PacketInfo};

use super::{XdpMode, ZeroCopy};
use crate::engine::jumbo::{self, Geometry, Placed};
use crate::engine::{self, AttachMode, BindMode, Capture, ErrorKind, Notice};
use crate::xsk::XskSocket;
use firehose_core::frame::accept::{packet_entry_dest, Rejected};
use firehose_core::meta::dest::PacketDest;
use firehose_core::wake::{wait_readable, Waker};

firehose_core::debug_category!(CAT, "fhxdpsrc", "Firehose AF_XDP source");

const DEFAULT_ADDRESS: &str = "0.0.0.0";
const DEFAULT_PORT: u32 = 7148;
const DEFAULT_FRAMES: u32 = 16384;
const DEFAULT_FRAME_SIZE: u32 = 4096;
const DEFAULT_BATCH_SIZE: u32 = 64;
const DEFAULT_BUSY_POLL_BUDGET: u32 = 64;
/// Sleep after an empty RX ring instead of blocking in poll() (0 = block). Measured in
/// `firehose bench bypass`: 100 µs took the receiver from 0.62× to 0.36× of fhudpsrc's CPU
/// per GB, because the kernel then wakes no one per packet.
const DEFAULT_POLL_US: u32 = 100;
/// Poll timeout while the kernel has frames to receive into: long, since a packet
/// wakes us anyway.
const IDLE_WAIT_MS: i32 = 100;
/// Poll timeout while few frames are posted: a dry fill ring makes the kernel drop
/// without waking us, so look again soon for frames released downstream.
const STARVED_WAIT_MS: i32 = 1;
/// How often the kernel's drop counters are read while no packet comes.
const KERNEL_STATS_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// The pool properties: today's 16384 frames of 4096 bytes by default.
const POOL: PoolProps = PoolProps {
    what: "UMEM",
    size_blurb: "Bytes of UMEM, in frames of frame-size bytes (rounded down to a power of two \
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

#[derive(Debug, Clone)]
struct Settings {
    interface: Option<String>,
    queue: u32,
    port: u32,
    extra_ports: Option<String>,
    address: String,
    mode: XdpMode,
    zero_copy: ZeroCopy,
    busy_poll: u32,
    poll_interval: u32,
    busy_poll_budget: u32,
    frame_size: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            interface: None,
            queue: 0,
            port: DEFAULT_PORT,
            extra_ports: None,
            address: DEFAULT_ADDRESS.into(),
            mode: XdpMode::Auto,
            zero_copy: ZeroCopy::Auto,
            busy_poll: 0,
            poll_interval: DEFAULT_POLL_US,
            busy_poll_budget: DEFAULT_BUSY_POLL_BUDGET,
            frame_size: DEFAULT_FRAME_SIZE,
        }
    }
}

impl Settings {
    /// UMEM frames: as set through the deprecated `frames`, or `pool-size` over
    /// `frame-size` rounded down to a power of two (the rings need one).
    fn frames(&self, pool: &PoolSettings) -> u64 {
        match pool.size {
            PoolSize::Count(n) => n,
            PoolSize::Bytes(_) => match pool.count(self.frame_size.into()) {
                0 => 0,
                n => 1 << n.ilog2(),
            },
        }
    }
}

firehose_core::counters! {
    /// Counters read by the `stats` property from any thread.
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
        malformed: names::MALFORMED,
        truncated: names::TRUNCATED,
        filtered: names::FILTERED,
        empty: names::EMPTY,
        joined: names::JOINED,
        unjoined: names::UNJOINED,
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

/// Per-batch tallies, added to the shared counters once per batch.
#[derive(Default)]
struct Tally {
    packets: u64,
    bytes: u64,
    malformed: u64,
    truncated: u64,
    filtered: u64,
    empty: u64,
    /// Datagrams longer than a frame, joined from several (jumbo frames).
    joined: u64,
    /// Datagrams longer than a frame whose frames could not be joined (not in slot
    /// order): dropped.
    unjoined: u64,
}

/// How the running capture ended up configured, for stats and logs.
#[derive(Clone, Copy, Debug)]
struct Mode {
    xdp: &'static str,
    bind: &'static str,
    memory: &'static str,
}

struct State {
    cap: Capture,
    frames: u32,
    frame_size: usize,
    batch: u32,
    busy_poll: bool,
    /// Sleep this long after an empty RX ring instead of blocking (`None` = block).
    poll_interval: Option<std::time::Duration>,
    /// Also in the base's live control; here so the receive loop takes no extra lock.
    waker: Arc<Waker>,
    /// Reused list of slots taken for the fill ring.
    post: Vec<u32>,
    /// The interface: gone or down is an error, not a capture that waits for ever.
    watch: firehose_core::netif::LinkWatch,
    /// When the receive loop, finding no packet, next reads the kernel's drop counters.
    kernel_stats_due: std::time::Instant,
}

#[derive(Default)]
pub struct XdpSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// The slot accounting, kept after stop for the final `stats` read.
    ring: Mutex<Option<SharedRing>>,
    mode: Mutex<Option<Mode>>,
    counters: Counters,
    kernel: KernelCounters,
    /// Most frames held downstream at once.
    high_water: Counter,
}

impl XdpSrc {
    fn stats(&self) -> gst::Structure {
        let k = &self.kernel;
        let counts = lock(&self.ring).as_ref().map(|r| {
            let r = lock(r);
            (r.counts(), r.len())
        });
        let (counts, slots) = counts.unwrap_or_default();
        let mut s = self.counters.structure();
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
        s
    }

    fn read_kernel_stats(&self, sock: &XskSocket) {
        match sock.statistics() {
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
            ports: engine::parse_ports(s.port, s.extra_ports.as_deref()).map_err(bad)?,
            address: engine::parse_address(&s.address).map_err(bad)?,
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
            frame_size: s.frame_size,
            batch_size: open.batch_size,
            hugepages: open.pool.policy(),
        })
    }

    fn open_capture(&self, s: &Settings, open: &Open) -> Result<(State, Mode), gst::ErrorMessage> {
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
        let waker = self.obj().live().new_waker().map_err(|e| {
            gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
        })?;
        let mode = Mode {
            xdp: cap.xdp_mode,
            bind: cap.bind_mode,
            memory: cap.region.kind().as_str(),
        };
        gst::info!(
            CAT,
            imp = self,
            "capturing UDP ports {:?} on {} queue {}: XDP {}, AF_XDP {} mode, {} frames \
             of {} B ({})",
            cfg.ports,
            cfg.interface,
            s.queue,
            mode.xdp,
            mode.bind,
            cfg.frames,
            s.frame_size,
            mode.memory
        );
        let watch = firehose_core::netif::LinkWatch::new(&cfg.interface, cap.ifindex);
        Ok((
            State {
                cap,
                frames: cfg.frames,
                frame_size: s.frame_size as usize,
                batch: open.batch_size,
                busy_poll: s.busy_poll > 0,
                poll_interval: (s.poll_interval > 0)
                    .then(|| std::time::Duration::from_micros(s.poll_interval.into())),
                waker,
                post: Vec::with_capacity(cfg.frames as usize),
                watch,
                kernel_stats_due: std::time::Instant::now(),
            },
            mode,
        ))
    }

    /// Receives until one batch with at least one datagram is ready (a memory over its
    /// frames plus the datagrams and where each was sent, its frame headers lying before
    /// its payload), the wait is interrupted, or an error occurs.
    fn fill(
        &self,
        st: &mut State,
        live: &LiveControl,
    ) -> Result<(gst::Memory, Vec<PacketInfo>, Vec<PacketDest>), gst::FlowError> {
        loop {
            if live.is_flushing() {
                return Err(gst::FlowError::Flushing);
            }
            let geometry = Geometry {
                frames: st.frames as usize,
                frame_size: st.frame_size,
            };
            // Multi-buffer: look far enough ahead to see the end of any datagram.
            let ahead = if st.cap.multi_buffer {
                st.batch.max(geometry.max_frags() as u32)
            } else {
                st.batch
            };
            let (start, n) = st.cap.sock.rx.peek(ahead);
            if n == 0 {
                let now = std::time::Instant::now();
                // With no packets the stats timer, which runs with batches, does not
                // read the kernel's drop counters: read them here, at most every 100 ms,
                // or an idle or starved capture (a full pool: exactly when the kernel
                // drops) shows them stale to `stats`, fhmetrics and the bench.
                if now >= st.kernel_stats_due {
                    self.read_kernel_stats(&st.cap.sock);
                    st.kernel_stats_due = now + KERNEL_STATS_IDLE;
                }
                if let Err(e) = st.watch.check(now) {
                    st.cap.link = None;
                    gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
                    return Err(gst::FlowError::Error);
                }
                // Frames released downstream go back to the kernel before we wait:
                // with the fill ring dry it drops packets without waking us.
                let posted = {
                    let mut ring = lock(&st.cap.ring);
                    engine::refill(&mut ring, &mut st.cap.sock.fill, &mut st.post);
                    ring.counts().posted
                };
                if st.busy_poll || st.cap.sock.fill.needs_wakeup() {
                    st.cap.sock.kick();
                }
                if st.busy_poll {
                    std::hint::spin_loop();
                    continue;
                }
                if let Some(nap) = st.poll_interval {
                    // Nobody waits on the socket, so the kernel wakes no one per
                    // packet; the RX ring holds what arrives meanwhile. Stop and
                    // unlock() cuts the nap short.
                    if !live.nap(nap) {
                        return Err(gst::FlowError::Flushing);
                    }
                    continue;
                }
                let timeout = if posted < st.batch as usize {
                    STARVED_WAIT_MS
                } else {
                    IDLE_WAIT_MS
                };
                match wait_readable(st.cap.sock.as_raw_fd(), &st.waker, timeout) {
                    Ok(true) => return Err(gst::FlowError::Flushing),
                    Ok(false) => continue,
                    Err(e) => {
                        st.cap.link = None;
                        gst::element_imp_error!(
                            self,
                            gst::ResourceError::Read,
                            ("poll on the AF_XDP socket failed: {}", e)
                        );
                        return Err(gst::FlowError::Error);
                    }
                }
            }
            let now = firehose_core::batch::unix_ns();
            let mut packets = Vec::with_capacity(n as usize);
            let mut dests = Vec::with_capacity(n as usize);
            let mut slots = Vec::with_capacity(n as usize);
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            let mut t = Tally::default();
            let fs = st.frame_size;
            {
                // One lock per batch: completions, the release of an all-rejected run
                // and the refill.
                let mut ring = lock(&st.cap.ring);
                // Descriptors consumed; the rest stay in the RX ring for the next call.
                let mut used = 0;
                let base = MemoryRegion::as_ptr(&st.cap.region);
                let mut i = 0;
                // A datagram joined in the guard ends the batch: its frames past the
                // last slot are held with the batch but lie outside the run, so no
                // later frame may extend the run over them.
                let mut wrapped = false;
                while i < n && !wrapped {
                    let d = st.cap.sock.rx.desc(start.wrapping_add(i));
                    // A datagram longer than a frame comes in several descriptors
                    // (multi-buffer mode), all in the ring once the first is: find its
                    // last; one cut off by the peek waits for the next call.
                    let mut last = i;
                    if st.cap.multi_buffer {
                        while last < n
                            && st.cap.sock.rx.desc(start.wrapping_add(last)).options
                                & libc::XDP_PKT_CONTD
                                != 0
                        {
                            last += 1;
                        }
                        if last == n && !(i == 0 && n == ahead) {
                            break;
                        }
                        if last == n {
                            // A whole window of continuations, more than any datagram
                            // spans: no datagram (a kernel bug). Waiting for its end
                            // would peek the same descriptors for ever; its frames go
                            // back and it is counted.
                            for k in 0..n {
                                let f = st.cap.sock.rx.desc(start.wrapping_add(k));
                                let fslot = f.addr as usize / fs;
                                if fslot < st.frames as usize && ring.complete(fslot as u32).is_ok()
                                {
                                    let _ = ring.release(fslot as u32);
                                }
                            }
                            t.malformed += 1;
                            used = n;
                            break;
                        }
                    }
                    let (addr, len) = (d.addr as usize, d.len as usize);
                    let slot = addr / fs;
                    // The lent memory covers lo..hi, so it may hold only this batch's
                    // own frames: a frame that does not continue the run of adjacent
                    // slots ends the batch (the fill ring's order wraps at the end of
                    // the UMEM, and frames between two of ours may be the kernel's).
                    if slots.last().is_some_and(|&l: &u32| l as usize + 1 != slot) {
                        break;
                    }
                    let first = i;
                    used = last + 1;
                    i = last + 1;
                    let frame_start = slot * fs;
                    // A descriptor outside the UMEM or across a frame boundary would
                    // be a kernel bug; count it rather than trust it.
                    let valid = |slot: usize, addr: usize, len: usize| {
                        slot < st.frames as usize && addr + len <= slot * fs + fs
                    };
                    let mut whole = valid(slot, addr, len) && ring.complete(slot as u32).is_ok();
                    if whole {
                        // A completed frame belongs to the run whether its datagram is
                        // kept or rejected: a rejected one goes back with the batch, so
                        // no frame inside lo..hi returns to the kernel while the memory
                        // is lent.
                        lo = lo.min(frame_start);
                        hi = hi.max(frame_start + fs);
                        slots.push(slot as u32);
                    }
                    // The continuation frames' bytes move up against the first's.
                    let mut end = addr + len;
                    for m in 1..=(last - first) as usize {
                        let f = st.cap.sock.rx.desc(start.wrapping_add(first + m as u32));
                        let (faddr, flen) = (f.addr as usize, f.len as usize);
                        let fslot = faddr / fs;
                        if !valid(fslot, faddr, flen) || ring.complete(fslot as u32).is_err() {
                            whole = false;
                            continue;
                        }
                        let placed = whole
                            .then(|| jumbo::place(geometry, slot, m, fslot, flen, end))
                            .flatten();
                        let dst = match placed {
                            Some(Placed::InRun { dst }) => {
                                slots.push(fslot as u32);
                                hi = hi.max(fslot * fs + fs);
                                dst
                            }
                            Some(Placed::Guard { dst }) => {
                                // Held with the batch, not released now: frames go back
                                // in the order they came, which keeps the fill ring in
                                // slot order (a frame returned early would leave a hole
                                // that the next datagram across it could not be joined
                                // over).
                                slots.push(fslot as u32);
                                hi = hi.max((dst + flen).div_ceil(fs) * fs);
                                wrapped = true;
                                dst
                            }
                            None => {
                                whole = false;
                                let _ = ring.release(fslot as u32);
                                continue;
                            }
                        };
                        // SAFETY: faddr..+flen lies in frame `fslot`, just completed
                        // (the kernel no longer writes it); dst..+flen lies in this
                        // datagram's own frames or in the guard past the UMEM, which
                        // the kernel never sees and which only a datagram holding the
                        // last frame (lent until released) uses; `place` checked it
                        // against the region. The ranges may overlap (a move back).
                        unsafe { std::ptr::copy(base.add(faddr), base.add(dst), flen) };
                        end = dst + flen;
                    }
                    if last > first {
                        if whole {
                            t.joined += 1;
                        } else {
                            t.unjoined += 1;
                            continue;
                        }
                    }
                    if !whole {
                        t.malformed += 1;
                        continue;
                    }
                    // SAFETY: addr..end lies inside this datagram's frames of the
                    // region (the first checked above, the rest joined against it); the
                    // frames were just completed, so the kernel no longer writes them
                    // and nobody else reads them until they are lent.
                    let frame = unsafe { std::slice::from_raw_parts(base.add(addr), end - addr) };
                    match packet_entry_dest(frame, addr, &st.cap.filter, now) {
                        Ok((p, d)) => {
                            t.packets += 1;
                            t.bytes += u64::from(p.len);
                            packets.push(p);
                            dests.push(d);
                        }
                        Err(r) => match r {
                            // The XDP program redirects UDP only.
                            Rejected::Malformed | Rejected::NotUdp => t.malformed += 1,
                            Rejected::Truncated => t.truncated += 1,
                            Rejected::Filtered => t.filtered += 1,
                            Rejected::Empty => t.empty += 1,
                        },
                    }
                }
                st.cap.sock.rx.release(used);
                if packets.is_empty() {
                    // Nothing to lend: the rejected frames go straight back.
                    for s in slots.drain(..) {
                        let _ = ring.release(s);
                    }
                }
                engine::refill(&mut ring, &mut st.cap.sock.fill, &mut st.post);
                let held = ring.counts().held as u64;
                if held > self.high_water.get() {
                    self.high_water.set(held);
                }
            }
            if st.cap.sock.fill.needs_wakeup() {
                st.cap.sock.kick();
            }
            let c = &self.counters;
            c.packets.add(t.packets);
            c.bytes.add(t.bytes);
            c.malformed.add(t.malformed);
            c.truncated.add(t.truncated);
            c.filtered.add(t.filtered);
            c.empty.add(t.empty);
            c.joined.add(t.joined);
            c.unjoined.add(t.unjoined);
            if packets.is_empty() {
                continue;
            }
            for p in &mut packets {
                // Offsets were relative to the UMEM; the memory starts at `lo`.
                p.offset -= lo as u32;
            }
            let mem = lend_batch(&st.cap.ring, &st.cap.region, lo..hi, slots);
            return Ok((mem, packets, dests));
        }
    }
}

firehose_core::element_subclass!(XdpSrc, "GstFhXdpSrc", firehose_core::src::PacketSrc);

impl ObjectImpl for XdpSrc {
    firehose_core::properties!(|| {
        vec![
            glib::ParamSpecString::builder("interface")
                .nick("Interface")
                .blurb("Network interface to capture on (required)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("queue")
                .nick("Queue")
                .blurb("Receive queue of the interface to bind (steer the stream there, e.g. with ethtool -N)")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecInt::builder("port")
                .nick("Port")
                .blurb("UDP destination port to capture; all other traffic goes to the kernel")
                .minimum(0)
                .maximum(65535)
                .default_value(DEFAULT_PORT as i32)
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("extra-ports")
                .nick("Extra ports")
                .blurb("More UDP destination ports to capture, comma-separated")
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("address")
                .nick("Address")
                .blurb("Destination IP to capture (IPv4 or IPv6); 0.0.0.0 = any, both families")
                .default_value(Some(DEFAULT_ADDRESS))
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<XdpMode>("mode")
                .nick("XDP mode")
                .blurb("Where the XDP program runs: auto, native (in the driver) or generic (on the skb)")
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<ZeroCopy>("zero-copy")
                .nick("Zero-copy")
                .blurb("Bind the socket in zero-copy mode: auto (fall back to copy), on, off")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("busy-poll")
                .nick("Busy poll")
                .blurb("0: sleep in poll() until packets arrive. N: spin on the socket and ask the kernel to busy-poll the queue for N µs per call (SO_PREFER_BUSY_POLL, SO_BUSY_POLL); uses a whole core")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("poll-interval")
                .nick("Poll interval")
                .blurb("Microseconds to sleep after an empty RX ring instead of blocking in poll() (0 = block until packets arrive); the RX ring must hold what arrives meanwhile")
                .maximum(100_000)
                .default_value(DEFAULT_POLL_US)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("busy-poll-budget")
                .nick("Busy poll budget")
                .blurb("Packets per busy-poll round (SO_BUSY_POLL_BUDGET)")
                .minimum(1)
                .maximum(65535)
                .default_value(DEFAULT_BUSY_POLL_BUDGET)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("frame-size")
                .nick("Frame size")
                .blurb("Bytes per UMEM frame, 2048 or 4096. On an interface whose MTU does not fit one frame less 256 B of headroom (jumbo frames), the capture runs in multi-buffer mode (Linux 6.6+): the kernel splits a long datagram over several frames and the element joins them (stats joined, unjoined)")
                .minimum(2048)
                .maximum(4096)
                .default_value(DEFAULT_FRAME_SIZE)
                .mutable_ready()
                .build(),
        ]
    });

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        let opt = |v: Option<String>| v.filter(|x| !x.is_empty());
        match pspec.name() {
            "interface" => s.interface = opt(value.get().unwrap()),
            "queue" => s.queue = value.get().unwrap(),
            "port" => s.port = value.get::<i32>().unwrap() as u32,
            "extra-ports" => s.extra_ports = opt(value.get().unwrap()),
            "address" => {
                s.address = value
                    .get::<Option<String>>()
                    .unwrap()
                    .unwrap_or_else(|| DEFAULT_ADDRESS.into())
            }
            "mode" => s.mode = value.get().unwrap(),
            "zero-copy" => s.zero_copy = value.get().unwrap(),
            "busy-poll" => s.busy_poll = value.get().unwrap(),
            "poll-interval" => s.poll_interval = value.get().unwrap(),
            "busy-poll-budget" => s.busy_poll_budget = value.get().unwrap(),
            "frame-size" => s.frame_size = value.get().unwrap(),
            other => gst::error!(CAT, imp = self, "no setter for property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = lock(&self.settings);
        match pspec.name() {
            "interface" => s.interface.to_value(),
            "queue" => s.queue.to_value(),
            "port" => (s.port as i32).to_value(),
            "extra-ports" => s.extra_ports.to_value(),
            "address" => s.address.to_value(),
            "mode" => s.mode.to_value(),
            "zero-copy" => s.zero_copy.to_value(),
            "busy-poll" => s.busy_poll.to_value(),
            "poll-interval" => s.poll_interval.to_value(),
            "busy-poll-budget" => s.busy_poll_budget.to_value(),
            "frame-size" => s.frame_size.to_value(),
            other => {
                gst::error!(CAT, imp = self, "no getter for property {other}");
                pspec.default_value().clone()
            }
        }
    }
}

impl ElementImpl for XdpSrc {
    firehose_core::element_metadata!(
        "Firehose AF_XDP source",
        "Source/Network",
        "Captures UDP to chosen ports with its own XDP program and an AF_XDP socket, \
         lending UMEM frames downstream, one buffer per batch",
    );
}

// Every method is the base's.
impl BaseSrcImpl for XdpSrc {}
impl PushSrcImpl for XdpSrc {}

impl PacketSrcImpl for XdpSrc {
    const LIVE: bool = true;
    const BATCH_SIZE: BatchSize = BatchSize {
        blurb: "Most frames taken from the RX ring, and pushed as one buffer, per batch",
        max: 4096,
        default: DEFAULT_BATCH_SIZE,
    };
    const POOL: &'static PoolProps = &POOL;
    const RECEIVE_INTO: ReceiveInto = ReceiveInto::Device {
        why: "the NIC writes into its AF_XDP UMEM",
    };

    fn stats_description() -> String {
        let kernel = KernelCounters::describe("pool-*, xdp-mode, bind-mode, memory");
        Counters::describe(&format!("drops-pool, drops-kernel, {kernel}"))
    }

    /// A UMEM frame.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        lock(&self.settings).frame_size.into()
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        self.counters.reset();
        self.kernel.reset();
        self.high_water.reset();
        let (state, mode) = self.open_capture(&s, open)?;
        *lock(&self.ring) = Some(state.cap.ring.clone());
        *lock(&self.mode) = Some(mode);
        *lock(&self.state) = Some(state);
        // A lent batch spans at most this much; a copy slot holds one.
        Ok(firehose_core::alloc::CopyOut::SLOT_BYTES)
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let st = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let (mem, packets, dests) = self.fill(st, rx.live)?;
        drop(guard);
        // One clock read per batch: the running time at which the batch was complete.
        let pts = self.obj().current_running_time();
        self.counters.batches.add(1);
        Ok(batch_buffer_with_dests(mem, packets, dests, pts, rx.readable).into())
    }

    fn counters(&self) -> gst::Structure {
        self.stats()
    }

    fn refresh_counters(&self) {
        if let Some(st) = lock(&self.state).as_ref() {
            self.read_kernel_stats(&st.cap.sock);
        }
    }

    fn close(&self) {
        if let Some(st) = lock(&self.state).take() {
            self.read_kernel_stats(&st.cap.sock);
            st.cap.close();
        }
    }
}
