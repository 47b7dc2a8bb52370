//! Heaps to packets, split exactly as spead2's sender splits them. No GStreamer types.
//!
//! Every packet carries HEAP_CNT, HEAP_LENGTH, PAYLOAD_OFFSET and PAYLOAD_LENGTH, then
//! the heap's own item pointers, once, in the first packet(s) (spilling into later ones
//! when they do not fit), then payload. The payload is the addressed items' bytes laid
//! out in pointer order. Every packet carries payload — at least one byte, and a
//! multiple of 8 in every packet but the last — so a receiver can order packets and see
//! losses; a heap with too little payload for that gets an addressed NULL item after
//! its own pointers and zero padding (the stop heap: STREAM_CTRL = 2, a NULL and one
//! zero byte).
//!
//! The packets are byte-identical to spead2 4.5.1's (`tests/interop_engine.rs` checks
//! that against spead2 itself), with one deliberate exception: when one packet holds
//! both the end of the items' bytes and padding, spead2 4.5.1 writes the padding first,
//! so even its own receiver reads zeros for that item; here the bytes stay where their
//! pointer says.
//!
//! [`PacketConfig::heap`] checks a heap and returns a [`HeapPackets`], which writes the
//! packets into caller-provided memory (a pool slab) and reports each one's offset and
//! length, so a batch buffer can be built with no allocation per packet. A heap larger
//! than the slab is written across several slabs: [`HeapPackets::fill`] resumes where
//! it stopped.

use std::fmt;

use crate::wire::{ctrl, ids, Flavour, ItemPointer, HEADER_LEN, ITEM_LEN, MAGIC, VERSION};

/// Bytes every packet starts with: the header and the four per-packet item pointers.
pub const PREFIX_LEN: usize = HEADER_LEN + 4 * ITEM_LEN;
/// The smallest packet size accepted (spead2's): the prefix, one item pointer and 8
/// bytes of payload.
pub const MIN_PACKET_SIZE: usize = PREFIX_LEN + 2 * ITEM_LEN;
/// The largest packet size accepted: the largest UDP payload over IPv4, rounded down to
/// a multiple of 8.
pub const MAX_PACKET_SIZE: usize = 65507 & !7;
/// spead2's default packet size: a 1500-byte MTU less the IPv4 and UDP headers.
pub const DEFAULT_PACKET_SIZE: usize = 1472;

/// `size` rounded down to a multiple of 8, as spead2 does so that payloads stay aligned.
pub fn round_packet_size(size: usize) -> usize {
    size & !7
}

/// The value of one item of a heap to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// Stored in the item pointer (right-aligned in the flavour's address bits).
    Immediate(u64),
    /// Addressed: these bytes go into the heap payload.
    Bytes(&'a [u8]),
}

/// One item of a heap to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// Item id.
    pub id: u64,
    /// Its value.
    pub value: Value<'a>,
}

impl<'a> Item<'a> {
    /// An immediate item.
    pub fn immediate(id: u64, value: u64) -> Self {
        Self {
            id,
            value: Value::Immediate(value),
        }
    }

    /// An addressed item holding `bytes`.
    pub fn bytes(id: u64, bytes: &'a [u8]) -> Self {
        Self {
            id,
            value: Value::Bytes(bytes),
        }
    }

    /// A DESCRIPTOR item whose value is an encoded descriptor (a nested SPEAD packet).
    pub fn descriptor(encoded: &'a [u8]) -> Self {
        Self::bytes(ids::DESCRIPTOR, encoded)
    }

    /// The STREAM_CTRL = stop item: a heap holding only this ends the stream.
    pub fn stop() -> Self {
        Self::immediate(ids::STREAM_CTRL, ctrl::STOP)
    }
}

