//! One heap under construction.

use std::collections::HashSet;

use firehose_core::Slot;

use super::items::push_unique;
use super::pools::Pools;
use super::ranges::{Insert, Ranges};
use super::Counts;
use crate::wire::{ids, ItemPointer, Packet};

/// Most distinct item pointers one heap may collect. Real heaps have tens or hundreds;
/// the bound keeps a sender from growing a heap's pointer list without end.
pub(crate) const MAX_HEAP_ITEMS: usize = 32768;

/// True for the four pointers every packet carries, which describe the packet rather
/// than the heap.
pub(crate) fn per_packet(ip: ItemPointer, f: crate::wire::Flavour) -> bool {
    ip.is_immediate() && matches!(ip.id(f), ids::HEAP_CNT..=ids::PAYLOAD_LENGTH)
}

/// A window entry. Entries are reused from heap to heap, so their lists keep their
/// storage and a heap costs no allocation beyond its description.
#[derive(Default)]
pub(crate) struct Entry {
    pub active: bool,
    pub cnt: u64,
    /// Arrival order of the heap's first packet (flushes go in this order).
    pub seq: u64,
    /// When a packet last added to this heap (same clock as `seq`): the heap touched
    /// longest ago leaves a full window first, so a flood of one-packet partial heaps
    /// evicts itself, not the heap whose packets keep arriving.
    pub touched: u64,
    /// Packets accepted into this heap: a heap that has received more than one is
    /// evicted only when no heap with one is in the window.
    pub packets: u32,
    /// Entered the window at its first packet as the heap the stream is expected to
    /// send next (see `Reassembler::expects`): kept in a full window as a heap of more
    /// than one packet is.
    pub vouched: bool,
    pub flavour: Option<crate::wire::Flavour>,
    pub heap_length: Option<usize>,
    /// The payload; `None` once the heap is known to be too large.
    pub slot: Option<Slot>,
    pub too_large: bool,
    pub ranges: Ranges,
    pub received: usize,
    /// End of the furthest byte received.
    pub extent: usize,
    /// Furthest address of an addressed item (an item may start past the bytes
    /// received so far).
    pub max_address: u64,
    pub pointers: Vec<u64>,
    pub seen: HashSet<u64>,
    pub stream_ctrl: Option<u64>,
    pub stamp: Option<u64>,
}

/// Where a packet's payload is.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// In a packet buffer: copied into the heap.
    Bytes(&'a [u8]),
    /// Already received into heap memory, at `at` (receiving straight into heaps):
    /// accounted without a copy if that is where it belongs.
    Landed { at: *const u8, len: usize },
}

impl Payload<'_> {
    pub fn len(&self) -> usize {
        match *self {
            Payload::Bytes(b) => b.len(),
            Payload::Landed { len, .. } => len,
        }
    }
}

/// What [`Entry::add`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Its bytes are in the heap now.
    Accepted,
    /// Dropped, and counted.
    Dropped,
    /// A landed payload that is not where this packet's bytes belong: nothing changed.
    Missed,
}

/// What the window needs from the configuration.
pub(crate) struct Limits {
    pub max_heap_size: usize,
    pub allow_out_of_order: bool,
}

impl Entry {
    /// Starts heap `cnt` in this entry, with `slot` as its payload memory.
    pub fn start(&mut self, p: &Packet<'_>, seq: u64, stamp: Option<u64>, slot: Slot) {
        self.active = true;
        self.cnt = p.heap_cnt;
        self.seq = seq;
        self.touched = seq;
        self.packets = 0;
        self.vouched = false;
        self.flavour = Some(p.flavour);
        self.heap_length = None;
        self.slot = Some(slot);
        self.too_large = false;
        self.ranges.clear();
        self.received = 0;
        self.extent = 0;
        self.max_address = 0;
        self.pointers.clear();
        if !self.seen.is_empty() {
            self.seen.clear();
        }
        self.stream_ctrl = None;
        self.stamp = stamp;
    }

    /// True when every byte of a heap of known length arrived.
    pub fn is_complete(&self) -> bool {
        self.heap_length == Some(self.received)
    }

