//! `speadpay` settings: the properties, their values, and the parsers of the
//! string-valued ones (`item-dtype`, `item-shape`, `immediates`).

use firehose_core::property::Convert;
use firehose_core::props::{self, HugepagesAlias, Memory};
use firehose_core::stats::StatsInterval;
use gst::glib;
use gst::prelude::*;

use crate::send;
use crate::wire::ids;

/// spead2's default flavour.
const DEFAULT_FLAVOUR: &str = "64-40";
const DEFAULT_PACKET_SIZE: u32 = send::DEFAULT_PACKET_SIZE as u32;
const DEFAULT_ITEM_ID: u64 = 0x1000;
const DEFAULT_ITEM_NAME: &str = "data";
/// Two heaps of 1 MiB in 8972-byte packets fit, and one 2 MiB hugepage holds a slab.
const DEFAULT_BATCH_BYTES: u32 = 2 << 20;

/// What the properties say. Read at start (all are `mutable_ready`), so the
/// string-valued ones are validated there, where an error can fail the state change.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `flavour`, kept as text until start, where a bad one fails the state change.
    pub flavour: String,
    /// `packet-size`.
    pub packet_size: u32,
    /// `heap-cnt-start`.
    pub heap_cnt_start: u64,
    /// `heap-cnt-step`.
    pub heap_cnt_step: u64,
    /// `descriptors-every`.
    pub descriptors_every: u32,
    /// `descriptors-separate`.
    pub descriptors_separate: bool,
    /// `item-id` (plain buffers).
    pub item_id: u64,
    /// `item-name` (plain buffers).
    pub item_name: String,
    /// `item-description` (plain buffers).
    pub item_description: String,
    /// `item-dtype` (plain buffers), kept as text until start: see [`parse_dtype`].
    pub item_dtype: String,
    /// `item-shape` (plain buffers), kept as text until start: see [`parse_shape`].
    pub item_shape: String,
    /// `immediates` (plain buffers), kept as text until start: see [`parse_immediates`].
    pub immediates: String,
    /// `timestamp-id` (plain buffers; 0 = none).
    pub timestamp_id: u64,
    /// `timestamp-step` (plain buffers).
    pub timestamp_step: u64,
    /// `stop-at-eos`.
    pub stop_at_eos: bool,
    /// `batch-bytes`: the pool's slab size.
    pub batch_bytes: u32,
    /// `memory` (or the deprecated `hugepages`): the pool's memory.
    pub memory: Memory,
    /// `stats-interval`.
    pub stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            flavour: DEFAULT_FLAVOUR.into(),
            packet_size: DEFAULT_PACKET_SIZE,
            heap_cnt_start: 1,
            heap_cnt_step: 1,
            descriptors_every: 0,
            descriptors_separate: false,
            item_id: DEFAULT_ITEM_ID,
            item_name: DEFAULT_ITEM_NAME.into(),
            item_description: String::new(),
            item_dtype: String::new(),
            item_shape: String::new(),
            immediates: String::new(),
            timestamp_id: 0,
            timestamp_step: 1,
            stop_at_eos: true,
            batch_bytes: DEFAULT_BATCH_BYTES,
            memory: Memory::default(),
            stats_interval: StatsInterval::default(),
        }
    }
}

/// A string property read as text: NULL is the empty string (a string-valued setting
/// is validated at start, where an error can fail the state change).
#[derive(Debug)]
pub(super) struct Text;

impl Convert<String> for Text {
    fn set(field: &mut String, value: &glib::Value, _: &glib::ParamSpec) {
        *field = value
            .get::<Option<String>>()
            .expect("GObject checks the type first")
            .unwrap_or_default();
    }
    fn get(field: &String, _: &glib::ParamSpec) -> glib::Value {
        field.to_value()
    }
}

