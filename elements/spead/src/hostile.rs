//! Bad SPEAD packets on purpose, for the hostile-traffic suite (`tests/`, `firehose bench
//! hostile`) and the fuzzers' seeds. No GStreamer types, no I/O: every generator writes one
//! packet into caller memory and returns its length, deterministically from a seeded
//! [`Xorshift`].
//!
//! The suite sends a *legitimate* stream ([`Legit`]: heaps of one addressed item whose
//! bytes are a function of the heap counter, cut as spead2 cuts them) and, beside it, one
//! [`Class`] of bad packets. A receiver passes when every legitimate heap arrives complete
//! and byte-exact ([`Legit::check`]), whatever the bad packets did. The classes that
//! reuse real heap counters (duplicates, overlaps, lying lengths) carry the real bytes or
//! are invalid on their own: SPEAD has no authentication, so a *valid* packet with other
//! bytes for a real heap is indistinguishable from the sender's and no receiver can be
//! asked to resist it.

use firehose_core::testing::Xorshift;

use crate::descriptor::{self, Descriptor};
use crate::send::{PacketConfig, SendError, PREFIX_LEN};
use crate::wire::{self, ctrl, ids, Flavour, ItemPointer, HEADER_LEN, ITEM_LEN};

/// The item id of the legitimate stream's one addressed item.
pub const LEGIT_ITEM: u64 = 0x1000;

/// Bytes a generator may write: the largest SPEAD packet sent over UDP/IPv4.
pub const MAX_PACKET: usize = crate::send::MAX_PACKET_SIZE;

/// One class of bad packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Real-looking packets cut short anywhere: in the header, the pointers or the payload.
    Truncated,
    /// HEAP_LENGTH / PAYLOAD_LENGTH beyond the packet or the heap, absurd heap sizes,
    /// also for the counters of real heaps.
    LyingLengths,
    /// PAYLOAD_OFFSET far beyond HEAP_LENGTH (or near 2^40), also for real heaps.
    HugeOffsets,
    /// Valid partial heaps with counters far ahead of and behind the stream.
    HugeIds,
    /// Single-packet heaps each describing a new item id.
    DescriptorFlood,
    /// One item id described again and again, differently each time.
    DescriptorChurn,
    /// Exact copies of the legitimate packets (a replay).
    Duplicates,
    /// The legitimate heaps' real bytes at other offsets and lengths.
    Overlaps,
    /// Many distinct partial heaps near the stream (behind it and just beyond its window).
    WindowThrash,
    /// STREAM_CTRL = stop heaps with random counters.
    StopSpoof,
    /// Random bytes, some behind a valid SPEAD header.
    RandomBytes,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 11] = [
        Class::Truncated,
        Class::LyingLengths,
        Class::HugeOffsets,
        Class::HugeIds,
        Class::DescriptorFlood,
        Class::DescriptorChurn,
        Class::Duplicates,
        Class::Overlaps,
        Class::WindowThrash,
        Class::StopSpoof,
        Class::RandomBytes,
    ];

    /// The name on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Truncated => "truncated",
            Class::LyingLengths => "lying-lengths",
            Class::HugeOffsets => "huge-offsets",
            Class::HugeIds => "huge-ids",
            Class::DescriptorFlood => "descriptor-flood",
            Class::DescriptorChurn => "descriptor-churn",
            Class::Duplicates => "duplicates",
            Class::Overlaps => "overlaps",
            Class::WindowThrash => "window-thrash",
            Class::StopSpoof => "stop-spoof",
            Class::RandomBytes => "random-bytes",
        }
    }

    /// The class named `s`.
    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The legitimate stream: heap `cnt` holds item [`LEGIT_ITEM`], `heap_size` bytes whose
/// 8-byte word `w` is [`word`]`(cnt, w)`, cut into packets of `packet_size` bytes with
/// every packet carrying HEAP_CNT, HEAP_LENGTH, PAYLOAD_OFFSET, PAYLOAD_LENGTH and the
/// first also the item's pointer — byte for byte what [`crate::send`] (and spead2) send.
#[derive(Clone, Copy, Debug)]
pub struct Legit {
    cfg: PacketConfig,
    heap_size: usize,
}

