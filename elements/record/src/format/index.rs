//! The index written beside a `format=raw` data file (`<data file>.idx`), so a reader
//! can find any record without scanning the data.
//!
//! All integers little-endian. A 32-byte header:
//!
//! | bytes | field |
//! |---|---|
//! | `0..8` | magic `b"FHRAWIX1"` |
//! | `8..12` | header length (32), `u32` |
//! | `12..16` | entry length (40), `u32` |
//! | `16..24` | creation time, ns since the Unix epoch, `u64` |
//! | `24..32` | reserved, 0 |
//!
//! then one 40-byte entry per record, in data-file order (a chunk's entry is followed
//! by one entry per slot, which lie inside the chunk's bytes):
//!
//! | bytes | field |
//! |---|---|
//! | `0..8` | id: packet number, heap counter, chunk id, slot index or buffer number (see [`Kind`]) |
//! | `8..16` | byte offset of the record in the data file |
//! | `16..20` | length in bytes |
//! | `20..24` | flags: bit 0 complete; bits 8..16 the [`Kind`] |
//! | `24..32` | capture time, ns since the Unix epoch (0: unknown) |
//! | `32..40` | buffer PTS in ns (`u64::MAX`: none) |
//!
//! Readers must use the header's lengths (later versions may append fields) and ignore
//! entries whose data lies beyond the end of the data file: after a crash the index may
//! be ahead of the data (see docs/recording.md).

use std::io;
use std::path::Path;

/// Index file magic.
pub const MAGIC: [u8; 8] = *b"FHRAWIX1";
/// Header length written by this version.
pub const HEADER_LEN: usize = 32;
/// Entry length written by this version.
pub const ENTRY_LEN: usize = 40;
/// Flag: the record is complete (always set for packets and plain buffers).
pub const FLAG_COMPLETE: u32 = 1;
/// `pts_ns` of a buffer that had no PTS.
pub const NO_PTS: u64 = u64::MAX;

/// What a record of a raw file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A whole buffer without a known meta; id = buffer number from 0.
    Buffer = 0,
    /// One datagram of an `application/x-firehose-packets` batch; id = packet number
    /// from 0.
    Packet = 1,
    /// One message (a SPEAD heap, `application/x-spead-heap`): a buffer with the
    /// message meta (`firehose_core::meta::message`); id = its id (heap counter),
    /// complete flag from it.
    Heap = 2,
    /// One chunk (`application/x-firehose-chunk`) as a whole; id = chunk id, complete
    /// when every slot is present. Its slots follow as [`Kind::Slot`] entries.
    Chunk = 3,
    /// One slot of the chunk entry before it; id = slot index in the chunk, complete
    /// when the slot is present (its bytes are undefined otherwise).
    Slot = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Kind::Buffer),
            1 => Some(Kind::Packet),
            2 => Some(Kind::Heap),
            3 => Some(Kind::Chunk),
            4 => Some(Kind::Slot),
            _ => None,
        }
    }
}

/// One index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Packet number, heap counter or buffer number.
    pub id: u64,
    /// Byte offset in the data file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// Complete (all bytes present).
    pub complete: bool,
    /// What the record is (`None`: a kind this version does not know).
    pub kind: Option<Kind>,
    /// Capture time, Unix ns (0: unknown).
    pub time_ns: u64,
    /// Buffer PTS in ns ([`NO_PTS`]: none).
    pub pts_ns: u64,
}

/// The index file header for a file created at `created_ns`.
pub fn header(created_ns: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(ENTRY_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&created_ns.to_le_bytes());
    h
}

impl Entry {
    /// The entry's bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut e = [0u8; ENTRY_LEN];
        let kind = self.kind.unwrap_or(Kind::Buffer) as u32;
        let flags = u32::from(self.complete) | (kind << 8);
        e[0..8].copy_from_slice(&self.id.to_le_bytes());
        e[8..16].copy_from_slice(&self.offset.to_le_bytes());
        e[16..20].copy_from_slice(&self.len.to_le_bytes());
        e[20..24].copy_from_slice(&flags.to_le_bytes());
        e[24..32].copy_from_slice(&self.time_ns.to_le_bytes());
        e[32..40].copy_from_slice(&self.pts_ns.to_le_bytes());
        e
    }

    /// Decodes an entry from its first [`ENTRY_LEN`] bytes.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b = b.get(..ENTRY_LEN)?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let flags = u32::from_le_bytes(b[20..24].try_into().expect("4 bytes"));
        Some(Self {
            id: u64_at(0),
            offset: u64_at(8),
            len: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
            complete: flags & FLAG_COMPLETE != 0,
            kind: Kind::from_u8((flags >> 8) as u8),
            time_ns: u64_at(24),
            pts_ns: u64_at(32),
        })
    }

    /// The record's byte range in the data file.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + u64::from(self.len)
    }
}

/// Reads an index file: every entry whose record lies within `data_len` bytes (the data
/// file's size), in order. A partial trailing entry (a crash mid-write) is ignored.
pub fn read(path: &Path, data_len: u64) -> io::Result<Vec<Entry>> {
    let bytes = std::fs::read(path)?;
    parse(&bytes, data_len).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a Firehose raw index (bad magic or lengths)",
                path.display()
            ),
        )
    })
}

/// Parses index bytes (see [`read`]).
pub fn parse(bytes: &[u8], data_len: u64) -> Option<Vec<Entry>> {
    if bytes.get(0..8)? != MAGIC {
        return None;
    }
    let hlen = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize;
    let elen = u32::from_le_bytes(bytes.get(12..16)?.try_into().ok()?) as usize;
    if hlen < HEADER_LEN || elen < ENTRY_LEN {
        return None;
    }
    Some(
        bytes
            .get(hlen..)
            .unwrap_or_default()
            .chunks_exact(elen)
            .filter_map(Entry::decode)
            .filter(|e| e.range().end <= data_len)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_clip_to_the_data() {
        let a = Entry {
            id: 7,
            offset: 0,
            len: 100,
            complete: true,
            kind: Some(Kind::Heap),
            time_ns: 5,
            pts_ns: NO_PTS,
        };
        let b = Entry {
            id: 8,
            offset: 100,
            len: 50,
            complete: false,
            ..a
        };
        let mut bytes = header(1).to_vec();
        bytes.extend_from_slice(&a.encode());
        bytes.extend_from_slice(&b.encode());
        bytes.extend_from_slice(&[1, 2, 3]); // a torn entry
        assert_eq!(parse(&bytes, 150).unwrap(), vec![a, b]);
        assert_eq!(parse(&bytes, 149).unwrap(), vec![a]);
        assert!(parse(b"nonsense", 0).is_none());
    }
}
