//! Datagrams that hold several SPEAD packets back to back.
//!
//! A sender using UDP GSO (spead2 and `fhudpsink gso=true` do) hands the kernel one large
//! datagram that the NIC, or the kernel, cuts into packets of the segment size. A capture
//! taken before that cut (`tcpdump -i lo`: loopback never segments) holds one record per
//! send, with several SPEAD packets in it. The segment size is not in the capture, but
//! every SPEAD packet says its own length (header + item pointers + PAYLOAD_LENGTH), so
//! [`split`] cuts such a datagram into its packets again. No GStreamer types.
//!
//! Every length is checked against the bytes that are there ([`Packet::parse_prefix`]):
//! a lying PAYLOAD_LENGTH or item count ends the split, it never reads past the datagram.

use crate::wire::{DecodeError, Packet};

/// What [`split`] found in one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// One packet, or not SPEAD at all (a first packet that does not parse is left to
    /// the receiver, which counts it): deliver the datagram as it is.
    Single,
    /// This many whole SPEAD packets (two or more), filling the datagram exactly.
    Packets(usize),
    /// `packets` whole SPEAD packets (at least one), then bytes from offset `at` on that
    /// are not a SPEAD packet, for the reason `error`: the pieces are those packets and
    /// the rest of the datagram as one more piece.
    Partial {
        /// Whole packets before `at`.
        packets: usize,
        /// Where the bytes that do not parse start.
        at: usize,
        /// Why they do not parse.
        error: DecodeError,
    },
}

/// Cuts `datagram` into the SPEAD packets it holds, writing each piece's length, in
/// order, into `lens` (cleared first; reuse it so that no datagram allocates). For
/// [`Split::Single`] `lens` holds the datagram's length alone; for
/// [`Split::Partial`] its last entry is the length of the bytes that did not parse.
/// The lengths always add up to `datagram.len()`.
pub fn split(datagram: &[u8], lens: &mut Vec<u32>) -> Split {
    lens.clear();
    let whole = |lens: &mut Vec<u32>| {
        lens.clear();
        lens.push(datagram.len() as u32);
        Split::Single
    };
    match Packet::parse_prefix(datagram) {
        Ok((_, n)) if n < datagram.len() => lens.push(n as u32),
        _ => return whole(lens),
    }
    let mut at = lens[0] as usize;
    loop {
        // parse_prefix never returns a length beyond the slice it is given, and every
        // packet is at least a header long, so `at` grows and stays in bounds.
        match Packet::parse_prefix(&datagram[at..]) {
            Ok((_, n)) => {
                lens.push(n as u32);
                at += n;
                if at == datagram.len() {
                    return Split::Packets(lens.len());
                }
            }
            Err(error) => {
                let packets = lens.len();
                lens.push((datagram.len() - at) as u32);
                return Split::Partial { packets, at, error };
            }
        }
    }
}

/// The name [`SPLITTER`] is registered under ([`crate::register`]): `fhpcapsrc
/// split=spead`.
pub const SPLITTER_NAME: &str = "spead";

/// [`split`] as a [`firehose_core::split::DatagramSplitter`], so that the replay source
/// (firehose-record) cuts GSO-captured records without depending on this crate.
#[derive(Debug)]
pub struct SpeadSplitter;

/// The splitter [`crate::register`] registers.
pub static SPLITTER: SpeadSplitter = SpeadSplitter;

impl firehose_core::split::DatagramSplitter for SpeadSplitter {
    fn packet(&self) -> &str {
        "SPEAD"
    }

    fn split(
        &self,
        datagram: &[u8],
        lens: &mut Vec<u32>,
    ) -> Result<(), firehose_core::split::Partial> {
        match split(datagram, lens) {
            Split::Single | Split::Packets(_) => Ok(()),
            Split::Partial { packets, at, .. } => {
                Err(firehose_core::split::Partial { packets, at })
            }
        }
    }

