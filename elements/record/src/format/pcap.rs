//! Classic pcap (nanosecond variant) and pcapng encoding: file headers, per-packet
//! record headers and trailers, written little-endian into caller-provided arrays so the
//! per-packet path allocates nothing.

/// Magic of a microsecond pcap file, as a native-order `u32`.
pub const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
/// Magic of a nanosecond pcap file, as a native-order `u32`.
pub const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Length of the classic pcap file header.
pub const PCAP_FILE_HEADER_LEN: usize = 24;
/// Length of a classic pcap record header.
pub const PCAP_RECORD_HEADER_LEN: usize = 16;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Snap length tcpdump uses by default.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// pcapng Section Header Block type.
pub const BT_SHB: u32 = 0x0A0D_0D0A;
/// pcapng Interface Description Block type.
pub const BT_IDB: u32 = 1;
/// pcapng (obsolete) Packet Block type.
pub const BT_PB: u32 = 2;
/// pcapng Simple Packet Block type.
pub const BT_SPB: u32 = 3;
/// pcapng Interface Statistics Block type.
pub const BT_ISB: u32 = 5;
/// pcapng Enhanced Packet Block type.
pub const BT_EPB: u32 = 6;
/// pcapng byte-order magic.
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// Fixed part of an EPB before the packet data (type, length, interface, time, lengths).
pub const EPB_HEADER_LEN: usize = 28;
/// Bytes an EPB adds to its packet besides padding (header and trailing length).
pub const EPB_OVERHEAD: usize = EPB_HEADER_LEN + 4;

/// The classic pcap file header: nanosecond magic, version 2.4.
pub fn pcap_file_header(snaplen: u32, linktype: u32) -> [u8; PCAP_FILE_HEADER_LEN] {
    let mut h = [0u8; PCAP_FILE_HEADER_LEN];
    h[0..4].copy_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone and sigfigs stay 0.
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&linktype.to_le_bytes());
    h
}

/// A classic pcap record header for a packet captured at `ts_ns` (Unix nanoseconds).
pub fn pcap_record_header(ts_ns: u64, caplen: u32, origlen: u32) -> [u8; PCAP_RECORD_HEADER_LEN] {
    let mut h = [0u8; PCAP_RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
    h[8..12].copy_from_slice(&caplen.to_le_bytes());
    h[12..16].copy_from_slice(&origlen.to_le_bytes());
    h
}

fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn push_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Wraps `body` (everything between the length fields) as a block of `block_type`.
fn push_block(out: &mut Vec<u8>, block_type: u32, body: &[u8]) {
    let total = (12 + body.len()) as u32;
    push_u32(out, block_type);
    push_u32(out, total);
    out.extend_from_slice(body);
    push_u32(out, total);
}

/// A Section Header Block (unknown section length) and one Interface Description Block
/// with nanosecond timestamps (`if_tsresol` = 9), appended to `out`.
pub fn pcapng_file_header(out: &mut Vec<u8>, snaplen: u32, linktype: u32, if_name: &str) {
    let mut body = Vec::with_capacity(64);
    push_u32(&mut body, BYTE_ORDER_MAGIC);
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&u64::MAX.to_le_bytes()); // section length unknown
    push_option(&mut body, 4, b"firehose fhrecordsink"); // shb_userappl
    push_option(&mut body, 0, &[]);
    push_block(out, BT_SHB, &body);

    body.clear();
    body.extend_from_slice(&(linktype as u16).to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    push_u32(&mut body, snaplen);
    push_option(&mut body, 2, if_name.as_bytes()); // if_name
    push_option(&mut body, 9, &[9]); // if_tsresol: 10^-9 s
    push_option(&mut body, 0, &[]);
    push_block(out, BT_IDB, &body);
}

/// The fixed part of an Enhanced Packet Block for interface 0 with `caplen` bytes of
/// packet data (which follows, padded to 4 bytes, then [`epb_trailer`]).
pub fn epb_header(ts_ns: u64, caplen: u32, origlen: u32) -> [u8; EPB_HEADER_LEN] {
    let total = epb_len(caplen as usize) as u32;
    let mut h = [0u8; EPB_HEADER_LEN];
    h[0..4].copy_from_slice(&BT_EPB.to_le_bytes());
    h[4..8].copy_from_slice(&total.to_le_bytes());
    // interface 0
    h[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(ts_ns as u32).to_le_bytes());
    h[20..24].copy_from_slice(&caplen.to_le_bytes());
    h[24..28].copy_from_slice(&origlen.to_le_bytes());
    h
}

/// Total length of an EPB carrying `caplen` bytes.
pub fn epb_len(caplen: usize) -> usize {
    EPB_OVERHEAD + caplen.next_multiple_of(4)
}

/// The padding and trailing length that close an EPB of `caplen` bytes; returns the
/// array and how many of its bytes to write.
pub fn epb_trailer(caplen: usize) -> ([u8; 8], usize) {
    let pad = caplen.next_multiple_of(4) - caplen;
    let mut t = [0u8; 8];
    t[pad..pad + 4].copy_from_slice(&(epb_len(caplen) as u32).to_le_bytes());
    (t, pad + 4)
}

/// Counters written in an Interface Statistics Block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfStats {
    /// First packet time (Unix ns), `isb_starttime`.
    pub start_ns: u64,
    /// Time of this block (Unix ns), `isb_endtime` and the block's timestamp.
    pub end_ns: u64,
    /// Packets the capture saw: recorded plus dropped anywhere (`isb_ifrecv`).
    pub received: u64,
    /// Packets lost before the recorder: upstream kernel and pool drops (`isb_ifdrop`).
    pub if_drops: u64,
    /// Packets the recorder itself dropped because the disk fell behind (`isb_osdrop`).
    pub os_drops: u64,
    /// Packets written to the capture (`isb_usrdeliv`).
    pub delivered: u64,
}

