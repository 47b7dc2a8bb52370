//! Sequence-number accounting: received, lost, duplicated, reordered, late, corrupted.
//!
//! [`SeqChecker`] is fed the sequence number of every valid packet, in arrival order. It
//! keeps the *frontier* (the highest sequence number accounted for) and a fixed bitmap of
//! which of the last `window` sequence numbers were received, so each packet costs a
//! compare and a bit operation and never allocates:
//!
//! - the next number after the frontier: in order;
//! - a jump ahead: the numbers skipped are counted as lost (their bits cleared);
//! - behind the frontier, inside the window, bit clear: it was counted lost and has now
//!   arrived, so it is reordered and `lost` goes down by one;
//! - behind the frontier, inside the window, bit set: duplicated;
//! - older than the window, or before `first_seq`: late. Whether it is a duplicate or a
//!   very late arrival can no longer be told, so `lost` is left alone.
//!
//! Invariant: `received + lost == frontier - first_seq + 1` (once anything was recorded).

/// Default number of recent sequence numbers remembered (8 KiB of bitmap).
pub const DEFAULT_WINDOW: u64 = 65536;

/// What one recorded sequence number turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The next number expected.
    InOrder,
    /// Ahead of the next number expected; `lost` numbers were skipped.
    Gap {
        /// How many numbers were skipped (and counted as lost).
        lost: u64,
    },
    /// A number counted as lost that has now arrived.
    Reordered,
    /// A number already received.
    Duplicate,
    /// Older than the window (or before `first_seq`): not accounted.
    Late,
}

impl Outcome {
    /// True when the packet was new (counted in `received`).
    pub fn is_new(self) -> bool {
        matches!(self, Self::InOrder | Self::Gap { .. } | Self::Reordered)
    }
}

/// Counters kept by a [`SeqChecker`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqStats {
    /// Distinct valid packets accounted for (in order, after a gap, or reordered).
    pub received: u64,
    /// Numbers skipped and not (yet) arrived.
    pub lost: u64,
    /// Packets whose number had already been received.
    pub duplicated: u64,
    /// Packets that arrived after a higher number (and were counted lost until then).
    pub reordered: u64,
    /// Packets too old to tell apart (older than the window or before `first_seq`).
    pub late: u64,
    /// Packets whose content failed verification (see [`SeqChecker::record_corrupted`]).
    pub corrupted: u64,
}

/// Counts loss, duplication and reordering in a stream of sequence numbers.
#[derive(Debug)]
pub struct SeqChecker {
    first_seq: u64,
    /// Highest number accounted for (received or counted lost); `None` before the first.
    frontier: Option<u64>,
    /// Bit `s & mask` is set when `s` was received, for `s` in `(frontier - window, frontier]`.
    seen: Box<[u64]>,
    mask: u64,
    stats: SeqStats,
}

impl SeqChecker {
    /// A checker expecting `first_seq` first, with the [`DEFAULT_WINDOW`].
    pub fn new(first_seq: u64) -> Self {
        Self::with_window(first_seq, DEFAULT_WINDOW)
    }

    /// A checker remembering the last `window` numbers (rounded up to a power of two, at
    /// least 64). The bitmap is allocated here, once.
    pub fn with_window(first_seq: u64, window: u64) -> Self {
        let window = window.max(64).next_power_of_two();
        Self {
            first_seq,
            frontier: None,
            seen: vec![0u64; (window / 64) as usize].into_boxed_slice(),
            mask: window - 1,
            stats: SeqStats::default(),
        }
    }

    /// Forgets everything and expects `first_seq` next, keeping the bitmap allocation.
    pub fn reset(&mut self, first_seq: u64) {
        self.first_seq = first_seq;
        self.frontier = None;
        self.seen.fill(0);
        self.stats = SeqStats::default();
    }

    /// The number of recent sequence numbers remembered.
    pub fn window(&self) -> u64 {
        self.mask + 1
    }

    /// The counters so far.
    pub fn stats(&self) -> SeqStats {
        self.stats
    }

    /// The highest number accounted for (received, or counted lost by a gap or by
    /// [`SeqChecker::finish`]).
    pub fn frontier(&self) -> Option<u64> {
        self.frontier
    }

