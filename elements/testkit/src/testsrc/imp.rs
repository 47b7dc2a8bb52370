//! `fhtestsrc` implementation: a `PushSrc` that fills one pool slot per batch.

use firehose_core::batch::batch_buffer;
use firehose_core::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firehose_core::pace::Pacer;
use firehose_core::src::prelude::*;
use firehose_core::src::{self as live, LiveControl, PoolProps, PoolSettings, PoolSize};
use firehose_core::stats::{self, names, StatsInterval, StatsTimer};
use firehose_core::{gstmem, PacketInfo, PoolConfig, SlotPool};

use crate::pattern;

firehose_core::debug_category!(CAT, "fhtestsrc", "Firehose test packet source");

const DEFAULT_PACKET_SIZE: u32 = 1472;
/// The largest UDP payload over IPv4, so every test packet fits one datagram.
const MAX_PACKET_SIZE: u32 = 65507;
const DEFAULT_BATCH_SIZE: u32 = 64;
const MAX_BATCH_SIZE: u32 = 65536;
/// Batches in flight at once: enough for a queue downstream to smooth over hiccups,
/// few enough that the pool stays small.
const POOL_SLOTS: u64 = 8;
/// The pool properties: 8 batches unless `pool-size` says otherwise.
const POOL: PoolProps = PoolProps {
    what: "packet pool",
    size_blurb: "Bytes of preallocated packet pool, in slots of batch-size x packet-size \
                 bytes (default: 8 batches)",
    default: PoolSize::Count(POOL_SLOTS),
    default_slot_bytes: DEFAULT_PACKET_SIZE as u64 * DEFAULT_BATCH_SIZE as u64,
    memory: true,
    hugepages_alias: false,
    count_alias: None,
};
/// Largest batch, so a typo in `batch-size` cannot reserve gigabytes.
const MAX_SLOT_BYTES: usize = 32 << 20;
/// How often a pool wait re-checks the unlock flag if a wake-up were ever missed.
const POOL_POLL: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug)]
struct Settings {
    packet_size: u32,
    batch_size: u32,
    rate: u64,
    num_packets: u64,
    first_seq: u64,
    fill_payload: bool,
    pool: PoolSettings,
    stats_interval: StatsInterval,
}

impl Settings {
    /// Bytes per pool slot: one batch.
    fn slot_bytes(&self) -> u64 {
        u64::from(self.packet_size) * u64::from(self.batch_size)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            packet_size: DEFAULT_PACKET_SIZE,
            batch_size: DEFAULT_BATCH_SIZE,
            rate: 0,
            num_packets: 0,
            first_seq: 0,
            fill_payload: true,
            pool: PoolSettings::new(&POOL),
            stats_interval: StatsInterval::default(),
        }
    }
}

/// Streaming state, owned by the streaming thread between `start` and `stop`.
#[derive(Debug)]
struct State {
    /// Settings as they were at `start`.
    settings: Settings,
    /// Packets produced so far (the next one is `first_seq + sent`).
    sent: u64,
    /// The schedule: counts the packet bytes produced so far, and gives each batch its
    /// send time and its PTS.
    pacer: Pacer,
    timer: StatsTimer,
}

impl Default for State {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            sent: 0,
            pacer: Pacer::new(0),
            timer: StatsTimer::new(0),
        }
    }
}

firehose_core::counters! {
    /// Counters read by the `stats` property from any thread.
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
    }
}

/// The `fhtestsrc` element.
#[derive(Default)]
pub struct FhTestSrc {
    /// `output`, `caps`, and what was negotiated: batches or one buffer per datagram.
    output: firehose_core::src::PacketOutput,
    /// `readable-metas`, and whether downstream may read them (the allocation query).
    readable: firehose_core::meta::readable::ReadableOutput,
    settings: Mutex<Settings>,
    state: Mutex<State>,
    /// For `stats`; `live` holds it too, to wake a pool wait on `unlock()`.
    pool: Mutex<Option<SlotPool>>,
    live: LiveControl,
    counters: Counters,
}

impl FhTestSrc {
    fn stats(&self) -> gst::Structure {
        let mut s = self.counters.structure();
        live::append_slot_pool(&mut s, lock(&self.pool).as_ref());
        s
    }

    fn post_stats(&self) {
        stats::post(self.obj().upcast_ref(), self.stats());
    }

