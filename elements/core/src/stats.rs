//! Statistics shared by every Firehose element.
//!
//! Every element keeps plain atomic counters (updated once per batch), exposes them as a
//! read-only `stats` property holding a [`gst::Structure`] named [`STRUCTURE_NAME`], and
//! posts the same structure as an element message every `stats-interval`. Counter names
//! are shared across elements so tools can add them up; they are in [`names`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Name of the stats structure, in the `stats` property and in element messages.
pub const STRUCTURE_NAME: &str = "firehose-stats";

/// The metric type of a statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the element restarts); exposed with a `_total` suffix.
    Counter,
    /// A level that goes up and down (pool slots in use), or a maximum so far.
    Gauge,
}

/// One statistic with a fixed meaning, as [`CATALOGUE`] declares it.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    /// Field name in the `firehose-stats` structure.
    pub stat: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// One line for people: the metrics endpoint's `# HELP`, the docs.
    pub help: &'static str,
}

/// Declares every statistic once: its constant in [`names`], and its kind and help in
/// [`CATALOGUE`] (what the metrics endpoint and docs/metrics.md read).
macro_rules! catalogue {
    ($( $(#[$doc:meta])* $konst:ident = $kind:ident $name:literal : $help:literal; )*) => {
        /// Statistic names, shared across elements so that tools can add them up; each
        /// is declared once, with its kind and help, in [`CATALOGUE`].
        pub mod names {
            $( $(#[$doc])* pub const $konst: &str = $name; )*
        }

        /// Every statistic with a fixed meaning. Gauges must be here (a gauge taken for
        /// a counter would make `rate()` nonsense); counters are here for their help, and
        /// a test checks that every element's numeric `stats` fields are.
        pub const CATALOGUE: &[Stat] = &[
            $( Stat { stat: $name, kind: Kind::$kind, help: $help }, )*
        ];
    };
}

catalogue! {
    /// Datagrams (or packets) delivered downstream.
    PACKETS = Counter "packets": "Datagrams or packets delivered downstream";
    /// Payload bytes delivered downstream.
    BYTES = Counter "bytes": "Payload bytes delivered downstream";
    /// Buffers (batches) pushed; for a source that pushes chunks, receive calls that
    /// returned data.
    BATCHES = Counter "batches": "Buffers (batches) pushed, or receive calls that returned data";
    /// Datagrams received, before any verdict on them (a chunk source's `packets` are
    /// those written into chunks).
    DATAGRAMS = Counter "datagrams": "Datagrams received, before any verdict on them";
    /// Packets whose payload the kernel received straight into its chunk or heap: no
    /// copy.
    PACKETS_LANDED = Counter "packets-landed": "Packets received straight into their chunk or heap (no copy)";
    /// Packets received into scratch and handed to the chunk or heap engine, which
    /// copies their payload once (the prediction of where it goes missed, or the handler
    /// does not allow receiving into chunks).
    PACKETS_COPIED = Counter "packets-copied": "Packets received into scratch and copied once";
    /// Datagrams the kernel dropped on a full socket buffer (SO_RXQ_OVFL).
    DROPS_KERNEL = Counter "drops-kernel": "Datagrams the kernel dropped on a full socket buffer";
    /// Datagrams received but dropped because no pool slot was free.
    DROPS_POOL = Counter "drops-pool": "Datagrams dropped because no pool slot was free";
    /// Packets (or buffers) a recorder dropped because the disk fell behind (recorders).
    DROPS_DISK = Counter "drops-disk": "Packets or buffers dropped because the disk fell behind";
    /// Packets of messages the packet handler chose not to place (chunk engines).
    DROPS_HANDLER = Counter "drops-handler": "Packets of messages the packet handler chose not to place";
    /// Packets the NIC dropped (DPDK imissed + rx_nombuf).
    DROPS_NIC = Counter "drops-nic": "Packets the NIC dropped (DPDK imissed + rx_nombuf)";
    /// Datagrams dropped because they were longer than `max-packet-size`.
    TRUNCATED = Counter "truncated": "Datagrams longer than max-packet-size, dropped";
    /// Zero-length datagrams (counted, not delivered).
    EMPTY = Counter "empty": "Zero-length datagrams, counted and not delivered";
    /// Packets that did not parse.
    MALFORMED = Counter "malformed": "Packets that did not parse";
    /// Reassembled heaps.
    HEAPS = Counter "heaps": "Reassembled heaps";
    /// Heaps that ended incomplete.
    HEAPS_INCOMPLETE = Counter "heaps-incomplete": "Heaps that ended incomplete";
    /// Chunks emitted.
    CHUNKS = Counter "chunks": "Chunks emitted";
    /// Chunks emitted with at least one slot absent (chunk engines).
    CHUNKS_INCOMPLETE = Counter "chunks-incomplete": "Chunks emitted with at least one slot absent";
    /// Packets for a chunk that had already left the window, or for a message already
    /// ended incomplete (chunk engines).
    TOO_OLD = Counter "too-old": "Packets for a chunk that had already left the window";
    /// Packets of heaps larger than `max-heap-size` (heap reassembly).
    TOO_LARGE = Counter "too-large": "Packets of heaps larger than max-heap-size";
    /// Times a chunk engine started its window again after a window's worth of
    /// messages in a row were too old, i.e. the sender restarted its counter (chunk
    /// engines).
    RESYNCS = Counter "resyncs": "Times a chunk engine restarted its window";
    /// Packets dropped because they did not continue their heap in order, or came after
    /// their heap was given up (heap reassembly).
    OUT_OF_ORDER_DROPPED = Counter "out-of-order-dropped": "Packets dropped because they did not continue their heap in order";
    /// Bytes written to disk.
    BYTES_WRITTEN = Counter "bytes-written": "Bytes written to disk";
    /// Files opened so far (recorders).
    FILES = Counter "files": "Files opened";
    /// Packets sent (sinks).
    PACKETS_SENT = Counter "packets-sent": "Packets sent";
    /// Bytes sent (sinks).
    BYTES_SENT = Counter "bytes-sent": "Bytes sent";
    /// Send errors (sinks).
    SEND_ERRORS = Counter "send-errors": "Send errors";
    /// UDP GSO sends, one per multi-segment message (sinks).
    GSO_SENDS = Counter "gso-sends": "UDP GSO sends";
    /// Times the kernel refused UDP GSO and the sink fell back to plain sends: 0 or 1,
    /// since the sink stops asking after a refusal (sinks).
    GSO_FALLBACKS = Counter "gso-fallbacks": "Times the kernel refused UDP GSO";
    /// Nanoseconds by which a paced sender fell behind its schedule and did not catch up
    /// (the schedule moved instead of a long catch-up burst): input that came late, or
    /// a sending thread the machine stalled. 0 while the rate is kept (sinks).
    PACING_SLIP_NS = Counter "pacing-slip-ns": "Time a paced sender fell behind its schedule";
    /// Packets missing from a sequence (checker).
    LOST = Counter "lost": "Packets missing from the sequence";
    /// Packets seen twice (checker).
    DUPLICATED = Counter "duplicated": "Packets seen twice";
    /// Packets that arrived after a later one (checker).
    REORDERED = Counter "reordered": "Packets that arrived after a later one";
    /// Packets whose content failed verification (checker).
    CORRUPTED = Counter "corrupted": "Packets whose content failed verification";
    /// Packets older than the checker's window: duplicates or very late arrivals
    /// (checker).
    LATE = Counter "late": "Packets older than the checker's window";
    /// Packets not delivered because they did not match the filter (replay sources).
    FILTERED = Counter "filtered": "Packets not delivered because they did not match the filter";
    /// Bytes a source copied into the memory downstream proposed because it cannot
    /// receive into it (its device owns its receive memory).
    BYTES_COPIED = Counter "bytes-copied": "Bytes copied into the memory downstream proposed";
    /// Times the pool was found empty.
    POOL_EXHAUSTED = Counter "pool-exhausted": "Times the pool was found empty";
    /// Pool slots in use now.
    POOL_IN_USE = Gauge "pool-in-use": "Pool slots in use now";
    /// Most pool slots ever in use at once.
    POOL_HIGH_WATER = Gauge "pool-high-water": "Most pool slots ever in use at once";
    /// Slots in the pool.
    POOL_SLOTS = Gauge "pool-slots": "Slots in the pool";
    /// Receive buffers posted to the device now.
    POOL_POSTED = Gauge "pool-posted": "Receive buffers posted to the device now";
    /// Longest single disk write, in microseconds (recorders).
    WRITE_LATENCY_MAX_US = Gauge "write-latency-max-us": "Longest single disk write";
    /// Consumers attached now.
    CONSUMERS = Gauge "consumers": "Consumers attached now";
    /// Buffers or transfers in flight now.
    IN_FLIGHT = Gauge "in-flight": "Buffers or transfers in flight now";
    /// SPEAD descriptor heaps received.
    DESCRIPTORS = Counter "descriptors": "SPEAD descriptor heaps received";
    /// Packets the kernel dropped for an AF_XDP socket (XDP_STATISTICS).
    RX_DROPPED = Counter "rx-dropped": "Packets the kernel dropped for an AF_XDP socket (XDP_STATISTICS)";
    /// Invalid descriptors on an AF_XDP receive ring.
    RX_INVALID_DESCS = Counter "rx-invalid-descs": "Invalid descriptors on an AF_XDP receive ring";
    /// Packets dropped because an AF_XDP receive ring was full.
    RX_RING_FULL = Counter "rx-ring-full": "Packets dropped because an AF_XDP receive ring was full";
    /// Times an AF_XDP fill ring was found empty.
    RX_FILL_RING_EMPTY_DESCS = Counter "rx-fill-ring-empty-descs": "Times an AF_XDP fill ring was found empty";
    /// Packets the NIC missed for lack of receive descriptors (DPDK).
    IMISSED = Counter "imissed": "Packets the NIC missed for lack of receive descriptors (DPDK)";
    /// Erroneous packets the NIC received (DPDK).
    IERRORS = Counter "ierrors": "Erroneous packets the NIC received (DPDK)";
    /// Receive buffer allocation failures (DPDK).
    RX_NOMBUF = Counter "rx-nombuf": "Receive buffer allocation failures (DPDK)";
    /// Packets the device did not accept for sending (DPDK).
    DROPS_TX = Counter "drops-tx": "Packets the device did not accept for sending (DPDK)";
    /// Work completions with an error status (ibverbs).
    COMPLETION_ERRORS = Counter "completion-errors": "Work completions with an error status (ibverbs)";
    /// Packets of messages whose chunk lay so far ahead that the window would have left
    /// every open chunk behind, until enough messages in a row agree on the jump (chunk
    /// engines).
    TOO_FAR = Counter "too-far": "Packets for a chunk so far ahead the window would have left every open chunk behind";
    /// SPEAD descriptors not kept because the table was full.
    DESCRIPTORS_DROPPED = Counter "descriptors-dropped": "SPEAD descriptors not kept because the table was full";
    /// Transfers to the GPU completed.
    TRANSFERS = Counter "transfers": "Transfers to the GPU completed";
    /// Inputs copied through a pinned bounce slot before the GPU transfer.
    BOUNCE_COPIES = Counter "bounce-copies": "Inputs copied through a pinned bounce slot before the GPU transfer";
    /// Most GPU transfers queued at once.
    IN_FLIGHT_HIGH_WATER = Gauge "in-flight-high-water": "Most GPU transfers queued at once";
    /// Time GPU submits waited for a free place in the ring.
    STALL_TIME_NS = Counter "stall-time-ns": "Time GPU submits waited for a free place in the ring";
    /// Buffers uploaded from unpinned memory because pinning was refused.
    PINNED_FALLBACKS = Counter "pinned-fallbacks": "Buffers uploaded from unpinned memory because pinning was refused";
    /// Bytes passed on in the source's own memory although downstream proposed its memory (no free slot).
    BYTES_UNCOPIED = Counter "bytes-uncopied": "Bytes passed on in the source's own memory although downstream proposed its memory (no free slot)";
    /// Datagrams longer than a frame whose frames were joined into contiguous bytes
    /// (multi-buffer AF_XDP).
    JOINED = Counter "joined": "Datagrams longer than an AF_XDP frame whose frames were joined";
    /// Datagrams longer than a frame whose frames could not be joined: dropped
    /// (multi-buffer AF_XDP).
    UNJOINED = Counter "unjoined": "Datagrams longer than an AF_XDP frame whose frames could not be joined (dropped)";
    /// Captured records cut into the SPEAD packets they held (replay).
    RECORDS_SPLIT = Counter "records-split": "Captured records cut into the SPEAD packets they held (replay)";
    /// Captured records that could not be cut into whole SPEAD packets (replay).
    RECORDS_UNSPLIT = Counter "records-unsplit": "Captured records that could not be cut into whole SPEAD packets (replay)";
    /// Complete heaps that carried only descriptors, learnt and not delivered.
    DESCRIPTOR_HEAPS = Counter "descriptor-heaps": "Complete heaps that carried only descriptors, learnt and not delivered";
    /// Buffers sent or received through shared memory.
    BUFFERS = Counter "buffers": "Buffers sent or received through shared memory";
    /// Buffers the producer says this consumer missed (held its limit, or its socket was full).
    MISSED = Counter "missed": "Buffers the producer says this consumer missed (held its limit, or its socket was full)";
    /// Caps changes received from the producer.
    CAPS_CHANGES = Counter "caps-changes": "Caps changes received from the producer";
    /// Consumers attached now whose on-full is drop.
    CONSUMERS_DROP = Gauge "consumers-drop": "Consumers attached now whose on-full is drop";
    /// Consumers ever attached.
    CONSUMERS_TOTAL = Counter "consumers-total": "Consumers ever attached";
    /// Consumers that went away without being asked (hang-up, crash).
    CONSUMERS_LOST = Counter "consumers-lost": "Consumers that went away without being asked (hang-up, crash)";
    /// Consumers disconnected for breaking the protocol.
    CONSUMERS_MALFORMED = Counter "consumers-malformed": "Consumers disconnected for breaking the protocol";
    /// Consumers refused at connect (another user, not allowed by allow-uid).
    CONSUMERS_REFUSED = Counter "consumers-refused": "Consumers refused at connect (another user, not allowed by allow-uid)";
    /// Buffer messages sent to consumers (one per consumer per buffer).
    MESSAGES = Counter "messages": "Buffer messages sent to consumers (one per consumer per buffer)";
    /// Buffers consumers released (one per consumer per buffer).
    RELEASED = Counter "released": "Buffers consumers released (one per consumer per buffer)";
    /// Release messages read (consumers batch their releases).
    RELEASE_MESSAGES = Counter "release-messages": "Release messages read (consumers batch their releases)";
    /// Releases of a buffer the consumer did not hold, ignored.
    RELEASES_UNKNOWN = Counter "releases-unknown": "Releases of a buffer the consumer did not hold, ignored";
    /// Buffers a drop-mode consumer missed because it held its limit.
    DROPS_HELD = Counter "drops-held": "Buffers a drop-mode consumer missed because it held its limit";
    /// Buffers a drop-mode consumer missed because its socket was full.
    DROPS_SOCKET_FULL = Counter "drops-socket-full": "Buffers a drop-mode consumer missed because its socket was full";
    /// Buffers skipped for a block-mode consumer because the element was flushing.
    DROPS_FLUSHING = Counter "drops-flushing": "Buffers skipped for a block-mode consumer because the element was flushing";
    /// Buffers dropped because no shared-memory copy slot was free.
    DROPS_NO_SLOT = Counter "drops-no-slot": "Buffers dropped because no shared-memory copy slot was free";
    /// Metas left out of a message that would have been too long.
    METAS_DROPPED = Counter "metas-dropped": "Metas left out of a message that would have been too long";
    /// Messages that travelled in multi-message packets.
    BATCHED_MESSAGES = Counter "batched-messages": "Messages that travelled in multi-message packets";
    /// Consumers that read shared-memory rings now.
    RING_CONSUMERS = Gauge "ring-consumers": "Consumers that read shared-memory rings now";
    /// Messages written into consumers' rings (no system call).
    RING_PACKETS = Counter "ring-packets": "Messages written into consumers' rings (no system call)";
    /// Messages a full ring had no room for (sent on the socket instead).
    RING_FULL = Counter "ring-full": "Messages a full ring had no room for (sent on the socket instead)";
    /// Releases read from release rings.
    RING_RELEASES = Counter "ring-releases": "Releases read from release rings";
    /// Wake-ups sent to consumers that announced they sleep.
    WAKES_SENT = Counter "wakes-sent": "Wake-ups sent to consumers that announced they sleep";
    /// Wake-ups consumers sent to the producer.
    WAKES_RECEIVED = Counter "wakes-received": "Wake-ups consumers sent to the producer";
}

/// The catalogue entry of stats field `stat`, if it has a fixed meaning.
pub fn stat(stat: &str) -> Option<&'static Stat> {
    CATALOGUE.iter().find(|s| s.stat == stat)
}

/// The value of a text field of a `stats` structure (`memory`, `xdp-mode`, …) that is not
/// known yet (before start) or does not apply: the key is there in every mode, as
/// counters that do not apply read 0.
pub const NOT_KNOWN: &str = "none";

/// A monotonically increasing counter, updated from the streaming thread and read from
/// any thread.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the value (for counters mirrored from elsewhere, e.g. the kernel).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Back to zero (at start).
    pub fn reset(&self) {
        self.set(0);
    }
}

/// Declares an engine's counts once: a plain struct of `u64` fields (no atomics, no
/// GStreamer: the engine owns it on its thread), each with its `stats` name. Generates
/// `NAMES` (declaration order), `COUNT`, `fields()` (`(name, value)` pairs, for
/// [`structure`] or a [`Mirror`]) and `describe(extra)` (the names joined by commas, then
/// `extra`: the blurb of a `stats` property), so the struct, the names in `stats` and
/// the documented list cannot drift apart.
///
/// ```
/// firehose_core::counts! {
///     /// What an engine counts.
///     pub struct EngineCounts {
///         /// Packets taken.
///         packets: firehose_core::stats::names::PACKETS,
///         too_far: "too-far",
///     }
/// }
/// let c = EngineCounts { packets: 3, too_far: 1 };
/// assert_eq!(c.fields(), [("packets", 3), ("too-far", 1)]);
/// let m = firehose_core::stats::Mirror::<{ EngineCounts::COUNT }>::default();
/// m.update(&c.fields());
/// assert_eq!(EngineCounts::from_values(m.values()), c);
/// assert_eq!(EngineCounts::describe("pool-*"), "packets, too-far, pool-*");
/// ```
#[macro_export]
macro_rules! counts {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $key:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $name {
            $( $(#[$fmeta])* pub $field: u64, )*
        }

        #[allow(dead_code)]
        impl $name {
            /// The stats names of the counts, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($key),*];
            /// How many counts there are.
            pub const COUNT: usize = Self::NAMES.len();

            /// `(name, value)` of every count, in declaration order.
            pub fn fields(&self) -> [(&'static str, u64); Self::COUNT] {
                [$(($key, self.$field)),*]
            }

            /// Adds `other`'s counts to these (a batch's tally to a running total).
            pub fn add(&mut self, other: &Self) {
                $( self.$field += other.$field; )*
            }

            /// The counts from their values in declaration order (what a
            /// [`Mirror`]($crate::stats::Mirror) holds).
            pub fn from_values(values: [u64; Self::COUNT]) -> Self {
                let [$($field),*] = values;
                Self { $($field),* }
            }

            /// The names joined by commas, then `extra` if not empty.
            pub fn describe(extra: &str) -> ::std::string::String {
                let mut s = Self::NAMES.join(", ");
                if !extra.is_empty() {
                    s.push_str(", ");
                    s.push_str(extra);
                }
                s
            }
        }
    };
}

/// Atomic copies of an engine's [`counts!`] (`N` = its `COUNT`), updated once per
/// buffer by the thread that owns the engine, so that a `stats` read from any thread
/// never waits for it.
#[derive(Debug)]
pub struct Mirror<const N: usize> {
    values: [Counter; N],
}

impl<const N: usize> Default for Mirror<N> {
    fn default() -> Self {
        Self {
            values: std::array::from_fn(|_| Counter::default()),
        }
    }
}

impl<const N: usize> Mirror<N> {
    /// Copies the engine's `fields()`.
    pub fn update(&self, fields: &[(&'static str, u64); N]) {
        for (c, (_, v)) in self.values.iter().zip(fields) {
            c.set(*v);
        }
    }

    /// Back to zero (at start).
    pub fn reset(&self) {
        self.values.iter().for_each(Counter::reset);
    }

    /// `(name, value)` pairs with the engine's `names` (its `NAMES`).
    pub fn fields(&self, names: &[&'static str]) -> Vec<(&'static str, u64)> {
        names
            .iter()
            .zip(&self.values)
            .map(|(n, c)| (*n, c.get()))
            .collect()
    }

    /// The values, in declaration order (for the counts' `from_values`).
    pub fn values(&self) -> [u64; N] {
        std::array::from_fn(|i| self.values[i].get())
    }
}

/// Builds the stats structure from `(name, value)` pairs.
pub fn structure(fields: &[(&str, u64)]) -> gst::Structure {
    let mut s = gst::Structure::new_empty(STRUCTURE_NAME);
    for (name, value) in fields {
        s.set(*name, *value);
    }
    s
}

/// Reads counter `name` from a stats structure (0 when absent).
pub fn field(s: &gst::StructureRef, name: &str) -> u64 {
    s.get::<u64>(name).unwrap_or(0)
}

/// True if `msg` is a Firehose stats message.
pub fn is_stats_message(msg: &gst::MessageRef) -> bool {
    match msg.view() {
        gst::MessageView::Element(e) => e.structure().is_some_and(|s| s.name() == STRUCTURE_NAME),
        _ => false,
    }
}

/// Default `stats-interval`: one message a second.
pub const DEFAULT_INTERVAL_MS: u32 = 1000;

/// The read-only `stats` property every Firehose element has: its counters (a
/// [`STRUCTURE_NAME`] structure; `counters` lists the fields, for the description).
pub fn stats_spec(counters: &str) -> gst::glib::ParamSpec {
    use gst::glib;
    use gst::prelude::*;
    glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
        .nick("Statistics")
        .blurb(&format!(
            "Counters (a {STRUCTURE_NAME} structure): {counters}"
        ))
        .read_only()
        .build()
}

/// The `stats-interval` setting of an element: milliseconds between its stats
/// messages (0 = none), [`DEFAULT_INTERVAL_MS`] by default. A property group of one,
/// which every element's settings contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsInterval(pub u32);

impl Default for StatsInterval {
    fn default() -> Self {
        Self(DEFAULT_INTERVAL_MS)
    }
}

crate::property_group! {
    StatsInterval as _s {
        0 => {
            use gst::prelude::*;
            gst::glib::ParamSpecUInt::builder("stats-interval")
                .nick("Statistics interval")
                .blurb("Milliseconds between firehose-stats element messages (0 = none)")
                .default_value(DEFAULT_INTERVAL_MS)
                .mutable_ready()
                .build()
        };
    }
}

impl StatsInterval {
    /// A timer firing at this interval.
    pub fn timer(&self) -> StatsTimer {
        StatsTimer::new(self.0)
    }
}

/// Decides when the next periodic stats message is due; checked once per batch.
#[derive(Debug)]
pub struct StatsTimer {
    interval: Option<Duration>,
    next: Instant,
}

impl StatsTimer {
    /// A timer firing every `interval_ms` milliseconds (0 = never).
    pub fn new(interval_ms: u32) -> Self {
        let interval = (interval_ms > 0).then(|| Duration::from_millis(interval_ms.into()));
        Self {
            interval,
            next: Instant::now() + interval.unwrap_or_default(),
        }
    }

    /// True (and re-armed) when a message is due at `now`.
    pub fn due(&mut self, now: Instant) -> bool {
        match self.interval {
            Some(iv) if now >= self.next => {
                self.next = now + iv;
                true
            }
            _ => false,
        }
    }
}

/// Posts `s` as an element message from `element`.
pub fn post(element: &gst::Element, s: gst::Structure) {
    use gst::prelude::*;
    let msg = gst::message::Element::builder(s).src(element).build();
    let _ = element.post_message(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_round_trip() {
        gst::init().unwrap();
        let s = structure(&[(names::PACKETS, 5), (names::DROPS_POOL, 2)]);
        assert_eq!(s.name(), STRUCTURE_NAME);
        assert_eq!(field(&s, names::PACKETS), 5);
        assert_eq!(field(&s, names::DROPS_POOL), 2);
        assert_eq!(field(&s, names::HEAPS), 0);
    }

    #[test]
    fn timer_fires_after_interval_only() {
        let mut t = StatsTimer::new(100);
        let now = Instant::now();
        assert!(!t.due(now));
        assert!(t.due(now + Duration::from_millis(150)));
        assert!(!t.due(now + Duration::from_millis(160)));
        let mut never = StatsTimer::new(0);
        assert!(!never.due(now + Duration::from_secs(3600)));
    }

    #[test]
    fn stats_interval_is_set_and_read_through_its_property() {
        use crate::property::PropertyGroup;
        use gst::prelude::*;
        gst::init().unwrap();
        let mut i = StatsInterval::default();
        let specs = i.spec_vec();
        assert_eq!(specs.len(), 1);
        let spec = &specs[0];
        assert_eq!(spec.name(), "stats-interval");
        assert_eq!(
            i.get(0, spec).unwrap().get::<u32>().unwrap(),
            DEFAULT_INTERVAL_MS
        );
        assert_eq!(spec.default_value().get::<u32>().unwrap(), i.0);
        assert!(i.set(0, &250u32.to_value(), spec));
        assert_eq!(i, StatsInterval(250));
        assert_eq!(
            i.get_named("stats-interval").unwrap().get::<u32>().unwrap(),
            250
        );
        // Past the group: not handled, and no panic.
        assert!(!i.set(1, &1u32.to_value(), spec));
        assert!(i.get(1, spec).is_none());
        assert_eq!(i, StatsInterval(250));
        assert!(stats_spec("packets").blurb().unwrap().ends_with("packets"));
    }

    #[test]
    fn counter_counts() {
        let c = Counter::default();
        c.add(3);
        c.add(4);
        assert_eq!(c.get(), 7);
        c.reset();
        assert_eq!(c.get(), 0);
    }
}
