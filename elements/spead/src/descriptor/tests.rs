use super::*;
use crate::wire::{encode as encode_packet, packet_len};

/// Descriptors as spead2 4.5.1 wrote them (`gen_spead2_fixtures.py`): a 48-bit `u`
/// scalar, a numpy dtype, a variable shape with two format fields, and an empty
/// description.
const SPEAD2_64_40: [&str; 4] = [
    "53040305000000098000010000000001800002000000001380000300000000008000040000000013800014000000100000001000000000000000110000000009000013000000000f000012000000001374696d657374616d70612074696d6575000030",
    "530403050000000a8000010000000001800002000000005180000300000000008000040000000051800014000000100100001000000000000000110000000004000013000000000c000012000000000c00001500000000186461746174686520646174610000000000040000000000087b276465736372273a20273c6932272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028342c2038297d",
    "53040305000000098000010000000001800002000000001f8000030000000000800004000000001f800014000000100200001000000000000000110000000003000013000000000b00001200000000137661727661726961626c657500000866000020010000000000000000000003",
    "53040305000000098000010000000001800002000000000d8000030000000000800004000000000d8000140000001003000010000000000000001100000000030000130000000003000012000000000773747263000008010000000000",
];
const SPEAD2_64_48: [&str; 4] = [
    "53040206000000098001000000000001800200000000001280030000000000008004000000000012801400000000100000100000000000000011000000000009001300000000000f001200000000001274696d657374616d70612074696d65750030",
    "530402060000000a8001000000000001800200000000005380030000000000008004000000000053801400000000100100100000000000000011000000000004001300000000000c001200000000000c001500000000001a64617461746865206461746100000000000004000000000000087b276465736372273a20273c6932272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028342c2038297d",
    "53040206000000098001000000000001800200000000001f8003000000000000800400000000001f801400000000100200100000000000000011000000000003001300000000000b00120000000000117661727661726961626c657500086600200100000000000000000000000003",
    "53040206000000098001000000000001800200000000000d8003000000000000800400000000000d8014000000001003001000000000000000110000000000030013000000000003001200000000000673747263000801000000000000",
];

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn expected() -> [Descriptor; 4] {
    [
        Descriptor {
            id: 0x1000,
            name: "timestamp".into(),
            description: "a time".into(),
            shape: vec![],
            format: vec![(b'u', 48)],
            dtype: None,
        },
        Descriptor {
            id: 0x1001,
            name: "data".into(),
            description: "the data".into(),
            shape: vec![Some(4), Some(8)],
            format: vec![],
            dtype: Some("{'descr': '<i2', 'fortran_order': False, 'shape': (4, 8)}".into()),
        },
        Descriptor {
            id: 0x1002,
            name: "var".into(),
            description: "variable".into(),
            shape: vec![None, Some(3)],
            format: vec![(b'u', 8), (b'f', 32)],
            dtype: None,
        },
        Descriptor {
            id: 0x1003,
            name: "str".into(),
            description: String::new(),
            shape: vec![None],
            format: vec![(b'c', 8)],
            dtype: None,
        },
    ]
}

#[test]
fn parses_what_spead2_writes() {
    for (vectors, f) in [
        (SPEAD2_64_40, Flavour::SPEAD_64_40),
        (SPEAD2_64_48, Flavour::SPEAD_64_48),
    ] {
        for (raw, want) in vectors.iter().zip(expected()) {
            assert_eq!(parse(&hex(raw)).unwrap(), want, "{f}");
        }
    }
}

#[test]
fn encodes_byte_for_byte_as_spead2() {
    for (vectors, f) in [
        (SPEAD2_64_40, Flavour::SPEAD_64_40),
        (SPEAD2_64_48, Flavour::SPEAD_64_48),
    ] {
        for (raw, d) in vectors.iter().zip(expected()) {
            assert_eq!(encode(&d, f), hex(raw), "{} in {f}", d.name);
        }
    }
}

#[test]
fn round_trips_in_every_flavour() {
    let d = Descriptor {
        id: 0x7f,
        // Short enough for 64-8, whose lengths are 8 bits.
        name: "x".repeat(30),
        description: "ünïcode".into(),
        shape: vec![Some(1), None, Some(200), Some(0)],
        format: vec![(b'i', 16), (b'b', 1), (b'u', 7)],
        dtype: Some("{}".into()),
    };
    for bits in (8..=56).step_by(8) {
        let f = Flavour::new(bits).unwrap();
        let mut want = d.clone();
        // Fields are as wide as the flavour allows; values are truncated to them.
        want.shape = d
            .shape
            .iter()
            .map(|s| s.map(|v| v & f.max_value()))
            .collect();
        let bits_mask = if bits >= 32 {
            (1u64 << (64 - bits)) - 1
        } else {
            u64::from(u32::MAX)
        };
        want.format = d
            .format
            .iter()
            .map(|&(c, b)| (c, (u64::from(b) & bits_mask) as u32))
            .collect();
        want.id = d.id & f.max_value();
        assert_eq!(parse(&encode(&d, f)).unwrap(), want, "{f}");
    }
}

