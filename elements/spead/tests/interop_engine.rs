//! The send engine against spead2 4.5.1's own sender, byte for byte: the same heap is
//! cut into packets by `firehose_spead::send` and by spead2 (`tests/spead2/packets.py`,
//! a `BytesStream`), and every packet must be identical.

mod interop_common;

use std::process::Command;
use std::time::Duration;

use firehose_spead::descriptor::{self, Descriptor};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::{Flavour, Packet};
use interop_common::{hex, python, run_with_timeout, script, unhex};

/// A descriptor as both sides write it: (Rust value, packets.py `desc` line).
fn desc(
    id: u64,
    name: &str,
    description: &str,
    shape: &[Option<u64>],
    ty: &str,
) -> (Descriptor, String) {
    let shape_text = if shape.is_empty() {
        "-".to_string()
    } else {
        shape
            .iter()
            .map(|d| d.map_or("None".to_string(), |d| d.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let text = |t: &str| {
        if t.is_empty() {
            "-".to_string()
        } else {
            t.replace(' ', "_")
        }
    };
    let line = format!(
        "desc {id:#x} {} {} {shape_text} {ty}",
        text(name),
        text(description)
    );
    let mut d = Descriptor {
        id,
        name: name.into(),
        description: description.into(),
        shape: shape.to_vec(),
        ..Descriptor::default()
    };
    match ty.strip_prefix("dtype:") {
        Some(descr) => {
            let dims: Vec<String> = shape.iter().map(|d| d.unwrap().to_string()).collect();
            let tuple = match dims.len() {
                0 => "()".to_string(),
                1 => format!("({},)", dims[0]),
                _ => format!("({})", dims.join(", ")),
            };
            d.dtype = Some(format!(
                "{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}}}"
            ));
        }
        None => {
            d.format = ty
                .split(',')
                .map(|f| (f.as_bytes()[0], f[1..].parse().unwrap()))
                .collect()
        }
    }
    (d, line)
}

/// One heap item for both sides.
enum Spec {
    Imm(u64, u64),
    Bytes(u64, Vec<u8>),
    Desc(Descriptor, String),
    Stop,
}

fn spead2_packets(flavour: Flavour, packet_size: usize, cnt: u64, spec: &[Spec]) -> Vec<Vec<u8>> {
    let mut input = String::new();
    for s in spec {
        match s {
            Spec::Imm(id, v) => input.push_str(&format!("imm {id:#x} {v}\n")),
            Spec::Bytes(id, b) => input.push_str(&format!("bytes {id:#x} {}\n", hex(b))),
            Spec::Desc(_, line) => input.push_str(&format!("{line}\n")),
            Spec::Stop => input.push_str("stop\n"),
        }
    }
    let out = run_with_timeout(
        Command::new(python()).arg(script("packets.py")).args([
            "--flavour",
            &flavour.heap_address_bits().to_string(),
            "--packet-size",
            &packet_size.to_string(),
            "--cnt",
            &cnt.to_string(),
        ]),
        Some(input.as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, Some(0), "packets.py failed: {}", out.stderr);
    let stream = unhex(out.stdout.trim());
    let mut packets = Vec::new();
    let mut rest = &stream[..];
    while !rest.is_empty() {
        let (_, len) = Packet::parse_prefix(rest).expect("spead2 wrote valid packets");
        packets.push(rest[..len].to_vec());
        rest = &rest[len..];
    }
    packets
}

fn ours(flavour: Flavour, packet_size: usize, cnt: u64, spec: &[Spec]) -> Vec<Vec<u8>> {
    let encoded: Vec<Vec<u8>> = spec
        .iter()
        .map(|s| match s {
            Spec::Desc(d, _) => descriptor::encode(d, flavour),
            _ => Vec::new(),
        })
        .collect();
    let items: Vec<Item<'_>> = spec
        .iter()
        .zip(&encoded)
        .map(|(s, enc)| match s {
            Spec::Imm(id, v) => Item::immediate(*id, *v),
            Spec::Bytes(id, b) => Item::bytes(*id, b),
            Spec::Desc(..) => Item::descriptor(enc),
            Spec::Stop => Item::stop(),
        })
        .collect();
    let cfg = PacketConfig::new(flavour, packet_size).unwrap();
    let mut heap = cfg.heap(cnt, &items).unwrap();
    let (_, bytes) = heap.remaining();
    let mut slab = vec![0u8; bytes];
    let mut spans = Vec::new();
    heap.fill(&mut slab, |o, l| spans.push((o, l)));
    assert!(heap.is_done());
    spans
        .into_iter()
        .map(|(o, l)| slab[o..o + l].to_vec())
        .collect()
}

fn same(flavour: Flavour, packet_size: usize, cnt: u64, spec: &[Spec]) {
    let theirs = spead2_packets(flavour, packet_size, cnt, spec);
    let mine = ours(flavour, packet_size, cnt, spec);
    assert_eq!(
        mine.len(),
        theirs.len(),
        "SPEAD-{flavour}, {packet_size} B: packet count differs"
    );
    for (k, (a, b)) in mine.iter().zip(&theirs).enumerate() {
        assert!(
            a == b,
            "SPEAD-{flavour}, {packet_size} B: packet {k} of {} differs\n ours   {}\n spead2 {}",
            mine.len(),
            hex(&a[..a.len().min(160)]),
            hex(&b[..b.len().min(160)])
        );
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn heaps_with_items_and_descriptors_match_spead2() {
    for flavour in [Flavour::SPEAD_64_40, Flavour::SPEAD_64_48] {
        let bits = flavour.heap_address_bits();
        for packet_size in [1472, 8972, 1475, 64] {
            let (d1, l1) = desc(
                0x1000,
                "samples",
                "ADC samples",
                &[Some(25_000), Some(2)],
                "dtype:<i2",
            );
            let (d2, l2) = desc(0x1600, "timestamp", "", &[], &format!("u{bits}"));
            let (d3, l3) = desc(0x1001, "label", "text", &[None], "c8");
            let spec = vec![
                Spec::Desc(d2, l2),
                Spec::Imm(0x1600, 123_456_789),
                Spec::Desc(d1, l1),
                Spec::Bytes(0x1000, pattern(100_000, 1)),
                Spec::Desc(d3, l3),
                Spec::Bytes(0x1001, b"heap-3".to_vec()),
            ];
            same(flavour, packet_size, 3, &spec);
        }
    }
}

#[test]
fn megabyte_heap_matches_spead2() {
    let spec = vec![
        Spec::Imm(0x1600, 1 << 30),
        Spec::Bytes(0x1000, pattern(1 << 20, 7)),
    ];
    same(Flavour::SPEAD_64_40, 8972, 1, &spec);
    same(Flavour::SPEAD_64_48, 1472, (1 << 47) + 5, &spec);
}

#[test]
fn pointer_spill_padding_and_the_stop_heap_match_spead2() {
    // More pointers than fit one packet and almost no payload: spead2 pads, adds a
    // NULL, and spreads the pointers.
    let many: Vec<Spec> = (0..40).map(|i| Spec::Imm(0x2000 + i, i * 3)).collect();
    same(Flavour::SPEAD_64_40, 64, 10, &many);
    same(Flavour::SPEAD_64_48, 128, 11, &many);
    // Empty addressed items and the stop heap.
    same(
        Flavour::SPEAD_64_40,
        1472,
        13,
        &[Spec::Bytes(0x1000, Vec::new()), Spec::Imm(0x1001, 1)],
    );
    same(Flavour::SPEAD_64_40, 1472, 14, &[Spec::Stop]);
    same(Flavour::SPEAD_64_48, 8972, 15, &[Spec::Stop]);
}

#[test]
fn values_are_taken_as_given() {
    // Guard against the comparison passing vacuously: a different value must differ.
    let a = ours(Flavour::SPEAD_64_40, 1472, 1, &[Spec::Imm(0x1600, 1)]);
    let b = spead2_packets(Flavour::SPEAD_64_40, 1472, 1, &[Spec::Imm(0x1600, 2)]);
    assert_ne!(a, b);
}

/// spead2's receiver's view of some packets: (item id, value bytes) of every item.
fn spead2_decode(packets: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    let out = run_with_timeout(
        Command::new(python())
            .arg(script("packets.py"))
            .arg("--decode"),
        Some(hex(&packets.concat()).as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.status,
        Some(0),
        "packets.py --decode failed: {}",
        out.stderr
    );
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("item "))
        .map(|l| {
            let (id, value) = l.split_once(' ').unwrap_or((l, ""));
            (u64::from_str_radix(&id[2..], 16).unwrap(), unhex(value))
        })
        .collect()
}

/// Where a heap needs padding (too little payload for its pointer packets) and one
/// packet holds both the end of the item bytes and the padding, spead2 4.5.1 writes the
/// padding first and the bytes after it, so its own receiver reads zeros for the item.
/// We keep the bytes where the pointer says they are. If a later spead2 fixes this,
/// the test fails: then the two can be compared with `same` like every other heap.
#[test]
fn padding_goes_after_the_data_where_spead2_4_5_1_puts_it_before() {
    let mut spec = vec![Spec::Bytes(0x1000, b"xyz".to_vec())];
    spec.extend((0..20).map(|i| Spec::Imm(0x3000 + i, i)));
    let f = Flavour::SPEAD_64_40;
    let theirs = spead2_packets(f, 96, 12, &spec);
    let mine = ours(f, 96, 12, &spec);
    assert_eq!(mine.len(), theirs.len());
    let header = |p: &[u8]| p.len() - 8; // the first packet carries 8 payload bytes
    assert_eq!(mine[0][..header(&mine[0])], theirs[0][..header(&theirs[0])]);
    assert_eq!(&mine[0][header(&mine[0])..], b"xyz\0\0\0\0\0");
    assert_eq!(&theirs[0][header(&theirs[0])..], b"\0\0\0\0\0xyz");
    assert_eq!(mine[1..], theirs[1..], "the other packets are identical");
    let value = |items: &[(u64, Vec<u8>)]| {
        items
            .iter()
            .find(|(id, _)| *id == 0x1000)
            .map(|(_, v)| v.clone())
            .expect("item 0x1000 decoded")
    };
    assert_eq!(
        value(&spead2_decode(&mine)),
        b"xyz",
        "spead2 reads ours right"
    );
    assert_eq!(
        value(&spead2_decode(&theirs)),
        b"\0\0\0",
        "and its own wrong"
    );
}