    fn why(&self, rest: &[u8]) -> String {
        match Packet::parse_prefix(rest) {
            Err(error) => error.to_string(),
            Ok(_) => "a whole packet".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{encode, ids, packet_len, Flavour, ItemPointer};

    fn packet(cnt: u64, payload: &[u8], claimed_len: Option<u64>) -> Vec<u8> {
        let f = Flavour::SPEAD_64_40;
        let items = [
            ItemPointer::immediate(f, ids::HEAP_CNT, cnt),
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
            ItemPointer::immediate(
                f,
                ids::PAYLOAD_LENGTH,
                claimed_len.unwrap_or(payload.len() as u64),
            ),
        ];
        let mut out = vec![0u8; packet_len(items.len(), payload.len())];
        encode(f, &items, payload, &mut out).unwrap();
        out
    }

    fn concat(ps: &[Vec<u8>]) -> Vec<u8> {
        ps.concat()
    }

    #[test]
    fn one_packet_and_non_spead_are_left_whole() {
        let mut lens = Vec::new();
        let p = packet(1, &[7; 100], None);
        assert_eq!(split(&p, &mut lens), Split::Single);
        assert_eq!(lens, [p.len() as u32]);
        assert_eq!(split(b"hello, not spead", &mut lens), Split::Single);
        assert_eq!(lens, [16]);
        assert_eq!(split(&[], &mut lens), Split::Single);
        assert_eq!(lens, [0]);
    }

    #[test]
    fn back_to_back_packets_are_cut_by_their_own_lengths() {
        let ps: Vec<Vec<u8>> = (0..5)
            .map(|i| packet(i, &vec![i as u8; 50 + i as usize * 7], None))
            .collect();
        let d = concat(&ps);
        let mut lens = Vec::new();
        assert_eq!(split(&d, &mut lens), Split::Packets(5));
        let want: Vec<u32> = ps.iter().map(|p| p.len() as u32).collect();
        assert_eq!(lens, want);
    }

    #[test]
    fn garbage_after_packets_is_one_more_piece_with_the_reason() {
        let a = packet(1, &[1; 40], None);
        let b = packet(2, &[2; 40], None);
        let mut d = concat(&[a.clone(), b.clone()]);
        d.extend_from_slice(b"tail that is not spead");
        let mut lens = Vec::new();
        assert_eq!(
            split(&d, &mut lens),
            Split::Partial {
                packets: 2,
                at: a.len() + b.len(),
                error: DecodeError::BadMagic
            }
        );
        assert_eq!(lens, [a.len() as u32, b.len() as u32, 22]);
    }

    #[test]
    fn lying_lengths_never_read_past_the_datagram() {
        let a = packet(1, &[1; 40], None);
        // Claims 1000 payload bytes, has 40: the second packet cannot be cut.
        let liar = packet(2, &[2; 40], Some(1000));
        let d = concat(&[a.clone(), liar.clone()]);
        let mut lens = Vec::new();
        assert_eq!(
            split(&d, &mut lens),
            Split::Partial {
                packets: 1,
                at: a.len(),
                error: DecodeError::LengthMismatch
            }
        );
        assert_eq!(lens.iter().sum::<u32>() as usize, d.len());
        // An item count beyond the datagram.
        let mut many = packet(3, &[3; 8], None);
        many[6] = 0xff;
        many[7] = 0xff;
        let d = concat(&[a.clone(), many]);
        assert!(matches!(
            split(&d, &mut lens),
            Split::Partial {
                error: DecodeError::TooManyItems,
                ..
            }
        ));
        // Every cut of a coalesced datagram: bounded, lengths add up, never a panic.
        let d = concat(&[a.clone(), packet(4, &[4; 33], None), a.clone()]);
        for cut in 0..=d.len() {
            let _ = split(&d[..cut], &mut lens);
            assert_eq!(lens.iter().map(|&l| l as usize).sum::<usize>(), cut);
        }
        // Every byte of the second packet's header flipped in turn.
        for i in a.len()..a.len() + 40 {
            let mut bad = d.clone();
            bad[i] ^= 0xa5;
            let _ = split(&bad, &mut lens);
            assert_eq!(lens.iter().map(|&l| l as usize).sum::<usize>(), bad.len());
        }
    }

    #[test]
    fn the_registered_splitter_cuts_as_split_does() {
        use firehose_core::split::DatagramSplitter;
        let ps: Vec<Vec<u8>> = (0..3).map(|i| packet(i, &[i as u8; 40], None)).collect();
        let mut d = concat(&ps);
        let mut lens = Vec::new();
        SPLITTER.split(&d, &mut lens).unwrap();
        assert_eq!(lens, vec![ps[0].len() as u32; 3]);
        let at = 2 * ps[0].len();
        d[at] = 0;
        let e = SPLITTER.split(&d, &mut lens).unwrap_err();
        assert_eq!((e.packets, e.at), (2, at));
        let why = SPLITTER.why(&d[e.at..]);
        assert!(why.contains("magic"), "{}", why);
        assert_eq!(SPLITTER.packet(), "SPEAD");
    }
}
