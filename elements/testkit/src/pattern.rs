//! The "Firehose test packet": a self-describing packet whose every byte can be checked.
//!
//! Layout (all fields big-endian):
//!
//! | bytes | field |
//! |---|---|
//! | `0..4` | magic `b"FHT1"` |
//! | `4..8` | total packet length, `u32` |
//! | `8..16` | sequence number, `u64` |
//! | `16..` | payload words: word `k` (at byte `16 + 8k`) is [`word`]`(seq, k)`, a `u64` |
//!
//! A trailing partial word (fewer than 8 bytes) holds the leading bytes of the
//! big-endian encoding of the next word. The payload depends on the sequence number, so a
//! packet whose header was corrupted into another valid sequence number still fails
//! verification (unless it has no payload at all: a 16-byte packet carries nothing to
//! cross-check its sequence number against).
//!
//! Generation and verification work a `u64` word at a time; the words are a multiply and
//! an add apart, so both run at memory speed.

use std::fmt;

/// The four bytes every test packet starts with.
pub const MAGIC: [u8; 4] = *b"FHT1";
/// Length of the header (magic, length, sequence number).
pub const HEADER_LEN: usize = 16;
/// The smallest valid test packet (a header with no payload).
pub const MIN_LEN: usize = HEADER_LEN;

/// Multiplier that spreads the sequence number over all 64 bits (golden ratio).
const SEQ_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
/// Multiplier that makes each word position distinct.
const POS_MUL: u64 = 0xD1B5_4A32_D192_ED03;
/// Words generated side by side (a 32-byte block: one AVX2 register, two SSE ones).
const LANES: usize = 4;

/// Payload word `k` of the packet with sequence number `seq`.
#[inline]
pub fn word(seq: u64, k: u64) -> u64 {
    seq.wrapping_mul(SEQ_MUL) ^ k.wrapping_mul(POS_MUL)
}

/// What was wrong with a packet that failed [`verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Shorter than the header.
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The first four bytes are not [`MAGIC`].
    BadMagic {
        /// The bytes found instead.
        found: [u8; 4],
    },
    /// The length field disagrees with the number of bytes received.
    LengthMismatch {
        /// Length written in the header.
        header: u32,
        /// Bytes received.
        actual: usize,
    },
    /// A payload byte differs from the pattern of the packet's sequence number.
    PatternMismatch {
        /// Sequence number in the header.
        seq: u64,
        /// Offset of the first wrong byte from the start of the packet.
        offset: usize,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { len } => {
                write!(
                    f,
                    "packet of {len} bytes is shorter than the {HEADER_LEN}-byte header"
                )
            }
            Self::BadMagic { found } => write!(f, "bad magic {found:02x?}, expected \"FHT1\""),
            Self::LengthMismatch { header, actual } => {
                write!(f, "header says {header} bytes but {actual} were received")
            }
            Self::PatternMismatch { seq, offset } => {
                write!(
                    f,
                    "packet {seq}: payload differs from the pattern at byte {offset}"
                )
            }
        }
    }
}

impl std::error::Error for Corruption {}

/// Writes only the header of test packet `seq` (magic, `buf`'s length, `seq`) into the
/// first [`HEADER_LEN`] bytes of `buf`, leaving the payload as it is: for benchmarks of
/// what carries packets, where generating the payload would swamp what is measured.
///
/// # Panics
/// If `buf` is shorter than [`MIN_LEN`] or longer than `u32::MAX` bytes.
pub fn write_header(seq: u64, buf: &mut [u8]) {
    assert!(
        buf.len() >= MIN_LEN,
        "a test packet needs at least {MIN_LEN} bytes"
    );
    let len = u32::try_from(buf.len()).expect("a test packet is at most u32::MAX bytes");
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&len.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// Writes test packet `seq` into the whole of `buf` (its length is the packet length).
///
/// # Panics
/// If `buf` is shorter than [`MIN_LEN`] or longer than `u32::MAX` bytes.
pub fn fill(seq: u64, buf: &mut [u8]) {
    assert!(
        buf.len() >= MIN_LEN,
        "a test packet needs at least {MIN_LEN} bytes"
    );
    write_header(seq, buf);
    let payload = &mut buf[HEADER_LEN..];

    // word(seq, k) = base ^ k*POS_MUL. The position terms of LANES consecutive words are
    // carried as running sums, so each step is independent adds, xors and stores that
    // the compiler turns into vector code; no multiply in the loop.
    let base = seq.wrapping_mul(SEQ_MUL);
    let mut pos: [u64; LANES] = std::array::from_fn(|i| (i as u64).wrapping_mul(POS_MUL));
    let step = (LANES as u64).wrapping_mul(POS_MUL);
    let mut blocks = payload.chunks_exact_mut(8 * LANES);
    for block in &mut blocks {
        for (w, p) in block.chunks_exact_mut(8).zip(&mut pos) {
            w.copy_from_slice(&(base ^ *p).to_be_bytes());
            *p = p.wrapping_add(step);
        }
    }
    // The rest (fewer than LANES words, maybe a partial one) continues the sequence.
    let rest = blocks.into_remainder();
    for (w, p) in rest.chunks_mut(8).zip(pos) {
        let n = w.len();
        w.copy_from_slice(&(base ^ p).to_be_bytes()[..n]);
    }
}

/// The sequence number of a packet, read from the header without verifying anything.
pub fn peek_seq(buf: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = buf.get(8..16)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// Checks every byte of `buf` against the test packet format; returns its sequence number.
pub fn verify(buf: &[u8]) -> Result<u64, Corruption> {
    if buf.len() < HEADER_LEN {
        return Err(Corruption::TooShort { len: buf.len() });
    }
    let (header, payload) = buf.split_at(HEADER_LEN);
    let magic: [u8; 4] = header[0..4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(Corruption::BadMagic { found: magic });
    }
    let len = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes"));
    if len as usize != buf.len() {
        return Err(Corruption::LengthMismatch {
            header: len,
            actual: buf.len(),
        });
    }
    let seq = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));

    // Fast path: OR together the differences of all words, branch once at the end. Only
    // a damaged packet pays for finding where.
    let base = seq.wrapping_mul(SEQ_MUL);
    let mut pos: [u64; LANES] = std::array::from_fn(|i| (i as u64).wrapping_mul(POS_MUL));
    let step = (LANES as u64).wrapping_mul(POS_MUL);
    let mut diff = [0u64; LANES];
    let mut blocks = payload.chunks_exact(8 * LANES);
    for block in &mut blocks {
        for ((w, p), d) in block.chunks_exact(8).zip(&mut pos).zip(&mut diff) {
            let got = u64::from_be_bytes(w.try_into().expect("8 bytes"));
            *d |= got ^ base ^ *p;
            *p = p.wrapping_add(step);
        }
    }
    let rest = blocks.remainder();
    let rest_ok = rest
        .chunks(8)
        .zip(pos)
        .all(|(w, p)| w == &(base ^ p).to_be_bytes()[..w.len()]);
    if rest_ok && diff.iter().all(|&d| d == 0) {
        return Ok(seq);
    }
    Err(Corruption::PatternMismatch {
        seq,
        offset: first_mismatch(seq, payload),
    })
}

