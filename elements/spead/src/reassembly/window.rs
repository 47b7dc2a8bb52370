//! A window of heaps under construction, and the heaps that recently left it.

use super::entry::Entry;

/// One window, and the heaps that recently left it.
pub(crate) struct Substream {
    pub entries: Vec<Entry>,
    /// (heap cnt, completed) of heaps that recently left the window, as a ring.
    recent: Vec<(u64, bool)>,
    recent_next: usize,
}

impl Substream {
    pub fn new(max_heaps: usize) -> Self {
        Self {
            entries: (0..max_heaps).map(|_| Entry::default()).collect(),
            recent: Vec::with_capacity(Self::recent_len(max_heaps)),
            recent_next: 0,
        }
    }

    /// Heaps remembered after they leave: late packets arrive within a few windows.
    fn recent_len(max_heaps: usize) -> usize {
        (2 * max_heaps).max(8)
    }

    pub fn find(&self, cnt: u64) -> Option<usize> {
        self.entries.iter().position(|e| e.active && e.cnt == cnt)
    }

    pub fn remember(&mut self, cnt: u64, completed: bool) {
        let n = Self::recent_len(self.entries.len());
        if self.recent.len() < n {
            self.recent.push((cnt, completed));
        } else {
            self.recent[self.recent_next] = (cnt, completed);
        }
        self.recent_next = (self.recent_next + 1) % n;
    }

    pub fn recently(&self, cnt: u64) -> Option<bool> {
        self.recent.iter().find(|r| r.0 == cnt).map(|r| r.1)
    }

    pub fn forget(&mut self) {
        self.recent.clear();
        self.recent_next = 0;
    }
}