/// Word `w` of legitimate heap `cnt`: distinct across heaps and positions, cheap to check.
pub fn word(cnt: u64, w: u64) -> u64 {
    cnt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ w.wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// Writes the bytes of heap `cnt` from heap offset `at` into `out` (any alignment): a
/// byte at a time up to a word boundary, then whole words (the generators write
/// hundreds of thousands of packets a second).
pub fn fill(cnt: u64, at: u64, out: &mut [u8]) {
    let head = (((8 - at % 8) % 8) as usize).min(out.len());
    let (first, rest) = out.split_at_mut(head);
    for (k, b) in first.iter_mut().enumerate() {
        let o = at + k as u64;
        *b = word(cnt, o / 8).to_le_bytes()[(o % 8) as usize];
    }
    let w0 = (at + head as u64) / 8;
    let mut words = rest.chunks_exact_mut(8);
    let mut w = w0;
    for c in &mut words {
        c.copy_from_slice(&word(cnt, w).to_le_bytes());
        w += 1;
    }
    for (k, b) in words.into_remainder().iter_mut().enumerate() {
        *b = word(cnt, w).to_le_bytes()[k];
    }
}

/// Writes a whole heap's bytes.
fn fill_heap(cnt: u64, out: &mut [u8]) {
    fill(cnt, 0, out);
}

impl Legit {
    /// Heaps of `heap_size` bytes (at least 8) in packets of `packet_size` bytes.
    pub fn new(flavour: Flavour, packet_size: usize, heap_size: usize) -> Result<Self, SendError> {
        let cfg = PacketConfig::new(flavour, packet_size)?;
        Ok(Self {
            cfg,
            heap_size: heap_size.max(8),
        })
    }

    /// The flavour.
    pub fn flavour(&self) -> Flavour {
        self.cfg.flavour()
    }

    /// Heap payload bytes.
    pub fn heap_size(&self) -> usize {
        self.heap_size
    }

    /// Payload bytes of the first packet (it also carries the item pointer).
    fn first_payload(&self) -> usize {
        self.cfg.packet_size() - PREFIX_LEN - ITEM_LEN
    }

    /// Payload bytes of every later packet.
    fn later_payload(&self) -> usize {
        self.cfg.packet_size() - PREFIX_LEN
    }

    /// Packets per heap.
    pub fn packets_per_heap(&self) -> usize {
        let first = self.first_payload();
        if self.heap_size <= first {
            1
        } else {
            1 + (self.heap_size - first).div_ceil(self.later_payload())
        }
    }

    /// Heap offset and length of packet `k`'s payload.
    fn payload_range(&self, k: usize) -> (usize, usize) {
        let first = self.first_payload();
        let at = if k == 0 {
            0
        } else {
            first + (k - 1) * self.later_payload()
        };
        let cap = if k == 0 { first } else { self.later_payload() };
        (at, cap.min(self.heap_size.saturating_sub(at)))
    }

    /// Writes packet `k` (of [`Self::packets_per_heap`]) of heap `cnt` into `out`
    /// (at least the packet size); returns its length.
    pub fn packet(&self, cnt: u64, k: usize, out: &mut [u8]) -> usize {
        let f = self.flavour();
        let (at, len) = self.payload_range(k);
        let first = [ItemPointer::addressed(f, LEGIT_ITEM, 0)];
        let extra: &[ItemPointer] = if k == 0 { &first } else { &[] };
        let n = header(
            f,
            cnt,
            Some(self.heap_size as u64),
            at as u64,
            len as u64,
            extra,
            out,
        );
        fill(cnt, at as u64, &mut out[n..n + len]);
        n + len
    }

    /// True when `heap` is heap `cnt`'s payload, whole and unaltered.
    pub fn check(&self, cnt: u64, heap: &[u8]) -> bool {
        heap.len() == self.heap_size && check_bytes(cnt, heap)
    }
}

/// True when `bytes` (from heap offset 0) are heap `cnt`'s.
pub fn check_bytes(cnt: u64, bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let ok = (&mut words)
        .enumerate()
        .all(|(w, c)| u64::from_le_bytes(c.try_into().expect("8 bytes")) == word(cnt, w as u64));
    let tail = words.remainder();
    let at = (bytes.len() - tail.len()) as u64;
    ok && tail.iter().enumerate().all(|(k, b)| {
        *b == word(cnt, (at + k as u64) / 8).to_le_bytes()[((at + k as u64) % 8) as usize]
    })
}

/// A whole legitimate heap into `out` (its length must be the heap size); for senders
/// that cut heaps themselves ([`crate::send`]).
pub fn legit_heap(cnt: u64, out: &mut [u8]) {
    fill_heap(cnt, out);
}

/// Writes the header and the per-packet pointers (HEAP_LENGTH only if given), then
/// `extra`; returns where the payload starts. `out` must hold them.
fn header(
    f: Flavour,
    cnt: u64,
    heap_len: Option<u64>,
    offset: u64,
    payload_len: u64,
    extra: &[ItemPointer],
    out: &mut [u8],
) -> usize {
    let mut items = [ItemPointer(0); 8];
    let mut n = 0;
    let mut push = |ip: ItemPointer| {
        items[n] = ip;
        n += 1;
    };
    push(ItemPointer::immediate(f, ids::HEAP_CNT, cnt));
    if let Some(l) = heap_len {
        push(ItemPointer::immediate(f, ids::HEAP_LENGTH, l));
    }
    push(ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, offset));
    push(ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, payload_len));
    for ip in extra.iter().take(8 - n) {
        items[n] = *ip;
        n += 1;
    }
    wire::encode(f, &items[..n], &[], out).expect("a header fits MAX_PACKET")
}