    /// Fills `slot` with `n` packets from `seq` on (only their headers unless
    /// `fill_payload`) and wraps it as a batch buffer.
    fn make_batch(
        &self,
        mut slot: firehose_core::Slot,
        (seq, n, packet_size): (u64, usize, usize),
        fill_payload: bool,
        readable: bool,
    ) -> gst::Buffer {
        let rx_time_ns = firehose_core::batch::unix_ns();
        let mut packets = Vec::with_capacity(n);
        let full = slot.as_mut_full();
        for (i, pkt) in full.chunks_exact_mut(packet_size).take(n).enumerate() {
            if fill_payload {
                pattern::fill(seq.wrapping_add(i as u64), pkt);
            } else {
                pattern::write_header(seq.wrapping_add(i as u64), pkt);
            }
            packets.push(PacketInfo {
                offset: (i * packet_size) as u32,
                len: packet_size as u32,
                rx_time_ns,
                src: Default::default(),
            });
        }
        slot.set_len(n * packet_size);
        batch_buffer(gstmem::slot_into_memory(slot), packets, None, readable)
    }
}

firehose_core::element_subclass!(FhTestSrc, "FhTestSrc", gst_base::PushSrc);

impl ObjectImpl for FhTestSrc {
    firehose_core::properties!(|| {
        let mut v = vec![
            glib::ParamSpecUInt::builder("packet-size")
                .nick("Packet size")
                .blurb("Bytes per test packet (header included)")
                .minimum(pattern::MIN_LEN as u32)
                .maximum(MAX_PACKET_SIZE)
                .default_value(DEFAULT_PACKET_SIZE)
                .mutable_ready()
                .build(),
            live::batch_size("Packets per buffer", MAX_BATCH_SIZE, DEFAULT_BATCH_SIZE),
            glib::ParamSpecUInt64::builder("rate")
                .nick("Rate")
                .blurb("Packet bytes per second, in bits/s (0 = as fast as possible)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("num-packets")
                .nick("Number of packets")
                .blurb("Packets to send before EOS (0 = unlimited)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("first-seq")
                .nick("First sequence number")
                .blurb("Sequence number of the first packet")
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("fill-payload")
                .nick("Fill payload")
                .blurb(
                    "Write every packet's payload pattern (false: only each packet's 16-byte \
                     header; the payload keeps what the slot held and fails fhcheck: for \
                     benchmarks of what carries the packets)",
                )
                .default_value(true)
                .mutable_ready()
                .build(),
        ];
        v.extend(firehose_core::src::PacketOutput::param_specs());
        v.extend(POOL.param_specs());
        v.extend(stats::properties(&Counters::describe("pool-*, memory")));
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
        match pspec.name() {
            "packet-size" => s.packet_size = value.get().expect("type checked upstream"),
            "batch-size" => s.batch_size = value.get().expect("type checked upstream"),
            "rate" => s.rate = value.get().expect("type checked upstream"),
            "num-packets" => s.num_packets = value.get().expect("type checked upstream"),
            "first-seq" => s.first_seq = value.get().expect("type checked upstream"),
            "fill-payload" => s.fill_payload = value.get().expect("type checked upstream"),
            other => s.stats_interval.set(other, value),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if let Some(v) = self.output.get(pspec) {
            return v;
        }
        let s = *lock(&self.settings);
        if let Some(v) = s.pool.get(pspec, s.slot_bytes()) {
            return v;
        }
        match pspec.name() {
            "packet-size" => s.packet_size.to_value(),
            "batch-size" => s.batch_size.to_value(),
            "rate" => s.rate.to_value(),
            "num-packets" => s.num_packets.to_value(),
            "first-seq" => s.first_seq.to_value(),
            "fill-payload" => s.fill_payload.to_value(),
            "stats" => self.stats().to_value(),
            other => s.stats_interval.value(other),
        }
    }

    // Not live: it paces itself. Buffers carry times from the start of the stream,
    // so segments are in time.
    firehose_core::live_src_constructed!(false);
}

impl ElementImpl for FhTestSrc {
    firehose_core::live_src_send_event!(live);

    firehose_core::element_metadata!(
        "Firehose test source",
        "Source/Network",
        "Produces batches of numbered, verifiable test packets (check them with fhcheck)",
    );

    firehose_core::pad_templates!(live::output::packets_src_template());
}

impl BaseSrcImpl for FhTestSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = *lock(&self.settings);
        let slot_size = settings.packet_size as usize * settings.batch_size as usize;
        if slot_size > MAX_SLOT_BYTES {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                (
                    "batch-size {} x packet-size {} = {} bytes exceeds the {} MiB batch limit; lower batch-size",
                    settings.batch_size,
                    settings.packet_size,
                    slot_size,
                    MAX_SLOT_BYTES >> 20
                )
            ));
        }
        let slots = settings.pool.count(slot_size as u64).max(2) as usize;
        let pool = SlotPool::new(&PoolConfig {
            slot_size,
            slots,
            hugepages: settings.pool.policy(),
        })
        .map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::NoSpaceLeft,
                ("cannot allocate the {slots} x {slot_size}-byte packet pool: {e}; lower pool-size, batch-size or packet-size")
            )
        })?;
        if let Some(why) = pool.fallback_reason() {
            gst::warning!(CAT, imp = self, "not using hugepages: {why}");
        }
        self.live.start();
        self.readable.start(settings.pool.readable_metas);
        self.live.add_pool(pool.clone());
        *lock(&self.pool) = Some(pool);
        *lock(&self.state) = State {
            settings,
            sent: 0,
            // No burst and no lag limit: the schedule never moves, so timestamps taken
            // from it are exact and evenly spaced even after a stall downstream.
            pacer: Pacer::new(settings.rate),
            timer: settings.stats_interval.timer(),
        };
        self.counters.reset();
        gst::debug!(CAT, imp = self, "started with {settings:?}");
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Buffers still downstream keep their slots (and the pool's memory) alive.
        *lock(&self.pool) = None;
        self.live.stop();
        Ok(())
    }

    /// An element downstream that needs its memory (`fhshmsink`'s shared segments,
    /// pinned pages) proposes its provider ([`firehose_core::alloc`]): the pool is cut
    /// from it, so each batch is generated straight into that memory, with no copy.
    /// Another allocator cannot be generated into: say so, and keep the own pool.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        self.readable.decide(self.obj().upcast_ref(), Some(query));
        // Called from the streaming thread before the first create: nothing holds the
        // pool's lock for long.
        let current = lock(&self.pool).clone();
        if let Some(current) = current {
            let decided =
                firehose_core::alloc::decide_pool(self.obj().upcast_ref(), query, &current)?;
            if let Some(pool) = decided {
                gst::info!(
                    CAT,
                    imp = self,
                    "generating into {} memory, as downstream proposed",
                    pool.kind().as_str()
                );
                self.live.set_pool(pool.clone());
                *lock(&self.pool) = Some(pool);
            }
        }
        self.parent_decide_allocation(query)
    }

    firehose_core::live_src_base!(live, output: output);
}

