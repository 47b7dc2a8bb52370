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

/// Counter names, shared across elements.
pub mod names {
    /// Datagrams (or packets) delivered downstream.
    pub const PACKETS: &str = "packets";
    /// Payload bytes delivered downstream.
    pub const BYTES: &str = "bytes";
    /// Buffers (batches) pushed; for a source that pushes chunks, receive calls that
    /// returned data.
    pub const BATCHES: &str = "batches";
    /// Datagrams received, before any verdict on them (a chunk source's `packets` are
    /// those written into chunks).
    pub const DATAGRAMS: &str = "datagrams";
    /// Packets whose payload the kernel received straight into its chunk or heap: no
    /// copy.
    pub const PACKETS_LANDED: &str = "packets-landed";
    /// Packets received into scratch and handed to the chunk or heap engine, which
    /// copies their payload once (the prediction of where it goes missed, or the handler
    /// does not allow receiving into chunks).
    pub const PACKETS_COPIED: &str = "packets-copied";
    /// Datagrams the kernel dropped on a full socket buffer (SO_RXQ_OVFL).
    pub const DROPS_KERNEL: &str = "drops-kernel";
    /// Datagrams received but dropped because no pool slot was free.
    pub const DROPS_POOL: &str = "drops-pool";
    /// Datagrams dropped because they were longer than `max-packet-size`.
    pub const TRUNCATED: &str = "truncated";
    /// Zero-length datagrams (counted, not delivered).
    pub const EMPTY: &str = "empty";
    /// Packets that did not parse.
    pub const MALFORMED: &str = "malformed";
    /// Reassembled heaps.
    pub const HEAPS: &str = "heaps";
    /// Heaps that ended incomplete.
    pub const HEAPS_INCOMPLETE: &str = "heaps-incomplete";
    /// Chunks emitted.
    pub const CHUNKS: &str = "chunks";
    /// Bytes written to disk.
    pub const BYTES_WRITTEN: &str = "bytes-written";
    /// Packets sent (sinks).
    pub const PACKETS_SENT: &str = "packets-sent";
    /// Bytes sent (sinks).
    pub const BYTES_SENT: &str = "bytes-sent";
    /// Send errors (sinks).
    pub const SEND_ERRORS: &str = "send-errors";
    /// Packets missing from a sequence (checker).
    pub const LOST: &str = "lost";
    /// Packets seen twice (checker).
    pub const DUPLICATED: &str = "duplicated";
    /// Packets that arrived after a later one (checker).
    pub const REORDERED: &str = "reordered";
    /// Packets whose content failed verification (checker).
    pub const CORRUPTED: &str = "corrupted";
    /// Packets older than the checker's window: duplicates or very late arrivals
    /// (checker).
    pub const LATE: &str = "late";
    /// UDP GSO sends, one per multi-segment message (sinks).
    pub const GSO_SENDS: &str = "gso-sends";
    /// Times the kernel refused UDP GSO and the sink fell back to plain sends: 0 or 1,
    /// since the sink stops asking after a refusal (sinks).
    pub const GSO_FALLBACKS: &str = "gso-fallbacks";
    /// Nanoseconds by which a paced sender fell behind its schedule and did not catch up
    /// (the schedule moved instead of a long catch-up burst): input that came late, or
    /// a sending thread the machine stalled. 0 while the rate is kept (sinks).
    pub const PACING_SLIP_NS: &str = "pacing-slip-ns";
    /// Pool slots in use now.
    pub const POOL_IN_USE: &str = "pool-in-use";
    /// Most pool slots ever in use at once.
    pub const POOL_HIGH_WATER: &str = "pool-high-water";
    /// Times the pool was found empty.
    pub const POOL_EXHAUSTED: &str = "pool-exhausted";
    /// Slots in the pool.
    pub const POOL_SLOTS: &str = "pool-slots";
    /// Chunks emitted with at least one slot absent (chunk engines).
    pub const CHUNKS_INCOMPLETE: &str = "chunks-incomplete";
    /// Packets for a chunk that had already left the window, or for a message already
    /// ended incomplete (chunk engines).
    pub const TOO_OLD: &str = "too-old";
    /// Packets of messages whose chunk lay so far ahead that the window would have left
    /// every open chunk behind, until enough messages in a row agree on the jump (chunk
    /// engines).
    pub const TOO_FAR: &str = "too-far";
    /// Packets of messages the packet handler chose not to place (chunk engines).
    pub const DROPS_HANDLER: &str = "drops-handler";
    /// Datagrams longer than a frame whose frames were joined into contiguous bytes
    /// (multi-buffer AF_XDP).
    pub const JOINED: &str = "joined";
    /// Datagrams longer than a frame whose frames could not be joined: dropped
    /// (multi-buffer AF_XDP).
    pub const UNJOINED: &str = "unjoined";
    /// Times a chunk engine started its window again after a window's worth of
    /// messages in a row were too old, i.e. the sender restarted its counter (chunk
    /// engines).
    pub const RESYNCS: &str = "resyncs";
    /// Packets (or buffers) a recorder dropped because the disk fell behind (recorders).
    pub const DROPS_DISK: &str = "drops-disk";
    /// Files opened so far (recorders).
    pub const FILES: &str = "files";
    /// Longest single disk write, in microseconds (recorders).
    pub const WRITE_LATENCY_MAX_US: &str = "write-latency-max-us";
    /// Packets not delivered because they did not match the filter (replay sources).
    pub const FILTERED: &str = "filtered";
    /// Packets of heaps larger than `max-heap-size` (heap reassembly).
    pub const TOO_LARGE: &str = "too-large";
    /// Bytes a source copied into the memory downstream proposed because it cannot
    /// receive into it (its device owns its receive memory).
    pub const BYTES_COPIED: &str = "bytes-copied";
    /// Packets dropped because they did not continue their heap in order, or came after
    /// their heap was given up (heap reassembly).
    pub const OUT_OF_ORDER_DROPPED: &str = "out-of-order-dropped";
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

/// The two properties every Firehose element has: the read-only `stats` structure
/// (`counters` lists its fields, for the property's description) and `stats-interval`.
pub fn properties(counters: &str) -> [gst::glib::ParamSpec; 2] {
    use gst::glib;
    use gst::prelude::*;
    [
        glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
            .nick("Statistics")
            .blurb(&format!(
                "Counters (a {STRUCTURE_NAME} structure): {counters}"
            ))
            .read_only()
            .build(),
        glib::ParamSpecUInt::builder("stats-interval")
            .nick("Statistics interval")
            .blurb("Milliseconds between firehose-stats element messages (0 = none)")
            .default_value(DEFAULT_INTERVAL_MS)
            .mutable_ready()
            .build(),
    ]
}

/// The `stats-interval` setting of an element: milliseconds between its stats
/// messages (0 = none), [`DEFAULT_INTERVAL_MS`] by default.
///
/// Why it also ends an element's property `match`: it is the one property every
/// element has, so `other => s.stats_interval.set(other, value)` and
/// `other => s.stats_interval.value(other)` handle it and say, in one place, that any other
/// name is a property the element declared but forgot to handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsInterval(pub u32);

impl Default for StatsInterval {
    fn default() -> Self {
        Self(DEFAULT_INTERVAL_MS)
    }
}

impl StatsInterval {
    /// Sets `stats-interval`.
    ///
    /// # Panics
    /// On any other property: one the element declared and did not handle (a bug).
    pub fn set(&mut self, name: &str, value: &gst::glib::Value) {
        match name {
            "stats-interval" => self.0 = value.get().expect("type checked upstream"),
            other => unreachable!("unknown property {other}"),
        }
    }

    /// The value of `stats-interval`.
    ///
    /// # Panics
    /// On any other property, as [`StatsInterval::set`].
    pub fn value(&self, name: &str) -> gst::glib::Value {
        use gst::prelude::*;
        match name {
            "stats-interval" => self.0.to_value(),
            other => unreachable!("unknown property {other}"),
        }
    }

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
        use gst::prelude::*;
        gst::init().unwrap();
        let [_, spec] = properties("packets");
        let mut i = StatsInterval::default();
        assert_eq!(
            i.value(spec.name()).get::<u32>().unwrap(),
            DEFAULT_INTERVAL_MS
        );
        assert_eq!(spec.default_value().get::<u32>().unwrap(), i.0);
        i.set(spec.name(), &250u32.to_value());
        assert_eq!(i, StatsInterval(250));
        assert_eq!(i.value("stats-interval").get::<u32>().unwrap(), 250);
        let r = std::panic::catch_unwind(move || i.set("queue", &1u32.to_value()));
        assert!(r.is_err(), "an unknown property is a bug");
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