/// An Interface Statistics Block for interface 0, appended to `out`.
pub fn isb(out: &mut Vec<u8>, s: &IfStats) {
    let ts = |ns: u64| {
        let mut b = [0u8; 8];
        b[0..4].copy_from_slice(&((ns >> 32) as u32).to_le_bytes());
        b[4..8].copy_from_slice(&(ns as u32).to_le_bytes());
        b
    };
    let mut body = Vec::with_capacity(96);
    push_u32(&mut body, 0);
    body.extend_from_slice(&ts(s.end_ns));
    push_option(&mut body, 2, &ts(s.start_ns));
    push_option(&mut body, 3, &ts(s.end_ns));
    push_option(&mut body, 4, &s.received.to_le_bytes());
    push_option(&mut body, 5, &s.if_drops.to_le_bytes());
    push_option(&mut body, 7, &s.os_drops.to_le_bytes());
    push_option(&mut body, 8, &s.delivered.to_le_bytes());
    push_option(&mut body, 0, &[]);
    push_block(out, BT_ISB, &body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_little_endian_nanosecond_pcap() {
        let h = pcap_file_header(65535, LINKTYPE_ETHERNET);
        assert_eq!(&h[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        let r = pcap_record_header(1_700_000_000_123_456_789, 60, 70);
        assert_eq!(
            u32::from_le_bytes(r[0..4].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(u32::from_le_bytes(r[4..8].try_into().unwrap()), 123_456_789);
    }

    #[test]
    fn pcapng_blocks_are_padded_and_bracketed_by_their_length() {
        let mut out = Vec::new();
        pcapng_file_header(&mut out, 1000, 1, "x");
        assert_eq!(out.len() % 4, 0);
        let shb_len = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
        assert_eq!(&out[shb_len - 4..shb_len], &out[4..8]);
        for caplen in 0..8usize {
            let (t, n) = epb_trailer(caplen);
            assert_eq!(EPB_HEADER_LEN + caplen + n, epb_len(caplen));
            assert_eq!(
                u32::from_le_bytes(t[n - 4..n].try_into().unwrap()) as usize,
                epb_len(caplen)
            );
        }
        let mut b = Vec::new();
        isb(&mut b, &IfStats::default());
        assert_eq!(b.len() % 4, 0);
        assert_eq!(
            u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize,
            b.len()
        );
    }
}
