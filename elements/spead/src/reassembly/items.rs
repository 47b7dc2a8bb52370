//! Item extents: where each addressed item of a heap starts and ends.
//!
//! SPEAD does not send item lengths. As spead2 does, the pointers are stably sorted by
//! (mode, address) — addressed before immediate, since the mode is the top bit — and an
//! addressed item runs from its address to the address of the next pointer in that
//! order, or to the end of the heap. Addressed NULL items take part (they end the
//! previous item's extent) but are never listed.

use std::ops::Range;

use crate::wire::{Flavour, ItemPointer};

/// Where the value of one pointer lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// An immediate pointer: the value is in the pointer.
    Immediate,
    /// An addressed pointer: these bytes of the heap payload.
    Bytes(Range<usize>),
    /// An addressed pointer whose address lies beyond the heap's end.
    Beyond,
}

/// The extent of every pointer of `pointers` (same order), in a heap of `len` bytes.
///
/// Allocates once per call (the sort keys): called once per heap, never per packet.
pub(crate) fn extents(flavour: Flavour, pointers: &[u64], len: usize) -> Vec<Extent> {
    let mut addressed: Vec<(u64, usize)> = pointers
        .iter()
        .enumerate()
        .filter(|(_, &p)| !ItemPointer(p).is_immediate())
        .map(|(i, &p)| (ItemPointer(p).value(flavour), i))
        .collect();
    // Sorting by (address, position) is the stable sort by address.
    addressed.sort_unstable();
    let mut out: Vec<Extent> = vec![Extent::Immediate; pointers.len()];
    for (k, &(start, i)) in addressed.iter().enumerate() {
        let end = addressed.get(k + 1).map_or(len as u64, |&(a, _)| a);
        out[i] = if start > len as u64 {
            Extent::Beyond
        } else {
            // `end` is at least `start` (sorted) and at most `len` unless it is itself
            // beyond the heap, in which case the item runs to the heap's end.
            Extent::Bytes(start as usize..end.min(len as u64) as usize)
        };
    }
    out
}

/// Appends `ip` to `pointers` unless an identical pointer is already there.
///
/// Senders may repeat a heap's pointers in every packet ("repeat pointers"); spead2
/// keeps each distinct pointer once. Short lists are searched linearly; long ones get
/// a hash set (kept by the caller and reused), so a packet full of pointers costs
/// O(pointers), not O(pointers × heap items).
pub(crate) fn push_unique(
    pointers: &mut Vec<u64>,
    seen: &mut std::collections::HashSet<u64>,
    ip: u64,
) -> bool {
    const LINEAR: usize = 16;
    if pointers.len() < LINEAR {
        if pointers.contains(&ip) {
            return false;
        }
        pointers.push(ip);
        return true;
    }
    if seen.is_empty() {
        seen.extend(pointers.iter().copied());
    }
    if !seen.insert(ip) {
        return false;
    }
    pointers.push(ip);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ids;

    const F: Flavour = Flavour::SPEAD_64_40;

    fn a(id: u64, addr: u64) -> u64 {
        ItemPointer::addressed(F, id, addr).0
    }

    fn i(id: u64, v: u64) -> u64 {
        ItemPointer::immediate(F, id, v).0
    }

    #[test]
    fn lengths_run_to_the_next_address_or_the_end() {
        let p = [a(0x1001, 10), i(0x1600, 5), a(0x1000, 0), a(ids::NULL, 14)];
        let e = extents(F, &p, 20);
        assert_eq!(
            e,
            vec![
                Extent::Bytes(10..14),
                Extent::Immediate,
                Extent::Bytes(0..10),
                Extent::Bytes(14..20)
            ]
        );
    }

    #[test]
    fn equal_addresses_give_zero_length_in_pointer_order() {
        let p = [a(0x11, 3), a(0x13, 3), a(0x12, 7)];
        let e = extents(F, &p, 9);
        assert_eq!(
            e,
            vec![
                Extent::Bytes(3..3),
                Extent::Bytes(3..7),
                Extent::Bytes(7..9)
            ]
        );
    }

    #[test]
    fn beyond_the_end_is_flagged_and_does_not_stretch_others() {
        let p = [a(0x1000, 0), a(0x1001, 50)];
        let e = extents(F, &p, 20);
        assert_eq!(e, vec![Extent::Bytes(0..20), Extent::Beyond]);
    }

    #[test]
    fn push_unique_dedupes_short_and_long_lists() {
        let mut v = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for round in 0..2 {
            for k in 0..100u64 {
                assert_eq!(push_unique(&mut v, &mut seen, k), round == 0);
            }
        }
        assert_eq!(v.len(), 100);
    }
}