    /// Counts one packet whose content failed verification (its number is not trusted).
    pub fn record_corrupted(&mut self) {
        self.stats.corrupted += 1;
    }

    /// Accounts one valid packet with sequence number `seq`.
    #[inline]
    pub fn record(&mut self, seq: u64) -> Outcome {
        match self.frontier {
            None if seq < self.first_seq => self.late(),
            None => self.advance(self.first_seq, seq),
            // f < seq, so f + 1 cannot overflow.
            Some(f) if seq > f => self.advance(f + 1, seq),
            Some(f) => self.behind(f, seq),
        }
    }

    /// Ends the stream: if `expected_total` packets were sent (numbered from
    /// `first_seq`), those after the frontier never arrived and are counted as lost.
    /// Calling it again adds nothing. Returns the final counters.
    pub fn finish(&mut self, expected_total: Option<u64>) -> SeqStats {
        if let Some(n) = expected_total.filter(|&n| n > 0) {
            let last = self.first_seq.saturating_add(n - 1);
            let from = match self.frontier {
                None => Some(self.first_seq),
                Some(f) if f < last => Some(f + 1),
                Some(_) => None,
            };
            if let Some(from) = from {
                let gap = last - from + 1;
                self.clear(from, gap);
                self.stats.lost += gap;
                self.frontier = Some(last);
            }
        }
        self.stats
    }

    /// `seq` is at or after `from`, the first number not yet accounted for.
    #[inline]
    fn advance(&mut self, from: u64, seq: u64) -> Outcome {
        let gap = seq - from;
        if gap > 0 {
            self.clear(from, gap);
            self.stats.lost += gap;
        }
        self.set(seq);
        self.frontier = Some(seq);
        self.stats.received += 1;
        if gap == 0 {
            Outcome::InOrder
        } else {
            Outcome::Gap { lost: gap }
        }
    }

    #[inline]
    fn behind(&mut self, frontier: u64, seq: u64) -> Outcome {
        if seq < self.first_seq || frontier - seq > self.mask {
            return self.late();
        }
        let (word, bit) = self.position(seq);
        if self.seen[word] & bit != 0 {
            self.stats.duplicated += 1;
            return Outcome::Duplicate;
        }
        // Inside the window and not seen, so the gap that skipped it counted it lost.
        self.seen[word] |= bit;
        self.stats.reordered += 1;
        self.stats.lost -= 1;
        self.stats.received += 1;
        Outcome::Reordered
    }

    fn late(&mut self) -> Outcome {
        self.stats.late += 1;
        Outcome::Late
    }

