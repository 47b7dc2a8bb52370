//! The prediction helpers every engine plans with: what a stream looked like so far
//! ([`Shape`]), where a message's next packet goes ([`Cursor`]), and filling a plan
//! from both ([`fill_plan`]).

use super::{Landing, MAX_HEADER};

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