impl PushSrcImpl for FhTestSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        self.live.create(|| {
            let mut state = lock(&self.state);
            let s = state.settings;
            let n = match s.num_packets {
                0 => u64::from(s.batch_size),
                total => u64::from(s.batch_size).min(total - state.sent),
            };
            if n == 0 {
                drop(state);
                gst::debug!(CAT, imp = self, "sent all {} packets", s.num_packets);
                self.post_stats();
                return Err(gst::FlowError::Eos);
            }

            // A batch leaves at the start of its slot (its PTS), once the bytes before it
            // have had their time: a send of nothing beyond what was already sent.
            if !state.pacer.wait(0, self.live.interrupt()) {
                return Err(gst::FlowError::Flushing);
            }
            let now = Instant::now();
            let pool = lock(&self.pool).clone().ok_or(gst::FlowError::Flushing)?;
            // A test source never drops: wait for downstream to give a slot back.
            let slot = pool
                .acquire_blocking(self.live.flag(), POOL_POLL)
                .ok_or(gst::FlowError::Flushing)?;

            let seq = s.first_seq.wrapping_add(state.sent);
            let packet_size = s.packet_size as usize;
            let mut buf = self.make_batch(
                slot,
                (seq, n as usize, packet_size),
                s.fill_payload,
                self.readable.wanted(),
            );
            let batch_bytes = n * u64::from(s.packet_size);
            {
                let b = buf.get_mut().expect("a new buffer is writable");
                // Paced: the nominal send time, so timestamps are exact and evenly spaced.
                // Unpaced: the time since the first batch.
                let (pts, duration) = if state.pacer.is_paced() {
                    let before = state.pacer.sent();
                    let pts = state.pacer.time_of(before);
                    let end = state.pacer.time_of(before + batch_bytes);
                    (pts, Some(end - pts))
                } else {
                    let origin = state.pacer.origin().unwrap_or(now);
                    (now.saturating_duration_since(origin), None)
                };
                b.set_pts(gst::ClockTime::from_nseconds(pts.as_nanos() as u64));
                b.set_duration(
                    duration.map(|d| gst::ClockTime::from_nseconds(d.as_nanos() as u64)),
                );
                // Offsets count packets, like samples in audio.
                b.set_offset(state.sent);
                b.set_offset_end(state.sent + n);
            }

            state.sent += n;
            state.pacer.record(batch_bytes);
            self.counters.packets.add(n);
            self.counters.bytes.add(batch_bytes);
            self.counters.batches.add(1);
            let due = state.timer.due(Instant::now());
            drop(state);
            if due {
                self.post_stats();
            }
            Ok(self.output.push(buf))
        })
    }
}
