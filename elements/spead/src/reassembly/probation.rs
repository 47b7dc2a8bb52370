//! Heaps that have received one packet, held apart from the window until a second
//! packet shows that a sender is really sending them (a 2Q-style admission: the window
//! is the cache, this is its probation queue).
//!
//! A flood of valid-looking first packets with other heap counters (lying or random
//! HEAP_CNTs, a thrash of the window) is indistinguishable from the start of a heap
//! until the heap's next packet arrives. Held here, such packets evict only each other,
//! oldest first: they take no window entry and no pool slot, so a heap under
//! construction in the window is never evicted by them, and a heap whose second packet
//! arrives before [`PLACES`] other heaps have started is never lost to them.
//!
//! Each place keeps one packet of up to [`PLACE_BYTES`] bytes, re-encoded (header,
//! pointers, payload); the storage is allocated once, and a place is found by a hash
//! of the heap counter: O(1) per packet, bounded memory.

use std::collections::HashMap;

use crate::wire::{Flavour, Packet};

/// Heaps held at most: a heap's first packet is lost only if this many other heaps
/// start (each with a first packet) before its second packet arrives.
pub const PLACES: usize = 256;

/// Largest packet held (header, pointers and payload): a jumbo frame's. A heap whose
/// first packet is larger enters the window at once.
pub const PLACE_BYTES: usize = 9216;

/// One held first packet.
#[derive(Default)]
struct Place {
    held: bool,
    cnt: u64,
    stamp: Option<u64>,
    flavour: Option<Flavour>,
    /// Its payload's place in its heap.
    offset: u64,
    end: u64,
    heap_length: Option<u64>,
    /// The packet, re-encoded ([`Packet::encode_into`]).
    packet: Vec<u8>,
}

/// The probation queue (see the module documentation).
pub(crate) struct Probation {
    places: Vec<Place>,
    index: HashMap<u64, u16>,
    /// Where the next heap is held: the place written longest ago.
    next: usize,
}

/// How a packet relates to the one held for its heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// It continues the heap: the heap is admitted to the window.
    Continues,
    /// It carries exactly the bytes held already.
    Duplicate,
    /// It contradicts the held packet (another HEAP_LENGTH or flavour, an overlap).
    Malformed,
    /// In-order mode, and it is not the next packet of the heap.
    OutOfOrder,
}

impl Probation {
    /// Room for `places` heaps (0: nothing is held; every heap enters the window at its
    /// first packet, as in spead2).
    pub fn new(places: usize) -> Self {
        Self {
            places: (0..places)
                .map(|_| Place {
                    packet: Vec::with_capacity(PLACE_BYTES),
                    ..Place::default()
                })
                .collect(),
            index: HashMap::with_capacity(places),
            next: 0,
        }
    }

    /// True when `p` may be held (there is room, and it fits a place).
    pub fn takes(&self, p: &Packet<'_>, header_len: usize) -> bool {
        !self.places.is_empty() && header_len + p.payload.len() <= PLACE_BYTES
    }

    /// Heaps held now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The place holding heap `cnt`.
    pub fn find(&self, cnt: u64) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        self.index.get(&cnt).map(|&i| usize::from(i))
    }

    /// How `p`, a packet of the heap held in place `i`, relates to the packet held.
    pub fn fit(&self, i: usize, p: &Packet<'_>, in_order: bool) -> Fit {
        let h = &self.places[i];
        let (start, end) = (p.payload_offset, p.payload_offset + p.payload.len() as u64);
        let length = h.heap_length.unwrap_or(u64::MAX);
        // In the order `Entry::add` checks a packet of a heap in the window.
        if h.flavour != Some(p.flavour)
            || p.heap_length.is_some_and(|l| l != length)
            || end > length
            || p.items()
                .any(|ip| !ip.is_immediate() && ip.value(p.flavour) > length)
        {
            Fit::Malformed
        } else if in_order && start > h.end {
            Fit::OutOfOrder
        } else if start >= h.offset && end <= h.end && end > start {
            Fit::Duplicate
        } else if start < h.end && h.offset < end {
            Fit::Malformed
        } else {
            Fit::Continues
        }
    }

    /// Holds `p` (heap `p.heap_cnt`, not held yet), the first packet of its heap, with
    /// `stamp`. True when that pushed out the heap held longest ago (now lost).
    pub fn hold(&mut self, p: &Packet<'_>, stamp: Option<u64>) -> bool {
        let i = self.next;
        self.next = (self.next + 1) % self.places.len();
        let place = &mut self.places[i];
        let evicted = place.held;
        if evicted {
            self.index.remove(&place.cnt);
        }
        place.held = true;
        place.cnt = p.heap_cnt;
        place.stamp = stamp;
        place.flavour = Some(p.flavour);
        place.offset = p.payload_offset;
        place.end = p.payload_offset + p.payload.len() as u64;
        place.heap_length = p.heap_length;
        p.encode_into(&mut place.packet);
        self.index.insert(p.heap_cnt, i as u16);
        evicted
    }

    /// Takes the packet held in place `i` out (the heap leaves probation): its bytes
    /// and stamp. Give the storage back with [`Probation::give_back`].
    pub fn take(&mut self, i: usize) -> (Vec<u8>, Option<u64>) {
        let place = &mut self.places[i];
        place.held = false;
        self.index.remove(&place.cnt);
        (std::mem::take(&mut place.packet), place.stamp)
    }

    /// Returns the storage [`Probation::take`] took from place `i`.
    pub fn give_back(&mut self, i: usize, packet: Vec<u8>) {
        self.places[i].packet = packet;
    }

    /// Forgets heap `cnt` if it is held (a stop heap superseded it).
    pub fn forget(&mut self, cnt: u64) {
        if let Some(i) = self.find(cnt) {
            self.places[i].held = false;
            self.index.remove(&cnt);
        }
    }

    /// Forgets every heap held; returns how many there were (each one lost).
    pub fn clear(&mut self) -> usize {
        let n = self.index.len();
        for p in &mut self.places {
            p.held = false;
        }
        self.index.clear();
        n
    }
}