firehose_core::property_group! {
    Settings as _s {
        flavour: Text => glib::ParamSpecString::builder("flavour")
            .nick("Flavour")
            .blurb("SPEAD flavour 64-A: 64-40 (spead2's default), 64-48 (MeerKAT), …")
            .default_value(Some(DEFAULT_FLAVOUR))
            .mutable_ready()
            .build();
        packet_size => glib::ParamSpecUInt::builder("packet-size")
            .nick("Packet size")
            .blurb(
                "Largest packet (UDP payload) in bytes, rounded down to a multiple \
                 of 8 as spead2 does; 1472 fits a 1500-byte MTU, 8972 a 9000-byte one",
            )
            .minimum(send::MIN_PACKET_SIZE as u32)
            .maximum(65507)
            .default_value(DEFAULT_PACKET_SIZE)
            .mutable_ready()
            .build();
        heap_cnt_start => glib::ParamSpecUInt64::builder("heap-cnt-start")
            .nick("First heap counter")
            .blurb("HEAP_CNT of the first heap")
            .default_value(1)
            .mutable_ready()
            .build();
        heap_cnt_step => glib::ParamSpecUInt64::builder("heap-cnt-step")
            .nick("Heap counter step")
            .blurb(
                "HEAP_CNT increment between heaps (N interleaved senders: step N, \
                 starts 1..N)",
            )
            .minimum(1)
            .default_value(1)
            .mutable_ready()
            .build();
        descriptors_every => glib::ParamSpecUInt::builder("descriptors-every")
            .nick("Descriptors every")
            .blurb(
                "Send the descriptors with the first heap and then every N heaps \
                 (0 = with the first heap only)",
            )
            .default_value(0)
            .mutable_ready()
            .build();
        descriptors_separate => glib::ParamSpecBoolean::builder("descriptors-separate")
            .nick("Descriptors separate")
            .blurb(
                "Send descriptors in a heap of their own just before the data heap \
                 they are due with (as spead2's get_heap(descriptors='all', \
                 data='none')), so every data heap holds data only: chunk \
                 receivers drop heaps that mix the two",
            )
            .default_value(false)
            .mutable_ready()
            .build();
        item_id => glib::ParamSpecUInt64::builder("item-id")
            .nick("Item id")
            .blurb("Plain buffers: id of the item holding the buffer's bytes")
            .minimum(ids::DESCRIPTOR_DTYPE + 1)
            .default_value(DEFAULT_ITEM_ID)
            .mutable_ready()
            .build();
        item_name: Text => glib::ParamSpecString::builder("item-name")
            .nick("Item name")
            .blurb("Plain buffers: the item's name in its descriptor")
            .default_value(Some(DEFAULT_ITEM_NAME))
            .mutable_ready()
            .build();
        item_description: Text => glib::ParamSpecString::builder("item-description")
            .nick("Item description")
            .blurb("Plain buffers: the item's description in its descriptor")
            .mutable_ready()
            .build();
        item_dtype: Text => glib::ParamSpecString::builder("item-dtype")
            .nick("Item dtype")
            .blurb(
                "Plain buffers: numpy element type (u1, <i2, >f4, <c8…); empty = \
                 bytes (format u8, shape from item-shape or variable)",
            )
            .mutable_ready()
            .build();
        item_shape: Text => glib::ParamSpecString::builder("item-shape")
            .nick("Item shape")
            .blurb(
                "Plain buffers: dimensions, e.g. 1024 or 4,256; empty = one \
                 dimension from the first buffer's size (with item-dtype) or \
                 variable (without)",
            )
            .mutable_ready()
            .build();
        immediates: Text => glib::ParamSpecString::builder("immediates")
            .nick("Immediates")
            .blurb(
                "Plain buffers: constant immediate items sent in every heap, \
                 ID=VALUE or NAME:ID=VALUE separated by commas (e.g. \
                 sync_time:0x1027=1700000000); described as unsigned integers",
            )
            .mutable_ready()
            .build();
        timestamp_id => glib::ParamSpecUInt64::builder("timestamp-id")
            .nick("Timestamp item id")
            .blurb(
                "Plain buffers: id of an immediate item counting timestamp-step per \
                 heap (0, step, 2·step…; described as 'timestamp'), e.g. for \
                 fhdepay handler-config=spead,place-item=ID,place-step=STEP (0 = none)",
            )
            .mutable_ready()
            .build();
        timestamp_step => glib::ParamSpecUInt64::builder("timestamp-step")
            .nick("Timestamp step")
            .blurb("Plain buffers: timestamp increment from one heap to the next")
            .default_value(1)
            .mutable_ready()
            .build();
        stop_at_eos => glib::ParamSpecBoolean::builder("stop-at-eos")
            .nick("Stop at EOS")
            .blurb("Send the stop heap (STREAM_CTRL = 2) at end of stream")
            .default_value(true)
            .mutable_ready()
            .build();
        batch_bytes => glib::ParamSpecUInt::builder("batch-bytes")
            .nick("Batch bytes")
            .blurb(
                "Size of each output buffer's pool slab: most packet bytes per \
                 batch (a larger heap spans several batches)",
            )
            .minimum(send::MAX_PACKET_SIZE as u32)
            .maximum(256 << 20)
            .default_value(DEFAULT_BATCH_BYTES)
            .mutable_ready()
            .build();
        memory => props::memory_spec("packet pool");
        deprecated("memory") memory: HugepagesAlias => props::hugepages_spec();
        group stats_interval;
    }
}

/// The counters `stats` holds.
pub(super) const COUNTERS: &str = "heaps, packets, bytes, batches, pool-*";

