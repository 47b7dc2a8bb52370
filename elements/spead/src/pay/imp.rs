//! `speadpay` implementation: a plain element (`chain` + `chain_list`, no BaseTransform,
//! so buffer lists stay lists) over the [`crate::send`] engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use firehose_core::props::Hugepages;
use firehose_core::stats::{self, names, Counter, StatsTimer};
use firehose_core::{caps, gstmem, PacketBatchMeta, PacketInfo, PoolConfig, Slot, SlotPool};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use crate::descriptor::{self, Descriptor};
use crate::heap::{HeapInfo, HeapMeta, ItemValue};
use crate::send::{self, HeapPackets, Item, PacketConfig};
use crate::wire::{ctrl, ids, Flavour};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "speadpay",
        gst::DebugColorFlags::empty(),
        Some("SPEAD payloader"),
    )
});

const DEFAULT_FLAVOUR: &str = "64-40";
const DEFAULT_PACKET_SIZE: u32 = send::DEFAULT_PACKET_SIZE as u32;
const DEFAULT_ITEM_ID: u64 = 0x1000;
const DEFAULT_ITEM_NAME: &str = "data";
/// Two heaps of 1 MiB in 8972-byte packets fit, and one 2 MiB hugepage holds a slab.
const DEFAULT_BATCH_BYTES: u32 = 2 << 20;
/// Slabs in flight: one being filled, one being sent by the sink, and room for a short
/// queue between them.
const POOL_SLOTS: usize = 8;
/// How often a pool wait re-checks the flushing flag if a wake-up were ever missed.
const POOL_POLL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
struct Settings {
    flavour: String,
    packet_size: u32,
    heap_cnt_start: u64,
    heap_cnt_step: u64,
    descriptors_every: u32,
    descriptors_separate: bool,
    item_id: u64,
    item_name: String,
    item_description: String,
    item_dtype: String,
    item_shape: String,
    immediates: String,
    timestamp_id: u64,
    timestamp_step: u64,
    stop_at_eos: bool,
    batch_bytes: u32,
    hugepages: Hugepages,
    stats_interval: u32,
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
            hugepages: Hugepages::default(),
            stats_interval: stats::DEFAULT_INTERVAL_MS,
        }
    }
}

/// One static immediate of `immediates`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Immediate {
    id: u64,
    value: u64,
    name: String,
}

/// A numpy dtype as spead2 writes it in a descriptor (`'<i2'`), and its element size.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dtype {
    descr: String,
    itemsize: u64,
}

/// What plain (non-heap) buffers become, from the properties.
#[derive(Clone, Debug)]
struct PlainSpec {
    item_id: u64,
    name: String,
    description: String,
    dtype: Option<Dtype>,
    /// From `item-shape`; `None` = derived from the first buffer.
    shape: Option<Vec<Option<u64>>>,
    immediates: Vec<Immediate>,
    /// `timestamp-id` and `timestamp-step`: an immediate counting `k·step` in heap k.
    timestamp: Option<(u64, u64)>,
}

