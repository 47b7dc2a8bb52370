//! Heaps that have received one packet, held apart from the window until a second
//! packet shows that a sender is really sending them (a 2Q-style admission: the window
//! is the cache, this is its probation queue).
//!
//! A flood of valid-looking first packets with other heap counters (lying or random
//! HEAP_CNTs, a thrash of the window) is indistinguishable from the start of a heap
//! until the heap's next packet arrives. Held here, such packets push out only each
//! other, oldest first: they take no window entry and no pool slot, so a heap under
//! construction in the window is never evicted by them, and a heap is lost to them only
//! if, between its first two packets, other heaps start with more than [`BYTES`] bytes
//! of first packets, or more than [`PLACES`] of them.
//!
//! The packets are kept re-encoded (header, pointers, payload) one after the other in
//! one ring of bytes allocated at start, and found by a hash of the heap counter: O(1)
//! per packet, bounded memory.

use std::collections::HashMap;

use crate::wire::{Flavour, Packet};

/// Heaps held at most.
pub const PLACES: usize = 16384;

/// Bytes of first packets held at most (the ring).
pub const BYTES: usize = 2 << 20;

/// Largest packet held (header, pointers and payload): a jumbo frame's. A heap whose
/// first packet is larger enters the window at once.
pub const PLACE_BYTES: usize = 9216;

/// One held first packet.
#[derive(Clone, Copy, Default)]
struct Place {
    held: bool,
    cnt: u64,
    stamp: Option<u64>,
    flavour: Option<Flavour>,
    /// Its payload's place in its heap.
    offset: u64,
    end: u64,
    heap_length: Option<u64>,
    /// Where the packet is in the ring, as a position that only grows (the ring holds
    /// byte `v` at `v % BYTES`; a packet never wraps), and its length.
    v: u64,
    len: usize,
}

/// The probation queue (see the module documentation).
pub(crate) struct Probation {
    places: Vec<Place>,
    index: HashMap<u64, u32>,
    ring: Vec<u8>,
    /// Places are used in order: place `seq % PLACES` for the `seq`-th packet held.
    /// Packets `oldest..next` are in the ring (some taken out or pushed out since).
    oldest: u64,
    next: u64,
    /// Where the next packet goes in the ring.
    write: u64,
    /// A packet taken out (lent by [`Probation::take`]).
    scratch: Vec<u8>,
}

/// How a packet relates to the one held for its heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// It continues the heap: the heap is admitted to the window.
    Continues,
    /// It carries only bytes held already.
    Duplicate,
    /// It contradicts the held packet (another HEAP_LENGTH or flavour, bytes beyond
    /// the heap, an overlap).
    Malformed,
    /// In-order mode, and it is not the next packet of the heap.
    OutOfOrder,
}

impl Probation {
    /// A queue that holds packets if `on` (else nothing is held: every heap enters the
    /// window at its first packet, as in spead2).
    pub fn new(on: bool) -> Self {
        let (places, bytes) = if on { (PLACES, BYTES) } else { (0, 0) };
        Self {
            places: vec![Place::default(); places],
            index: HashMap::with_capacity(places),
            ring: vec![0; bytes],
            oldest: 0,
            next: 0,
            write: 0,
            scratch: Vec::with_capacity(if on { PLACE_BYTES } else { 0 }),
        }
    }

    /// True when `p` may be held (the queue is on, and `p` is small enough).
    pub fn takes(&self, p: &Packet<'_>) -> bool {
        !self.places.is_empty() && p.encoded_len() <= PLACE_BYTES
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
        self.index.get(&cnt).map(|&i| i as usize)
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

    /// Pushes out the packet held longest ago (or the room it left); true if it was
    /// still held (its heap is lost).
    fn pop(&mut self) -> bool {
        let at = (self.oldest % self.places.len() as u64) as usize;
        let place = &mut self.places[at];
        self.oldest += 1;
        let lost = place.held;
        if lost {
            place.held = false;
            self.index.remove(&place.cnt);
        }
        lost
    }

    /// Holds `p` (heap `p.heap_cnt`, not held yet; [`Probation::takes`] said yes), the
    /// first packet of its heap, with `stamp`. Returns how many heaps held longest ago
    /// were pushed out to make room (each one lost).
    pub fn hold(&mut self, p: &Packet<'_>, stamp: Option<u64>) -> u64 {
        let n = p.encoded_len();
        let size = BYTES as u64;
        let mut v = self.write;
        if v % size + n as u64 > size {
            // Not across the ring's end: start again at its beginning.
            v = v.next_multiple_of(size);
        }
        let mut lost = 0;
        while self.oldest < self.next
            && (self.next - self.oldest >= self.places.len() as u64
                || v + n as u64 - self.places[(self.oldest % self.places.len() as u64) as usize].v
                    > size)
        {
            lost += u64::from(self.pop());
        }
        let i = (self.next % self.places.len() as u64) as usize;
        self.next += 1;
        self.write = v + n as u64;
        let at = (v % size) as usize;
        p.encode_to(&mut self.ring[at..at + n]);
        self.places[i] = Place {
            held: true,
            cnt: p.heap_cnt,
            stamp,
            flavour: Some(p.flavour),
            offset: p.payload_offset,
            end: p.payload_offset + p.payload.len() as u64,
            heap_length: p.heap_length,
            v,
            len: n,
        };
        self.index.insert(p.heap_cnt, i as u32);
        lost
    }

    /// Takes the packet held in place `i` out (the heap leaves probation): a copy of
    /// its bytes, and its stamp. Give the copy back with [`Probation::give_back`].
    pub fn take(&mut self, i: usize) -> (Vec<u8>, Option<u64>) {
        let place = &mut self.places[i];
        place.held = false;
        self.index.remove(&place.cnt);
        let at = (place.v % BYTES as u64) as usize;
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.extend_from_slice(&self.ring[at..at + place.len]);
        (out, place.stamp)
    }

    /// Returns the copy [`Probation::take`] lent.
    pub fn give_back(&mut self, copy: Vec<u8>) {
        self.scratch = copy;
    }

    /// Forgets heap `cnt` if it is held (a stop heap superseded it).
    pub fn forget(&mut self, cnt: u64) {
        if let Some(i) = self.index.remove(&cnt) {
            self.places[i as usize].held = false;
        }
    }

    /// Forgets every heap held; returns how many there were (each one lost).
    pub fn clear(&mut self) -> usize {
        let n = self.index.len();
        for &i in self.index.values() {
            self.places[i as usize].held = false;
        }
        self.index.clear();
        self.oldest = self.next;
        n
    }
}
