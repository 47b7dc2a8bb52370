//! SPEAD packets on the wire: header, item pointers, payload. Big-endian throughout.
//!
//! [`Packet::parse`] validates a packet and gives access to its fields without copying or
//! allocating; [`encode`] writes one. Every 64-bit flavour (item id width + heap address
//! width = 8 bytes) is accepted; anything else is rejected.

use std::fmt;

/// SPEAD magic byte.
pub const MAGIC: u8 = 0x53;
/// SPEAD version.
pub const VERSION: u8 = 4;
/// Bytes of the packet header.
pub const HEADER_LEN: usize = 8;
/// Bytes per item pointer.
pub const ITEM_LEN: usize = 8;

/// Reserved item ids.
pub mod ids {
    /// Padding; an addressed NULL can end the previous item's extent.
    pub const NULL: u64 = 0x00;
    /// Identifies the heap; immediate, in every packet.
    pub const HEAP_CNT: u64 = 0x01;
    /// Total heap payload bytes; immediate, optional.
    pub const HEAP_LENGTH: u64 = 0x02;
    /// Where this packet's payload sits in the heap; immediate, required.
    pub const PAYLOAD_OFFSET: u64 = 0x03;
    /// Payload bytes in this packet; immediate, required.
    pub const PAYLOAD_LENGTH: u64 = 0x04;
    /// Addressed; the value is a SPEAD packet describing one item.
    pub const DESCRIPTOR: u64 = 0x05;
    /// Immediate; 0 start, 1 descriptor reissue, 2 stop, 3 descriptor update.
    pub const STREAM_CTRL: u64 = 0x06;
    /// Descriptor fields.
    pub const DESCRIPTOR_NAME: u64 = 0x10;
    /// Descriptor description.
    pub const DESCRIPTOR_DESCRIPTION: u64 = 0x11;
    /// Descriptor shape.
    pub const DESCRIPTOR_SHAPE: u64 = 0x12;
    /// Descriptor format.
    pub const DESCRIPTOR_FORMAT: u64 = 0x13;
    /// Descriptor id (immediate).
    pub const DESCRIPTOR_ID: u64 = 0x14;
    /// Descriptor numpy dtype header.
    pub const DESCRIPTOR_DTYPE: u64 = 0x15;
}

/// STREAM_CTRL values.
pub mod ctrl {
    /// Stream start.
    pub const START: u64 = 0;
    /// Descriptors reissued.
    pub const DESCRIPTOR_REISSUE: u64 = 1;
    /// Stream stop: the end of the stream.
    pub const STOP: u64 = 2;
    /// Descriptors updated.
    pub const DESCRIPTOR_UPDATE: u64 = 3;
}

/// A SPEAD-64-A flavour: 64-bit item pointers with A bits of heap address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flavour {
    heap_address_bits: u8,
}

impl Flavour {
    /// SPEAD-64-40, spead2's default.
    pub const SPEAD_64_40: Flavour = Flavour {
        heap_address_bits: 40,
    };
    /// SPEAD-64-48, MeerKAT's.
    pub const SPEAD_64_48: Flavour = Flavour {
        heap_address_bits: 48,
    };

    /// A flavour with `heap_address_bits` (a multiple of 8 from 8 to 56).
    pub fn new(heap_address_bits: u8) -> Option<Self> {
        (heap_address_bits.is_multiple_of(8) && (8..=56).contains(&heap_address_bits))
            .then_some(Self { heap_address_bits })
    }

    /// Parses `64-40`, `64-48`, … (the form used in properties).
    pub fn parse(s: &str) -> Option<Self> {
        let bits = s.strip_prefix("64-")?.parse().ok()?;
        Self::new(bits)
    }

    /// Bits of heap address (A).
    pub fn heap_address_bits(self) -> u8 {
        self.heap_address_bits
    }

    /// Bits of item id (63 − A: the top bit is the mode).
    pub fn item_id_bits(self) -> u8 {
        63 - self.heap_address_bits
    }

    /// Largest value an immediate or an address can hold.
    pub fn max_value(self) -> u64 {
        (1u64 << self.heap_address_bits) - 1
    }

    /// Largest item id.
    pub fn max_id(self) -> u64 {
        (1u64 << self.item_id_bits()) - 1
    }

    fn header_bytes(self) -> (u8, u8) {
        let a = self.heap_address_bits / 8;
        (8 - a, a)
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "64-{}", self.heap_address_bits)
    }
}

