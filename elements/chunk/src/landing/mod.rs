//! Receiving straight into an engine's memory: what a host (a receive path that can
//! scatter each datagram, such as `recvmmsg` with an iovec list) and an engine (the chunk
//! assembler, the SPEAD heap reassembler) say to each other.
//!
//! The engine predicts where the next packets' payloads belong ([`LandingEngine::plan`]);
//! the host has each expected packet's header received into scratch and its payload
//! there; then, before anything is written, it asks the engine which packets are the
//! predicted ones ([`LandingEngine::predicted`]), gathers every other packet that touched
//! engine memory into scratch of its own, and finally, in arrival order, has the engine
//! account each landed packet without a copy ([`LandingEngine::land`]) and take every
//! other one as usual ([`LandingEngine::push`]).
//!
//! What keeps a wrong guess harmless is the engine's promise: a prediction only points
//! at memory where nothing accepted lives, and each place is predicted once. The host's
//! part is the order above.
//!
//! Everything landing shares lives in this module: the protocol ([`Landing`],
//! [`Landed`], [`LandingEngine`]); the prediction helpers every engine builds its plan
//! with ([`Shape`], [`Cursor`], [`fill_plan`]); when landing pays and the `landing`
//! property that chooses it ([`Mode`], [`LANDING_MAX_CHUNK_BYTES`],
//! [`LANDING_MIN_PAYLOAD_BYTES`]); and a host without a socket for tests
//! ([`receive_simulated`]). What each engine predicts stays with it (the chunk engine's
//! `engine/landing.rs`, the SPEAD reassembler's `reassembly/landing.rs`); the kernel UDP
//! host is `firehose_net::direct::DirectReceiver`.

use crate::handler::PacketFacts;
use crate::Flow;

mod plan;
mod policy;
mod simulate;

pub use plan::{fill_plan, Cursor, Shape};
pub use policy::{Mode, LANDING_MAX_CHUNK_BYTES, LANDING_MIN_PAYLOAD_BYTES};
pub use simulate::receive_simulated;

/// Headers longer than this are not predicted (scratch stays small and fixed).
pub const MAX_HEADER: usize = 256;

/// Where a host should have one expected packet received: its first
/// [`Landing::header_len`] bytes into scratch, the next [`Landing::len`] at
/// [`Landing::dest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landing {
    /// Bytes expected before the payload.
    pub header_len: usize,
    /// Where the payload belongs, in memory owned by the engine (valid until the engine
    /// next takes a packet, emits, flushes or resets).
    pub dest: *mut u8,
    /// Payload bytes expected; a shorter payload (a message's last packet) still lands.
    pub len: usize,
    /// Shorter than the stream's full packets (a message's last): UDP GRO ends a
    /// coalesced message after such a datagram.
    pub short: bool,
    /// The message (chunk slot's message, heap) the packet is expected to belong to.
    pub message_id: u64,
    /// Where its payload is expected to start within that message.
    pub message_offset: usize,
}

impl Landing {
    /// True when a packet of `packet_len` bytes whose header was received into `header_len`
    /// bytes of scratch has the lengths this landing expects: the header's, and a payload
    /// of 1 to [`Landing::len`] bytes.
    pub fn fits(&self, header_len: usize, packet_len: usize) -> bool {
        header_len == self.header_len
            && packet_len > header_len
            && packet_len - header_len <= self.len
    }

    /// True when `facts` (of a packet whose header is `header_len` bytes) are this
    /// landing's packet: the cheap re-check of [`LandingEngine::land`], so that facts of
    /// another packet cannot be accounted at this landing.
    pub fn is_for(&self, header_len: usize, facts: &PacketFacts) -> bool {
        facts.payload.start == header_len
            && facts.message_id == self.message_id
            && facts.message_offset == self.message_offset
            && facts.payload.len() <= self.len
    }
}

/// What [`LandingEngine::land`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landed {
    /// Accounted: in place without a copy, or dropped and counted. What to do next.
    Done(Flow),
    /// Not where it was predicted: gather the packet and [`LandingEngine::push`] it.
    Missed,
}

/// An engine packets can be received straight into (see the module documentation).
pub trait LandingEngine {
    /// Where the engine puts what it finishes (chunks, heaps).
    type Output;

    /// The payload length of the stream's full packets as seen so far, if any: a host
    /// may judge from it whether landing is worth its cost.
    fn expected_payload(&self) -> Option<usize>;

    /// Predicts where up to `max` next packets go, in arrival order, into `plan`
    /// (cleared first); it may stop early where it cannot guess.
    fn plan(&mut self, max: usize, plan: &mut Vec<Landing>);

    /// The facts of the packet whose first `header.len()` bytes are `header` and whose
    /// length is `packet_len`, when it is the one `landing` predicted; `None` otherwise.
    /// Changes nothing: a host asks it of every packet of a receive before it lands or
    /// pushes any.
    fn predicted(
        &mut self,
        header: &[u8],
        packet_len: usize,
        landing: &Landing,
    ) -> Option<PacketFacts>;

    /// Accounts a packet whose header is `header` (scratch), whose facts
    /// [`LandingEngine::predicted`] gave for `landing`, and whose payload the receive put
    /// at `landing.dest`: with no copy if it belongs there, dropped and counted where
    /// [`LandingEngine::push`] would drop it, [`Landed::Missed`] (nothing changed)
    /// otherwise.
    fn land(
        &mut self,
        header: &[u8],
        facts: &PacketFacts,
        landing: &Landing,
        out: &mut Self::Output,
    ) -> Landed;

    /// Takes one whole packet the usual way (a copy of its payload).
    fn push(&mut self, packet: &[u8], out: &mut Self::Output) -> Flow;
}
