//! `speaddepay` settings: the properties and their values.

use std::sync::LazyLock;

use firehose_core::props::Hugepages;
use firehose_core::stats;
use gst::glib;
use gst::prelude::*;

use super::IncompletePolicy;
use crate::reassembly::DEFAULT_MAX_HEAP_SIZE;

const DEFAULT_MAX_HEAPS: u32 = 4;
const DEFAULT_SUBSTREAMS: u32 = 1;
/// Windows beyond this would only hide a misconfiguration (and cost memory per class).
const MAX_WINDOW: u32 = 1024;
/// Heaps above 1 GiB are not heaps a receive pipeline should hold in memory.
const MAX_MAX_HEAP_SIZE: u64 = 1 << 30;

#[derive(Debug, Clone)]
/// What the properties say; read at start.
pub(super) struct Settings {
    pub max_heaps: u32,
    pub substreams: u32,
    pub allow_out_of_order: bool,
    pub incomplete: IncompletePolicy,
    pub max_heap_size: u64,
    pub stop_is_eos: bool,
    pub hugepages: Hugepages,
    pub pool_size: u64,
    pub stats_interval: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_heaps: DEFAULT_MAX_HEAPS,
            substreams: DEFAULT_SUBSTREAMS,
            allow_out_of_order: false,
            incomplete: IncompletePolicy::Drop,
            max_heap_size: DEFAULT_MAX_HEAP_SIZE as u64,
            stop_is_eos: true,
            hugepages: Hugepages::Auto,
            pool_size: 0,
            stats_interval: stats::DEFAULT_INTERVAL_MS,
        }
    }
}

impl Settings {
    /// Sets property `name` (every property but the read-only `stats`).
    pub fn set(&mut self, name: &str, value: &glib::Value) {
        match name {
            "max-heaps" => self.max_heaps = value.get().unwrap(),
            "substreams" => self.substreams = value.get().unwrap(),
            "allow-out-of-order" => self.allow_out_of_order = value.get().unwrap(),
            "incomplete" => self.incomplete = value.get().unwrap(),
            "max-heap-size" => self.max_heap_size = value.get().unwrap(),
            "stop-is-eos" => self.stop_is_eos = value.get().unwrap(),
            "hugepages" => self.hugepages = value.get().unwrap(),
            "pool-size" => self.pool_size = value.get().unwrap(),
            "stats-interval" => self.stats_interval = value.get().unwrap(),
            other => unreachable!("unknown property {other}"),
        }
    }

    /// The value of property `name` (every property but `stats`).
    pub fn get(&self, name: &str) -> glib::Value {
        match name {
            "max-heaps" => self.max_heaps.to_value(),
            "substreams" => self.substreams.to_value(),
            "allow-out-of-order" => self.allow_out_of_order.to_value(),
            "incomplete" => self.incomplete.to_value(),
            "max-heap-size" => self.max_heap_size.to_value(),
            "stop-is-eos" => self.stop_is_eos.to_value(),
            "hugepages" => self.hugepages.to_value(),
            "pool-size" => self.pool_size.to_value(),
            "stats-interval" => self.stats_interval.to_value(),
            other => unreachable!("unknown property {other}"),
        }
    }
}

/// The element's properties.
pub(super) fn properties() -> &'static [glib::ParamSpec] {
    static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
        let mut v = vec![
            glib::ParamSpecUInt::builder("max-heaps")
                .nick("Maximum heaps")
                .blurb("Heaps under construction per substream; a new heap evicts the oldest (spead2's max_heaps)")
                .minimum(1)
                .maximum(MAX_WINDOW)
                .default_value(DEFAULT_MAX_HEAPS)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("substreams")
                .nick("Substreams")
                .blurb("Separate windows, one per heap cnt mod N (N interleaved senders)")
                .minimum(1)
                .maximum(MAX_WINDOW)
                .default_value(DEFAULT_SUBSTREAMS)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("allow-out-of-order")
                .nick("Allow out of order")
                .blurb("Accept a heap's packets in any order (else a packet not at the next offset is dropped: out-of-order-dropped)")
                .default_value(false)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<IncompletePolicy>("incomplete")
                .nick("Incomplete heaps")
                .blurb("drop (count heaps-incomplete) or deliver (complete=false and the ranges received in the meta)")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("max-heap-size")
                .nick("Maximum heap size")
                .blurb("Largest heap payload in bytes; packets of larger heaps are dropped (too-large). Sets the largest pool size class")
                .minimum(1)
                .maximum(MAX_MAX_HEAP_SIZE)
                .default_value(DEFAULT_MAX_HEAP_SIZE as u64)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("stop-is-eos")
                .nick("Stop is EOS")
                .blurb("A stop heap (STREAM_CTRL=2) ends the stream with EOS; false pushes it as a heap and keeps going")
                .default_value(true)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
                .nick("Hugepages")
                .blurb("Payload memory in hugepages: auto (fall back with a warning), require, off")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("pool-size")
                .nick("Pool size")
                .blurb("Bytes of preallocated heap memory: an eighth (up to 8 MiB) for single-packet heaps, the rest split so every size class (16 KiB x4 ... max-heap-size) holds as many heaps (at least 2); 0 = max-heaps x substreams + 4 heaps per class, plus 8 MiB")
                .default_value(0)
                .mutable_ready()
                .build(),
        ];
        v.extend(stats::properties(
            "packets, heaps, bytes, heaps-incomplete, malformed, too-large, out-of-order-dropped, duplicated, drops-pool, pool-*, descriptors",
        ));
        v
    });
    PROPS.as_ref()
}