/// One item pointer: mode bit, item id, and an immediate value or a heap address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemPointer(pub u64);

impl ItemPointer {
    /// An immediate item (value stored in the pointer).
    pub fn immediate(flavour: Flavour, id: u64, value: u64) -> Self {
        Self(
            1 << 63
                | (id & flavour.max_id()) << flavour.heap_address_bits
                | (value & flavour.max_value()),
        )
    }

    /// An addressed item (value at `address` in the heap payload).
    pub fn addressed(flavour: Flavour, id: u64, address: u64) -> Self {
        Self((id & flavour.max_id()) << flavour.heap_address_bits | (address & flavour.max_value()))
    }

    /// True for immediate items.
    pub fn is_immediate(self) -> bool {
        self.0 >> 63 == 1
    }

    /// The item id.
    pub fn id(self, flavour: Flavour) -> u64 {
        (self.0 >> flavour.heap_address_bits) & flavour.max_id()
    }

    /// The immediate value or the heap address.
    pub fn value(self, flavour: Flavour) -> u64 {
        self.0 & flavour.max_value()
    }
}

/// Why a packet was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than a header, or than its item pointers.
    Truncated,
    /// First byte is not 0x53.
    BadMagic,
    /// Version is not 4.
    BadVersion,
    /// Item-id and heap-address widths do not make a 64-bit flavour.
    BadFlavour,
    /// More item pointers than the packet can hold.
    TooManyItems,
    /// A required item (HEAP_CNT, PAYLOAD_OFFSET, PAYLOAD_LENGTH) is missing.
    MissingItem(u64),
    /// Length is not 8 + 8·n + PAYLOAD_LENGTH.
    LengthMismatch,
    /// PAYLOAD_OFFSET + PAYLOAD_LENGTH is beyond HEAP_LENGTH.
    BeyondHeap,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated packet"),
            DecodeError::BadMagic => write!(f, "bad magic (not 0x53)"),
            DecodeError::BadVersion => write!(f, "bad version (not 4)"),
            DecodeError::BadFlavour => write!(f, "not a SPEAD-64-* flavour"),
            DecodeError::TooManyItems => write!(f, "more item pointers than the packet holds"),
            DecodeError::MissingItem(id) => write!(f, "required item {id:#x} missing"),
            DecodeError::LengthMismatch => {
                write!(f, "packet length does not match its PAYLOAD_LENGTH")
            }
            DecodeError::BeyondHeap => write!(f, "payload extends beyond HEAP_LENGTH"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A validated packet, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// The flavour its header declares.
    pub flavour: Flavour,
    /// HEAP_CNT.
    pub heap_cnt: u64,
    /// HEAP_LENGTH, if present.
    pub heap_length: Option<u64>,
    /// PAYLOAD_OFFSET.
    pub payload_offset: u64,
    /// STREAM_CTRL, if present.
    pub stream_ctrl: Option<u64>,
    items: &'a [u8],
    /// This packet's payload bytes.
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Validates `buf` as exactly one packet (a UDP datagram).
    pub fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let (p, len) = Self::parse_prefix(buf)?;
        if len != buf.len() {
            return Err(DecodeError::LengthMismatch);
        }
        Ok(p)
    }

    /// Validates the packet at the start of `buf` (packets concatenated in a file or a
    /// TCP stream) and returns it with its length.
    pub fn parse_prefix(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut p, items_end, end) = Self::decode_head(buf, buf.len())?;
        p.payload = &buf[items_end..end];
        Ok((p, end))
    }

    /// Validates a packet of `packet_len` bytes from its first bytes alone, `head`,
    /// which must hold its header and item pointers; the packet returned has an empty
    /// `payload`. Also returns where its payload starts. For receives that put the
    /// header and the payload in different places.
    pub fn parse_head(head: &'a [u8], packet_len: usize) -> Result<(Self, usize), DecodeError> {
        let (p, items_end, end) = Self::decode_head(head, packet_len)?;
        if end != packet_len {
            return Err(DecodeError::LengthMismatch);
        }
        Ok((p, items_end))
    }

    /// Validates the header and item pointers at the start of `buf`, whose packet is
    /// `total` bytes long (its payload may lie elsewhere). Returns the packet with an
    /// empty payload, where its payload starts and where it ends.
    fn decode_head(buf: &'a [u8], total: usize) -> Result<(Self, usize, usize), DecodeError> {
        if buf.len() < HEADER_LEN {
            return Err(DecodeError::Truncated);
        }
        if buf[0] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if buf[1] != VERSION {
            return Err(DecodeError::BadVersion);
        }
        let (id_bytes, addr_bytes) = (buf[2], buf[3]);
        if u16::from(id_bytes) + u16::from(addr_bytes) != 8 {
            return Err(DecodeError::BadFlavour);
        }
        let flavour = Flavour::new(addr_bytes * 8).ok_or(DecodeError::BadFlavour)?;
        let n = usize::from(u16::from_be_bytes([buf[6], buf[7]]));
        let items_end = HEADER_LEN + n * ITEM_LEN;
        if items_end > buf.len() {
            return Err(DecodeError::TooManyItems);
        }
        let items = &buf[HEADER_LEN..items_end];
        let (mut heap_cnt, mut heap_length, mut offset, mut length, mut ctrl) =
            (None, None, None, None, None);
        for chunk in items.chunks_exact(ITEM_LEN) {
            let ip = ItemPointer(u64::from_be_bytes(chunk.try_into().expect("8 bytes")));
            if !ip.is_immediate() {
                continue;
            }
            let v = Some(ip.value(flavour));
            match ip.id(flavour) {
                ids::HEAP_CNT => heap_cnt = v,
                ids::HEAP_LENGTH => heap_length = v,
                ids::PAYLOAD_OFFSET => offset = v,
                ids::PAYLOAD_LENGTH => length = v,
                ids::STREAM_CTRL => ctrl = v,
                _ => {}
            }
        }
        let heap_cnt = heap_cnt.ok_or(DecodeError::MissingItem(ids::HEAP_CNT))?;
        let payload_offset = offset.ok_or(DecodeError::MissingItem(ids::PAYLOAD_OFFSET))?;
        let payload_length = length.ok_or(DecodeError::MissingItem(ids::PAYLOAD_LENGTH))?;
        let end = (items_end as u64)
            .checked_add(payload_length)
            .filter(|&e| e <= total as u64)
            .ok_or(DecodeError::LengthMismatch)? as usize;
        if let Some(hl) = heap_length {
            if payload_offset
                .checked_add(payload_length)
                .is_none_or(|e| e > hl)
            {
                return Err(DecodeError::BeyondHeap);
            }
        }
        Ok((
            Self {
                flavour,
                heap_cnt,
                heap_length,
                payload_offset,
                stream_ctrl: ctrl,
                items,
                payload: &[],
            },
            items_end,
            end,
        ))
    }

    /// Bytes [`Packet::encode_to`] writes: the packet's own length.
    pub(crate) fn encoded_len(&self) -> usize {
        HEADER_LEN + self.items.len() + self.payload.len()
    }

    /// Writes the packet again (header, item pointers, payload) at the start of `out`
    /// (at least [`Packet::encoded_len`] bytes): [`Packet::parse`] of those bytes gives
    /// this packet back. For keeping a packet past the life of its buffer.
    pub(crate) fn encode_to(&self, out: &mut [u8]) {
        let addr_bytes = self.flavour.heap_address_bits() / 8;
        let n = (self.n_items() as u16).to_be_bytes();
        let (head, rest) = out.split_at_mut(HEADER_LEN);
        head.copy_from_slice(&[MAGIC, VERSION, 8 - addr_bytes, addr_bytes, 0, 0, n[0], n[1]]);
        let (items, rest) = rest.split_at_mut(self.items.len());
        items.copy_from_slice(self.items);
        rest[..self.payload.len()].copy_from_slice(self.payload);
    }

    /// Number of item pointers.
    pub fn n_items(&self) -> usize {
        self.items.len() / ITEM_LEN
    }

    /// The item pointers, in packet order.
    pub fn items(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        self.items
            .chunks_exact(ITEM_LEN)
            .map(|c| ItemPointer(u64::from_be_bytes(c.try_into().expect("8 bytes"))))
    }

    /// The value of immediate item `id`, if the packet carries it.
    pub fn immediate(&self, id: u64) -> Option<u64> {
        let f = self.flavour;
        self.items()
            .find(|ip| ip.is_immediate() && ip.id(f) == id)
            .map(|ip| ip.value(f))
    }

    /// True if the packet carries items other than the four per-packet ones (HEAP_CNT,
    /// HEAP_LENGTH, PAYLOAD_OFFSET, PAYLOAD_LENGTH).
    pub fn has_heap_items(&self) -> bool {
        let f = self.flavour;
        self.items()
            .any(|ip| !matches!(ip.id(f), ids::HEAP_CNT..=ids::PAYLOAD_LENGTH))
    }
}

