//! A chunk that has left the engine's window, and how it becomes a buffer.

use firehose_core::gstmem::slot_into_buffer;
use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::meta::{message, readable};
use firehose_core::pool::Slot;

/// A chunk that has left the window: its pool slot (holding `slots × slot_size` valid
/// bytes) and its description.
pub struct FinishedChunk {
    /// The chunk memory; returns to its pool when dropped.
    pub slot: Slot,
    /// What is in it.
    pub info: ChunkInfo,
    /// The caller's clock value when the chunk was opened (see
    /// [`crate::ChunkAssembler::set_clock`]), e.g. a running time in nanoseconds.
    pub opened_at: Option<u64>,
    /// Payload bytes written into each slot (for the readable meta; the Rust meta has
    /// presence only).
    pub slot_bytes: Vec<u64>,
}

impl FinishedChunk {
    /// The chunk as a buffer: the whole slot as its one memory (no copy), a
    /// [`ChunkMeta`] and a message meta ([`ChunkInfo::message`]), and `opened_at` as the
    /// PTS (nanoseconds); with `readable` (the `readable-metas` property), also the
    /// chunk meta every language reads ([`firehose_core::meta::readable`]).
    pub fn into_buffer(self, readable: bool) -> gst::Buffer {
        let mut buf = slot_into_buffer(self.slot);
        let b = buf.get_mut().expect("a new buffer is writable");
        b.set_pts(self.opened_at.map(gst::ClockTime::from_nseconds));
        message::add(b, &self.info.message());
        if readable {
            readable::add_chunk(b, &self.info, &self.slot_bytes);
        }
        ChunkMeta::add(b, self.info);
        buf
    }
}

impl std::fmt::Debug for FinishedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinishedChunk")
            .field("info", &self.info)
            .field("opened_at", &self.opened_at)
            .finish_non_exhaustive()
    }
}
