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

use crate::chunk::Flow;
use crate::handler::PacketFacts;

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
