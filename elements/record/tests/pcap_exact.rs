//! A pcap recording is byte for byte what the format says: the file written through the
//! staging blocks (stored in whole cache lines with streaming stores where the CPU has
//! them, payloads at every alignment the record headers give them, across block
//! boundaries, several blocks in flight) equals a file built here independently, header
//! by header.

mod common;

use std::net::SocketAddrV4;

use common::{batch, payload, read_capture, record, TempDir};
use firehose_core::stats::names;

/// Payload lengths covering short and long payloads at every alignment: a spread from 1
/// to 9000 bytes, and the lengths around a cache line and page sizes.
fn lengths() -> Vec<usize> {
    let mut v: Vec<usize> = (0..240).map(|i| (i * 1237) % 9000 + 1).collect();
    v.extend([
        1023, 1024, 1025, 4095, 4096, 4097, 8191, 8192, 8193, 64, 63, 65, 1,
    ]);
    v
}

/// RFC 1071 checksum of an IPv4 header.
fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The pcap file docs/recording.md describes for these datagrams: nanosecond magic,
/// version 2.4, snap length 262144, Ethernet; per datagram a record header, the
/// synthesized Ethernet/IPv4/UDP headers (identification counting from 1) and the
/// payload.
fn expected(datagrams: &[(u64, Vec<u8>)], src: SocketAddrV4, dst: SocketAddrV4) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&262_144u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for (i, (ts, p)) in datagrams.iter().enumerate() {
        let frame_len = (42 + p.len()) as u32;
        f.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&frame_len.to_le_bytes());
        f.extend_from_slice(&frame_len.to_le_bytes());
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((28 + p.len()) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&((i + 1) as u16).to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src.ip().octets());
        ip[16..20].copy_from_slice(&dst.ip().octets());
        let c = ip_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&src.port().to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(p);
    }
    f
}

fn check(io_depth: &str) {
    common::init();
    let dir = TempDir::new("pcap-exact");
    let path = dir.join("x.pcap");
    let src: SocketAddrV4 = "10.1.2.3:5000".parse().unwrap();
    let dst: SocketAddrV4 = "10.0.0.2:7148".parse().unwrap();
    let lens = lengths();
    let mut datagrams = Vec::new();
    let mut buffers = Vec::new();
    // Batches of 40, with the times common::batch gives them (ts + index in the batch).
    for (b, group) in lens.chunks(40).enumerate() {
        let ts = 1_700_000_000_000_000_000 + b as u64 * 1_000_000_007;
        let payloads: Vec<Vec<u8>> = group
            .iter()
            .enumerate()
            .map(|(i, &n)| payload((b * 40 + i) as u64, n))
            .collect();
        datagrams.extend(
            payloads
                .iter()
                .enumerate()
                .map(|(i, p)| (ts + i as u64, p.clone())),
        );
        buffers.push(batch(&payloads, src.into(), ts));
    }
    let el = record(
        &[
            ("location", path.to_str().unwrap()),
            ("destination", "10.0.0.2:7148"),
            ("when-full", "block"),
            // Small blocks: most payloads straddle a block boundary, many blocks in flight.
            ("block-size", "8192"),
            ("queue-size", "1048576"),
            ("io-depth", io_depth),
        ],
        buffers,
    );
    assert_eq!(common::stat(&el, names::PACKETS), lens.len() as u64);
    let want = expected(&datagrams, src, dst);
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), want.len(), "file size");
    if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!(
            "io-depth={io_depth}: first differing byte at offset {at} of {}",
            got.len()
        );
    }
    // And our reader gives every datagram back, with its time.
    let (read, counts) = read_capture(&path);
    assert_eq!(counts, Default::default());
    assert_eq!(read.len(), datagrams.len());
    for (r, (ts, p)) in read.iter().zip(&datagrams) {
        assert_eq!((&r.payload, r.ts_ns), (p, *ts));
    }
}

#[test]
fn pcap_bytes_are_exact_with_several_writes_in_flight() {
    check("4");
}

#[test]
fn pcap_bytes_are_exact_with_one_write_at_a_time() {
    check("1");
}