/// What a generator knows of the legitimate stream: its shape and the counter its sender
/// is at now (an attacker on the path sees it).
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The stream.
    pub legit: Legit,
    /// The heap counter being sent now.
    pub cnt: u64,
}

/// A counter near the legitimate stream's: the current heap, one just sent or one about
/// to be (where the real heaps are being assembled).
fn near(rng: &mut Xorshift, t: &Target) -> u64 {
    (t.cnt + (rng.next_u64() % 6)).saturating_sub(3).max(1)
}

/// A real-looking packet of heap `cnt` cut short at a random length: in the header, in
/// the pointers, or in the payload (PAYLOAD_LENGTH then lies about what is there).
pub fn truncated(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let cnt = near(rng, t);
    let k = (rng.next_u64() as usize) % t.legit.packets_per_heap();
    let full = t.legit.packet(cnt, k, out);
    1 + (rng.next_u64() as usize) % (full - 1)
}

/// Lengths that lie: PAYLOAD_LENGTH beyond the bytes present, PAYLOAD_OFFSET +
/// PAYLOAD_LENGTH beyond HEAP_LENGTH, or HEAP_LENGTH absurd (up to 2^40) — for real heap
/// counters half of the time.
pub fn lying_lengths(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let cnt = if rng.chance(50) {
        near(rng, t)
    } else {
        rng.next_u64() % f.max_value()
    };
    let real = t.legit.heap_size() as u64;
    let len = 8 * (1 + rng.next_u64() % 128);
    let (heap_len, offset, claimed) = match rng.next_u64() % 3 {
        // PAYLOAD_LENGTH says more than the packet holds.
        0 => (real, 0, len + 8 * (1 + rng.next_u64() % 4096)),
        // The payload ends past HEAP_LENGTH.
        1 => (len / 2, 0, len),
        // An absurd heap (beyond any max-heap-size), payload in place.
        _ => (real + (rng.next_u64() % f.max_value()).max(1 << 31), 0, len),
    };
    let n = header(f, cnt, Some(heap_len), offset, claimed, &[], out);
    fill(cnt, offset, &mut out[n..n + len as usize]);
    n + len as usize
}

/// PAYLOAD_OFFSET far beyond the heap (up to the flavour's largest address) for real
/// and random counters, with a payload that is otherwise in order.
pub fn huge_offsets(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let cnt = if rng.chance(50) {
        near(rng, t)
    } else {
        rng.next_u64() % f.max_value()
    };
    let heap_len = if rng.chance(50) {
        Some(t.legit.heap_size() as u64)
    } else {
        None
    };
    let offset = (t.legit.heap_size() as u64 + rng.next_u64() % f.max_value()) & f.max_value() & !7;
    let len = 8 * (1 + rng.next_u64() % 1024) as usize;
    let n = header(f, cnt, heap_len, offset, len as u64, &[], out);
    fill(cnt, 0, &mut out[n..n + len]);
    n + len
}