#[test]
fn an_empty_dtype_is_not_written() {
    let d = Descriptor {
        id: 9,
        dtype: Some(String::new()),
        ..Default::default()
    };
    let raw = encode(&d, Flavour::SPEAD_64_40);
    assert_eq!(raw.len(), packet_len(9, 0));
    assert_eq!(parse(&raw).unwrap().dtype, None);
}

fn packet(f: Flavour, items: &[ItemPointer], payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packet_len(items.len(), payload.len())];
    encode_packet(f, items, payload, &mut out).unwrap();
    out
}

fn prefix(f: Flavour, len: u64, offset: u64) -> Vec<ItemPointer> {
    vec![
        ItemPointer::immediate(f, ids::HEAP_CNT, 1),
        ItemPointer::immediate(f, ids::HEAP_LENGTH, len + offset),
        ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, offset),
        ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, len),
    ]
}

#[test]
fn garbage_is_an_error() {
    let f = Flavour::SPEAD_64_40;
    let good = hex(SPEAD2_64_40[2]);
    assert!(matches!(parse(&[]), Err(DescriptorError::Packet(_))));
    assert!(matches!(parse(b"hello"), Err(DescriptorError::Packet(_))));
    assert!(matches!(
        parse(&good[..good.len() - 1]),
        Err(DescriptorError::Packet(DecodeError::LengthMismatch))
    ));

    // Not the start of its heap.
    let mut items = prefix(f, 4, 4);
    items.push(ItemPointer::immediate(f, ids::DESCRIPTOR_ID, 5));
    assert_eq!(
        parse(&packet(f, &items, b"abcd")),
        Err(DescriptorError::NotWholeHeap)
    );

    // No id.
    let mut items = prefix(f, 4, 0);
    items.push(ItemPointer::addressed(f, ids::DESCRIPTOR_NAME, 0));
    assert_eq!(
        parse(&packet(f, &items, b"abcd")),
        Err(DescriptorError::MissingId)
    );

    let with = |id: u64, addr: u64, payload: &[u8]| {
        let mut items = prefix(f, payload.len() as u64, 0);
        items.push(ItemPointer::immediate(f, ids::DESCRIPTOR_ID, 5));
        items.push(ItemPointer::addressed(f, id, addr));
        parse(&packet(f, &items, payload))
    };
    assert_eq!(
        with(ids::DESCRIPTOR_NAME, 9, b"abcd"),
        Err(DescriptorError::BeyondPayload(ids::DESCRIPTOR_NAME))
    );
    assert_eq!(
        with(ids::DESCRIPTOR_NAME, 0, &[0xff, 0xfe]),
        Err(DescriptorError::NotText(ids::DESCRIPTOR_NAME))
    );
    // A shape entry is 6 bytes in 64-40, a format entry 4.
    assert_eq!(
        with(ids::DESCRIPTOR_SHAPE, 0, &[0; 7]),
        Err(DescriptorError::BadLength(ids::DESCRIPTOR_SHAPE))
    );
    assert_eq!(
        with(ids::DESCRIPTOR_FORMAT, 0, &[b'u', 0, 0]),
        Err(DescriptorError::BadLength(ids::DESCRIPTOR_FORMAT))
    );
    assert_eq!(
        with(ids::DESCRIPTOR_FORMAT, 0, &[b'z', 0, 0, 8]),
        Err(DescriptorError::BadFormat(b'z', 8))
    );
    assert_eq!(
        with(ids::DESCRIPTOR_SHAPE, 0, &[0, 0, 0, 0, 0, 7])
            .unwrap()
            .shape,
        vec![Some(7)]
    );
}

#[test]
fn no_truncation_or_bit_flip_panics() {
    for raw in SPEAD2_64_40.iter().chain(&SPEAD2_64_48) {
        let good = hex(raw);
        for n in 0..good.len() {
            let _ = parse(&good[..n]);
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                let _ = parse(&b);
            }
        }
    }
}