/// Why a heap (or a packet size) cannot be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The packet size (after rounding down to a multiple of 8) is outside
    /// [`MIN_PACKET_SIZE`]..=[`MAX_PACKET_SIZE`].
    BadPacketSize {
        /// The size asked for.
        size: usize,
    },
    /// HEAP_CNT does not fit the flavour's address bits.
    HeapCntTooLarge {
        /// The heap counter.
        cnt: u64,
        /// The largest the flavour carries.
        max: u64,
    },
    /// An item id does not fit the flavour's item-id bits.
    ItemIdTooLarge {
        /// The item id.
        id: u64,
        /// The largest the flavour carries.
        max: u64,
    },
    /// An immediate value does not fit the flavour's address bits.
    ImmediateTooLarge {
        /// The item id.
        id: u64,
        /// The value.
        value: u64,
        /// The largest the flavour carries.
        max: u64,
    },
    /// The heap payload is longer than the flavour can address.
    HeapTooLarge {
        /// Payload bytes.
        bytes: u64,
        /// The largest the flavour addresses.
        max: u64,
    },
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SendError::BadPacketSize { size } => write!(
                f,
                "packet size {size} is outside {MIN_PACKET_SIZE}..={MAX_PACKET_SIZE} \
                 (after rounding down to a multiple of 8)"
            ),
            SendError::HeapCntTooLarge { cnt, max } => {
                write!(f, "heap cnt {cnt} is above the flavour's maximum {max}")
            }
            SendError::ItemIdTooLarge { id, max } => {
                write!(f, "item id {id:#x} is above the flavour's maximum {max:#x}")
            }
            SendError::ImmediateTooLarge { id, value, max } => write!(
                f,
                "immediate item {id:#x} = {value} is above the flavour's maximum {max}"
            ),
            SendError::HeapTooLarge { bytes, max } => write!(
                f,
                "heap payload of {bytes} bytes is more than the flavour addresses ({max})"
            ),
        }
    }
}

impl std::error::Error for SendError {}

/// Flavour and packet size: how heaps are cut into packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketConfig {
    flavour: Flavour,
    packet_size: usize,
    max_pointers: usize,
}

impl PacketConfig {
    /// Packets of at most `packet_size` bytes (rounded down to a multiple of 8) in
    /// `flavour`.
    pub fn new(flavour: Flavour, packet_size: usize) -> Result<Self, SendError> {
        let rounded = round_packet_size(packet_size);
        if !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&rounded) {
            return Err(SendError::BadPacketSize { size: packet_size });
        }
        // spead2 keeps room for 8 payload bytes beside a full set of pointers, so a
        // packet of pointers still carries payload and later payloads stay aligned.
        let max_pointers = (rounded - PREFIX_LEN - ITEM_LEN) / ITEM_LEN;
        Ok(Self {
            flavour,
            packet_size: rounded,
            max_pointers,
        })
    }

    /// The flavour.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The largest packet, bytes (a multiple of 8).
    pub fn packet_size(&self) -> usize {
        self.packet_size
    }

    /// The most of a heap's own item pointers one packet carries.
    pub fn max_pointers_per_packet(&self) -> usize {
        self.max_pointers
    }

    /// Checks heap `cnt` with `items` (in pointer order) and prepares its packets.
    pub fn heap<'h>(&self, cnt: u64, items: &'h [Item<'h>]) -> Result<HeapPackets<'h>, SendError> {
        let f = self.flavour;
        if cnt > f.max_value() {
            return Err(SendError::HeapCntTooLarge {
                cnt,
                max: f.max_value(),
            });
        }
        let mut payload: u64 = 0;
        for it in items {
            if it.id > f.max_id() {
                return Err(SendError::ItemIdTooLarge {
                    id: it.id,
                    max: f.max_id(),
                });
            }
            match it.value {
                Value::Immediate(v) if v > f.max_value() => {
                    return Err(SendError::ImmediateTooLarge {
                        id: it.id,
                        value: v,
                        max: f.max_value(),
                    })
                }
                Value::Immediate(_) => {}
                Value::Bytes(b) => payload += b.len() as u64,
            }
        }
        // As spead2: the packets that carry pointers (plus one, in case a NULL pointer
        // must follow the items) each need payload — 8 bytes in all but the last.
        let pointer_packets = items.len() / self.max_pointers + 1;
        let min_payload = ((pointer_packets - 1) * ITEM_LEN + 1) as u64;
        let need_null = payload < min_payload;
        let payload_size = payload.max(min_payload);
        if payload_size > f.max_value() {
            return Err(SendError::HeapTooLarge {
                bytes: payload_size,
                max: f.max_value(),
            });
        }
        Ok(HeapPackets {
            cfg: *self,
            cnt,
            items,
            payload_size,
            need_null,
            next_pointer: 0,
            next_address: 0,
            payload_offset: 0,
            next_item: 0,
            next_item_offset: 0,
        })
    }
}