/// Valid first packets of heaps with counters far ahead (2^20 and more) or far behind the
/// stream, or anywhere in the flavour's range: heaps that will never complete.
pub fn huge_ids(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let r = rng.next_u64();
    let cnt = match r % 3 {
        0 => t.cnt.saturating_add((1 << 20) + (r >> 8) % (1 << 30)) & f.max_value(),
        1 => t.cnt.saturating_sub((1 << 20) + (r >> 8) % (1 << 30)),
        _ => (r >> 8) & f.max_value(),
    };
    partial(rng, t, cnt, out)
}

/// The first packet of heap `cnt` as the legitimate sender would send it (the heap
/// never finishes).
fn partial(rng: &mut Xorshift, t: &Target, cnt: u64, out: &mut [u8]) -> usize {
    let k = if rng.chance(50) {
        0
    } else {
        (rng.next_u64() as usize) % t.legit.packets_per_heap()
    };
    // Short payloads: many heaps per second for the same bit rate.
    let f = t.legit.flavour();
    let (at, full) = t.legit.payload_range(k);
    let len = (8 * (1 + rng.next_u64() % 16) as usize).min(full.max(1));
    let extra = [ItemPointer::addressed(f, LEGIT_ITEM, 0)];
    let n = header(
        f,
        cnt,
        Some(t.legit.heap_size() as u64),
        at as u64,
        len as u64,
        if k == 0 { &extra } else { &[] },
        out,
    );
    fill(cnt, at as u64, &mut out[n..n + len]);
    n + len
}

/// A counter no legitimate heap has or will have soon: well behind the stream, or
/// beyond any receive window ahead of it.
fn stranger(rng: &mut Xorshift, t: &Target) -> u64 {
    let r = rng.next_u64();
    if r & 1 == 0 {
        t.cnt + (1 << 24) + (r >> 1) % (1 << 24)
    } else {
        (1 << 40) - 1 - (r >> 1) % (1 << 24)
    }
}

/// A single-packet heap holding one DESCRIPTOR item (`d`, encoded).
fn descriptor_heap(f: Flavour, cnt: u64, d: &Descriptor, out: &mut [u8]) -> usize {
    let enc = descriptor::encode(d, f);
    let extra = [ItemPointer::addressed(f, ids::DESCRIPTOR, 0)];
    let n = header(
        f,
        cnt,
        Some(enc.len() as u64),
        0,
        enc.len() as u64,
        &extra,
        out,
    );
    out[n..n + enc.len()].copy_from_slice(&enc);
    n + enc.len()
}

/// Descriptors of distinct item ids (never the stream's), each in a complete heap of its own.
pub fn descriptor_flood(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let id = 0x2000 + rng.next_u64() % (f.max_id() - 0x2000);
    let d = Descriptor {
        id,
        name: format!("flood_{id:x}"),
        description: "x".repeat((rng.next_u64() % 200) as usize),
        shape: vec![Some(rng.next_u64() % 4096)],
        format: vec![(b'u', 8)],
        dtype: None,
    };
    descriptor_heap(f, stranger(rng, t), &d, out)
}

/// The legitimate item's descriptor, changed on every packet (name, shape, type).
pub fn descriptor_churn(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let r = rng.next_u64();
    let d = Descriptor {
        id: LEGIT_ITEM,
        name: format!("churn_{r:x}"),
        description: "y".repeat((r % 500) as usize),
        shape: (0..(r >> 9) % 4)
            .map(|k| Some(k * (r >> 20) % 9999))
            .collect(),
        format: vec![(b"uif"[(r % 3) as usize], 8 << ((r >> 2) % 4))],
        dtype: None,
    };
    descriptor_heap(f, stranger(rng, t), &d, out)
}

/// A replayed legitimate packet: heap near the stream's, byte for byte as sent.
pub fn duplicates(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let cnt = near(rng, t);
    let k = (rng.next_u64() as usize) % t.legit.packets_per_heap();
    t.legit.packet(cnt, k, out)
}

