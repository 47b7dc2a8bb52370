//! Receiving straight into chunks: the engine predicts where the next packets' payloads
//! go ([`ChunkAssembler::plan`]), a host has the kernel (or a NIC) put each header into
//! scratch and each payload there, and the engine then accounts every payload that
//! landed where it belongs without copying it ([`ChunkAssembler::land`]).
//!
//! Why it is safe to guess: a prediction only ever points at chunk memory nothing has
//! been written to yet in this use of the chunk — past the furthest payload of an open
//! message, into a slot no message holds, or into a pool slot reserved for the next
//! chunk — and each place is predicted for one (message, offset) only. A wrong guess
//! therefore overwrites no accepted byte; it leaves bytes in a place whose presence is
//! clear (undefined, as the [`super::ChunkMeta`] says), and the host gathers that
//! packet and hands it to [`ChunkAssembler::push`] like any other.
//!
//! The guess is the stream's recent shape: the message of the last packet continues
//! with payloads as long as its last full ones, and the next message is the last one's
//! id plus the step seen between messages, placed where
//! [`crate::handler::PacketHandler::predict_placement`] says. Header and payload lengths
//! are learnt apart for a message's first packet, which often carries more items (as
//! spead2 sends them).

use crate::handler::{PacketFacts, Placement};
use crate::landing::{fill_plan, Cursor, Landed, Landing, LandingEngine, Shape};

use super::table::Route;
use super::{ChunkAssembler, FinishedChunk, Flow, SlotStatus};

impl ChunkAssembler {
    /// True when payloads are received straight into chunks: the handler allows it
    /// ([`ChunkAssembler::can_land`]) and it is on — by default for chunks of at most
    /// [`super::LANDING_MAX_CHUNK_BYTES`], see [`ChunkAssembler::set_landing`].
    pub fn lands_directly(&self) -> bool {
        self.direct
    }

    /// True when the handler lets payloads be received straight into chunks
    /// ([`crate::handler::PacketHandler::parses_header_alone`] and
    /// [`crate::handler::PacketHandler::copies_payload_unchanged`]).
    pub fn can_land(&self) -> bool {
        self.can_land
    }

    /// Turns receiving straight into chunks on or off (on only if the handler allows
    /// it), overriding the default by chunk size. Off, [`ChunkAssembler::plan`] predicts
    /// nothing and every packet is pushed.
    pub fn set_landing(&mut self, on: bool) {
        self.direct = on && self.can_land;
        self.reserved = None;
    }

    /// The open message `id`'s slot, if it is still being received.
    fn open_cursor(&mut self, id: u64) -> Option<Cursor> {
        let Some((Route::Slot(pos), _)) = self.table.get(id) else {
            return None;
        };
        let pos = pos as usize;
        let st = self.states[pos];
        if st.status != SlotStatus::Open || st.message_id != id {
            return None;
        }
        let spc = self.cfg.slots_per_chunk;
        let slot = self.window[pos / spc].as_mut()?.slot.as_mut()?;
        let base = slot
            .as_mut_full()
            .as_mut_ptr()
            .wrapping_add((pos % spc) * self.cfg.slot_size);
        Some(Cursor {
            message_id: id,
            base,
            frontier: st.end,
            len: st.len?,
        })
    }

    /// The message after `prev`, if its placement follows from its id and its slot is
    /// free memory.
    fn next_cursor(&mut self, prev: u64, shape: &Shape) -> Option<Cursor> {
        if shape.message_len == 0 || shape.message_len > self.cfg.slot_size {
            return None;
        }
        // One message seen so far: guess the next id is one more.
        let id = prev.checked_add(shape.step.max(1))?;
        let Some(Placement::Place { chunk_id, index }) = self.handler.predict_placement(id) else {
            return None;
        };
        if index >= self.cfg.slots_per_chunk || self.table.get(id).is_some() {
            return None;
        }
        let chunk = self.free_chunk_memory(chunk_id, index)?;
        Some(Cursor {
            message_id: id,
            base: chunk.wrapping_add(index * self.cfg.slot_size),
            frontier: 0,
            len: shape.message_len,
        })
    }

