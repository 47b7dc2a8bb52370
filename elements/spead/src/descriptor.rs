//! SPEAD item descriptors (the value of a DESCRIPTOR item is itself a SPEAD packet).
//!
//! A descriptor is one complete single-packet heap (heap cnt 1, as spead2 writes it)
//! holding DESCRIPTOR_ID (immediate) and NAME, DESCRIPTION, FORMAT, SHAPE and optionally
//! DTYPE (addressed). [`parse`] reads one without trusting anything in it; [`encode`]
//! writes exactly the bytes spead2 writes, so the two interoperate byte for byte:
//! pointers HEAP_CNT, HEAP_LENGTH, PAYLOAD_OFFSET, PAYLOAD_LENGTH, ID, NAME, DESCRIPTION,
//! FORMAT, SHAPE[, DTYPE], then the payload in the same order.
//!
//! Field widths follow the flavour (A = heap address bits): a SHAPE entry is a flag byte
//! (bit 0 = variable length) and A/8 bytes of size; a FORMAT entry is a type character
//! and 8 − A/8 bytes of bit count.

use std::fmt;

use crate::reassembly::items::{extents, Extent};
use crate::wire::{ids, DecodeError, Flavour, ItemPointer, Packet};

/// One item's description.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// DESCRIPTOR_ID: the item id described.
    pub id: u64,
    /// DESCRIPTOR_NAME.
    pub name: String,
    /// DESCRIPTOR_DESCRIPTION.
    pub description: String,
    /// DESCRIPTOR_SHAPE: one entry per dimension; `None` = variable length.
    pub shape: Vec<Option<u64>>,
    /// DESCRIPTOR_FORMAT: (type char `u i f c b`, bits) pairs.
    pub format: Vec<(u8, u32)>,
    /// DESCRIPTOR_DTYPE: a numpy `.npy` header dict (overrides format and shape).
    pub dtype: Option<String>,
}

/// The type characters a FORMAT entry may hold (SPEAD: signed, unsigned, float, char,
/// bool).
pub const FORMAT_TYPES: &[u8] = b"uifcb";

/// Why a DESCRIPTOR value was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DescriptorError {
    /// The value is not one valid SPEAD packet.
    Packet(DecodeError),
    /// The packet is not a whole heap (payload offset not 0, or HEAP_LENGTH differs
    /// from the payload it carries).
    NotWholeHeap,
    /// An addressed field points beyond the payload.
    BeyondPayload(u64),
    /// No DESCRIPTOR_ID, or DESCRIPTOR_ID 0 (spead2 rejects those too).
    MissingId,
    /// NAME, DESCRIPTION or DTYPE is not UTF-8.
    NotText(u64),
    /// SHAPE or FORMAT is not a whole number of entries.
    BadLength(u64),
    /// A FORMAT entry has an unknown type character or an absurd bit count.
    BadFormat(u8, u64),
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Packet(e) => write!(f, "descriptor packet: {e}"),
            Self::NotWholeHeap => write!(f, "descriptor packet is not a whole heap"),
            Self::BeyondPayload(id) => write!(f, "descriptor field {id:#x} beyond its payload"),
            Self::MissingId => write!(f, "descriptor without DESCRIPTOR_ID"),
            Self::NotText(id) => write!(f, "descriptor field {id:#x} is not UTF-8"),
            Self::BadLength(id) => {
                write!(
                    f,
                    "descriptor field {id:#x} is not a whole number of entries"
                )
            }
            Self::BadFormat(c, bits) => write!(f, "descriptor format entry ({c:#x}, {bits})"),
        }
    }
}

impl std::error::Error for DescriptorError {}

/// Reads a DESCRIPTOR item's value. Never panics; anything that is not a well-formed
/// descriptor is an error (the caller counts it).
pub fn parse(value: &[u8]) -> Result<Descriptor, DescriptorError> {
    let p = Packet::parse(value).map_err(DescriptorError::Packet)?;
    let len = p.payload.len();
    if p.payload_offset != 0 || p.heap_length.is_some_and(|h| h != len as u64) {
        return Err(DescriptorError::NotWholeHeap);
    }
    let f = p.flavour;
    let pointers: Vec<u64> = p.items().map(|ip| ip.0).collect();
    let addr_bytes = usize::from(f.heap_address_bits() / 8);
    let mut d = Descriptor::default();
    for (ip, extent) in pointers.iter().zip(extents(f, &pointers, len)) {
        let ip = ItemPointer(*ip);
        let id = ip.id(f);
        let bytes = match extent {
            Extent::Immediate => {
                if id == ids::DESCRIPTOR_ID {
                    d.id = ip.value(f);
                }
                continue;
            }
            Extent::Beyond => return Err(DescriptorError::BeyondPayload(id)),
            // spead2 skips empty fields: the value stays at its default.
            Extent::Bytes(r) if r.is_empty() => continue,
            Extent::Bytes(r) => &p.payload[r],
        };
        match id {
            ids::DESCRIPTOR_NAME => d.name = text(id, bytes)?,
            ids::DESCRIPTOR_DESCRIPTION => d.description = text(id, bytes)?,
            ids::DESCRIPTOR_DTYPE => d.dtype = Some(text(id, bytes)?),
            ids::DESCRIPTOR_SHAPE => d.shape = shape(id, bytes, addr_bytes)?,
            ids::DESCRIPTOR_FORMAT => d.format = format(id, bytes, 8 - addr_bytes)?,
            // An addressed DESCRIPTOR_ID is ignored, as spead2 does; padding and
            // unknown fields are skipped.
            _ => {}
        }
    }
    if d.id == 0 {
        return Err(DescriptorError::MissingId);
    }
    Ok(d)
}

