//! A pool slot filled by successive batches, each handed out as its own `gst::Memory`.
//!
//! A receive slab must be large enough for a full batch of maximum-size (e.g. 64 KiB GRO)
//! datagrams, but at moderate rates one `recvmmsg` returns a few small datagrams. Giving
//! each such batch a whole slot would let a short downstream queue exhaust the pool while
//! holding almost no data. An arena keeps filling the same slot: each committed batch
//! becomes a memory over a disjoint byte range, and the slot returns to its pool when the
//! arena and every memory cut from it are gone.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::Arc;

use crate::pool::Slot;

/// Commits are rounded up to this, so every memory starts cache-line aligned.
const ALIGN: usize = 64;

pub(crate) struct Cell(UnsafeCell<Slot>);

// SAFETY: the slot's bytes are only ever accessed through disjoint ranges: the arena
// writes only past `filled`, and each piece owns the range it was committed with.
unsafe impl Sync for Cell {}
// SAFETY: Slot is Send.
unsafe impl Send for Cell {}

impl Cell {
    fn base(&self) -> *mut u8 {
        // SAFETY: as_mut_full only computes the slot's address; callers restrict
        // themselves to their own disjoint ranges.
        unsafe { (*self.0.get()).as_mut_full().as_mut_ptr() }
    }
}

/// The filling end of a slot.
pub struct SlotArena {
    cell: Arc<Cell>,
    capacity: usize,
    filled: usize,
}

impl SlotArena {
    /// Starts filling `slot` from its beginning.
    pub fn new(slot: Slot) -> Self {
        let capacity = slot.capacity();
        Self {
            cell: Arc::new(Cell(UnsafeCell::new(slot))),
            capacity,
            filled: 0,
        }
    }

    /// The slot's size in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes not yet committed.
    pub fn remaining(&self) -> usize {
        self.capacity - self.filled
    }

    /// The uncommitted bytes, to receive into.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: [filled, capacity) has not been committed to any piece, and `&mut self`
        // makes this the only writer.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.cell.base().add(self.filled),
                self.capacity - self.filled,
            )
        }
    }

    /// Hands out the first `len` spare bytes as a memory of their own.
    pub fn commit(&mut self, len: usize) -> gst::Memory {
        let len = len.min(self.remaining());
        let range = self.filled..self.filled + len;
        self.filled = (self.filled + len)
            .next_multiple_of(ALIGN)
            .min(self.capacity);
        PoolBytes::Piece {
            cell: self.cell.clone(),
            range,
        }
        .into_memory()
    }
}

/// Pool memory as the bytes of a `gst::Memory`: a whole slot, or a committed range of an
/// arena's slot. The one way pool memory becomes a `GstMemory`
/// ([`PoolBytes::into_memory`]); a whole slot costs no more than the slot itself.
pub(crate) enum PoolBytes {
    /// A whole slot (its first `len()` bytes).
    Whole(Slot),
    /// A committed range of an arena's slot.
    Piece {
        cell: Arc<Cell>,
        range: Range<usize>,
    },
}

impl PoolBytes {
    /// Wraps the bytes as a writable `gst::Memory`, no copy: the slot returns to its pool
    /// when the last memory over it (sub-memories included) is dropped.
    pub(crate) fn into_memory(self) -> gst::Memory {
        gst::Memory::from_mut_slice(self)
    }
}

impl AsRef<[u8]> for PoolBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            PoolBytes::Whole(slot) => slot.as_ref(),
            // SAFETY: the range was committed to this piece alone and lies within the slot.
            PoolBytes::Piece { cell, range } => unsafe {
                std::slice::from_raw_parts(cell.base().add(range.start), range.len())
            },
        }
    }
}

impl AsMut<[u8]> for PoolBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            PoolBytes::Whole(slot) => slot.as_mut(),
            // SAFETY: as above; `&mut self` is the only access to this range.
            PoolBytes::Piece { cell, range } => unsafe {
                std::slice::from_raw_parts_mut(cell.base().add(range.start), range.len())
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HugepagePolicy, PoolConfig, SlotPool};

    #[test]
    fn pieces_are_disjoint_and_the_slot_returns_after_the_last() {
        gst::init().unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 4096,
            slots: 1,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut a = SlotArena::new(pool.try_acquire().unwrap());
        a.spare_mut()[..3].copy_from_slice(b"one");
        let m1 = a.commit(3);
        assert_eq!(a.remaining(), 4096 - 64);
        a.spare_mut()[..3].copy_from_slice(b"two");
        let m2 = a.commit(3);
        assert_eq!(m1.map_readable().unwrap().as_slice(), b"one");
        assert_eq!(m2.map_readable().unwrap().as_slice(), b"two");
        assert_eq!(
            crate::gstmem::memory_kind(&m2),
            Some(crate::MemoryKind::System)
        );
        drop(a);
        drop(m1);
        assert_eq!(pool.stats().in_use, 1);
        drop(m2);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn commit_is_clamped_to_capacity() {
        gst::init().unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 128,
            slots: 1,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut a = SlotArena::new(pool.try_acquire().unwrap());
        let m = a.commit(1000);
        assert_eq!(m.size(), 128);
        assert_eq!(a.remaining(), 0);
    }
}
