//! Pool slots as `gst::Memory`, without a copy, and the kind of memory behind a buffer.
//!
//! One path wraps pool memory as `GstMemory` (`arena::PoolBytes`): a whole slot here, a
//! committed range of a slot in [`crate::arena::SlotArena::commit`].

use crate::arena::PoolBytes;
use crate::memory::{kind_of_ptr, MemoryKind};
use crate::pool::Slot;

/// Wraps `slot` (its first `slot.len()` bytes) as a writable `gst::Memory`.
///
/// No byte is copied. The slot goes back to its pool when the last reference to the
/// memory is dropped, sub-memories (`share`, buffer lists cut from it) included, since
/// they keep their parent alive.
pub fn slot_into_memory(slot: Slot) -> gst::Memory {
    PoolBytes::Whole(slot).into_memory()
}

/// Wraps `slot` as the only memory of a new buffer.
pub fn slot_into_buffer(slot: Slot) -> gst::Buffer {
    let mut buf = gst::Buffer::new();
    buf.get_mut()
        .expect("a new buffer is writable")
        .append_memory(slot_into_memory(slot));
    buf
}

/// The kind of Firehose pool memory `mem` points into, or `None` for memory that did
/// not come from a Firehose pool (or whose pool is gone).
pub fn memory_kind(mem: &gst::MemoryRef) -> Option<MemoryKind> {
    let map = mem.map_readable().ok()?;
    kind_of_ptr(map.as_ptr())
}

/// The kind of the first memory of `buf` (see [`memory_kind`]).
pub fn buffer_memory_kind(buf: &gst::BufferRef) -> Option<MemoryKind> {
    if buf.n_memory() == 0 {
        return None;
    }
    memory_kind(buf.peek_memory(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HugepagePolicy, PoolConfig, SlotPool};

    fn pool() -> SlotPool {
        gst::init().unwrap();
        SlotPool::new(&PoolConfig {
            slot_size: 4096,
            slots: 2,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap()
    }

    #[test]
    fn memory_shares_the_slot_bytes_and_returns_it() {
        let p = pool();
        let mut s = p.try_acquire().unwrap();
        let ptr = s.as_mut_full().as_ptr();
        s.as_mut_full()[..4].copy_from_slice(b"abcd");
        s.set_len(4);
        let mem = slot_into_memory(s);
        {
            let map = mem.map_readable().unwrap();
            assert_eq!(map.as_slice(), b"abcd");
            assert_eq!(map.as_ptr(), ptr, "no copy was made");
        }
        assert_eq!(memory_kind(&mem), Some(MemoryKind::System));
        assert_eq!(p.stats().in_use, 1);
        drop(mem);
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn sub_memories_keep_the_slot_until_the_last_drops() {
        let p = pool();
        let mut s = p.try_acquire().unwrap();
        s.as_mut_full()[..8].copy_from_slice(b"01234567");
        s.set_len(8);
        let buf = slot_into_buffer(s);
        let sub = buf.peek_memory(0).share(2..5);
        let sub_buf = buf.copy_region(gst::BufferCopyFlags::MEMORY, 4..8).unwrap();
        drop(buf);
        assert_eq!(p.stats().in_use, 1);
        assert_eq!(sub.map_readable().unwrap().as_slice(), b"234");
        assert_eq!(memory_kind(&sub), Some(MemoryKind::System));
        drop(sub);
        assert_eq!(p.stats().in_use, 1);
        assert_eq!(sub_buf.map_readable().unwrap().as_slice(), b"4567");
        drop(sub_buf);
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn foreign_memory_has_no_kind() {
        gst::init().unwrap();
        let buf = gst::Buffer::from_slice(vec![1u8; 16]);
        assert_eq!(buffer_memory_kind(&buf), None);
    }
}
