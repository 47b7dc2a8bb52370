//! The byte ranges of a heap received so far (out-of-order mode).

use std::ops::Range;

/// How a new range relates to those already received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// No byte of it was received before: added.
    New,
    /// Every byte of it was received before: a duplicate, not added.
    Duplicate,
    /// Some of its bytes were received before and some not: not added. Correct senders
    /// never do this (a retransmitted packet repeats a whole earlier one).
    Overlap,
    /// It would be a new range and the heap already has [`MAX_RANGES`]: not added.
    TooFragmented,
}

/// Most separate ranges a heap may have. Inserting in the middle of the list is linear,
/// so without a bound a sender scattering tiny packets could make each insert cost
/// the whole list; a real heap of 16 MiB in 1472-byte packets, reordered as badly as
/// possible, needs under 6000.
pub(crate) const MAX_RANGES: usize = 16384;

/// Disjoint, sorted, coalesced ranges. Packets arriving in order extend the last range
/// in place, so the list stays short and its storage (reused from heap to heap) does
/// not grow per packet.
#[derive(Debug, Default)]
pub(crate) struct Ranges {
    v: Vec<Range<usize>>,
}

impl Ranges {
    /// Forgets everything, keeping the storage.
    pub fn clear(&mut self) {
        self.v.clear();
    }

    /// The ranges, sorted.
    pub fn as_slice(&self) -> &[Range<usize>] {
        &self.v
    }

    /// Adds `r` (non-empty) if none of its bytes was received.
    pub fn insert(&mut self, r: Range<usize>) -> Insert {
        debug_assert!(!r.is_empty());
        // Fast path: in-order arrival extends the last range.
        if let Some(last) = self.v.last_mut() {
            if last.end == r.start {
                last.end = r.end;
                return Insert::New;
            }
        }
        // First range ending after r.start: the only candidates for overlap start here.
        let i = self.v.partition_point(|x| x.end <= r.start);
        if let Some(x) = self.v.get(i) {
            if x.start < r.end {
                return if x.start <= r.start && r.end <= x.end {
                    Insert::Duplicate
                } else {
                    Insert::Overlap
                };
            }
        }
        // Disjoint: merge with a neighbour that touches it, or insert.
        let touches_prev = i > 0 && self.v[i - 1].end == r.start;
        let touches_next = self.v.get(i).is_some_and(|x| x.start == r.end);
        match (touches_prev, touches_next) {
            (true, true) => {
                self.v[i - 1].end = self.v[i].end;
                self.v.remove(i);
            }
            (true, false) => self.v[i - 1].end = r.end,
            (false, true) => self.v[i].start = r.start,
            (false, false) if self.v.len() >= MAX_RANGES => return Insert::TooFragmented,
            (false, false) => self.v.insert(i, r),
        }
        Insert::New
    }
}

#[cfg(test)]
// Lists of one range are what these tests are about.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_out_of_order_coalesce() {
        let mut r = Ranges::default();
        assert_eq!(r.insert(0..10), Insert::New);
        assert_eq!(r.insert(10..20), Insert::New);
        assert_eq!(r.insert(30..40), Insert::New);
        assert_eq!(r.as_slice(), &[0..20, 30..40]);
        assert_eq!(r.insert(25..30), Insert::New);
        assert_eq!(r.as_slice(), &[0..20, 25..40]);
        assert_eq!(r.insert(20..25), Insert::New);
        assert_eq!(r.as_slice(), &[0..40]);
    }

    #[test]
    fn duplicates_and_overlaps_are_told_apart() {
        let mut r = Ranges::default();
        r.insert(10..20);
        r.insert(30..40);
        assert_eq!(r.insert(10..20), Insert::Duplicate);
        assert_eq!(r.insert(12..18), Insert::Duplicate);
        assert_eq!(r.insert(5..15), Insert::Overlap);
        assert_eq!(r.insert(15..35), Insert::Overlap);
        assert_eq!(r.insert(35..45), Insert::Overlap);
        assert_eq!(r.insert(0..50), Insert::Overlap);
        assert_eq!(r.as_slice(), &[10..20, 30..40]);
        assert_eq!(r.insert(0..10), Insert::New);
        assert_eq!(r.insert(40..50), Insert::New);
        assert_eq!(r.as_slice(), &[0..20, 30..50]);
    }

    #[test]
    fn fragmentation_is_bounded() {
        let mut r = Ranges::default();
        for k in 0..MAX_RANGES {
            assert_eq!(r.insert(2 * k..2 * k + 1), Insert::New);
        }
        assert_eq!(
            r.insert(2 * MAX_RANGES + 5..2 * MAX_RANGES + 6),
            Insert::TooFragmented
        );
        // Filling a gap still works: it merges, it does not add.
        assert_eq!(r.insert(1..2), Insert::New);
        assert_eq!(r.as_slice().len(), MAX_RANGES - 1);
    }
}
