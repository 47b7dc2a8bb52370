//! A host without a socket, for testing engines.

use super::{Landed, Landing, LandingEngine};

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