/// Parses `item-dtype`: a numpy type string such as `u1`, `<i2`, `>f4`, `c8`.
fn parse_dtype(s: &str) -> Result<Dtype, String> {
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
    let size: u64 = rest[1..].parse().map_err(|_| bad())?;
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
fn parse_shape(s: &str) -> Result<Option<Vec<Option<u64>>>, String> {
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

fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses `immediates`: `ID=VALUE` or `NAME:ID=VALUE`, separated by commas; ids and
/// values in decimal or 0x-hex.
fn parse_immediates(s: &str) -> Result<Vec<Immediate>, String> {
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

/// Python's repr of a tuple of dimensions: `()`, `(5,)`, `(4, 8)`.
fn py_tuple(dims: &[u64]) -> String {
    match dims {
        [] => "()".into(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl PlainSpec {
    fn from_settings(s: &Settings, flavour: Flavour) -> Result<Self, String> {
        let dtype = match s.item_dtype.trim() {
            "" => None,
            d => Some(parse_dtype(d)?),
        };
        let shape = parse_shape(&s.item_shape)?;
        if dtype.is_some() && shape.as_ref().is_some_and(|d| d.contains(&None)) {
            return Err(
                "item-shape has a variable (None) dimension, which a numpy item-dtype \
                 cannot describe: give every dimension or leave item-dtype empty"
                    .into(),
            );
        }
        let immediates = parse_immediates(&s.immediates)?;
        // spead2 decodes names and descriptions as ASCII and fails on anything else.
        for text in [&s.item_name, &s.item_description]
            .into_iter()
            .chain(immediates.iter().map(|i| &i.name))
        {
            if !text.is_ascii() {
                return Err(format!(
                    "'{text}' is not ASCII: spead2 receivers cannot decode descriptor names \
                     and descriptions that are not"
                ));
            }
        }
        let timestamp = (s.timestamp_id != 0).then_some((s.timestamp_id, s.timestamp_step));
        let ids: Vec<u64> = immediates
            .iter()
            .map(|i| i.id)
            .chain(timestamp.map(|t| t.0))
            .chain([s.item_id])
            .collect();
        if let Some(dup) = ids
            .iter()
            .enumerate()
            .find_map(|(k, id)| ids[..k].contains(id).then_some(id))
        {
            return Err(format!(
                "item id {dup:#x} is used twice (immediates, timestamp-id, item-id)"
            ));
        }
        for &id in &ids {
            if id > flavour.max_id() || id <= ids::DESCRIPTOR_DTYPE {
                return Err(format!(
                    "item id {id:#x} is reserved or does not fit SPEAD-{flavour} \
                     (user ids are {:#x}..={:#x}; spead2 starts at 0x1000)",
                    ids::DESCRIPTOR_DTYPE + 1,
                    flavour.max_id()
                ));
            }
        }
        for imm in &immediates {
            if imm.value > flavour.max_value() {
                return Err(format!(
                    "immediate {:#x}={} does not fit the {} address bits of SPEAD-{flavour}",
                    imm.id,
                    imm.value,
                    flavour.heap_address_bits()
                ));
            }
        }
        Ok(Self {
            item_id: s.item_id,
            name: s.item_name.clone(),
            description: s.item_description.clone(),
            dtype,
            shape,
            immediates,
            timestamp,
        })
    }

    /// The descriptors, immediates first then the data item (the order of the items),
    /// for buffers of `len` bytes (the shape, when not given, comes from it).
    fn descriptors(&self, flavour: Flavour, len: usize) -> Result<Vec<Descriptor>, String> {
        let scalar = |id: u64, name: &str, description: &str| Descriptor {
            id,
            name: name.into(),
            description: description.into(),
            shape: Vec::new(),
            format: vec![(b'u', u32::from(flavour.heap_address_bits()))],
            dtype: None,
        };
        let mut out: Vec<Descriptor> = self
            .immediates
            .iter()
            .map(|imm| scalar(imm.id, &imm.name, ""))
            .collect();
        if let Some((id, step)) = self.timestamp {
            out.push(scalar(id, "timestamp", &format!("heap number * {step}")));
        }
        let data = match &self.dtype {
            None => Descriptor {
                id: self.item_id,
                name: self.name.clone(),
                description: self.description.clone(),
                // Bytes of any length unless a shape is given.
                shape: self.shape.clone().unwrap_or_else(|| vec![None]),
                format: vec![(b'u', 8)],
                dtype: None,
            },
            Some(dt) => {
                let dims: Vec<u64> = match &self.shape {
                    Some(d) => d.iter().map(|x| x.unwrap_or(0)).collect(),
                    None if (len as u64).is_multiple_of(dt.itemsize) => {
                        vec![len as u64 / dt.itemsize]
                    }
                    None => {
                        return Err(format!(
                            "the first buffer has {len} bytes, not a whole number of \
                             {}-byte {} elements: set item-shape or fix the buffer size",
                            dt.itemsize, dt.descr
                        ))
                    }
                };
                Descriptor {
                    id: self.item_id,
                    name: self.name.clone(),
                    description: self.description.clone(),
                    shape: dims.iter().copied().map(Some).collect(),
                    format: Vec::new(),
                    dtype: Some(format!(
                        "{{'descr': '{}', 'fortran_order': False, 'shape': {}}}",
                        dt.descr,
                        py_tuple(&dims)
                    )),
                }
            }
        };
        out.push(data);
        Ok(out)
    }

    /// Bytes every buffer must have, when the descriptor fixes it.
    fn fixed_len(&self, descriptor: &Descriptor) -> Option<u64> {
        let size = self.dtype.as_ref().map_or(1, |d| d.itemsize);
        descriptor
            .shape
            .iter()
            .try_fold(size, |acc, d| d.map(|d| acc * d))
    }
}

/// The slab being filled.
struct Pending {
    slot: Slot,
    used: usize,
    packets: Vec<PacketInfo>,
    pts: Option<gst::ClockTime>,
}

/// A descriptor list as upstream shares it, and its encoding in the output flavour.
type KnownDescriptors = (Arc<[Descriptor]>, Vec<Vec<u8>>);

/// Streaming state, from READY→PAUSED to PAUSED→READY.
struct State {
    cfg: PacketConfig,
    pool: SlotPool,
    pending: Option<Pending>,
    cnt_start: u64,
    cnt_step: u64,
    /// Data heaps sent so far (descriptor and stop heaps are not counted).
    sent: u64,
    /// Heaps of any kind sent so far: the next heap's cnt is `start + index·step`.
    index: u64,
    descriptors_separate: bool,
    descriptors_every: u32,
    stop_at_eos: bool,
    plain: PlainSpec,
    /// The plain-buffer descriptors, encoded with the first buffer; and the buffer
    /// length they fix, if they fix one.
    plain_descriptors: Option<(Vec<Vec<u8>>, Option<u64>)>,
    warned_len: bool,
    /// The heap input's known descriptors, encoded in the output flavour, kept while
    /// upstream sends the same list.
    known: Option<KnownDescriptors>,
    timer: StatsTimer,
}

impl State {
    /// HEAP_CNT of the heap `ahead` heaps after the next one.
    fn cnt(&self, ahead: u64) -> u64 {
        let index = self.index.wrapping_add(ahead);
        self.cnt_start
            .wrapping_add(index.wrapping_mul(self.cnt_step))
    }

    /// Descriptors go with the first heap and every `descriptors-every` heaps.
    fn descriptors_due(&self) -> bool {
        self.sent == 0
            || (self.descriptors_every > 0
                && self.sent.is_multiple_of(self.descriptors_every.into()))
    }
}

#[derive(Default)]
struct Counters {
    heaps: Counter,
    packets: Counter,
    bytes: Counter,
    batches: Counter,
}

/// The `speadpay` element.
pub struct SpeadPay {
    sinkpad: gst::Pad,
    srcpad: gst::Pad,
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Outside `state`, so a flush can wake a pool wait while `state` is held.
    pool: Mutex<Option<SlotPool>>,
    flushing: AtomicBool,
    counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SpeadPay {
    fn stats(&self) -> gst::Structure {
        let c = &self.counters;
        let pool = lock(&self.pool)
            .as_ref()
            .map(SlotPool::stats)
            .unwrap_or_default();
        stats::structure(&[
            (names::HEAPS, c.heaps.get()),
            (names::PACKETS, c.packets.get()),
            (names::BYTES, c.bytes.get()),
            (names::BATCHES, c.batches.get()),
            (names::POOL_SLOTS, pool.slots as u64),
            (names::POOL_IN_USE, pool.in_use as u64),
            (names::POOL_HIGH_WATER, pool.high_water as u64),
            (names::POOL_EXHAUSTED, pool.exhausted),
        ])
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let settings_error =
            |msg: String| gst::error_msg!(gst::LibraryError::Settings, ("{}", msg));
        let flavour = Flavour::parse(s.flavour.trim()).ok_or_else(|| {
            settings_error(format!(
                "flavour '{}' is not a SPEAD-64 flavour: write 64-40 (spead2's default), \
                 64-48 (MeerKAT) or another 64-A with A a multiple of 8",
                s.flavour
            ))
        })?;
        let cfg = PacketConfig::new(flavour, s.packet_size as usize)
            .map_err(|e| settings_error(format!("packet-size: {e}")))?;
        if s.heap_cnt_start > flavour.max_value() {
            return Err(settings_error(format!(
                "heap-cnt-start {} does not fit SPEAD-{flavour} (at most {})",
                s.heap_cnt_start,
                flavour.max_value()
            )));
        }
        let plain = PlainSpec::from_settings(&s, flavour).map_err(settings_error)?;
        let slot_size = (s.batch_bytes as usize).max(cfg.packet_size());
        let pool = SlotPool::new(&PoolConfig {
            slot_size,
            slots: POOL_SLOTS,
            hugepages: s.hugepages.into(),
        })
        .map_err(|e| gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e)))?;
        if let Some(reason) = pool.fallback_reason() {
            gst::warning!(CAT, imp = self, "pool in normal pages: {reason}");
        }
        gst::info!(
            CAT,
            imp = self,
            "SPEAD-{flavour}, {}-byte packets, slabs of {} bytes ({})",
            cfg.packet_size(),
            pool.slot_size(),
            pool.kind().as_str()
        );
        for c in [
            &self.counters.heaps,
            &self.counters.packets,
            &self.counters.bytes,
            &self.counters.batches,
        ] {
            c.reset();
        }
        self.flushing.store(false, Ordering::Release);
        *lock(&self.pool) = Some(pool.clone());
        *lock(&self.state) = Some(State {
            cfg,
            pool,
            pending: None,
            cnt_start: s.heap_cnt_start,
            cnt_step: s.heap_cnt_step,
            sent: 0,
            index: 0,
            descriptors_separate: s.descriptors_separate,
            descriptors_every: s.descriptors_every,
            stop_at_eos: s.stop_at_eos,
            plain,
            plain_descriptors: None,
            warned_len: false,
            known: None,
            timer: StatsTimer::new(s.stats_interval),
        });
        Ok(())
    }

    fn stop(&self) {
        *lock(&self.state) = None;
        *lock(&self.pool) = None;
    }

    fn set_flushing(&self, flushing: bool) {
        self.flushing.store(flushing, Ordering::Release);
        if flushing {
            if let Some(pool) = lock(&self.pool).as_ref() {
                pool.wake_waiters();
            }
        }
    }

    fn encode_all(list: &[Descriptor], flavour: Flavour) -> Vec<Vec<u8>> {
        list.iter()
            .map(|d| descriptor::encode(d, flavour))
            .collect()
    }

    /// Turns one input buffer into a heap and writes its packets.
    fn send_buffer(
        &self,
        state: &mut State,
        buffer: &gst::BufferRef,
    ) -> Result<(), gst::FlowError> {
        let map = buffer.map_readable().map_err(|_| {
            gst::element_imp_error!(
                self,
                gst::StreamError::Failed,
                ("Cannot map an input buffer for reading"),
                ["speadpay needs system-memory input (download GPU memory first)"]
            );
            gst::FlowError::Error
        })?;
        let data = map.as_slice();
        let flavour = state.cfg.flavour();
        let due = state.descriptors_due();
        let meta = buffer.meta::<HeapMeta>();

        // Owned bytes the items borrow: filled first, borrowed after.
        if meta.is_none() && state.plain_descriptors.is_none() {
            let list = state.plain.descriptors(flavour, data.len()).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Format, ("{}", e));
                gst::FlowError::Error
            })?;
            let fixed = list.last().and_then(|d| state.plain.fixed_len(d));
            state.plain_descriptors = Some((Self::encode_all(&list, flavour), fixed));
        }
        if let Some(m) = &meta {
            let known = &m.info().descriptors;
            let stale = state
                .known
                .as_ref()
                .is_none_or(|(list, _)| !Arc::ptr_eq(list, known));
            if stale && !known.is_empty() {
                state.known = Some((known.clone(), Self::encode_all(known, flavour)));
            }
        }

        // Descriptors and values apart: the descriptors go first in the heap, or in a
        // heap of their own with `descriptors-separate`.
        let mut descs: Vec<Item<'_>> = Vec::new();
        let mut items: Vec<Item<'_>> = Vec::new();
        match &meta {
            Some(m) => {
                let info = m.info();
                let known = state.known.as_ref().map(|(_, encoded)| encoded.as_slice());
                let same_flavour = info.flavour == flavour;
                if let Some(bad) =
                    heap_items(info, data, known, same_flavour, due, &mut descs, &mut items)
                {
                    gst::warning!(
                        CAT,
                        imp = self,
                        "heap {}: {bad} item(s) point outside the buffer; sent without them",
                        info.heap_cnt
                    );
                }
            }
            None => {
                let (encoded, fixed) = state.plain_descriptors.as_ref().expect("encoded above");
                if let Some(want) = fixed {
                    if *want != data.len() as u64 && !state.warned_len {
                        state.warned_len = true;
                        gst::element_imp_warning!(
                            self,
                            gst::StreamError::Format,
                            (
                                "A buffer has {} bytes but the item's descriptor says {want}: \
                              spead2 receivers will reject such heaps (set item-shape, or \
                              send buffers of one size)",
                                data.len()
                            )
                        );
                    }
                }
                if due {
                    descs.extend(encoded.iter().map(|d| Item::descriptor(d)));
                }
                items.extend(
                    state
                        .plain
                        .immediates
                        .iter()
                        .map(|imm| Item::immediate(imm.id, imm.value)),
                );
                if let Some((id, step)) = state.plain.timestamp {
                    // Wraps like a hardware counter of the flavour's width.
                    let value = state.sent.wrapping_mul(step) & flavour.max_value();
                    items.push(Item::immediate(id, value));
                }
                items.push(Item::bytes(state.plain.item_id, data));
            }
        }
        let separate = state.descriptors_separate && !descs.is_empty();
        if !separate {
            descs.append(&mut items);
            items = descs;
            descs = Vec::new();
        }
        let heaps: &[&[Item<'_>]] = if separate {
            &[&descs, &items]
        } else {
            &[&items]
        };
        for (k, heap_items) in heaps.iter().enumerate() {
            let cnt = state.cnt(k as u64);
            let mut heap = state.cfg.heap(cnt, heap_items).map_err(|e| {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Encode,
                    ("Cannot send heap {cnt}: {e}"),
                    ["set flavour to one that fits the values (e.g. 64-48) or send less"]
                );
                gst::FlowError::Error
            })?;
            self.write_heap(&mut state.pending, &state.pool, &mut heap, buffer.pts())?;
        }
        let n = heaps.len() as u64;
        drop(items);
        drop(descs);
        state.index += n;
        state.sent += 1;
        self.counters.heaps.add(1);
        Ok(())
    }

    /// Writes every packet of `heap` into slabs, pushing each slab that fills up. The
    /// last, partly filled slab stays pending for the next heap of a buffer list.
    fn write_heap(
        &self,
        pending: &mut Option<Pending>,
        pool: &SlotPool,
        heap: &mut HeapPackets<'_>,
        pts: Option<gst::ClockTime>,
    ) -> Result<(), gst::FlowError> {
        loop {
            if pending.is_none() {
                let slot = pool
                    .acquire_blocking(&self.flushing, POOL_POLL)
                    .ok_or(gst::FlowError::Flushing)?;
                let estimate = slot.capacity() / heap.next_len().unwrap_or(1).max(1) + 1;
                *pending = Some(Pending {
                    slot,
                    used: 0,
                    packets: Vec::with_capacity(estimate),
                    pts,
                });
            }
            let p = pending.as_mut().expect("set above");
            let Pending {
                slot,
                used,
                packets,
                ..
            } = p;
            let base = *used;
            let written = heap.fill(&mut slot.as_mut_full()[base..], |offset, len| {
                packets.push(PacketInfo {
                    offset: (base + offset) as u32,
                    len: len as u32,
                    rx_time_ns: 0,
                    src: Default::default(),
                })
            });
            *used += written;
            if heap.is_done() {
                return Ok(());
            }
            // The slab is full (a slab always holds at least one packet).
            self.push_pending(pending)?;
        }
    }

    /// Pushes the pending slab, if it holds any packet.
    fn push_pending(&self, pending: &mut Option<Pending>) -> Result<(), gst::FlowError> {
        let Some(Pending {
            mut slot,
            used,
            packets,
            pts,
        }) = pending.take()
        else {
            return Ok(());
        };
        if packets.is_empty() {
            return Ok(());
        }
        slot.set_len(used);
        let n = packets.len() as u64;
        let mut buf = gstmem::slot_into_buffer(slot);
        {
            let b = buf.get_mut().expect("a new buffer is writable");
            b.set_pts(pts);
            PacketBatchMeta::add(b, packets);
        }
        self.counters.packets.add(n);
        self.counters.bytes.add(used as u64);
        self.counters.batches.add(1);
        if self.srcpad.current_caps().is_none() {
            // Upstream sent no caps (e.g. appsrc without caps): ours are fixed anyway.
            self.srcpad
                .push_event(gst::event::Caps::new(&caps::packets_caps()));
        }
        self.srcpad.push(buf).map(|_| ())
    }

    fn post_stats_if_due(&self) {
        let due = lock(&self.state)
            .as_mut()
            .is_some_and(|s| s.timer.due(Instant::now()));
        if due {
            stats::post(self.obj().upcast_ref(), self.stats());
        }
    }

    fn chain(
        &self,
        _pad: &gst::Pad,
        buffer: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            self.send_buffer(state, &buffer)?;
            self.push_pending(&mut state.pending)?;
        }
        self.post_stats_if_due();
        Ok(gst::FlowSuccess::Ok)
    }

    fn chain_list(
        &self,
        _pad: &gst::Pad,
        list: gst::BufferList,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            // Small heaps share slabs: one push per slab, not per heap.
            for buffer in list.iter() {
                self.send_buffer(state, buffer)?;
            }
            self.push_pending(&mut state.pending)?;
        }
        self.post_stats_if_due();
        Ok(gst::FlowSuccess::Ok)
    }

    /// Sends the stop heap (at EOS).
    fn send_stop(&self) -> Result<(), gst::FlowError> {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        if !state.stop_at_eos {
            return self.push_pending(&mut state.pending);
        }
        let items = [Item::stop()];
        let cnt = state.cnt(0);
        let mut heap = state.cfg.heap(cnt, &items).map_err(|e| {
            gst::error!(CAT, imp = self, "cannot send the stop heap: {e}");
            gst::FlowError::Error
        })?;
        self.write_heap(&mut state.pending, &state.pool, &mut heap, None)?;
        self.push_pending(&mut state.pending)?;
        gst::debug!(CAT, imp = self, "stop heap {cnt} sent");
        Ok(())
    }

    fn sink_event(&self, pad: &gst::Pad, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::Caps(_) => self
                .srcpad
                .push_event(gst::event::Caps::new(&caps::packets_caps())),
            // Our caps are fixed: send them right after stream-start, so that a segment
            // never precedes them even when upstream (e.g. fakesrc) sends no caps.
            gst::EventView::StreamStart(_) => {
                let ok = self.srcpad.push_event(event);
                self.srcpad
                    .push_event(gst::event::Caps::new(&caps::packets_caps()));
                ok
            }
            gst::EventView::Eos(_) => {
                if let Err(e) = self.send_stop() {
                    gst::warning!(CAT, imp = self, "stop heap not sent: {e:?}");
                }
                stats::post(self.obj().upcast_ref(), self.stats());
                self.srcpad.push_event(event)
            }
            gst::EventView::FlushStart(_) => {
                self.set_flushing(true);
                self.srcpad.push_event(event)
            }
            gst::EventView::FlushStop(_) => {
                if let Some(state) = lock(&self.state).as_mut() {
                    state.pending = None;
                }
                self.set_flushing(false);
                self.srcpad.push_event(event)
            }
            _ => gst::Pad::event_default(pad, Some(&*self.obj()), event),
        }
    }
}

