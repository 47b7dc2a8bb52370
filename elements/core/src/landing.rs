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

/// What a stream looked like so far: what an engine guesses its next packets from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shape {
    /// The message of the last packet accounted.
    pub last_id: Option<u64>,
    /// Id increment from one message to the next (0: not seen yet, guessed 1).
    pub step: u64,
    /// Length of the last message that said it.
    pub message_len: usize,
    /// Header and payload lengths of a message's first packet and of later full ones
    /// (0: not seen yet).
    pub first: (usize, usize),
    /// See `first`.
    pub next: (usize, usize),
}

impl Shape {
    /// Learns from a packet just accounted: message `id`, its payload of `payload_len`
    /// bytes at `offset` in the message after a header of `header_len` bytes, and the
    /// message's length if the packet says it.
    pub fn learn(
        &mut self,
        id: u64,
        offset: usize,
        header_len: usize,
        payload_len: usize,
        message_len: Option<usize>,
    ) {
        match self.last_id {
            Some(last) if id > last => self.step = id - last,
            _ => {}
        }
        self.last_id = Some(id);
        let lengths = (header_len, payload_len);
        let end = offset + payload_len;
        if let Some(l) = message_len {
            self.message_len = l;
        }
        if offset == 0 {
            self.first = lengths;
        } else if message_len.is_some_and(|l| end < l) {
            // Only a message's full packets say how long the next ones are: its last
            // is usually shorter.
            self.next = lengths;
        }
    }

    /// The payload length of the stream's full packets as seen so far (those of a
    /// message's first packet until a later one has been seen), if any.
    pub fn expected_payload(&self) -> Option<usize> {
        let (_, next) = self.next;
        let (_, first) = self.first;
        [next, first].into_iter().find(|&n| n > 0)
    }
}

/// Where an engine's next prediction goes: a message's memory, and how far the message
/// is received or predicted.
#[derive(Clone, Copy, Debug)]
pub struct Cursor {
    /// The message.
    pub message_id: u64,
    /// Start of its memory.
    pub base: *mut u8,
    /// Bytes of it received or predicted so far.
    pub frontier: usize,
    /// Its length.
    pub len: usize,
}

/// Fills `plan` with up to `max` landings: the rest of `open` (the message being
/// received, if any), then the messages `next` gives, each asked for with the id of the
/// one before (the stream's last message first); every packet guessed from `shape`.
/// Stops where nothing can be guessed.
pub fn fill_plan(
    max: usize,
    plan: &mut Vec<Landing>,
    shape: &Shape,
    open: Option<Cursor>,
    mut next: impl FnMut(u64) -> Option<Cursor>,
) {
    let Some(last) = shape.last_id else {
        return;
    };
    let mut cur = open;
    while plan.len() < max {
        let c = match cur {
            Some(c) if c.frontier < c.len => c,
            _ => match next(cur.map_or(last, |c| c.message_id)) {
                Some(c) => c,
                None => break,
            },
        };
        let Some(l) = next_landing(shape, c) else {
            break;
        };
        plan.push(l);
        cur = Some(Cursor {
            frontier: c.frontier + l.len,
            ..c
        });
    }
}

/// The landing of the packet at `c`'s frontier, guessed from the (header, payload)
/// lengths `shape` learnt for a message's first packet and for its later full ones.
/// `None` where nothing can be guessed, or the message is full.
fn next_landing(shape: &Shape, c: Cursor) -> Option<Landing> {
    let Cursor {
        message_id,
        base,
        frontier,
        len,
    } = c;
    // Until both kinds of packet have been seen, guess one like the other.
    let (header_len, payload) = match (frontier == 0, shape.first, shape.next) {
        (true, (0, _), next) => next,
        (true, first, _) => first,
        (false, first, (0, _)) => first,
        (false, _, next) => next,
    };
    if header_len == 0 || header_len > MAX_HEADER || payload == 0 || frontier >= len {
        return None;
    }
    let n = payload.min(len - frontier);
    Some(Landing {
        header_len,
        // In bounds: frontier < len, which the caller's memory holds.
        dest: base.wrapping_add(frontier),
        len: n,
        short: n < payload,
        message_id,
        message_offset: frontier,
    })
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

/// A host without a socket, for testing engines: what `firehose_net::direct`'s receive
/// does with one `recvmmsg` of `packets` (one datagram per message, no GRO), with plain
/// copies standing in for the kernel's scatter list. Plans for the batch, "receives" each
/// expected packet's header into scratch and its payload at its landing, reads every other
/// packet back first, then lands or pushes each in order. Returns how many landed.
pub fn receive_simulated<E: LandingEngine>(
    engine: &mut E,
    packets: &[Vec<u8>],
    plan: &mut Vec<Landing>,
    out: &mut E::Output,
) -> usize {
    /// A packet as the "kernel" left it: header, what went to its landing, the rest.
    struct Received {
        head: Vec<u8>,
        landing: Option<(Landing, usize)>,
        rest: Vec<u8>,
    }
    /// The landed bytes of `r`.
    fn landed(r: &Received) -> &[u8] {
        match r.landing {
            // SAFETY: a landing points at `l.len >= n` bytes of the engine's memory,
            // which it keeps until it next takes a packet (the trait's contract); the
            // engine has taken none since these were written.
            Some((l, n)) => unsafe { std::slice::from_raw_parts(l.dest, n) },
            None => &[],
        }
    }
    engine.plan(packets.len(), plan);
    let received: Vec<Received> = packets
        .iter()
        .enumerate()
        .map(|(k, p)| match plan.get(k) {
            Some(l) => {
                let h = l.header_len.min(p.len());
                let n = l.len.min(p.len() - h);
                // SAFETY: as above; `n <= l.len`, and `p` is not engine memory.
                unsafe { std::ptr::copy_nonoverlapping(p[h..].as_ptr(), l.dest, n) };
                Received {
                    head: p[..h].to_vec(),
                    landing: Some((*l, n)),
                    rest: p[h + n..].to_vec(),
                }
            }
            None => Received {
                head: p.clone(),
                landing: None,
                rest: Vec::new(),
            },
        })
        .collect();
    // Pass one: which landed as predicted; every other one is read back before any write.
    let mut taken = Vec::with_capacity(received.len());
    for r in &received {
        let whole = || [&r.head[..], landed(r), &r.rest[..]].concat();
        let len = r.head.len() + landed(r).len() + r.rest.len();
        let facts = match r.landing {
            Some((l, _)) if r.rest.is_empty() => engine.predicted(&r.head, len, &l),
            _ => None,
        };
        taken.push(match facts {
            Some(f) => (r, None, Some(f)),
            None => (r, Some(whole()), None),
        });
    }
    // Pass two, in arrival order.
    let mut count = 0;
    for (r, copy, facts) in taken {
        match (copy, facts, r.landing) {
            (Some(bytes), _, _) => {
                engine.push(&bytes, out);
            }
            (None, Some(f), Some((l, _))) => match engine.land(&r.head, &f, &l, out) {
                Landed::Done(_) => count += 1,
                Landed::Missed => {
                    let bytes = [&r.head[..], landed(r), &r.rest[..]].concat();
                    engine.push(&bytes, out);
                }
            },
            _ => unreachable!("a packet is either read back or predicted"),
        }
    }
    count
}