/// The packets of one heap, written on demand; resumable across slabs.
#[derive(Clone, Debug)]
pub struct HeapPackets<'h> {
    cfg: PacketConfig,
    cnt: u64,
    items: &'h [Item<'h>],
    /// HEAP_LENGTH: the items' bytes plus any padding.
    payload_size: u64,
    /// A NULL pointer follows the items, to mark where their bytes end and the padding
    /// starts.
    need_null: bool,
    /// Next pointer to write (== items.len() means the NULL).
    next_pointer: usize,
    /// Heap address of the next addressed pointer.
    next_address: u64,
    payload_offset: u64,
    /// Item whose bytes come next in the payload, and how far into it.
    next_item: usize,
    next_item_offset: usize,
}

impl HeapPackets<'_> {
    /// HEAP_CNT.
    pub fn heap_cnt(&self) -> u64 {
        self.cnt
    }

    /// HEAP_LENGTH: payload bytes of the heap, padding included.
    pub fn heap_length(&self) -> u64 {
        self.payload_size
    }

    /// True once every packet has been written.
    pub fn is_done(&self) -> bool {
        self.payload_offset >= self.payload_size
    }

    fn pointers_left(&self) -> usize {
        self.items.len() + usize::from(self.need_null) - self.next_pointer
    }

    /// Pointers and payload bytes of the next packet.
    fn next_shape(&self) -> Option<(usize, usize)> {
        if self.is_done() {
            return None;
        }
        let n = self.cfg.max_pointers.min(self.pointers_left());
        let room = self.cfg.packet_size - PREFIX_LEN - n * ITEM_LEN;
        let payload = (self.payload_size - self.payload_offset).min(room as u64) as usize;
        Some((n, payload))
    }

    /// Length of the next packet, or `None` when done.
    pub fn next_len(&self) -> Option<usize> {
        self.next_shape()
            .map(|(n, payload)| PREFIX_LEN + n * ITEM_LEN + payload)
    }

    /// Packets and bytes still to write.
    pub fn remaining(&self) -> (usize, usize) {
        let (mut pointers, mut left) = (
            self.pointers_left(),
            (self.payload_size - self.payload_offset) as usize,
        );
        let (mut packets, mut bytes) = (0, 0);
        // Packets that still carry pointers, one by one (a handful per heap)…
        while left > 0 && pointers > 0 {
            let n = self.cfg.max_pointers.min(pointers);
            let payload = left.min(self.cfg.packet_size - PREFIX_LEN - n * ITEM_LEN);
            packets += 1;
            bytes += PREFIX_LEN + n * ITEM_LEN + payload;
            pointers -= n;
            left -= payload;
        }
        // …then full payload-only packets and a last short one, in closed form.
        let per = self.cfg.packet_size - PREFIX_LEN;
        let tail = left.div_ceil(per);
        (packets + tail, bytes + left + tail * PREFIX_LEN)
    }

    /// Writes the next packet at the start of `out`; returns its length, or `None`
    /// when done or when `out` is too short (nothing is written then).
    pub fn write_next(&mut self, out: &mut [u8]) -> Option<usize> {
        let (n, payload_len) = self.next_shape()?;
        let len = PREFIX_LEN + n * ITEM_LEN + payload_len;
        let out = out.get_mut(..len)?;
        let f = self.cfg.flavour;
        let addr_bytes = f.heap_address_bits() / 8;
        let n_all = (n + 4) as u16;
        out[..HEADER_LEN].copy_from_slice(&[
            MAGIC,
            VERSION,
            8 - addr_bytes,
            addr_bytes,
            0,
            0,
            (n_all >> 8) as u8,
            n_all as u8,
        ]);
        let mut at = HEADER_LEN;
        let mut put = |ip: ItemPointer| {
            out[at..at + ITEM_LEN].copy_from_slice(&ip.0.to_be_bytes());
            at += ITEM_LEN;
        };
        put(ItemPointer::immediate(f, ids::HEAP_CNT, self.cnt));
        put(ItemPointer::immediate(
            f,
            ids::HEAP_LENGTH,
            self.payload_size,
        ));
        put(ItemPointer::immediate(
            f,
            ids::PAYLOAD_OFFSET,
            self.payload_offset,
        ));
        put(ItemPointer::immediate(
            f,
            ids::PAYLOAD_LENGTH,
            payload_len as u64,
        ));
        for _ in 0..n {
            let ip = match self.items.get(self.next_pointer) {
                None => ItemPointer::addressed(f, ids::NULL, self.next_address),
                Some(Item {
                    id,
                    value: Value::Immediate(v),
                }) => ItemPointer::immediate(f, *id, *v),
                Some(Item {
                    id,
                    value: Value::Bytes(b),
                }) => {
                    let ip = ItemPointer::addressed(f, *id, self.next_address);
                    self.next_address += b.len() as u64;
                    ip
                }
            };
            put(ip);
            self.next_pointer += 1;
        }
        let mut dst = &mut out[PREFIX_LEN + n * ITEM_LEN..];
        while !dst.is_empty() {
            let Some(item) = self.items.get(self.next_item) else {
                // Padding after the last item's bytes (see `need_null`).
                dst.fill(0);
                break;
            };
            let Value::Bytes(src) = item.value else {
                self.next_item += 1;
                continue;
            };
            let take = (src.len() - self.next_item_offset).min(dst.len());
            let (head, tail) = dst.split_at_mut(take);
            head.copy_from_slice(&src[self.next_item_offset..self.next_item_offset + take]);
            dst = tail;
            self.next_item_offset += take;
            if self.next_item_offset == src.len() {
                self.next_item += 1;
                self.next_item_offset = 0;
            }
        }
        self.payload_offset += payload_len as u64;
        Some(len)
    }

    /// Writes as many whole packets as fit into `out`, back to back from its start,
    /// calling `on_packet(offset, len)` for each; returns the bytes used. Call again
    /// with fresh memory until [`HeapPackets::is_done`].
    pub fn fill(&mut self, out: &mut [u8], mut on_packet: impl FnMut(usize, usize)) -> usize {
        let mut used = 0;
        while let Some(len) = self.write_next(&mut out[used..]) {
            on_packet(used, len);
            used += len;
        }
        used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Packet;

    const F40: Flavour = Flavour::SPEAD_64_40;

    /// Writes every packet of a heap into one big buffer; returns the packets.
    fn packets(cfg: &PacketConfig, cnt: u64, items: &[Item<'_>]) -> Vec<Vec<u8>> {
        let mut hp = cfg.heap(cnt, items).unwrap();
        let (n, bytes) = hp.remaining();
        let mut slab = vec![0u8; bytes];
        let mut spans = Vec::new();
        let used = hp.fill(&mut slab, |o, l| spans.push((o, l)));
        assert!(hp.is_done());
        assert_eq!((spans.len(), used), (n, bytes), "remaining() predicted it");
        spans
            .iter()
            .map(|&(o, l)| slab[o..o + l].to_vec())
            .collect()
    }

    /// A receiver's view: the heap payload, and every non-per-packet pointer in order.
    fn reassemble(f: Flavour, pkts: &[Vec<u8>]) -> (u64, Vec<u8>, Vec<ItemPointer>) {
        let first = Packet::parse(&pkts[0]).unwrap();
        let len = first.heap_length.unwrap() as usize;
        let mut payload = vec![0xEEu8; len];
        let mut pointers = Vec::new();
        let mut expect_offset = 0;
        for p in pkts {
            let p = Packet::parse(p).unwrap();
            assert_eq!(p.flavour, f);
            assert_eq!(p.heap_cnt, first.heap_cnt);
            assert_eq!(p.heap_length, Some(len as u64));
            assert_eq!(p.payload_offset, expect_offset, "in offset order, no gaps");
            assert!(!p.payload.is_empty(), "every packet carries payload");
            let ids: Vec<u64> = p.items().take(4).map(|ip| ip.id(f)).collect();
            assert_eq!(
                ids,
                [1, 2, 3, 4],
                "per-packet items first, in spead2's order"
            );
            let at = p.payload_offset as usize;
            payload[at..at + p.payload.len()].copy_from_slice(p.payload);
            expect_offset += p.payload.len() as u64;
            pointers.extend(p.items().skip(4));
        }
        assert_eq!(expect_offset as usize, len);
        (first.heap_cnt, payload, pointers)
    }

    /// Each addressed pointer's bytes: up to the next larger address or the heap end.
    fn value_of(f: Flavour, pointers: &[ItemPointer], payload: &[u8], id: u64) -> Vec<u8> {
        let ip = pointers.iter().find(|p| p.id(f) == id).unwrap();
        let start = ip.value(f);
        let end = pointers
            .iter()
            .filter(|p| !p.is_immediate() && p.value(f) > start)
            .map(|p| p.value(f))
            .min()
            .unwrap_or(payload.len() as u64);
        payload[start as usize..end as usize].to_vec()
    }

    #[test]
    fn round_trip_multi_packet_heap_in_both_flavours() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let small = b"hello, spead".to_vec();
        let desc = vec![0x53u8; 77];
        for f in [Flavour::SPEAD_64_40, Flavour::SPEAD_64_48] {
            for size in [1472, 8972, 9000, 1475] {
                let cfg = PacketConfig::new(f, size).unwrap();
                assert_eq!(cfg.packet_size(), size & !7);
                let items = [
                    Item::descriptor(&desc),
                    Item::immediate(0x1600, 123_456),
                    Item::bytes(0x1000, &big),
                    Item::bytes(0x1001, &small),
                ];
                let pkts = packets(&cfg, 42, &items);
                for p in &pkts[..pkts.len() - 1] {
                    assert_eq!(p.len(), cfg.packet_size(), "all but the last are full");
                }
                let (cnt, payload, ptrs) = reassemble(f, &pkts);
                assert_eq!(cnt, 42);
                assert_eq!(payload.len(), big.len() + small.len() + desc.len());
                let ids: Vec<u64> = ptrs.iter().map(|p| p.id(f)).collect();
                assert_eq!(ids, [5, 0x1600, 0x1000, 0x1001], "items once, in order");
                assert_eq!(ptrs[1].value(f), 123_456);
                assert!(ptrs[1].is_immediate());
                assert_eq!(value_of(f, &ptrs, &payload, 0x1000), big);
                assert_eq!(value_of(f, &ptrs, &payload, 0x1001), small);
                assert_eq!(value_of(f, &ptrs, &payload, 5), desc);
                // Bytes laid out in pointer order.
                assert_eq!(ptrs[0].value(f), 0);
                assert_eq!(ptrs[2].value(f), desc.len() as u64);
            }
        }
    }

    #[test]
    fn stop_heap_is_a_null_and_one_zero_byte() {
        let cfg = PacketConfig::new(F40, 1472).unwrap();
        let items = [Item::stop()];
        let pkts = packets(&cfg, 7, &items);
        assert_eq!(pkts.len(), 1);
        // Reference built by hand: header, 4 per-packet pointers, STREAM_CTRL=2 (immediate),
        // NULL at address 0 (addressed), one zero byte.
        let mut want = vec![0x53, 4, 3, 5, 0, 0, 0, 6];
        for w in [
            0x8000_0100_0000_0007u64, // HEAP_CNT 7
            0x8000_0200_0000_0001,    // HEAP_LENGTH 1
            0x8000_0300_0000_0000,    // PAYLOAD_OFFSET 0
            0x8000_0400_0000_0001,    // PAYLOAD_LENGTH 1
            0x8000_0600_0000_0002,    // STREAM_CTRL stop
            0x0000_0000_0000_0000,    // NULL @ 0
        ] {
            want.extend_from_slice(&w.to_be_bytes());
        }
        want.push(0);
        assert_eq!(pkts[0], want);
        let p = Packet::parse(&pkts[0]).unwrap();
        assert_eq!(p.stream_ctrl, Some(ctrl::STOP));
    }

    #[test]
    fn byte_layout_matches_a_hand_made_reference() {
        // 64 bytes: prefix 40 + room for 2 pointers + 8 payload bytes.
        let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 64).unwrap();
        assert_eq!(cfg.max_pointers_per_packet(), 2);
        let a = [0xA0u8, 0xA1, 0xA2];
        let b: Vec<u8> = (0xB0..0xBD).collect(); // 13 bytes
        let items = [
            Item::bytes(0x1000, &a),
            Item::immediate(0x1001, 0xABCDEF),
            Item::bytes(0x1002, &b),
        ];
        let pkts = packets(&cfg, 0x0102_0304_0506, &items);
        // 16 payload bytes, 3 pointers: packet 1 carries 2 pointers + 8 bytes, packet 2
        // the last pointer + the remaining 8 bytes.
        assert_eq!(pkts.len(), 2);
        let imm = |id: u64, v: u64| (1u64 << 63 | id << 48 | v).to_be_bytes();
        let adr = |id: u64, v: u64| (id << 48 | v).to_be_bytes();
        // The 64-48 header (its last byte the pointer count), the four per-packet
        // pointers (HEAP_CNT, HEAP_LENGTH 16, PAYLOAD_OFFSET `offset`, PAYLOAD_LENGTH),
        // the heap's `pointers`, the payload.
        let packet = |offset: u64, pointers: &[[u8; 8]], payload: &[u8]| {
            let mut p = vec![0x53, 4, 2, 6, 0, 0, 0, 4 + pointers.len() as u8];
            let per_packet = [
                imm(1, 0x0102_0304_0506),
                imm(2, 16),
                imm(3, offset),
                imm(4, payload.len() as u64),
            ];
            for w in per_packet.iter().chain(pointers) {
                p.extend_from_slice(w);
            }
            p.extend_from_slice(payload);
            p
        };
        let p1 = packet(
            0,
            &[adr(0x1000, 0), imm(0x1001, 0xABCDEF)],
            &[0xA0, 0xA1, 0xA2, 0xB0, 0xB1, 0xB2, 0xB3, 0xB4],
        );
        let p2 = packet(8, &[adr(0x1002, 3)], &b[5..]);
        assert_eq!(pkts, vec![p1, p2]);
    }

    #[test]
    fn pointers_spill_and_short_heaps_get_padding() {
        // 10 immediates, 2 pointers per packet: 5 pointer packets (+ the NULL) each
        // need payload; the heap has none, so it gets 5·8 + 1 bytes of padding.
        let cfg = PacketConfig::new(F40, 64).unwrap();
        let items: Vec<Item<'_>> = (0..10).map(|i| Item::immediate(0x2000 + i, i)).collect();
        let pkts = packets(&cfg, 1, &items);
        let (_, payload, ptrs) = reassemble(F40, &pkts);
        assert_eq!(payload, vec![0u8; 41]);
        assert_eq!(pkts.len(), 6);
        assert_eq!(ptrs.len(), 11);
        let last = ptrs.last().unwrap();
        assert_eq!((last.id(F40), last.is_immediate()), (ids::NULL, false));
        for (i, p) in ptrs[..10].iter().enumerate() {
            assert_eq!((p.id(F40), p.value(F40)), (0x2000 + i as u64, i as u64));
        }
        // A small addressed item: the NULL marks where its bytes end.
        let items = [
            Item::immediate(0x3000, 1),
            Item::immediate(0x3001, 2),
            Item::bytes(0x1000, b"abc"),
        ];
        let pkts = packets(&cfg, 2, &items);
        let (_, payload, ptrs) = reassemble(F40, &pkts);
        assert_eq!(payload.len(), 9);
        assert_eq!(value_of(F40, &ptrs, &payload, 0x1000), b"abc");
        let null = ptrs.last().unwrap();
        assert_eq!((null.id(F40), null.value(F40)), (ids::NULL, 3));
    }

    #[test]
    fn fill_resumes_across_small_slabs() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 253) as u8).collect();
        let items = [Item::bytes(0x1000, &data)];
        let cfg = PacketConfig::new(F40, 1472).unwrap();
        let whole = packets(&cfg, 9, &items);
        let mut hp = cfg.heap(9, &items).unwrap();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut slab = vec![0u8; 5000]; // three full packets per slab
        while !hp.is_done() {
            let mut spans = Vec::new();
            let used = hp.fill(&mut slab, |o, l| spans.push((o, l)));
            assert!(used > 0 && spans.len() <= 3);
            got.extend(spans.into_iter().map(|(o, l)| slab[o..o + l].to_vec()));
        }
        assert_eq!(got, whole);
        // A slab too small for the next packet writes nothing and changes nothing.
        let mut hp = cfg.heap(9, &items).unwrap();
        assert_eq!(hp.fill(&mut [0u8; 100], |_, _| panic!()), 0);
        assert_eq!(hp.next_len(), Some(1472));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(
            PacketConfig::new(F40, 50),
            Err(SendError::BadPacketSize { size: 50 })
        );
        assert!(PacketConfig::new(F40, 70_000).is_err());
        assert_eq!(PacketConfig::new(F40, 1479).unwrap().packet_size(), 1472);
        let cfg = PacketConfig::new(F40, 1472).unwrap();
        assert!(matches!(
            cfg.heap(1 << 40, &[]),
            Err(SendError::HeapCntTooLarge { .. })
        ));
        assert!(matches!(
            cfg.heap(1, &[Item::immediate(1 << 23, 0)]),
            Err(SendError::ItemIdTooLarge { .. })
        ));
        assert!(matches!(
            cfg.heap(1, &[Item::immediate(0x1000, 1 << 40)]),
            Err(SendError::ImmediateTooLarge { .. })
        ));
        let msg = SendError::BadPacketSize { size: 3 }.to_string();
        assert!(msg.contains("56..="), "{msg}");
    }
}
