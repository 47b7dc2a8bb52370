//! Receiving straight into heaps: the reassembler predicts where the next packets'
//! payloads go ([`Reassembler::plan`]), a host has each header received into scratch and
//! each payload there, and the reassembler then accounts every payload that landed where
//! it belongs without copying it ([`Reassembler::land`]). The host side is
//! `firehose_net::direct::DirectReceiver`; the protocol is
//! [`firehose_chunk::landing`]'s.
//!
//! Only in in-order mode (the default): there, every byte of a heap before its `extent`
//! has been accepted and none after it, so a prediction — the newest heap's next
//! packets from its extent on, and the packets of the heap expected after it, into a
//! pool slot reserved for that heap — never points at an accepted byte, and each place
//! is predicted once. A wrong guess leaves bytes where nothing was accepted; the host
//! gathers that packet and pushes it as usual.
//!
//! The guess is the stream's recent shape: header and payload lengths of a heap's first
//! packet (which carries more item pointers as spead2 sends them) and of its later ones,
//! HEAP_LENGTH, and the step between heap cnts.

use firehose_chunk::handler::PacketFacts;
use firehose_chunk::landing::{fill_plan, Cursor, Landed, Landing, LandingEngine, Shape};
use firehose_chunk::Flow;

use super::entry::Payload;
use super::{Heap, Reassembler};
use crate::wire::Packet;

/// What [`Reassembler`] emits while receiving straight into heaps: the heaps it
/// finished, and the stamp to give the heaps the next packets start.
#[derive(Debug, Default)]
pub struct Emitted {
    /// Heaps completed, evicted or flushed, in order.
    pub heaps: Vec<Heap>,
    /// Stamp remembered for heaps that start now (e.g. the receive time).
    pub stamp: Option<u64>,
}

impl Reassembler {
    /// Takes a batch of datagrams lying in a transport's memory (`packets` lists them in
    /// `data`) as [`LandingEngine::push`] takes one each, stamping heaps that start with
    /// `out.stamp`; an entry outside `data` is counted as malformed, never read.
    pub fn push_batch(
        &mut self,
        data: &[u8],
        packets: &[firehose_core::PacketInfo],
        out: &mut Emitted,
    ) {
        let stamp = out.stamp;
        let heaps = &mut out.heaps;
        for p in packets {
            match firehose_core::transport::datagram(data, p) {
                Some(d) => Reassembler::push(self, d, stamp, &mut |h| heaps.push(h)),
                None => {
                    self.counts.packets += 1;
                    self.counts.malformed += 1;
                }
            }
        }
    }

    /// Turns receiving straight into heaps on, for heaps of at most `max_heap` bytes, or
    /// off (`None`; the default, and always in out-of-order mode). Off, or for larger
    /// heaps, [`Reassembler::plan`] predicts nothing.
    pub fn set_landing(&mut self, max_heap: Option<usize>) {
        self.landing = max_heap.is_some() && !self.limits.allow_out_of_order;
        self.landing_max_heap = max_heap.unwrap_or(0);
        self.reserved = None;
    }

    /// True when [`Reassembler::plan`] may predict (landing is on).
    pub fn lands_directly(&self) -> bool {
        self.landing
    }

    /// True when landing is on and the stream's heaps, as far as seen, are no larger
    /// than it was asked for.
    pub fn heaps_fit_landing(&self) -> bool {
        self.landing && self.shape.message_len <= self.landing_max_heap
    }

    /// Heap `cnt`, if it is under construction with a known length: its memory past
    /// the bytes received (in order mode, nothing past `extent` is accepted).
    fn open_cursor(&mut self, cnt: u64) -> Option<Cursor> {
        let s = (cnt % self.subs.len() as u64) as usize;
        let i = self.subs[s].find(cnt)?;
        let e = &mut self.subs[s].entries[i];
        if e.too_large {
            return None;
        }
        let len = e.heap_length?;
        let extent = e.extent;
        let slot = e.slot.as_mut()?;
        if slot.capacity() < len {
            return None;
        }
        Some(Cursor {
            message_id: cnt,
            base: slot.as_mut_full().as_mut_ptr(),
            frontier: extent,
            len,
        })
    }