/// The items of a heap from `speaddepay`; returns how many were skipped, if any.
///
/// DESCRIPTOR items pass through byte for byte when the flavour is unchanged. In
/// another flavour their nested packets would be wrong, so they are replaced by the
/// heap's known descriptors, encoded anew. The known descriptors are also added
/// when descriptors are due and the heap carries none.
fn heap_items<'a>(
    info: &HeapInfo,
    data: &'a [u8],
    known: Option<&'a [Vec<u8>]>,
    same_flavour: bool,
    due: bool,
    descs: &mut Vec<Item<'a>>,
    items: &mut Vec<Item<'a>>,
) -> Option<usize> {
    let carries = info.items.iter().any(|i| i.id == ids::DESCRIPTOR);
    if (due && !carries) || (carries && !same_flavour) {
        if let Some(encoded) = known {
            descs.extend(encoded.iter().map(|d| Item::descriptor(d)));
        }
    }
    let mut skipped = 0;
    let mut has_ctrl = false;
    for it in &info.items {
        match &it.value {
            ItemValue::Immediate(v) => {
                has_ctrl |= it.id == ids::STREAM_CTRL;
                items.push(Item::immediate(it.id, *v));
            }
            ItemValue::Bytes(_) if it.id == ids::DESCRIPTOR && !same_flavour => {}
            ItemValue::Bytes(r) => match data.get(r.clone()) {
                Some(bytes) if it.id == ids::DESCRIPTOR => descs.push(Item::descriptor(bytes)),
                Some(bytes) => items.push(Item::bytes(it.id, bytes)),
                None => skipped += 1,
            },
        }
    }
    // A start or descriptor-reissue marker travels on; a stop does not: this
    // element sends its own at EOS.
    match info.stream_ctrl {
        Some(c) if c != ctrl::STOP && !has_ctrl => items.push(Item::immediate(ids::STREAM_CTRL, c)),
        _ => {}
    }
    (skipped > 0).then_some(skipped)
}