/// The real bytes of a heap near the stream's at an offset and length of its own
/// (straddling the legitimate packets' boundaries, unaligned half of the time).
pub fn overlaps(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let cnt = near(rng, t);
    let size = t.legit.heap_size();
    let max = t.legit.later_payload().min(size);
    let len = 1 + (rng.next_u64() as usize) % max;
    let mut at = (rng.next_u64() as usize) % (size - len + 1);
    if rng.chance(50) {
        at &= !7;
    }
    let n = header(f, cnt, Some(size as u64), at as u64, len as u64, &[], out);
    fill(cnt, at as u64, &mut out[n..n + len]);
    n + len
}

/// Distinct partial heaps close to the stream: just behind it (heaps already done or
/// abandoned) and just beyond what a window of heaps or chunks holds ahead.
pub fn window_thrash(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let r = rng.next_u64();
    // Behind the stream: heaps it has finished (not, near its start, a live heap's
    // counter clamped to the first heap's).
    let behind = t.cnt.checked_sub(8 + (r >> 1) % 4096).filter(|&c| c >= 1);
    let cnt = match behind {
        Some(c) if r & 1 == 0 => c,
        _ => t.cnt + 4096 + (r >> 1) % 4096,
    };
    partial(rng, t, cnt, out)
}

/// A stop heap (STREAM_CTRL = stop, as spead2 sends it) with a random counter.
pub fn stop_spoof(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let f = t.legit.flavour();
    let cnt = if rng.chance(50) {
        near(rng, t)
    } else {
        stranger(rng, t)
    };
    let extra = [
        ItemPointer::immediate(f, ids::STREAM_CTRL, ctrl::STOP),
        ItemPointer::addressed(f, ids::NULL, 0),
    ];
    let n = header(f, cnt, Some(1), 0, 1, &extra, out);
    out[n] = 0;
    n + 1
}

/// Random bytes, 1 to 9000 of them; a third of the time behind a valid SPEAD header
/// announcing a random number of pointers.
pub fn random_bytes(rng: &mut Xorshift, t: &Target, out: &mut [u8]) -> usize {
    let len = 1 + (rng.next_u64() as usize) % 9000;
    for c in out[..len].chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        c.copy_from_slice(&r[..c.len()]);
    }
    if rng.chance(33) && len >= HEADER_LEN {
        let f = t.legit.flavour();
        let n = (rng.next_u64() % 1200) as u16;
        let (id_bytes, addr_bytes) = (8 - f.heap_address_bits() / 8, f.heap_address_bits() / 8);
        out[..HEADER_LEN].copy_from_slice(&[
            wire::MAGIC,
            wire::VERSION,
            id_bytes,
            addr_bytes,
            0,
            0,
            (n >> 8) as u8,
            n as u8,
        ]);
    }
    len
}

/// One class's packets, one at a time.
pub struct Generator {
    class: Class,
    rng: Xorshift,
    legit: Legit,
}

impl Generator {
    /// Packets of `class` against `legit`, the same for the same `seed` (nonzero).
    pub fn new(class: Class, seed: u64, legit: Legit) -> Self {
        Self {
            class,
            rng: Xorshift(seed.max(1)),
            legit,
        }
    }

    /// The class.
    pub fn class(&self) -> Class {
        self.class
    }