    #[inline]
    fn position(&self, seq: u64) -> (usize, u64) {
        let i = seq & self.mask;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    #[inline]
    fn set(&mut self, seq: u64) {
        let (word, bit) = self.position(seq);
        self.seen[word] |= bit;
    }

    /// Marks `count` numbers from `start` as not received (their bits may still describe
    /// numbers one window older).
    fn clear(&mut self, start: u64, count: u64) {
        let window = self.window();
        if count >= window {
            self.seen.fill(0);
            return;
        }
        let a = start & self.mask;
        let end = a + count;
        if end <= window {
            self.clear_linear(a, end);
        } else {
            self.clear_linear(a, window);
            self.clear_linear(0, end - window);
        }
    }

    /// Clears bit indices `a..b` (`a < b <= window`) a word at a time.
    fn clear_linear(&mut self, a: u64, b: u64) {
        let (wa, wb) = ((a / 64) as usize, ((b - 1) / 64) as usize);
        let low = !0u64 << (a % 64); // bits at or above a
        let high = !0u64 >> (63 - (b - 1) % 64); // bits at or below b - 1
        if wa == wb {
            self.seen[wa] &= !(low & high);
        } else {
            self.seen[wa] &= !low;
            self.seen[wa + 1..wb].fill(0);
            self.seen[wb] &= !high;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn feed(c: &mut SeqChecker, seqs: impl IntoIterator<Item = u64>) -> Vec<Outcome> {
        seqs.into_iter().map(|s| c.record(s)).collect()
    }

    fn stats(received: u64, lost: u64, duplicated: u64, reordered: u64, late: u64) -> SeqStats {
        SeqStats {
            received,
            lost,
            duplicated,
            reordered,
            late,
            corrupted: 0,
        }
    }

    #[test]
    fn in_order_is_clean() {
        let mut c = SeqChecker::new(0);
        assert!(feed(&mut c, 0..1000).iter().all(|o| *o == Outcome::InOrder));
        assert_eq!(c.finish(Some(1000)), stats(1000, 0, 0, 0, 0));
    }

    #[test]
    fn gap_counts_lost() {
        let mut c = SeqChecker::new(10);
        let o = feed(&mut c, [10, 11, 15, 16]);
        assert_eq!(o[2], Outcome::Gap { lost: 3 });
        assert_eq!(c.stats(), stats(4, 3, 0, 0, 0));
    }

    #[test]
    fn missing_first_packets_are_lost() {
        let mut c = SeqChecker::new(100);
        assert_eq!(c.record(105), Outcome::Gap { lost: 5 });
        assert_eq!(c.record(102), Outcome::Reordered);
        assert_eq!(c.stats(), stats(2, 4, 0, 1, 0));
    }

    #[test]
    fn reordered_packet_gives_back_a_loss() {
        let mut c = SeqChecker::new(0);
        let o = feed(&mut c, [0, 2, 1, 3]);
        assert_eq!(
            o,
            [
                Outcome::InOrder,
                Outcome::Gap { lost: 1 },
                Outcome::Reordered,
                Outcome::InOrder
            ]
        );
        assert_eq!(c.finish(Some(4)), stats(4, 0, 0, 1, 0));
    }

    #[test]
    fn duplicates_are_counted_once_each() {
        let mut c = SeqChecker::new(0);
        let o = feed(&mut c, [0, 1, 1, 2, 0, 2, 2]);
        assert_eq!(o.iter().filter(|o| **o == Outcome::Duplicate).count(), 4);
        assert_eq!(c.stats(), stats(3, 0, 4, 0, 0));
    }

    #[test]
    fn duplicate_of_a_reordered_packet() {
        let mut c = SeqChecker::new(0);
        feed(&mut c, [0, 3, 1, 1]);
        assert_eq!(c.stats(), stats(3, 1, 1, 1, 0));
    }

    #[test]
    fn older_than_window_is_late_and_keeps_lost() {
        let mut c = SeqChecker::with_window(0, 64);
        assert_eq!(c.window(), 64);
        feed(&mut c, [0, 2]); // 1 lost
        feed(&mut c, 3..=65); // frontier 65: window is 2..=65
        assert_eq!(c.record(1), Outcome::Late);
        assert_eq!(c.record(0), Outcome::Late);
        assert_eq!(c.record(2), Outcome::Duplicate);
        assert_eq!(c.stats(), stats(65, 1, 1, 0, 2));
    }

    #[test]
    fn before_first_seq_is_late() {
        let mut c = SeqChecker::new(50);
        assert_eq!(c.record(49), Outcome::Late);
        feed(&mut c, [50, 51]);
        assert_eq!(c.record(10), Outcome::Late);
        assert_eq!(c.stats(), stats(2, 0, 0, 0, 2));
    }

    #[test]
    fn window_wraps_many_times() {
        // Bits are reused every 64 numbers: a stale bit from one lap must not make a
        // lost number of the next lap look like a duplicate when it finally arrives.
        let mut c = SeqChecker::with_window(0, 64);
        for lap in 0..100u64 {
            let base = lap * 64;
            for s in base..base + 64 {
                if s % 64 != 5 {
                    c.record(s);
                }
            }
            assert_eq!(c.record(base + 5), Outcome::Reordered, "lap {lap}");
            assert_eq!(c.record(base + 5), Outcome::Duplicate, "lap {lap}");
        }
        assert_eq!(c.finish(Some(6400)), stats(6400, 0, 100, 100, 0));
    }

    #[test]
    fn gap_wrapping_around_the_bitmap_end() {
        let mut c = SeqChecker::with_window(0, 128);
        feed(&mut c, 0..=120);
        feed(&mut c, [140]); // gap 121..=139 wraps past bit index 127
        for s in 121..140 {
            assert_eq!(c.record(s), Outcome::Reordered, "seq {s}");
        }
        assert_eq!(c.record(130), Outcome::Duplicate);
        assert_eq!(c.stats(), stats(141, 0, 1, 19, 0));
    }

    #[test]
    fn large_gaps() {
        let mut c = SeqChecker::new(0);
        c.record(0);
        assert_eq!(c.record(1_000_000), Outcome::Gap { lost: 999_999 });
        // Inside the window the missing numbers can still arrive...
        assert_eq!(c.record(1_000_000 - 10), Outcome::Reordered);
        // ...but not the ones older than it.
        assert_eq!(c.record(10), Outcome::Late);
        assert_eq!(c.record(0), Outcome::Late);
        assert_eq!(
            c.record(u64::MAX - 1),
            Outcome::Gap {
                lost: u64::MAX - 1_000_002
            }
        );
        assert_eq!(c.record(u64::MAX), Outcome::InOrder);
        let s = c.stats();
        assert_eq!(
            (s.received, s.lost, s.reordered, s.late),
            (5, u64::MAX - 4, 1, 2)
        );
    }

    #[test]
    fn finish_counts_the_missing_tail_once() {
        let mut c = SeqChecker::new(0);
        feed(&mut c, [0, 1, 2]);
        assert_eq!(c.finish(Some(10)).lost, 7);
        assert_eq!(c.finish(Some(10)).lost, 7);
        assert_eq!(c.finish(None).lost, 7);
        // A straggler after finish is still recognised.
        assert_eq!(c.record(9), Outcome::Reordered);
        assert_eq!(c.stats().lost, 6);
    }

    #[test]
    fn finish_with_nothing_received() {
        let mut c = SeqChecker::new(5);
        assert_eq!(c.finish(Some(3)), stats(0, 3, 0, 0, 0));
        assert_eq!(c.frontier(), Some(7));
        let mut c = SeqChecker::new(5);
        assert_eq!(c.finish(None), SeqStats::default());
        assert_eq!(c.finish(Some(0)), SeqStats::default());
    }

    #[test]
    fn finish_with_more_than_expected_adds_nothing() {
        let mut c = SeqChecker::new(0);
        feed(&mut c, 0..20);
        assert_eq!(c.finish(Some(10)), stats(20, 0, 0, 0, 0));
    }

    #[test]
    fn corrupted_and_reset() {
        let mut c = SeqChecker::with_window(0, 64);
        feed(&mut c, [0, 5]);
        c.record_corrupted();
        assert_eq!(c.stats().corrupted, 1);
        c.reset(3);
        assert_eq!(c.stats(), SeqStats::default());
        assert_eq!(c.record(5), Outcome::Gap { lost: 2 });
        assert_eq!(
            c.record(3),
            Outcome::Reordered,
            "the old bit for 5 must be gone"
        );
    }

    /// A straightforward model of the documented rules, with a HashSet for memory.
    struct Model {
        first: u64,
        window: u64,
        frontier: Option<u64>,
        seen: HashSet<u64>,
        s: SeqStats,
    }

    impl Model {
        fn record(&mut self, seq: u64) {
            let next = self.frontier.map_or(self.first, |f| f + 1);
            if seq >= next {
                self.s.lost += seq - next;
                self.s.received += 1;
                self.seen.insert(seq);
                self.frontier = Some(seq);
            } else if seq < self.first || self.frontier.unwrap() - seq >= self.window {
                self.s.late += 1;
            } else if !self.seen.insert(seq) {
                self.s.duplicated += 1;
            } else {
                self.s.reordered += 1;
                self.s.lost -= 1;
                self.s.received += 1;
            }
        }
    }

    #[test]
    fn matches_a_simple_model_on_random_streams() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..50 {
            let first = next() % 1000;
            let mut c = SeqChecker::with_window(first, 128);
            let mut m = Model {
                first,
                window: 128,
                frontier: None,
                seen: HashSet::new(),
                s: SeqStats::default(),
            };
            let mut pos = first;
            for _ in 0..5000 {
                // Mostly forward, with jumps, repeats and stragglers of various ages.
                let r = next() % 100;
                let seq = match r {
                    0..70 => pos,
                    70..80 => pos + next() % 300,
                    80..90 => pos.saturating_sub(next() % 200),
                    _ => pos.saturating_sub(1),
                };
                pos = pos.max(seq) + 1;
                m.record(seq);
                c.record(seq);
                assert_eq!(c.stats(), m.s, "round {round}, seq {seq}");
            }
        }
    }
}