#[glib::object_subclass]
impl ObjectSubclass for SpeadPay {
    const NAME: &'static str = "GstSpeadPay";
    type Type = super::SpeadPay;
    type ParentType = gst::Element;

    fn with_class(klass: &Self::Class) -> Self {
        let sink_templ = klass.pad_template("sink").expect("sink template");
        let sinkpad = gst::Pad::builder_from_template(&sink_templ)
            .chain_function(|pad, parent, buffer| {
                SpeadPay::catch_panic_pad_function(
                    parent,
                    || Err(gst::FlowError::Error),
                    |imp| imp.chain(pad, buffer),
                )
            })
            .chain_list_function(|pad, parent, list| {
                SpeadPay::catch_panic_pad_function(
                    parent,
                    || Err(gst::FlowError::Error),
                    |imp| imp.chain_list(pad, list),
                )
            })
            .event_function(|pad, parent, event| {
                SpeadPay::catch_panic_pad_function(
                    parent,
                    || false,
                    |imp| imp.sink_event(pad, event),
                )
            })
            .build();
        let src_templ = klass.pad_template("src").expect("src template");
        let srcpad = gst::Pad::builder_from_template(&src_templ).build();
        Self {
            sinkpad,
            srcpad,
            settings: Mutex::new(Settings::default()),
            state: Mutex::new(None),
            pool: Mutex::new(None),
            flushing: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }
}

impl ObjectImpl for SpeadPay {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut v = vec![
                glib::ParamSpecString::builder("flavour")
                    .nick("Flavour")
                    .blurb("SPEAD flavour 64-A: 64-40 (spead2's default), 64-48 (MeerKAT), …")
                    .default_value(Some(DEFAULT_FLAVOUR))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("packet-size")
                    .nick("Packet size")
                    .blurb(
                        "Largest packet (UDP payload) in bytes, rounded down to a multiple \
                         of 8 as spead2 does; 1472 fits a 1500-byte MTU, 8972 a 9000-byte one",
                    )
                    .minimum(send::MIN_PACKET_SIZE as u32)
                    .maximum(65507)
                    .default_value(DEFAULT_PACKET_SIZE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("heap-cnt-start")
                    .nick("First heap counter")
                    .blurb("HEAP_CNT of the first heap")
                    .default_value(1)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("heap-cnt-step")
                    .nick("Heap counter step")
                    .blurb(
                        "HEAP_CNT increment between heaps (N interleaved senders: step N, \
                         starts 1..N)",
                    )
                    .minimum(1)
                    .default_value(1)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("descriptors-every")
                    .nick("Descriptors every")
                    .blurb(
                        "Send the descriptors with the first heap and then every N heaps \
                         (0 = with the first heap only)",
                    )
                    .default_value(0)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("descriptors-separate")
                    .nick("Descriptors separate")
                    .blurb(
                        "Send descriptors in a heap of their own just before the data heap \
                         they are due with (as spead2's get_heap(descriptors='all', \
                         data='none')), so every data heap holds data only: chunk \
                         receivers drop heaps that mix the two",
                    )
                    .default_value(false)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("item-id")
                    .nick("Item id")
                    .blurb("Plain buffers: id of the item holding the buffer's bytes")
                    .minimum(ids::DESCRIPTOR_DTYPE + 1)
                    .default_value(DEFAULT_ITEM_ID)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("item-name")
                    .nick("Item name")
                    .blurb("Plain buffers: the item's name in its descriptor")
                    .default_value(Some(DEFAULT_ITEM_NAME))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("item-description")
                    .nick("Item description")
                    .blurb("Plain buffers: the item's description in its descriptor")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("item-dtype")
                    .nick("Item dtype")
                    .blurb(
                        "Plain buffers: numpy element type (u1, <i2, >f4, <c8…); empty = \
                         bytes (format u8, shape from item-shape or variable)",
                    )
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("item-shape")
                    .nick("Item shape")
                    .blurb(
                        "Plain buffers: dimensions, e.g. 1024 or 4,256; empty = one \
                         dimension from the first buffer's size (with item-dtype) or \
                         variable (without)",
                    )
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("immediates")
                    .nick("Immediates")
                    .blurb(
                        "Plain buffers: constant immediate items sent in every heap, \
                         ID=VALUE or NAME:ID=VALUE separated by commas (e.g. \
                         sync_time:0x1027=1700000000); described as unsigned integers",
                    )
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("timestamp-id")
                    .nick("Timestamp item id")
                    .blurb(
                        "Plain buffers: id of an immediate item counting timestamp-step per \
                         heap (0, step, 2·step…; described as 'timestamp'), e.g. for \
                         fhdepay handler-config=spead,place-item=ID,step=STEP (0 = none)",
                    )
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("timestamp-step")
                    .nick("Timestamp step")
                    .blurb("Plain buffers: timestamp increment from one heap to the next")
                    .default_value(1)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("stop-at-eos")
                    .nick("Stop at EOS")
                    .blurb("Send the stop heap (STREAM_CTRL = 2) at end of stream")
                    .default_value(true)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("batch-bytes")
                    .nick("Batch bytes")
                    .blurb(
                        "Size of each output buffer's pool slab: most packet bytes per \
                         batch (a larger heap spans several batches)",
                    )
                    .minimum(send::MAX_PACKET_SIZE as u32)
                    .maximum(256 << 20)
                    .default_value(DEFAULT_BATCH_BYTES)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
                    .nick("Hugepages")
                    .blurb(
                        "Pool memory in hugepages: auto (fall back with a warning), require, off",
                    )
                    .mutable_ready()
                    .build(),
            ];
            v.extend(stats::properties("heaps, packets, bytes, batches, pool-*"));
            v
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        let string = || {
            value
                .get::<Option<String>>()
                .expect("type checked upstream")
                .unwrap_or_default()
        };
        match pspec.name() {
            "flavour" => s.flavour = string(),
            "packet-size" => s.packet_size = value.get().expect("type checked upstream"),
            "heap-cnt-start" => s.heap_cnt_start = value.get().expect("type checked upstream"),
            "heap-cnt-step" => s.heap_cnt_step = value.get().expect("type checked upstream"),
            "descriptors-every" => {
                s.descriptors_every = value.get().expect("type checked upstream")
            }
            "descriptors-separate" => {
                s.descriptors_separate = value.get().expect("type checked upstream")
            }
            "item-id" => s.item_id = value.get().expect("type checked upstream"),
            "item-name" => s.item_name = string(),
            "item-description" => s.item_description = string(),
            "item-dtype" => s.item_dtype = string(),
            "item-shape" => s.item_shape = string(),
            "immediates" => s.immediates = string(),
            "timestamp-id" => s.timestamp_id = value.get().expect("type checked upstream"),
            "timestamp-step" => s.timestamp_step = value.get().expect("type checked upstream"),
            "stop-at-eos" => s.stop_at_eos = value.get().expect("type checked upstream"),
            "batch-bytes" => s.batch_bytes = value.get().expect("type checked upstream"),
            "hugepages" => s.hugepages = value.get().expect("type checked upstream"),
            "stats-interval" => s.stats_interval = value.get().expect("type checked upstream"),
            other => unreachable!("unknown property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        match pspec.name() {
            "flavour" => s.flavour.to_value(),
            "packet-size" => s.packet_size.to_value(),
            "heap-cnt-start" => s.heap_cnt_start.to_value(),
            "heap-cnt-step" => s.heap_cnt_step.to_value(),
            "descriptors-every" => s.descriptors_every.to_value(),
            "descriptors-separate" => s.descriptors_separate.to_value(),
            "item-id" => s.item_id.to_value(),
            "item-name" => s.item_name.to_value(),
            "item-description" => s.item_description.to_value(),
            "item-dtype" => s.item_dtype.to_value(),
            "item-shape" => s.item_shape.to_value(),
            "immediates" => s.immediates.to_value(),
            "timestamp-id" => s.timestamp_id.to_value(),
            "timestamp-step" => s.timestamp_step.to_value(),
            "stop-at-eos" => s.stop_at_eos.to_value(),
            "batch-bytes" => s.batch_bytes.to_value(),
            "hugepages" => s.hugepages.to_value(),
            "stats-interval" => s.stats_interval.to_value(),
            other => unreachable!("unknown property {other}"),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.add_pad(&self.sinkpad).expect("sink pad added once");
        obj.add_pad(&self.srcpad).expect("src pad added once");
    }
}

impl GstObjectImpl for SpeadPay {}

impl ElementImpl for SpeadPay {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "SPEAD payloader",
                "Codec/Payloader/Network",
                "Cuts heaps (from speaddepay, or one per plain buffer) into SPEAD packets as \
                 spead2's sender does, in pooled batches for fhudpsink; stop heap at EOS",
                "Firehose developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![
                gst::PadTemplate::new(
                    "sink",
                    gst::PadDirection::Sink,
                    gst::PadPresence::Always,
                    &gst::Caps::new_any(),
                )
                .expect("valid sink template"),
                gst::PadTemplate::new(
                    "src",
                    gst::PadDirection::Src,
                    gst::PadPresence::Always,
                    &caps::packets_caps(),
                )
                .expect("valid src template"),
            ]
        });
        TEMPLATES.as_ref()
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        match transition {
            gst::StateChange::ReadyToPaused => {
                if let Err(e) = self.start() {
                    self.post_error_message(e);
                    return Err(gst::StateChangeError);
                }
            }
            // Before the pads deactivate, which waits for a chain blocked on the pool.
            gst::StateChange::PausedToReady => self.set_flushing(true),
            _ => {}
        }
        let ret = self.parent_change_state(transition)?;
        if transition == gst::StateChange::PausedToReady {
            self.stop();
        }
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_as_numpy_writes_them() {
        let d = |s: &str| parse_dtype(s).map(|d| (d.descr, d.itemsize));
        assert_eq!(d("u1"), Ok(("|u1".into(), 1)));
        assert_eq!(d("<i2"), Ok(("<i2".into(), 2)));
        assert_eq!(d(">f4"), Ok((">f4".into(), 4)));
        assert_eq!(d("c8"), Ok(("<c8".into(), 8)));
        assert_eq!(d("|i1"), Ok(("|i1".into(), 1)));
        for bad in ["", "x4", "u3", "<f1", "c4", "i", "<"] {
            assert!(parse_dtype(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_and_immediates() {
        assert_eq!(parse_shape(""), Ok(None));
        assert_eq!(parse_shape("1024"), Ok(Some(vec![Some(1024)])));
        assert_eq!(parse_shape("(4, 256)"), Ok(Some(vec![Some(4), Some(256)])));
        assert_eq!(parse_shape("None,8"), Ok(Some(vec![None, Some(8)])));
        assert!(parse_shape("None,None").is_err());
        assert!(parse_shape("4,x").is_err());
        assert_eq!(
            parse_immediates("0x1600=5, sync:4097=0x10"),
            Ok(vec![
                Immediate {
                    id: 0x1600,
                    value: 5,
                    name: "item_0x1600".into()
                },
                Immediate {
                    id: 4097,
                    value: 16,
                    name: "sync".into()
                }
            ])
        );
        assert!(parse_immediates("0x1600").is_err());
        assert!(parse_immediates("a:b=c").is_err());
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[5]), "(5,)");
        assert_eq!(py_tuple(&[4, 8]), "(4, 8)");
    }

    #[test]
    fn plain_descriptors_follow_the_properties() {
        let f = Flavour::SPEAD_64_48;
        let mut s = Settings {
            immediates: "ts:0x1600=7".into(),
            ..Settings::default()
        };
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].id, d[0].name.as_str()), (0x1600, "ts"));
        assert_eq!(d[0].format, vec![(b'u', 48)]);
        assert!(d[0].shape.is_empty());
        assert_eq!((d[1].id, d[1].name.as_str()), (0x1000, "data"));
        assert_eq!(
            (d[1].shape.clone(), d[1].format.clone()),
            (vec![None], vec![(b'u', 8)])
        );
        assert_eq!(spec.fixed_len(&d[1]), None);

