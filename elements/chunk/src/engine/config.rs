//! The engine's configuration, its per-packet verdict and its counters.

use super::table::DropReason;
use firehose_core::pool::PoolConfig;
use firehose_core::stats::names;
use firehose_core::HugepagePolicy;

/// How chunks are laid out and how much is kept in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Slots (messages, heaps) per chunk: spead2's `heaps_per_chunk`.
    pub slots_per_chunk: usize,
    /// Bytes per slot: the largest message (spead2's maximum heap size).
    pub slot_size: usize,
    /// Chunks open at once (the window): spead2's `max_chunks`.
    pub max_chunks: usize,
    /// Messages assembled at once; placing one more ends the oldest, incomplete
    /// (spead2's `max_heaps`). Also bounds the remembered dropped messages.
    pub max_messages: usize,
    /// Per-packet presence: the payload bytes of each packet; packet `k` of a message is
    /// the one at offset `k × packet_payload_size` (0: off). As spead2's
    /// `packet_presence_payload_size`.
    pub packet_payload_size: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            slots_per_chunk: 64,
            slot_size: 8192,
            max_chunks: 4,
            max_messages: 32,
            packet_payload_size: 0,
        }
    }
}

impl ChunkConfig {
    /// Bytes of one chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.slots_per_chunk * self.slot_size
    }

    /// Packets tracked per slot (0 when per-packet presence is off).
    pub fn packets_per_slot(&self) -> usize {
        match self.packet_payload_size {
            0 => 0,
            p => self.slot_size.div_ceil(p),
        }
    }

    /// Checks the numbers; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.slots_per_chunk == 0 || self.slot_size == 0 {
            return Err("slots-per-chunk and slot-size must be at least 1".into());
        }
        if self.max_chunks == 0 || self.max_messages == 0 {
            return Err("max-chunks and max-messages must be at least 1".into());
        }
        let bytes = self.slots_per_chunk.checked_mul(self.slot_size);
        if bytes.is_none_or(|b| b > isize::MAX as usize / 2) {
            return Err(format!(
                "a chunk of {} slots × {} bytes is too large",
                self.slots_per_chunk, self.slot_size
            ));
        }
        if u32::try_from(self.slots_per_chunk * self.max_chunks).is_err() {
            return Err("slots-per-chunk × max-chunks must be below 2^32".into());
        }
        Ok(())
    }

    /// The pool for these chunks: `chunks` slots of one chunk each.
    pub fn pool_config(&self, chunks: usize, hugepages: HugepagePolicy) -> PoolConfig {
        PoolConfig {
            slot_size: self.chunk_bytes(),
            slots: chunks,
            hugepages,
        }
    }
}

/// What the host should do after a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// The handler ended the stream ([`crate::handler::Placement::End`]): every open chunk has been
    /// emitted; send EOS. Later packets are dropped (`drops-handler`, as is the ending
    /// packet itself) until [`super::ChunkAssembler::reset`].
    End,
}

/// The engine's counters (shared names in [`firehose_core::stats::names`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkStats {
    /// Packets written into chunks.
    pub packets: u64,
    /// Payload bytes written into chunks.
    pub bytes: u64,
    /// Chunks emitted.
    pub chunks: u64,
    /// Chunks emitted with at least one slot absent.
    pub chunks_incomplete: u64,
    /// Messages that completed.
    pub heaps: u64,
    /// Messages that ended incomplete (evicted with their chunk, or by `max_messages`).
    pub heaps_incomplete: u64,
    /// Times the window started again elsewhere: a window's worth of messages in a row
    /// were too old (the sender restarted its counter), or a window no message had
    /// completed in (or a quiet one) saw the stream's messages elsewhere.
    pub resyncs: u64,
    /// Packets that did not parse, were placed outside the chunk or the slot, or collided
    /// with another message's slot.
    pub malformed: u64,
    /// Packets for chunks that had left the window, or for messages already ended
    /// incomplete.
    pub too_old: u64,
    /// Packets of messages that were already complete.
    pub duplicated: u64,
    /// Packets of messages the handler dropped.
    pub drops_handler: u64,
    /// Packets dropped because their chunk got no pool slot.
    pub drops_pool: u64,
    /// Packets of messages whose chunk lay beyond the whole window, dropped until
    /// enough messages in a row confirmed the jump (a lying or random chunk id must not
    /// end every open chunk).
    pub too_far: u64,
}

impl ChunkStats {
    /// How many counters [`ChunkStats::fields`] gives.
    pub const COUNT: usize = 13;

    /// The counters as `(name, value)` pairs, for [`firehose_core::stats::structure`].
    pub fn fields(&self) -> [(&'static str, u64); Self::COUNT] {
        [
            (names::PACKETS, self.packets),
            (names::BYTES, self.bytes),
            (names::CHUNKS, self.chunks),
            (names::CHUNKS_INCOMPLETE, self.chunks_incomplete),
            (names::HEAPS, self.heaps),
            (names::HEAPS_INCOMPLETE, self.heaps_incomplete),
            (names::MALFORMED, self.malformed),
            (names::TOO_OLD, self.too_old),
            (names::DUPLICATED, self.duplicated),
            (names::DROPS_HANDLER, self.drops_handler),
            (names::DROPS_POOL, self.drops_pool),
            (names::RESYNCS, self.resyncs),
            (names::TOO_FAR, self.too_far),
        ]
    }

    /// Packets seen: those written plus every drop counter.
    pub fn packets_seen(&self) -> u64 {
        self.packets
            + self.malformed
            + self.too_old
            + self.duplicated
            + self.drops_handler
            + self.drops_pool
            + self.too_far
    }

    pub(super) fn count(&mut self, reason: DropReason) {
        match reason {
            DropReason::Malformed => self.malformed += 1,
            DropReason::TooOld => self.too_old += 1,
            DropReason::Handler => self.drops_handler += 1,
            DropReason::Pool => self.drops_pool += 1,
            DropReason::Duplicated => self.duplicated += 1,
            DropReason::TooFar => self.too_far += 1,
        }
    }
}