/// Offset (from the packet start) of the first payload byte that differs from the pattern.
#[cold]
fn first_mismatch(seq: u64, payload: &[u8]) -> usize {
    for (k, chunk) in payload.chunks(8).enumerate() {
        let want = word(seq, k as u64).to_be_bytes();
        if let Some(i) = chunk.iter().zip(want).position(|(a, b)| *a != b) {
            return HEADER_LEN + 8 * k + i;
        }
    }
    unreachable!("first_mismatch called on a payload that matches")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_small_sizes() {
        for len in MIN_LEN..200 {
            let mut buf = vec![0u8; len];
            fill(len as u64 * 7, &mut buf);
            assert_eq!(verify(&buf), Ok(len as u64 * 7), "len {len}");
        }
    }

    #[test]
    fn layout_is_as_documented() {
        let mut buf = vec![0u8; 35];
        fill(0x0102_0304_0506_0708, &mut buf);
        assert_eq!(&buf[0..4], b"FHT1");
        assert_eq!(&buf[4..8], &35u32.to_be_bytes());
        assert_eq!(&buf[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let seq = 0x0102_0304_0506_0708;
        assert_eq!(&buf[16..24], &word(seq, 0).to_be_bytes());
        assert_eq!(&buf[24..32], &word(seq, 1).to_be_bytes());
        assert_eq!(&buf[32..35], &word(seq, 2).to_be_bytes()[..3]);
        assert_eq!(peek_seq(&buf), Some(seq));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        for len in [16usize, 17, 23, 24, 25, 64, 101, 1472] {
            let mut good = vec![0u8; len];
            fill(42, &mut good);
            for i in 0..len {
                let mut bad = good.clone();
                bad[i] ^= 0x01;
                if len == MIN_LEN && (8..16).contains(&i) {
                    // A packet with no payload has nothing to cross-check its sequence
                    // number against.
                    assert!(verify(&bad).is_ok());
                    continue;
                }
                let err = verify(&bad).expect_err("corruption must be detected");
                match i {
                    0..4 => assert!(matches!(err, Corruption::BadMagic { .. })),
                    4..8 => assert!(matches!(err, Corruption::LengthMismatch { .. })),
                    // A changed sequence number changes the expected pattern.
                    8..16 => assert!(matches!(
                        err,
                        Corruption::PatternMismatch { offset: 16, .. }
                    )),
                    _ => assert_eq!(err, Corruption::PatternMismatch { seq: 42, offset: i }),
                }
            }
        }
    }

    #[test]
    fn sequence_number_of_bare_header_is_not_checked() {
        // Documented limitation: a 16-byte packet with a changed seq still verifies.
        let mut buf = [0u8; 16];
        fill(1, &mut buf);
        buf[15] = 2;
        assert_eq!(verify(&buf), Ok(2));
    }

    #[test]
    fn payload_of_another_sequence_number_is_rejected() {
        let mut a = vec![0u8; 100];
        let mut b = vec![0u8; 100];
        fill(5, &mut a);
        fill(6, &mut b);
        a[8..16].copy_from_slice(&b[8..16]);
        assert_eq!(
            verify(&a),
            Err(Corruption::PatternMismatch { seq: 6, offset: 16 })
        );
    }

    #[test]
    fn truncated_and_short_packets_are_rejected() {
        let mut buf = vec![0u8; 100];
        fill(9, &mut buf);
        assert_eq!(
            verify(&buf[..99]),
            Err(Corruption::LengthMismatch {
                header: 100,
                actual: 99
            })
        );
        assert_eq!(verify(&buf[..15]), Err(Corruption::TooShort { len: 15 }));
        assert!(Corruption::TooShort { len: 15 }.to_string().contains("15"));
    }

    #[test]
    #[should_panic(expected = "at least 16")]
    fn fill_rejects_short_buffers() {
        fill(0, &mut [0u8; 15]);
    }

    #[test]
    fn words_differ_between_packets_and_positions() {
        assert_ne!(word(0, 1), word(1, 0));
        assert_ne!(word(1, 1), word(2, 1));
        assert_ne!(word(7, 0), word(7, 1));
    }
}