    /// Adds one packet of this heap (its payload in `payload`), or drops and counts it.
    /// The caller has checked HEAP_LENGTH against `max_heap_size`.
    pub fn add(
        &mut self,
        p: &Packet<'_>,
        payload: Payload<'_>,
        lim: &Limits,
        pools: &Pools,
        counts: &mut Counts,
    ) -> Added {
        if self.too_large {
            counts.too_large += 1;
            return Added::Dropped;
        }
        let f = p.flavour;
        if self.flavour != Some(f) {
            counts.malformed += 1;
            return Added::Dropped;
        }
        let len = payload.len();
        let end = p.payload_offset.saturating_add(len as u64);
        let mut new_length = None;
        match (self.heap_length, p.heap_length) {
            (Some(a), Some(b)) if a as u64 != b => {
                counts.malformed += 1;
                return Added::Dropped;
            }
            (Some(a), _) if end > a as u64 => {
                counts.malformed += 1;
                return Added::Dropped;
            }
            (None, Some(b)) if b < self.extent as u64 => {
                counts.malformed += 1;
                return Added::Dropped;
            }
            (None, Some(b)) => new_length = Some(b as usize),
            (None, None) if end > lim.max_heap_size as u64 => {
                // Without HEAP_LENGTH the heap grew past the bound: give it up, and
                // drop (and count) its later packets while it stays in the window.
                counts.too_large += 1;
                self.too_large = true;
                self.slot = None;
                return Added::Dropped;
            }
            _ => {}
        }
        let length = new_length.or(self.heap_length);
        if let Some(l) = length {
            let beyond = |a: u64| a > l as u64;
            if beyond(self.max_address)
                || p.items()
                    .any(|ip| !ip.is_immediate() && beyond(ip.value(f)))
            {
                counts.malformed += 1;
                return Added::Dropped;
            }
        }
        if self.pointers.len() + p.n_items() > MAX_HEAP_ITEMS {
            counts.malformed += 1;
            return Added::Dropped;
        }
        // `end` is at most max_heap_size here (checked against HEAP_LENGTH, or above).
        let range = p.payload_offset as usize..end as usize;
        if len > 0 && !lim.allow_out_of_order && range.start > self.extent {
            counts.out_of_order_dropped += 1;
            return Added::Dropped;
        }
        if !self.reserve(length.unwrap_or(range.end), pools) {
            counts.drops_pool += 1;
            return Added::Dropped;
        }
        if let Payload::Landed { at, .. } = payload {
            let slot = self.slot.as_mut().expect("reserve() left a slot");
            if len == 0 || slot.as_mut_full()[range.start..].as_ptr() != at {
                return Added::Missed;
            }
        }
        if len > 0 {
            match self.ranges.insert(range.clone()) {
                Insert::New => {}
                Insert::Duplicate => {
                    counts.duplicates += 1;
                    return Added::Dropped;
                }
                Insert::Overlap => {
                    counts.malformed += 1;
                    return Added::Dropped;
                }
                Insert::TooFragmented => {
                    counts.out_of_order_dropped += 1;
                    return Added::Dropped;
                }
            }
            let slot = self.slot.as_mut().expect("reserve() left a slot");
            let heap = slot.as_mut_full();
            match payload {
                Payload::Bytes(bytes) => {
                    heap[range.clone()].copy_from_slice(bytes);
                    // The heap's next packet most likely lands right after this one:
                    // start loading those lines now (see `memory::prefetch`).
                    firehose_core::memory::prefetch_following(heap, range.end, len);
                }
                // Checked before anything changed (above): already where it belongs.
                Payload::Landed { .. } => {}
            }
            self.received += len;
            self.extent = self.extent.max(range.end);
        }
        if new_length.is_some() {
            self.heap_length = new_length;
        }
        for ip in p.items() {
            if per_packet(ip, f) {
                continue;
            }
            if ip.is_immediate() {
                if ip.id(f) == ids::STREAM_CTRL {
                    self.stream_ctrl = Some(ip.value(f));
                }
            } else {
                self.max_address = self.max_address.max(ip.value(f));
            }
            push_unique(&mut self.pointers, &mut self.seen, ip.0);
        }
        Added::Accepted
    }

    /// Makes the slot hold at least `need` bytes, moving what arrived into a larger
    /// slot if needed (only heaps without HEAP_LENGTH grow). False if no slot is free.
    fn reserve(&mut self, need: usize, pools: &Pools) -> bool {
        let Some(old) = self.slot.as_mut() else {
            return false;
        };
        if old.capacity() >= need {
            return true;
        }
        let Some(mut new) = pools.slot(need) else {
            return false;
        };
        let n = self.extent;
        new.as_mut_full()[..n].copy_from_slice(&old.as_mut_full()[..n]);
        self.slot = Some(new);
        true
    }
}
