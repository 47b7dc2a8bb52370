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

firehose_core::counts! {
    /// The engine's counters (shared names in [`firehose_core::stats::names`]), declared
    /// once: the struct, the names in `stats` and the list in the `stats` blurb.
    pub struct ChunkStats {
        /// Packets written into chunks.
        packets: names::PACKETS,
        /// Payload bytes written into chunks.
        bytes: names::BYTES,
        /// Chunks emitted.
        chunks: names::CHUNKS,
        /// Chunks emitted with at least one slot absent.
        chunks_incomplete: names::CHUNKS_INCOMPLETE,
        /// Messages that completed.
        heaps: names::HEAPS,
        /// Messages that ended incomplete (evicted with their chunk, or by `max_messages`).
        heaps_incomplete: names::HEAPS_INCOMPLETE,
        /// Packets that did not parse, were placed outside the chunk or the slot, or
        /// collided with another message's slot.
        malformed: names::MALFORMED,
        /// Packets for chunks that had left the window, or for messages already ended
        /// incomplete.
        too_old: names::TOO_OLD,
        /// Packets of messages that were already complete.
        duplicated: names::DUPLICATED,
        /// Packets of messages the handler dropped.
        drops_handler: names::DROPS_HANDLER,
        /// Packets dropped because their chunk got no pool slot.
        drops_pool: names::DROPS_POOL,
        /// Times the window started again elsewhere: a window's worth of messages in a
        /// row were too old (the sender restarted its counter), or a window no message
        /// had completed in (or a quiet one) saw the stream's messages elsewhere.
        resyncs: names::RESYNCS,
        /// Packets of messages whose chunk lay beyond the whole window, dropped until
        /// enough messages in a row confirmed the jump (a lying or random chunk id must
        /// not end every open chunk).
        too_far: names::TOO_FAR,
    }
}

impl ChunkStats {
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