/// The DESCRIPTOR_ID a DESCRIPTOR item's value holds, as [`parse`] would read it, without
/// parsing the rest; `None` when the value is not a packet or holds no id (0 included).
pub fn peek_id(value: &[u8]) -> Option<u64> {
    let p = Packet::parse(value).ok()?;
    let f = p.flavour;
    p.items()
        .filter(|ip| ip.is_immediate() && ip.id(f) == ids::DESCRIPTOR_ID)
        .last()
        .map(|ip| ip.value(f))
        .filter(|&id| id != 0)
}

fn text(id: u64, bytes: &[u8]) -> Result<String, DescriptorError> {
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| DescriptorError::NotText(id))
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |v, &b| v << 8 | u64::from(b))
}

fn shape(id: u64, bytes: &[u8], size_bytes: usize) -> Result<Vec<Option<u64>>, DescriptorError> {
    let entry = 1 + size_bytes;
    if !bytes.len().is_multiple_of(entry) {
        return Err(DescriptorError::BadLength(id));
    }
    Ok(bytes
        .chunks_exact(entry)
        .map(|e| (e[0] & 1 == 0).then(|| be(&e[1..])))
        .collect())
}

fn format(id: u64, bytes: &[u8], bits_bytes: usize) -> Result<Vec<(u8, u32)>, DescriptorError> {
    let entry = 1 + bits_bytes;
    if !bytes.len().is_multiple_of(entry) {
        return Err(DescriptorError::BadLength(id));
    }
    bytes
        .chunks_exact(entry)
        .map(|e| {
            let bits = be(&e[1..]);
            match u32::try_from(bits) {
                Ok(b) if FORMAT_TYPES.contains(&e[0]) => Ok((e[0], b)),
                _ => Err(DescriptorError::BadFormat(e[0], bits)),
            }
        })
        .collect()
}

/// Writes `d` as a DESCRIPTOR item value in `flavour`, byte for byte as spead2 does.
///
/// Sizes and bit counts wider than their fields are truncated to the field, as on the
/// wire; a DTYPE is written only when present and non-empty (spead2 omits an empty one).
/// The encoded fields must fit the flavour's heap addresses (2^A bytes: 255 for 64-8,
/// 1 TiB for 64-40), as with spead2.
pub fn encode(d: &Descriptor, flavour: Flavour) -> Vec<u8> {
    let addr_bytes = usize::from(flavour.heap_address_bits() / 8);
    let bits_bytes = 8 - addr_bytes;
    let dtype = d.dtype.as_deref().filter(|s| !s.is_empty());
    let name_len = d.name.len();
    let desc_len = d.description.len();
    let format_len = d.format.len() * (1 + bits_bytes);
    let shape_len = d.shape.len() * (1 + addr_bytes);
    let payload_len = name_len + desc_len + format_len + shape_len + dtype.map_or(0, str::len);

    let pl = payload_len as u64;
    let mut at = 0u64;
    let mut addressed = |id: u64, len: usize| {
        let ip = ItemPointer::addressed(flavour, id, at);
        at += len as u64;
        ip
    };
    let mut items = vec![
        ItemPointer::immediate(flavour, ids::HEAP_CNT, 1),
        ItemPointer::immediate(flavour, ids::HEAP_LENGTH, pl),
        ItemPointer::immediate(flavour, ids::PAYLOAD_OFFSET, 0),
        ItemPointer::immediate(flavour, ids::PAYLOAD_LENGTH, pl),
        ItemPointer::immediate(flavour, ids::DESCRIPTOR_ID, d.id),
        addressed(ids::DESCRIPTOR_NAME, name_len),
        addressed(ids::DESCRIPTOR_DESCRIPTION, desc_len),
        addressed(ids::DESCRIPTOR_FORMAT, format_len),
        addressed(ids::DESCRIPTOR_SHAPE, shape_len),
    ];
    if let Some(t) = dtype {
        items.push(addressed(ids::DESCRIPTOR_DTYPE, t.len()));
    }

    let mut payload = Vec::with_capacity(payload_len);
    payload.extend_from_slice(d.name.as_bytes());
    payload.extend_from_slice(d.description.as_bytes());
    for &(c, bits) in &d.format {
        payload.push(c);
        payload.extend_from_slice(&u64::from(bits).to_be_bytes()[8 - bits_bytes..]);
    }
    for dim in &d.shape {
        payload.push(u8::from(dim.is_none()));
        payload.extend_from_slice(&dim.unwrap_or(0).to_be_bytes()[8 - addr_bytes..]);
    }
    if let Some(t) = dtype {
        payload.extend_from_slice(t.as_bytes());
    }

    let mut out = vec![0u8; crate::wire::packet_len(items.len(), payload.len())];
    let n = crate::wire::encode(flavour, &items, &payload, &mut out)
        .expect("the buffer is sized for the packet and there are at most 10 items");
    debug_assert_eq!(n, out.len());
    out
}

#[cfg(test)]
mod tests;
