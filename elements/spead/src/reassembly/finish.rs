//! Turning a heap's pointers and payload into a [`HeapInfo`], and the stream's
//! descriptors.

use std::ops::Range;

use super::items::{extents, Extent};
use crate::descset::{DescriptorTable, Upsert};
use crate::heap::{HeapInfo, HeapItem, ItemValue};
use crate::wire::{ids, Flavour, ItemPointer};

/// What building a heap's description found wrong with its descriptors.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Learned {
    /// Descriptors that did not parse.
    pub malformed: u64,
    /// Descriptors refused because the table is full (`max-descriptors`).
    pub refused: u64,
}

/// What [`build`] needs to know about a heap besides its bytes.
pub(crate) struct Parts<'a> {
    pub heap_cnt: u64,
    pub flavour: Flavour,
    /// The heap's distinct pointers, per-packet ones excluded.
    pub pointers: &'a [u64],
    /// The payload (heap length bytes; unreceived bytes zeroed).
    pub payload: &'a [u8],
    pub complete: bool,
    pub received: Vec<Range<usize>>,
    pub stream_ctrl: Option<u64>,
}

/// Builds the heap's description, learning any descriptor it carries (only from bytes
/// that arrived) into `descriptors`. Returns it and what was wrong with its descriptors.
pub(crate) fn build(parts: Parts<'_>, descriptors: &mut DescriptorTable) -> (HeapInfo, Learned) {
    let f = parts.flavour;
    let len = parts.payload.len();
    let arrived = |r: &Range<usize>| {
        parts.complete
            || parts
                .received
                .iter()
                .any(|x| x.start <= r.start && r.end <= x.end)
    };
    let mut items = Vec::with_capacity(parts.pointers.len());
    let mut learned = Learned::default();
    for (&p, extent) in parts.pointers.iter().zip(extents(f, parts.pointers, len)) {
        let ip = ItemPointer(p);
        let id = ip.id(f);
        if id == ids::NULL {
            continue;
        }
        let value = match extent {
            Extent::Immediate => ItemValue::Immediate(ip.value(f)),
            // spead2 lists no empty item; an item beyond an incomplete heap's end has
            // no bytes to show.
            Extent::Bytes(r) if r.is_empty() => continue,
            Extent::Beyond => continue,
            Extent::Bytes(r) => {
                if id == ids::DESCRIPTOR && arrived(&r) {
                    learn(&parts.payload[r.clone()], descriptors, &mut learned);
                }
                ItemValue::Bytes(r)
            }
        };
        items.push(HeapItem { id, value });
    }
    let info = HeapInfo {
        heap_cnt: parts.heap_cnt,
        flavour: f,
        items,
        descriptors: descriptors.snapshot(),
        complete: parts.complete,
        received: parts.received,
        stream_ctrl: parts.stream_ctrl,
    };
    (info, learned)
}

/// If the complete heap `parts` describes would list only DESCRIPTOR items (at least
/// one, nothing else; what [`build`] skips — NULL, empty and beyond-the-end items — does
/// not count), learns them into `descriptors` as [`build`] would and returns what was
/// wrong with them; otherwise `None`, and nothing is learnt. No description is built:
/// such a heap costs its descriptors' lookups and nothing else (issue 18).
pub(crate) fn descriptors_only(
    parts: &Parts<'_>,
    descriptors: &mut DescriptorTable,
) -> Option<Learned> {
    let f = parts.flavour;
    if !parts.complete || parts.stream_ctrl.is_some() {
        return None;
    }
    let len = parts.payload.len();
    let extents = extents(f, parts.pointers, len);
    let mut any = false;
    for (&p, extent) in parts.pointers.iter().zip(&extents) {
        let id = ItemPointer(p).id(f);
        match extent {
            _ if id == ids::NULL => {}
            Extent::Bytes(r) if r.is_empty() => {}
            Extent::Beyond => {}
            Extent::Bytes(_) if id == ids::DESCRIPTOR => any = true,
            _ => return None,
        }
    }
    if !any {
        return None;
    }
    let mut learned = Learned::default();
    for (&p, extent) in parts.pointers.iter().zip(extents) {
        if ItemPointer(p).id(f) != ids::DESCRIPTOR {
            continue;
        }
        if let Extent::Bytes(r) = extent {
            if !r.is_empty() {
                learn(&parts.payload[r], descriptors, &mut learned);
            }
        }
    }
    Some(learned)
}

/// Learns one DESCRIPTOR value into `descriptors`, counting what was wrong with it.
fn learn(value: &[u8], descriptors: &mut DescriptorTable, learned: &mut Learned) {
    match descriptors.upsert_bytes(value) {
        Ok(Upsert::Full) => learned.refused += 1,
        Ok(_) => {}
        Err(_) => learned.malformed += 1,
    }
}

/// The received ranges of a complete heap of `len` bytes.
pub(crate) fn whole(len: usize) -> Vec<std::ops::Range<usize>> {
    std::iter::once(0..len).collect()
}

/// Zeroes the bytes of `buf` outside `received` (sorted, disjoint), so an incomplete
/// heap shows no stale bytes of an earlier heap.
pub(crate) fn zero_gaps(buf: &mut [u8], received: &[std::ops::Range<usize>]) {
    let mut at = 0;
    for r in received {
        let start = r.start.min(buf.len());
        buf[at.min(start)..start].fill(0);
        at = at.max(r.end);
    }
    if at < buf.len() {
        buf[at..].fill(0);
    }
}