    /// Writes the next bad packet into `out` (at least [`MAX_PACKET`] bytes), aimed at a
    /// stream now sending heap `cnt`; returns its length.
    pub fn next(&mut self, cnt: u64, out: &mut [u8]) -> usize {
        let t = Target {
            legit: self.legit,
            cnt,
        };
        let g = match self.class {
            Class::Truncated => truncated,
            Class::LyingLengths => lying_lengths,
            Class::HugeOffsets => huge_offsets,
            Class::HugeIds => huge_ids,
            Class::DescriptorFlood => descriptor_flood,
            Class::DescriptorChurn => descriptor_churn,
            Class::Duplicates => duplicates,
            Class::Overlaps => overlaps,
            Class::WindowThrash => window_thrash,
            Class::StopSpoof => stop_spoof,
            Class::RandomBytes => random_bytes,
        };
        g(&mut self.rng, &t, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::Item;
    use crate::wire::Packet;

    fn legit() -> Legit {
        Legit::new(Flavour::SPEAD_64_40, 8972, 1 << 20).unwrap()
    }

    #[test]
    fn legit_packets_are_what_the_sender_sends() {
        let l = legit();
        let mut heap = vec![0u8; l.heap_size()];
        legit_heap(7, &mut heap);
        assert!(l.check(7, &heap) && !l.check(8, &heap));
        let items = [Item::bytes(LEGIT_ITEM, &heap)];
        let mut hp = PacketConfig::new(Flavour::SPEAD_64_40, 8972)
            .unwrap()
            .heap(7, &items)
            .unwrap();
        let (mut a, mut b) = (vec![0u8; MAX_PACKET], vec![0u8; MAX_PACKET]);
        let mut k = 0;
        while let Some(n) = hp.write_next(&mut a) {
            let m = l.packet(7, k, &mut b);
            assert_eq!(&a[..n], &b[..m], "packet {k}");
            k += 1;
        }
        assert_eq!(k, l.packets_per_heap());
        let mut h2 = heap.clone();
        h2[12345] ^= 1;
        assert!(!l.check(7, &h2));
        assert!(check_bytes(7, &heap[..1001]));
    }

    #[test]
    fn fill_matches_at_any_offset() {
        let byte = |o: u64| word(3, o / 8).to_le_bytes()[(o % 8) as usize];
        for at in 0..17u64 {
            for len in 0..40 {
                let mut part = vec![0u8; len];
                fill(3, at, &mut part);
                let want: Vec<u8> = (0..len as u64).map(|k| byte(at + k)).collect();
                assert_eq!(part, want, "at {at} len {len}");
                assert!(check_bytes(3, &want[..]) == (at == 0 || len == 0));
            }
        }
    }

    #[test]
    fn every_class_is_deterministic_and_bad() {
        let l = legit();
        let mut out = vec![0u8; MAX_PACKET];
        let mut again = vec![0u8; MAX_PACKET];
        for class in Class::ALL {
            assert_eq!(Class::parse(class.name()), Some(class));
            let mut g = Generator::new(class, 42, l);
            let mut h = Generator::new(class, 42, l);
            for i in 0..2000u64 {
                let cnt = 100 + i / 10;
                let n = g.next(cnt, &mut out);
                let m = h.next(cnt, &mut again);
                assert!(n > 0 && n <= MAX_PACKET, "{class:?}");
                assert_eq!(&out[..n], &again[..m], "{class:?} deterministic");
                let p = Packet::parse(&out[..n]);
                match class {
                    // Mostly undecodable, a valid prefix by chance at most.
                    Class::Truncated | Class::RandomBytes => {}
                    Class::LyingLengths | Class::HugeOffsets => {
                        if let Ok(p) = p {
                            let hl = p.heap_length.unwrap_or(u64::MAX);
                            let end = p.payload_offset + p.payload.len() as u64;
                            assert!(
                                end > hl || hl > 1 << 30 || p.heap_length.is_none(),
                                "{class:?}: a consistent packet {p:?}"
                            );
                        }
                    }
                    Class::StopSpoof => {
                        assert_eq!(p.unwrap().immediate(ids::STREAM_CTRL), Some(ctrl::STOP))
                    }
                    Class::Duplicates | Class::Overlaps => {
                        let p = p.unwrap();
                        assert!(
                            check_bytes_at(p.heap_cnt, p.payload_offset, p.payload),
                            "{class:?} carries the real bytes"
                        );
                        assert!(p.heap_cnt.abs_diff(cnt) <= 3);
                    }
                    Class::HugeIds | Class::WindowThrash => {
                        let p = p.unwrap();
                        assert!(p.heap_cnt.abs_diff(cnt) >= 8, "{class:?}: {}", p.heap_cnt);
                    }
                    Class::DescriptorFlood | Class::DescriptorChurn => {
                        let p = p.unwrap();
                        let d = descriptor::parse(p.payload).unwrap();
                        assert_eq!(d.id == LEGIT_ITEM, class == Class::DescriptorChurn);
                    }
                }
            }
        }
    }

    fn check_bytes_at(cnt: u64, at: u64, bytes: &[u8]) -> bool {
        let mut want = vec![0u8; bytes.len()];
        fill(cnt, at, &mut want);
        want == bytes
    }
}
