//! What an emitted chunk carries: [`ChunkInfo`] (plain data) and [`ChunkMeta`], the
//! buffer meta on `application/x-firehose-chunk` buffers. The chunk engine (crate
//! `firehose-chunk`) writes it; it lives here, with the other metas, so that a consumer
//! (the recorder) reads it without depending on the engine.

use std::ops::Range;

use crate::meta::message::Message;

/// Everything known about a chunk besides its bytes.
///
/// The chunk's memory is `slots × slot_size` bytes; slot `i` starts at `i × slot_size`.
/// The bytes of a slot whose presence bit is clear are undefined (they are not zeroed:
/// that would cost a second pass over memory that is mostly overwritten anyway), and so
/// are those of a present slot past its message's end, and, with per-packet presence,
/// those of a packet whose bit is clear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// The chunk's number, as the handler placed it.
    pub chunk_id: u64,
    /// Slots (messages, heaps) per chunk.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_size: usize,
    /// Presence bitmap: bit `i % 64` of word `i / 64` is set when slot `i` is present.
    pub present: Vec<u64>,
    /// Number of present slots.
    pub slots_present: usize,
    /// Packets tracked per slot for per-packet presence (0: not tracked).
    pub packets_per_slot: usize,
    /// Per-packet presence: bit `i × packets_per_slot + k` is set when packet `k` of
    /// slot `i` (the one at payload offset `k × packet_payload_size`) was written.
    pub packet_present: Vec<u64>,
    /// Packets written into the chunk.
    pub packets: u64,
    /// Payload bytes written into the chunk.
    pub bytes: u64,
}

fn bit(words: &[u64], i: usize) -> bool {
    words.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
}

impl ChunkInfo {
    /// True when slot `index` is present.
    pub fn is_present(&self, index: usize) -> bool {
        index < self.slots && bit(&self.present, index)
    }

    /// True when packet `packet` of slot `index` was written (always false when
    /// per-packet presence is off).
    pub fn is_packet_present(&self, index: usize, packet: usize) -> bool {
        index < self.slots
            && packet < self.packets_per_slot
            && bit(&self.packet_present, index * self.packets_per_slot + packet)
    }

    /// The indices of the slots that are not present, in order.
    pub fn missing(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slots).filter(|&i| !self.is_present(i))
    }

    /// True when every slot is present.
    pub fn is_complete(&self) -> bool {
        self.slots_present == self.slots
    }

    /// What the generic message meta ([`crate::meta::message`]) says of the chunk: its
    /// id, whether every slot is present, and the payload bytes written (how many a
    /// chunk should hold is the handler's to know: 0).
    pub fn message(&self) -> Message {
        Message {
            id: self.chunk_id,
            complete: self.is_complete(),
            bytes_expected: 0,
            bytes_received: self.bytes,
        }
    }

    /// The byte range of slot `index` within the chunk.
    pub fn slot_range(&self, index: usize) -> Range<usize> {
        index * self.slot_size..(index + 1) * self.slot_size
    }
}

crate::rust_meta! {
    /// The meta on `application/x-firehose-chunk` buffers: which slots of the chunk hold
    /// data.
    pub struct ChunkMeta(ChunkInfo), api = c"FirehoseChunkMetaAPI", name = c"FirehoseChunkMeta", transform = transform_chunk;
}

impl ChunkMeta {
    /// The chunk's description.
    pub fn info(&self) -> &ChunkInfo {
        self.data()
    }
}

/// Full copies keep the meta; region copies drop it (slot offsets would no longer hold).
fn transform_chunk(info: &ChunkInfo, region: Option<(usize, usize)>) -> Option<ChunkInfo> {
    match region {
        None => Some(info.clone()),
        Some(_) => None,
    }
}