    /// The memory of chunk `chunk_id` when its slot `index` is unwritten: an open chunk
    /// whose slot no message holds yet, or the chunk after the newest, in a pool slot
    /// taken ahead for it.
    fn free_chunk_memory(&mut self, chunk_id: u64, index: usize) -> Option<*mut u8> {
        let head = self.head?;
        let max = self.cfg.max_chunks as u64;
        if chunk_id <= head {
            if head - chunk_id >= max {
                return None;
            }
            let w = (chunk_id % max) as usize;
            let spc = self.cfg.slots_per_chunk;
            if self.states[w * spc + index].status != SlotStatus::Empty {
                return None;
            }
            let open = self.window[w].as_mut()?;
            if open.id != chunk_id || open.emitted {
                return None;
            }
            return Some(open.slot.as_mut()?.as_mut_full().as_mut_ptr());
        }
        if chunk_id != head + 1 {
            return None;
        }
        if self.reserved.as_ref().is_none_or(|(id, _)| *id != chunk_id) {
            // A slot reserved for another chunk goes back first: it may have received
            // guesses, but nothing accepted.
            self.reserved = None;
            self.reserved = Some((chunk_id, self.pool.try_acquire()?));
        }
        let (_, slot) = self.reserved.as_mut()?;
        Some(slot.as_mut_full().as_mut_ptr())
    }
}

impl LandingEngine for ChunkAssembler {
    type Output = Vec<FinishedChunk>;

    fn expected_payload(&self) -> Option<usize> {
        self.shape.expected_payload()
    }

    fn plan(&mut self, max: usize, plan: &mut Vec<Landing>) {
        plan.clear();
        if !self.direct || self.ended {
            return;
        }
        let shape = self.shape;
        let Some(last) = shape.last_id else {
            return;
        };
        let open = self.open_cursor(last);
        fill_plan(max, plan, &shape, open, |prev| {
            self.next_cursor(prev, &shape)
        });
    }

    fn predicted(
        &mut self,
        header: &[u8],
        packet_len: usize,
        landing: &Landing,
    ) -> Option<PacketFacts> {
        if !landing.fits(header.len(), packet_len) {
            return None;
        }
        let facts = self.handler.parse_header(header, packet_len)?;
        (facts.message_id == landing.message_id
            && facts.message_offset == landing.message_offset
            && facts.payload == (header.len()..packet_len))
            .then_some(facts)
    }

    fn land(
        &mut self,
        header: &[u8],
        facts: &PacketFacts,
        landing: &Landing,
        out: &mut Vec<FinishedChunk>,
    ) -> Landed {
        if self.ended {
            self.stats.drops_handler += 1;
            return Landed::Done(Flow::End);
        }
        // Cheap re-checks, so facts of another packet cannot be accounted here.
        if !self.direct || !landing.is_for(header.len(), facts) {
            return Landed::Missed;
        }
        let pos = match self.route(header, facts, out) {
            Ok(pos) => pos,
            Err(flow) => return Landed::Done(flow),
        };
        let Some(t) = self.check(pos, facts) else {
            return Landed::Done(Flow::Continue);
        };
        let spc = self.cfg.slots_per_chunk;
        let Some(slot) = self.window[pos / spc]
            .as_mut()
            .and_then(|c| c.slot.as_mut())
        else {
            return Landed::Missed;
        };
        if slot.as_mut_full().as_mut_ptr().wrapping_add(t.at) != landing.dest {
            return Landed::Missed;
        }
        self.account(pos, facts, &t, out);
        Landed::Done(Flow::Continue)
    }

    fn push(&mut self, packet: &[u8], out: &mut Vec<FinishedChunk>) -> Flow {
        ChunkAssembler::push(self, packet, out)
    }
}