    /// The heap after `last`, in a pool slot reserved for it, if its cnt and length
    /// follow from the stream so far and it has not been seen yet.
    fn next_cursor(&mut self, last: u64, shape: &Shape) -> Option<Cursor> {
        let len = shape.message_len;
        if len == 0 || len > self.limits.max_heap_size {
            return None;
        }
        let cnt = last.checked_add(shape.step.max(1))?;
        let s = (cnt % self.subs.len() as u64) as usize;
        if self.subs[s].find(cnt).is_some() || self.subs[s].recently(cnt).is_some() {
            return None;
        }
        if self
            .reserved
            .as_ref()
            .is_none_or(|(c, slot)| *c != cnt || slot.capacity() < len)
        {
            // A slot reserved for another heap goes back first: it may have received
            // guesses, but nothing accepted.
            self.reserved = None;
            self.reserved = Some((cnt, self.pools.slot(len)?));
        }
        let (_, slot) = self.reserved.as_mut()?;
        Some(Cursor {
            message_id: cnt,
            base: slot.as_mut_full().as_mut_ptr(),
            frontier: 0,
            len,
        })
    }
}

impl LandingEngine for Reassembler {
    type Output = Emitted;

    fn expected_payload(&self) -> Option<usize> {
        self.shape.expected_payload()
    }

    fn plan(&mut self, max: usize, plan: &mut Vec<Landing>) {
        // The rest of the newest heap, then the heap expected after it.
        plan.clear();
        if !self.landing {
            return;
        }
        let shape = self.shape;
        let Some(last) = shape.last_id else {
            return;
        };
        if shape.message_len > self.landing_max_heap {
            return;
        }
        let open = self.open_cursor(last);
        // One heap ahead: its slot is the one reserved.
        fill_plan(max, plan, &shape, open, |prev| {
            (prev == last)
                .then(|| self.next_cursor(last, &shape))
                .flatten()
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
        let (p, payload_start) = Packet::parse_head(header, packet_len).ok()?;
        (payload_start == header.len()
            && p.heap_cnt == landing.message_id
            && p.payload_offset == landing.message_offset as u64
            && p.stream_ctrl.is_none())
        .then(|| PacketFacts {
            message_id: p.heap_cnt,
            payload: header.len()..packet_len,
            message_offset: landing.message_offset,
            message_len: p.heap_length.map(|l| l as usize),
        })
    }

    fn land(
        &mut self,
        header: &[u8],
        facts: &PacketFacts,
        landing: &Landing,
        out: &mut Emitted,
    ) -> Landed {
        // Cheap re-checks, so facts of another packet cannot be accounted here.
        if !self.landing || !landing.is_for(header.len(), facts) {
            return Landed::Missed;
        }
        let Ok((p, _)) = Packet::parse_head(header, facts.payload.end) else {
            return Landed::Missed;
        };
        let payload = Payload::Landed {
            at: landing.dest,
            len: facts.payload.len(),
        };
        let stamp = out.stamp;
        let heaps = &mut out.heaps;
        if !self.accept(&p, header.len(), payload, stamp, &mut |h| heaps.push(h)) {
            return Landed::Missed;
        }
        self.counts.packets += 1;
        Landed::Done(Flow::Continue)
    }

    /// The stream's end is a heap like any other here (its `stream_ctrl` says stop):
    /// the host decides what it means, so this never returns [`Flow::End`].
    fn push(&mut self, packet: &[u8], out: &mut Emitted) -> Flow {
        let stamp = out.stamp;
        let heaps = &mut out.heaps;
        Reassembler::push(self, packet, stamp, &mut |h| heaps.push(h));
        Flow::Continue
    }
}
