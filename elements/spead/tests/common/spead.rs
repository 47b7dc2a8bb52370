//! Hand-made SPEAD packets for tests: heaps split the way spead2's sender splits them
//! (HEAP_CNT, HEAP_LENGTH, PAYLOAD_OFFSET, PAYLOAD_LENGTH in every packet, the heap's
//! pointers in the first, addressed values laid out in pointer order), single packets
//! with any field wrong, and the spead2-written fixtures in `tests/data`.
//!
//! Shared by the unit tests (through `#[path]`) and the integration tests. It names the
//! codec as `crate::wire`, which is the module itself in the unit tests; an integration
//! test brings it in scope at its root with `use firehose_spead::wire;`.

#![allow(dead_code)]

use crate::wire::{self, ctrl, ids, Flavour, ItemPointer, Packet};

/// An item value to send.
#[derive(Clone, Debug)]
pub enum Val {
    /// In the pointer.
    Imm(u64),
    /// In the payload.
    Bytes(Vec<u8>),
}

/// One packet: the four per-packet pointers (HEAP_LENGTH only if `heap_len` is given),
/// then `extra`, then `payload`.
pub fn packet(
    f: Flavour,
    cnt: u64,
    heap_len: Option<u64>,
    offset: u64,
    payload: &[u8],
    extra: &[ItemPointer],
) -> Vec<u8> {
    let mut items = vec![ItemPointer::immediate(f, ids::HEAP_CNT, cnt)];
    if let Some(l) = heap_len {
        items.push(ItemPointer::immediate(f, ids::HEAP_LENGTH, l));
    }
    items.push(ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, offset));
    items.push(ItemPointer::immediate(
        f,
        ids::PAYLOAD_LENGTH,
        payload.len() as u64,
    ));
    items.extend_from_slice(extra);
    let mut out = vec![0u8; wire::packet_len(items.len(), payload.len())];
    wire::encode(f, &items, payload, &mut out).unwrap();
    out
}

/// The heap payload and pointers for `items` (addressed values in order).
pub fn layout(f: Flavour, items: &[(u64, Val)]) -> (Vec<ItemPointer>, Vec<u8>) {
    let mut pointers = Vec::new();
    let mut payload = Vec::new();
    for (id, v) in items {
        match v {
            Val::Imm(x) => pointers.push(ItemPointer::immediate(f, *id, *x)),
            Val::Bytes(b) => {
                pointers.push(ItemPointer::addressed(f, *id, payload.len() as u64));
                payload.extend_from_slice(b);
            }
        }
    }
    (pointers, payload)
}

/// A heap as spead2 sends it: packets of at most `chunk` payload bytes; the pointers
/// ride in the first packet. With `with_length` false HEAP_LENGTH is left out.
pub fn heap_packets_opt(
    f: Flavour,
    cnt: u64,
    items: &[(u64, Val)],
    chunk: usize,
    with_length: bool,
) -> Vec<Vec<u8>> {
    let (pointers, mut payload) = layout(f, items);
    if payload.is_empty() {
        // spead2 never sends a packet without payload: an addressed NULL and a byte.
        payload.push(0);
    }
    let hl = with_length.then_some(payload.len() as u64);
    payload
        .chunks(chunk.max(1))
        .enumerate()
        .map(|(k, c)| {
            let extra: &[ItemPointer] = if k == 0 { &pointers } else { &[] };
            packet(f, cnt, hl, (k * chunk) as u64, c, extra)
        })
        .collect()
}

/// [`heap_packets_opt`] with HEAP_LENGTH.
pub fn heap_packets(f: Flavour, cnt: u64, items: &[(u64, Val)], chunk: usize) -> Vec<Vec<u8>> {
    heap_packets_opt(f, cnt, items, chunk, true)
}

/// The stop heap as spead2 sends it: STREAM_CTRL = stop, an addressed NULL, one zero byte.
pub fn stop_packet(f: Flavour, cnt: u64) -> Vec<u8> {
    packet(
        f,
        cnt,
        Some(1),
        0,
        &[0],
        &[
            ItemPointer::immediate(f, ids::STREAM_CTRL, ctrl::STOP),
            ItemPointer::addressed(f, ids::NULL, 0),
        ],
    )
}

/// `n` bytes of a pattern that depends on `seed`.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// A spead2 fixture (`tests/data/<name>.hex`): the concatenated packets.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}.hex", env!("CARGO_MANIFEST_DIR"));
    let s = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// What spead2's receiver made of a fixture (`tests/data/<name>.expect`), one line per
/// item or descriptor.
pub fn fixture_expect(name: &str) -> Vec<String> {
    let path = format!("{}/tests/data/{name}.expect", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The fixtures: flavour and packet size.
pub const FIXTURES: [&str; 4] = [
    "spead2-64-40-9000",
    "spead2-64-40-256",
    "spead2-64-48-9000",
    "spead2-64-48-256",
];

/// Splits concatenated packets.
pub fn split(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (_, n) = Packet::parse_prefix(bytes).expect("fixture packets parse");
        out.push(bytes[..n].to_vec());
        bytes = &bytes[n..];
    }
    out
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