        s.item_dtype = "<i2".into();
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!(
            d[1].dtype.as_deref(),
            Some("{'descr': '<i2', 'fortran_order': False, 'shape': (50,)}")
        );
        assert_eq!(d[1].shape, vec![Some(50)]);
        assert_eq!(spec.fixed_len(&d[1]), Some(100));
        assert!(spec.descriptors(f, 101).is_err());

        s.item_shape = "5,10".into();
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 7).unwrap();
        assert_eq!(
            d[1].dtype.as_deref(),
            Some("{'descr': '<i2', 'fortran_order': False, 'shape': (5, 10)}")
        );
        assert_eq!(spec.fixed_len(&d[1]), Some(100));

        s.timestamp_id = 0x1601;
        s.timestamp_step = 2048;
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!((d[1].id, d[1].name.as_str()), (0x1601, "timestamp"));
        assert_eq!(
            d.last().unwrap().id,
            0x1000,
            "the data item's descriptor stays last"
        );
        s.timestamp_id = 0x1600;
        let e = PlainSpec::from_settings(&s, f).unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        s.timestamp_id = 0;

        s.item_description = "µs".into();
        let e = PlainSpec::from_settings(&s, f).unwrap_err();
        assert!(e.contains("ASCII"), "{e}");
        s.item_description.clear();

        s.item_shape = "None".into();
        assert!(PlainSpec::from_settings(&s, f).is_err());
        s.item_dtype.clear();
        s.item_id = 3;
        assert!(PlainSpec::from_settings(&s, f).is_err());
        s.item_id = 0x1000;
        s.immediates = "0x1600=281474976710656".into(); // 2^48
        assert!(PlainSpec::from_settings(&s, f).is_err());
    }
}
