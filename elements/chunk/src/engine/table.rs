//! The in-flight message table: message id → where its packets go, in memory allocated
//! once.
//!
//! Open addressing with linear probing and backward-shift deletion, so removals leave no
//! tombstones and a lookup never degrades as messages come and go. The owner bounds the
//! number of live entries (see [`FifoRing`]) to half the capacity, so probes stay short
//! and an insert always finds a free entry.

/// Why every packet of a message is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The packets or the placement made no sense (`malformed`).
    Malformed,
    /// The message's chunk has left the window, or the message was ended early
    /// (`too-old`).
    TooOld,
    /// The handler did not want it (`drops-handler`).
    Handler,
    /// Its chunk got no pool memory (`drops-pool`).
    Pool,
    /// The message was already complete (`duplicated`).
    Duplicated,
    /// The message's chunk lies beyond the whole window and the jump is not yet
    /// confirmed (`too-far`).
    TooFar,
}

/// Where the packets of a message go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Into the slot at this position of the window's slot-state array.
    Slot(u32),
    /// Nowhere: dropped and counted.
    Dropped(DropReason),
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    route: Route,
    /// Which insertion this is, so a stale FIFO record cannot evict a newer entry.
    stamp: u64,
    used: bool,
}

const EMPTY: Entry = Entry {
    key: 0,
    route: Route::Dropped(DropReason::Malformed),
    stamp: 0,
    used: false,
};

/// A fixed-capacity hash map from message id to [`Route`].
pub(crate) struct MessageTable {
    entries: Box<[Entry]>,
    mask: usize,
    shift: u32,
    len: usize,
}

impl MessageTable {
    /// A table for at most `max_live` entries (capacity: the next power of two of twice
    /// that, so the load stays at or below one half).
    pub(crate) fn new(max_live: usize) -> Self {
        let cap = (max_live.max(4) * 2).next_power_of_two();
        Self {
            entries: vec![EMPTY; cap].into_boxed_slice(),
            mask: cap - 1,
            shift: 64 - cap.trailing_zeros(),
            len: 0,
        }
    }

    /// Fibonacci hashing: message ids are often multiples of a power of two (a
    /// timestamp step), which a plain modulo would pile into a few entries.
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn find(&self, key: u64) -> Option<usize> {
        let mut i = self.home(key);
        loop {
            let e = &self.entries[i];
            if !e.used {
                return None;
            }
            if e.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The route of `key` and the stamp it was inserted with.
    pub(crate) fn get(&self, key: u64) -> Option<(Route, u64)> {
        self.find(key)
            .map(|i| (self.entries[i].route, self.entries[i].stamp))
    }

    /// Sets the route of `key` (replacing any).
    pub(crate) fn insert(&mut self, key: u64, route: Route, stamp: u64) {
        let mut i = self.home(key);
        loop {
            let e = &mut self.entries[i];
            if !e.used || e.key == key {
                if !e.used {
                    self.len += 1;
                }
                *e = Entry {
                    key,
                    route,
                    stamp,
                    used: true,
                };
                // The owner's bound keeps a free entry; a full table would loop forever.
                debug_assert!(self.len <= self.mask);
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `key`; returns what it held.
    pub(crate) fn remove(&mut self, key: u64) -> Option<(Route, u64)> {
        let mut hole = self.find(key)?;
        let gone = (self.entries[hole].route, self.entries[hole].stamp);
        self.len -= 1;
        // Backward shift: pull later entries of the probe run into the hole unless their
        // home lies cyclically after the hole (they would then be unreachable from it).
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            if !self.entries[j].used {
                break;
            }
            let home = self.home(self.entries[j].key);
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.entries[hole] = self.entries[j];
                hole = j;
            }
        }
        self.entries[hole] = EMPTY;
        Some(gone)
    }

    /// Forgets every entry.
    pub(crate) fn clear(&mut self) {
        self.entries.fill(EMPTY);
        self.len = 0;
    }

    /// Live entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A fixed-size FIFO of `(key, stamp)` records: pushing onto a full ring returns the
/// oldest record, which the owner then retires from the table (if still current).
pub(crate) struct FifoRing {
    records: Box<[(u64, u64)]>,
    next: usize,
    len: usize,
}

impl FifoRing {
    /// A ring of `capacity` records (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            records: vec![(0, 0); capacity.max(1)].into_boxed_slice(),
            next: 0,
            len: 0,
        }
    }

    /// Adds a record; returns the one it displaced when the ring was full.
    pub(crate) fn push(&mut self, record: (u64, u64)) -> Option<(u64, u64)> {
        let old = std::mem::replace(&mut self.records[self.next], record);
        self.next = (self.next + 1) % self.records.len();
        if self.len == self.records.len() {
            Some(old)
        } else {
            self.len += 1;
            None
        }
    }

    /// Forgets every record.
    pub(crate) fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_with_colliding_keys() {
        let mut t = MessageTable::new(64);
        // Multiples of a large power of two: the usual timestamp-step ids.
        let keys: Vec<u64> = (0..64).map(|k| k << 20).collect();
        for (n, &k) in keys.iter().enumerate() {
            t.insert(k, Route::Slot(n as u32), n as u64);
        }
        assert_eq!(t.len(), 64);
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), Some((Route::Slot(n as u32), n as u64)));
        }
        // Remove every other one; the rest must stay reachable.
        for &k in keys.iter().step_by(2) {
            assert!(t.remove(k).is_some());
        }
        assert_eq!(t.remove(keys[0]), None);
        for (n, &k) in keys.iter().enumerate() {
            let want = (n % 2 == 1).then_some((Route::Slot(n as u32), n as u64));
            assert_eq!(t.get(k), want, "key {k}");
        }
        assert_eq!(t.len(), 32);
        t.clear();
        assert_eq!(t.get(keys[1]), None);
    }

    #[test]
    fn churn_keeps_every_live_key_reachable() {
        // Sliding window of 100 live keys over 10 000 inserts, against a model.
        let mut t = MessageTable::new(100);
        let mut live = std::collections::VecDeque::new();
        for k in 0u64..10_000 {
            let key = k.wrapping_mul(4096) ^ (k >> 3);
            t.insert(key, Route::Dropped(DropReason::Handler), k);
            live.push_back((key, k));
            if live.len() > 100 {
                let (old, _) = live.pop_front().unwrap();
                assert!(t.remove(old).is_some());
            }
            if k % 97 == 0 {
                for &(key, stamp) in &live {
                    assert_eq!(t.get(key).map(|r| r.1), Some(stamp));
                }
            }
        }
        assert_eq!(t.len(), 100);
    }

    #[test]
    fn ring_returns_the_oldest_when_full() {
        let mut r = FifoRing::new(2);
        assert_eq!(r.push((1, 1)), None);
        assert_eq!(r.push((2, 2)), None);
        assert_eq!(r.push((3, 3)), Some((1, 1)));
        assert_eq!(r.push((4, 4)), Some((2, 2)));
        r.clear();
        assert_eq!(r.push((5, 5)), None);
    }
}