/// Bytes a packet with `n_items` pointers and `payload_len` payload bytes takes.
pub fn packet_len(n_items: usize, payload_len: usize) -> usize {
    HEADER_LEN + n_items * ITEM_LEN + payload_len
}

/// Writes a packet (header, `items` in order, `payload`) into `out`; returns its length,
/// or `None` if `out` is too small or there are more than 65535 items. The caller
/// includes HEAP_CNT, PAYLOAD_OFFSET and PAYLOAD_LENGTH among `items`.
pub fn encode(
    flavour: Flavour,
    items: &[ItemPointer],
    payload: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    let n = u16::try_from(items.len()).ok()?;
    let len = packet_len(items.len(), payload.len());
    let out = out.get_mut(..len)?;
    let (id_bytes, addr_bytes) = flavour.header_bytes();
    out[..HEADER_LEN].copy_from_slice(&[
        MAGIC,
        VERSION,
        id_bytes,
        addr_bytes,
        0,
        0,
        (n >> 8) as u8,
        n as u8,
    ]);
    for (k, ip) in items.iter().enumerate() {
        let at = HEADER_LEN + k * ITEM_LEN;
        out[at..at + ITEM_LEN].copy_from_slice(&ip.0.to_be_bytes());
    }
    out[HEADER_LEN + items.len() * ITEM_LEN..].copy_from_slice(payload);
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(f: Flavour, cnt: u64, heap_len: u64, off: u64, payload: &[u8]) -> Vec<u8> {
        let items = [
            ItemPointer::immediate(f, ids::HEAP_CNT, cnt),
            ItemPointer::immediate(f, ids::HEAP_LENGTH, heap_len),
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, off),
            ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, payload.len() as u64),
            ItemPointer::addressed(f, 0x1000, 0),
        ];
        let mut out = vec![0u8; packet_len(items.len(), payload.len())];
        let n = encode(f, &items, payload, &mut out).unwrap();
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn header_bytes_match_the_spec() {
        let p = basic(Flavour::SPEAD_64_40, 1, 4, 0, b"abcd");
        assert_eq!(&p[..8], &[0x53, 4, 3, 5, 0, 0, 0, 5]);
        let p = basic(Flavour::SPEAD_64_48, 1, 4, 0, b"abcd");
        assert_eq!(&p[..4], &[0x53, 4, 2, 6]);
    }

    #[test]
    fn round_trip_every_flavour() {
        for bits in (8..=56).step_by(8) {
            let f = Flavour::new(bits).unwrap();
            let cnt = f.max_value().min(123_456);
            let buf = basic(f, cnt, 10, 6, b"wxyz");
            let p = Packet::parse(&buf).unwrap();
            assert_eq!(p.flavour, f);
            assert_eq!(
                (p.heap_cnt, p.heap_length, p.payload_offset),
                (cnt, Some(10), 6)
            );
            assert_eq!(p.payload, b"wxyz");
            assert_eq!(p.n_items(), 5);
            assert!(p.has_heap_items());
            let user = p.items().last().unwrap();
            assert!(!user.is_immediate());
            assert_eq!(user.id(f), 0x1000 & f.max_id());
        }
    }

    #[test]
    fn flavour_names() {
        assert_eq!(Flavour::parse("64-48"), Some(Flavour::SPEAD_64_48));
        assert_eq!(Flavour::SPEAD_64_40.to_string(), "64-40");
        assert_eq!(Flavour::parse("64-41"), None);
        assert_eq!(Flavour::parse("32-16"), None);
        assert_eq!(Flavour::parse("64-64"), None);
    }

    #[test]
    fn bad_input_is_rejected_not_panicking() {
        let good = basic(Flavour::SPEAD_64_40, 7, 4, 0, b"abcd");
        assert_eq!(
            Packet::parse(&good[..5]).unwrap_err(),
            DecodeError::Truncated
        );
        let mut b = good.clone();
        b[0] = 0x54;
        assert_eq!(Packet::parse(&b).unwrap_err(), DecodeError::BadMagic);
        let mut b = good.clone();
        b[1] = 3;
        assert_eq!(Packet::parse(&b).unwrap_err(), DecodeError::BadVersion);
        let mut b = good.clone();
        b[2] = 4;
        assert_eq!(Packet::parse(&b).unwrap_err(), DecodeError::BadFlavour);
        let mut b = good.clone();
        b[7] = 200;
        assert_eq!(Packet::parse(&b).unwrap_err(), DecodeError::TooManyItems);
        let mut b = good.clone();
        b.push(0);
        assert_eq!(Packet::parse(&b).unwrap_err(), DecodeError::LengthMismatch);
        assert_eq!(
            Packet::parse(&good[..good.len() - 1]).unwrap_err(),
            DecodeError::LengthMismatch
        );
        let beyond = basic(Flavour::SPEAD_64_40, 7, 5, 3, b"abcd");
        assert_eq!(Packet::parse(&beyond).unwrap_err(), DecodeError::BeyondHeap);
        // No HEAP_CNT.
        let f = Flavour::SPEAD_64_40;
        let items = [
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
            ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, 1),
        ];
        let mut out = vec![0u8; packet_len(2, 1)];
        encode(f, &items, b"x", &mut out).unwrap();
        assert_eq!(
            Packet::parse(&out).unwrap_err(),
            DecodeError::MissingItem(ids::HEAP_CNT)
        );
        // A huge PAYLOAD_LENGTH does not overflow.
        let items = [
            ItemPointer::immediate(f, ids::HEAP_CNT, 1),
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
            ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, f.max_value()),
        ];
        let mut out = vec![0u8; packet_len(3, 1)];
        encode(f, &items, b"x", &mut out).unwrap();
        assert_eq!(
            Packet::parse(&out).unwrap_err(),
            DecodeError::LengthMismatch
        );
    }

    #[test]
    fn concatenated_packets_parse_one_after_another() {
        let mut s = basic(Flavour::SPEAD_64_48, 1, 2, 0, b"ab");
        s.extend(basic(Flavour::SPEAD_64_48, 2, 3, 0, b"cde"));
        let (a, la) = Packet::parse_prefix(&s).unwrap();
        let (b, lb) = Packet::parse_prefix(&s[la..]).unwrap();
        assert_eq!(
            (a.heap_cnt, a.payload, b.heap_cnt, b.payload),
            (1, &b"ab"[..], 2, &b"cde"[..])
        );
        assert_eq!(la + lb, s.len());
    }

    #[test]
    fn a_packet_validates_from_its_header_and_length() {
        let p = basic(Flavour::SPEAD_64_48, 7, 16, 4, b"abcd");
        let whole = Packet::parse(&p).unwrap();
        let start = p.len() - 4;
        let (head, at) = Packet::parse_head(&p[..start], p.len()).unwrap();
        assert_eq!(at, start);
        assert_eq!(
            (
                head.heap_cnt,
                head.heap_length,
                head.payload_offset,
                head.payload
            ),
            (
                whole.heap_cnt,
                whole.heap_length,
                whole.payload_offset,
                &b""[..]
            )
        );
        // The whole packet works too; a wrong length or a cut item does not.
        assert_eq!(Packet::parse_head(&p, p.len()).unwrap().1, start);
        assert_eq!(
            Packet::parse_head(&p[..start], p.len() - 1).unwrap_err(),
            DecodeError::LengthMismatch
        );
        assert_eq!(
            Packet::parse_head(&p[..start], p.len() + 1).unwrap_err(),
            DecodeError::LengthMismatch
        );
        assert_eq!(
            Packet::parse_head(&p[..start - 1], p.len()).unwrap_err(),
            DecodeError::TooManyItems
        );
    }

    #[test]
    fn immediate_lookup_and_stream_ctrl() {
        let f = Flavour::SPEAD_64_40;
        let items = [
            ItemPointer::immediate(f, ids::HEAP_CNT, 9),
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
            ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, 1),
            ItemPointer::immediate(f, ids::STREAM_CTRL, ctrl::STOP),
            ItemPointer::immediate(f, 0x1600, 42),
        ];
        let mut out = vec![0u8; packet_len(items.len(), 1)];
        encode(f, &items, &[0], &mut out).unwrap();
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.stream_ctrl, Some(ctrl::STOP));
        assert_eq!(p.immediate(0x1600), Some(42));
        assert_eq!(p.heap_length, None);
    }
}