/// One static immediate of `immediates`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Immediate {
    /// The item id.
    pub id: u64,
    /// The value, sent in every heap.
    pub value: u64,
    /// The name in its descriptor (`item_0x…` when none is given).
    pub name: String,
}

/// A numpy dtype as spead2 writes it in a descriptor (`'<i2'`), and its element size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Dtype {
    /// The descr as numpy writes it, byte order included.
    pub descr: String,
    /// Bytes per element.
    pub itemsize: u64,
}

/// Parses `item-dtype`: a numpy type string such as `u1`, `<i2`, `>f4`, `c8`.
pub(super) fn parse_dtype(s: &str) -> Result<Dtype, String> {
    let bad = || {
        format!(
            "item-dtype '{s}' is not a numpy type: write an optional byte order (< > |) then \
             u, i, f or c and the size in bytes, e.g. <i2, >f4, u1, <c8"
        )
    };
    let s = s.trim();
    let (order, rest) = match s.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => (Some(&s[..1]), &s[1..]),
        _ => (None, s),
    };
    let kind = rest.chars().next().ok_or_else(bad)?;
    // Past the first character, not byte: `µ4` must be an error, not a panic.
    let size: u64 = rest[kind.len_utf8()..].parse().map_err(|_| bad())?;
    let ok = match kind {
        'u' | 'i' => matches!(size, 1 | 2 | 4 | 8),
        'f' => matches!(size, 2 | 4 | 8),
        'c' => matches!(size, 8 | 16),
        _ => false,
    };
    if !ok {
        return Err(bad());
    }
    // As numpy prints it: '|' for single bytes, the machine's order when none is given.
    let native = if cfg!(target_endian = "little") {
        "<"
    } else {
        ">"
    };
    let order = match (size, order) {
        (1, _) => "|",
        (_, None | Some("=") | Some("|")) => native,
        (_, Some(o)) => o,
    };
    Ok(Dtype {
        descr: format!("{order}{kind}{size}"),
        itemsize: size,
    })
}

/// Parses `item-shape`: dimensions separated by commas (`1024`, `4,256`, `(4, 256)`);
/// `None` or `?` marks the one variable dimension (only without `item-dtype`).
pub(super) fn parse_shape(s: &str) -> Result<Option<Vec<Option<u64>>>, String> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(')');
    if t.trim().is_empty() {
        return Ok(None);
    }
    let dims: Vec<Option<u64>> = t
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| match d {
            "None" | "?" => Ok(None),
            n => n.parse().map(Some).map_err(|_| {
                format!("item-shape '{s}': '{n}' is not a dimension (a number, or None)")
            }),
        })
        .collect::<Result<_, _>>()?;
    if dims.iter().filter(|d| d.is_none()).count() > 1 {
        return Err(format!(
            "item-shape '{s}' has more than one variable (None) dimension"
        ));
    }
    Ok(Some(dims))
}

/// A number in decimal or 0x-hex, as ids are usually written in hex.
fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses `immediates`: `ID=VALUE` or `NAME:ID=VALUE`, separated by commas; ids and
/// values in decimal or 0x-hex.
pub(super) fn parse_immediates(s: &str) -> Result<Vec<Immediate>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let bad = || {
                format!(
                    "immediates entry '{entry}' is not ID=VALUE or NAME:ID=VALUE \
                     (e.g. 0x1600=5 or timestamp:0x1600=5)"
                )
            };
            let (name, rest) = match entry.split_once(':') {
                Some((n, r)) => (Some(n.trim()), r),
                None => (None, entry),
            };
            let (id, value) = rest.split_once('=').ok_or_else(bad)?;
            let id = parse_number(id).ok_or_else(bad)?;
            let value = parse_number(value).ok_or_else(bad)?;
            Ok(Immediate {
                id,
                value,
                name: name
                    .filter(|n| !n.is_empty())
                    .map_or_else(|| format!("item_{id:#x}"), str::to_owned),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::property::assert_round_trips;
    use firehose_core::property::PropertyGroup;
    use firehose_core::props::Hugepages;

    #[test]
    fn every_property_round_trips() {
        let names = assert_round_trips(&mut Settings::default());
        assert_eq!(names.first().map(String::as_str), Some("flavour"));
        assert!(names.iter().any(|n| n == "stats-interval"));
    }

    #[test]
    fn a_null_string_is_empty_text_and_hugepages_sets_memory() {
        gst::init().unwrap();
        let mut s = Settings::default();
        assert!(s.set_named("flavour", &None::<String>.to_value()));
        assert_eq!(s.flavour, "");
        assert!(s.set_named("item-name", &Some("x").to_value()));
        assert_eq!(s.item_name, "x");
        assert!(s.set_named("hugepages", &Hugepages::Require.to_value()));
        assert_eq!(s.memory, Memory::Hugepages);
    }
}
