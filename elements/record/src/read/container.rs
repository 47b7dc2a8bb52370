//! Reading the records of a pcap (µs or ns, either byte order) or pcapng file.
//!
//! The file is read in large chunks into one buffer and records are returned as slices
//! of it, so reading allocates nothing per packet. Damage never panics: a record that
//! cannot be framed ends the file (counted `malformed`), a block that can be framed but
//! not understood is skipped (counted `malformed`), and a file cut in the middle of a
//! record ends after the last whole one (counted `truncated`). What ended the file
//! early, and where, is kept ([`CaptureReader::damage`]) for a reader that must say so
//! (`fhpcapsrc` makes it an error); space never written (zeros after the last record,
//! as a recording of an older version killed with writes in flight left) is the end of
//! the data, not damage.

use std::io::{self, Read};

use crate::format::pcap::{
    BT_EPB, BT_IDB, BT_PB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, PCAP_MAGIC_NS, PCAP_MAGIC_US,
};

/// Bytes read from the file at a time.
const CHUNK: usize = 4 << 20;
/// Largest record or block accepted; anything claiming more is damage, not data.
const MAX_RECORD: usize = 16 << 20;

/// One captured packet.
#[derive(Debug)]
pub struct Record<'a> {
    /// Link type of its interface (LINKTYPE_* number).
    pub linktype: u16,
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed `data.len()` when the capture cut it).
    pub orig_len: u32,
    /// The captured bytes, starting with the link-layer header.
    pub data: &'a [u8],
}

/// What ended a file before its end, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset in the file of the record or block that could not be read.
    pub offset: u64,
    /// What was wrong with it.
    pub what: String,
}

/// Damage seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Records or blocks that could not be understood.
    pub malformed: u64,
    /// A record cut short by the end of the file (0 or 1).
    pub truncated: u64,
}

#[derive(Clone, Copy, Debug)]
struct Iface {
    linktype: u16,
    snaplen: u32,
    /// Timestamp unit: (10 or 2, exponent).
    resol: (u8, u8),
    offset_s: i64,
}

#[derive(Debug)]
enum Container {
    Pcap {
        swapped: bool,
        nanos: bool,
        linktype: u16,
        /// The file header's snaplen (0: none given).
        snaplen: u32,
    },
    Pcapng {
        swapped: bool,
        ifaces: Vec<Iface>,
    },
}

/// A record reader over any byte stream.
pub struct CaptureReader<R> {
    src: R,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    start: usize,
    end: usize,
    eof: bool,
    done: bool,
    container: Container,
    counts: ReadCounts,
    damage: Option<Damage>,
}

fn u16_at(b: &[u8], i: usize, swapped: bool) -> u16 {
    let v = u16::from_le_bytes([b[i], b[i + 1]]);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

fn u32_at(b: &[u8], i: usize, swapped: bool) -> u32 {
    let v = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

/// Converts a timestamp in units of `resol` to ns.
fn to_ns(ts: u64, resol: (u8, u8), offset_s: i64) -> u64 {
    let ns = match resol {
        (2, e) => ((u128::from(ts) * 1_000_000_000) >> e.min(127)) as u64,
        (_, e) if e <= 9 => ts.saturating_mul(10u64.pow(u32::from(9 - e))),
        (_, e) => ts / 10u64.saturating_pow(u32::from(e - 9)),
    };
    ns.saturating_add_signed(offset_s.saturating_mul(1_000_000_000))
}

/// Whole packet records in the capture at `path`, which may still be being written
/// (a live tcpdump, a running recorder): 0 until its header is, and a record cut
/// short at the end is not counted. Counting stops at the first record that cannot be
/// read, and each call reads the file from its start: for waiting until a capture
/// holds what was sent, not for large files.
pub fn count_whole_records(path: &std::path::Path) -> usize {
    let Ok(f) = std::fs::File::open(path) else {
        return 0;
    };
    let Ok(mut r) = CaptureReader::new(io::BufReader::new(f)) else {
        return 0;
    };
    let mut n = 0;
    while let Ok(Some(_)) = r.next_record() {
        n += 1;
    }
    n
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header of `src`; fails with `InvalidData` if it is neither pcap
    /// nor pcapng.
    pub fn new(src: R) -> io::Result<Self> {
        let mut r = Self {
            src,
            buf: vec![0; CHUNK],
            base: 0,
            start: 0,
            end: 0,
            eof: false,
            done: false,
            container: Container::Pcapng {
                swapped: false,
                ifaces: Vec::new(),
            },
            counts: ReadCounts::default(),
            damage: None,
        };
        r.fill(24)?;
        let head = &r.buf[r.start..r.end];
        if head.len() < 4 {
            return Err(not_a_capture(head));
        }
        let magic = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let pcap = match magic {
            PCAP_MAGIC_US => Some((false, false)),
            PCAP_MAGIC_NS => Some((false, true)),
            m if m == PCAP_MAGIC_US.swap_bytes() => Some((true, false)),
            m if m == PCAP_MAGIC_NS.swap_bytes() => Some((true, true)),
            _ => None,
        };
        if let Some((swapped, nanos)) = pcap {
            if head.len() < 24 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a pcap file cut short in its file header ({} of 24 bytes)",
                        head.len()
                    ),
                ));
            }
            // The link type's upper bits hold FCS information: keep the low 16.
            let linktype = u32_at(head, 20, swapped) as u16;
            r.container = Container::Pcap {
                swapped,
                nanos,
                linktype,
                snaplen: u32_at(head, 16, swapped),
            };
            r.start += 24;
        } else if magic != BT_SHB {
            return Err(not_a_capture(head));
        }
        Ok(r)
    }

    /// Damage seen so far.
    pub fn counts(&self) -> ReadCounts {
        self.counts
    }

    /// What ended the file before its end, if something did: a record or block that
    /// cannot be framed, or one cut short (not space never written).
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Ends the file at the record or block at `start`, which is damaged (`what`).
    fn damaged(&mut self, what: String) {
        self.damage = Some(Damage {
            offset: self.base + self.start as u64,
            what,
        });
        self.done = true;
    }

    /// Makes at least `n` bytes available from `start`, unless the file ends first.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        while self.end - self.start < n && !self.eof {
            if self.start + n > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.base += self.start as u64;
                self.end -= self.start;
                self.start = 0;
                if n > self.buf.len() {
                    self.buf.resize(n.next_multiple_of(CHUNK), 0);
                }
            }
            let got = self.src.read(&mut self.buf[self.end..])?;
            if got == 0 {
                self.eof = true;
            }
            self.end += got;
        }
        Ok(())
    }

    fn avail(&self) -> usize {
        self.end - self.start
    }

    /// Ends the file after a partial record (`what`, of `need` bytes): damage unless
    /// what is left was never written (zeros).
    fn truncated(&mut self, what: &str, need: usize) {
        let left = &self.buf[self.start..self.end];
        if !left.is_empty() {
            self.counts.truncated += 1;
            if left.iter().any(|&b| b != 0) {
                let n = left.len();
                self.damaged(format!(
                    "{what} cut short by the end of the file ({n} of {need} bytes)"
                ));
            }
        }
        self.done = true;
    }

    /// The next packet, or `None` at the end of the file.
    pub fn next_record(&mut self) -> io::Result<Option<Record<'_>>> {
        if self.done {
            return Ok(None);
        }
        match self.container {
            Container::Pcap {
                swapped,
                nanos,
                linktype,
                snaplen,
            } => self.next_pcap(swapped, nanos, linktype, snaplen),
            Container::Pcapng { .. } => self.next_pcapng(),
        }
    }

    fn next_pcap(
        &mut self,
        swapped: bool,
        nanos: bool,
        linktype: u16,
        snaplen: u32,
    ) -> io::Result<Option<Record<'_>>> {
        self.fill(16)?;
        if self.avail() < 16 {
            self.truncated("a record header", 16);
            return Ok(None);
        }
        let h = &self.buf[self.start..self.start + 16];
        if h.iter().all(|&b| b == 0) {
            // Not a record (no capture holds an empty frame at the epoch) but space
            // never written: a recording of a version before the writes in file order,
            // killed with writes in flight (io-depth above 1), ends so. The data ends
            // here.
            self.counts.truncated += 1;
            self.done = true;
            return Ok(None);
        }
        let sec = u64::from(u32_at(h, 0, swapped));
        let frac = u64::from(u32_at(h, 4, swapped));
        let caplen = u32_at(h, 8, swapped) as usize;
        let orig_len = u32_at(h, 12, swapped);
        let bad = if caplen > MAX_RECORD {
            Some(format!(
                "a record claims {caplen} bytes (more than the {MAX_RECORD} any record may have)"
            ))
        } else if snaplen > 0 && caplen > snaplen as usize {
            Some(format!(
                "a record of {caplen} bytes is longer than the file's snaplen ({snaplen})"
            ))
        } else if frac >= if nanos { 1_000_000_000 } else { 1_000_000 } {
            Some(format!(
                "a record's timestamp fraction ({frac}) is out of range"
            ))
        } else {
            None
        };
        if let Some(what) = bad {
            // No framing to resynchronise on: the rest of the file is unreadable.
            self.counts.malformed += 1;
            self.damaged(what);
            return Ok(None);
        }
        self.fill(16 + caplen)?;
        if self.avail() < 16 + caplen {
            self.truncated("a record", 16 + caplen);
            return Ok(None);
        }
        let at = self.start + 16;
        self.start = at + caplen;
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        Ok(Some(Record {
            linktype,
            ts_ns,
            orig_len,
            data: &self.buf[at..at + caplen],
        }))
    }

    fn next_pcapng(&mut self) -> io::Result<Option<Record<'_>>> {
        loop {
            self.fill(12)?;
            if self.avail() < 12 {
                self.truncated("a block header", 12);
                return Ok(None);
            }
            let Container::Pcapng { swapped, .. } = self.container else {
                unreachable!("pcapng reader on a pcap file")
            };
            let b = &self.buf[self.start..self.end];
            let raw_type = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
            let swapped = if raw_type == BT_SHB {
                // The section's byte order is given by its byte-order magic.
                match u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) {
                    BYTE_ORDER_MAGIC => false,
                    m if m == BYTE_ORDER_MAGIC.swap_bytes() => true,
                    m => {
                        self.counts.malformed += 1;
                        self.damaged(format!("a section header's byte-order magic is {m:#010x}"));
                        return Ok(None);
                    }
                }
            } else {
                swapped
            };
            let block_type = u32_at(b, 0, swapped);
            let len = u32_at(b, 4, swapped) as usize;
            if block_type == 0 && len == 0 {
                // Space never written (see next_pcap): the data ends here.
                self.counts.truncated += 1;
                self.done = true;
                return Ok(None);
            }
            if len < 12 || !len.is_multiple_of(4) || len > MAX_RECORD {
                self.counts.malformed += 1;
                self.damaged(format!(
                    "a block of type {block_type:#x} claims a length of {len} bytes"
                ));
                return Ok(None);
            }
            self.fill(len)?;
            if self.avail() < len {
                self.truncated("a block", len);
                return Ok(None);
            }
            let at = self.start;
            self.start += len;
            let block = &self.buf[at..at + len];
            if u32_at(block, len - 4, swapped) as usize != len {
                self.counts.malformed += 1;
                continue;
            }
            let body = &block[8..len - 4];
            match block_type {
                BT_SHB => {
                    self.container = Container::Pcapng {
                        swapped,
                        ifaces: Vec::new(),
                    };
                }
                BT_IDB => match parse_idb(body, swapped) {
                    Some(iface) => {
                        if let Container::Pcapng { ifaces, .. } = &mut self.container {
                            ifaces.push(iface);
                        }
                    }
                    None => self.counts.malformed += 1,
                },
                BT_EPB | BT_PB | BT_SPB => {
                    let Container::Pcapng { ifaces, .. } = &self.container else {
                        unreachable!()
                    };
                    match packet(block_type, body, swapped, ifaces) {
                        Some((iface, ts_ns, orig_len, range)) => {
                            let data = &self.buf[at + 8 + range.start..at + 8 + range.end];
                            return Ok(Some(Record {
                                linktype: iface.linktype,
                                ts_ns,
                                orig_len,
                                data,
                            }));
                        }
                        None => self.counts.malformed += 1,
                    }
                }
                _ => {} // statistics, name resolution, custom blocks: not packets
            }
        }
    }
}

fn not_a_capture(head: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "not a pcap or pcapng file (it starts with {:02x?})",
            &head[..head.len().min(4)]
        ),
    )
}

fn parse_idb(body: &[u8], swapped: bool) -> Option<Iface> {
    if body.len() < 8 {
        return None;
    }
    let mut iface = Iface {
        linktype: u16_at(body, 0, swapped),
        snaplen: u32_at(body, 4, swapped),
        resol: (10, 6),
        offset_s: 0,
    };
    let mut opts = &body[8..];
    while opts.len() >= 4 {
        let code = u16_at(opts, 0, swapped);
        let olen = u16_at(opts, 2, swapped) as usize;
        let value = opts.get(4..4 + olen)?;
        match (code, olen) {
            (0, _) => break,
            (9, 1) => {
                let v = value[0];
                iface.resol = if v & 0x80 != 0 {
                    (2, v & 0x7f)
                } else {
                    (10, v)
                };
            }
            (14, 8) => {
                let v = u64::from_le_bytes(value.try_into().ok()?);
                iface.offset_s = if swapped { v.swap_bytes() } else { v } as i64;
            }
            _ => {}
        }
        opts = opts
            .get((4 + olen).next_multiple_of(4)..)
            .unwrap_or_default();
    }
    Some(iface)
}

/// A packet block's interface, time, wire length and data range within `body`.
fn packet(
    block_type: u32,
    body: &[u8],
    swapped: bool,
    ifaces: &[Iface],
) -> Option<(Iface, u64, u32, std::ops::Range<usize>)> {
    if block_type == BT_SPB {
        let iface = *ifaces.first()?;
        let orig_len = u32_at(body.get(..4)?, 0, swapped);
        let mut caplen = (orig_len as usize).min(body.len() - 4);
        if iface.snaplen > 0 {
            caplen = caplen.min(iface.snaplen as usize);
        }
        return Some((iface, 0, orig_len, 4..4 + caplen));
    }
    if body.len() < 20 {
        return None;
    }
    let iface_id = if block_type == BT_PB {
        u16_at(body, 0, swapped) as usize
    } else {
        u32_at(body, 0, swapped) as usize
    };
    let iface = *ifaces.get(iface_id)?;
    let ts = (u64::from(u32_at(body, 4, swapped)) << 32) | u64::from(u32_at(body, 8, swapped));
    let caplen = u32_at(body, 12, swapped) as usize;
    let orig_len = u32_at(body, 16, swapped);
    if 20 + caplen > body.len() {
        return None;
    }
    Some((
        iface,
        to_ns(ts, iface.resol, iface.offset_s),
        orig_len,
        20..20 + caplen,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pcap::{
        epb_header, epb_trailer, pcap_file_header, pcap_record_header, pcapng_file_header,
    };

    fn collect(bytes: &[u8]) -> (Vec<(u64, Vec<u8>)>, ReadCounts) {
        let mut r = CaptureReader::new(bytes).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            out.push((rec.ts_ns, rec.data.to_vec()));
        }
        (out, r.counts())
    }

    fn swap_pcap(mut f: Vec<u8>, records: usize, sizes: &[usize]) -> Vec<u8> {
        // Rewrites a little-endian pcap file big-endian.
        for i in [0usize, 8, 12, 16, 20] {
            f[i..i + 4].reverse();
        }
        f[4..6].reverse();
        f[6..8].reverse();
        f[8..12].copy_from_slice(&[0, 0, 0, 0]);
        let mut at = 24;
        for &size in sizes.iter().take(records) {
            for j in 0..4 {
                f[at + 4 * j..at + 4 * j + 4].reverse();
            }
            at += 16 + size;
        }
        f
    }

    #[test]
    fn pcap_in_both_resolutions_and_byte_orders() {
        let mut f = pcap_file_header(65535, 1).to_vec();
        f.extend_from_slice(&pcap_record_header(1_000_000_123, 3, 3));
        f.extend_from_slice(b"abc");
        f.extend_from_slice(&pcap_record_header(2_000_000_000, 1, 9));
        f.extend_from_slice(b"d");
        let (recs, counts) = collect(&f);
        assert_eq!(
            recs,
            vec![
                (1_000_000_123, b"abc".to_vec()),
                (2_000_000_000, b"d".to_vec())
            ]
        );
        assert_eq!(counts, ReadCounts::default());

        let big = swap_pcap(f.clone(), 2, &[3, 1]);
        assert_eq!(collect(&big).0, recs);

        // Microseconds: the same file with the µs magic and fractions in µs.
        let mut us = f.clone();
        us[0..4].copy_from_slice(&PCAP_MAGIC_US.to_le_bytes());
        us[24 + 4..24 + 8].copy_from_slice(&7u32.to_le_bytes());
        let (recs_us, _) = collect(&us);
        assert_eq!(recs_us[0].0, 1_000_007_000);
        let big_us = swap_pcap(us, 2, &[3, 1]);
        assert_eq!(collect(&big_us).0[0].0, 1_000_007_000);
    }

    #[test]
    fn whole_records_of_a_file_being_written_are_counted() {
        let path = std::env::temp_dir().join(format!("fh-count-{}.pcap", std::process::id()));
        assert_eq!(count_whole_records(&path), 0, "no file yet");
        let mut f = pcap_file_header(65535, 1).to_vec();
        std::fs::write(&path, &f[..10]).unwrap();
        assert_eq!(count_whole_records(&path), 0, "header half written");
        for i in 0..3u64 {
            f.extend_from_slice(&pcap_record_header(i, 3, 3));
            f.extend_from_slice(b"abc");
        }
        std::fs::write(&path, &f[..f.len() - 1]).unwrap();
        assert_eq!(count_whole_records(&path), 2, "the last record cut short");
        std::fs::write(&path, &f).unwrap();
        assert_eq!(count_whole_records(&path), 3);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn space_never_written_ends_the_data() {
        // A pcap an older version left when killed with writes in flight: whole
        // records, then zeros.
        let mut f = pcap_file_header(65535, 1).to_vec();
        f.extend_from_slice(&pcap_record_header(1, 3, 3));
        f.extend_from_slice(b"abc");
        f.extend_from_slice(&[0u8; 4096]);
        let (recs, counts) = collect(&f);
        assert_eq!(recs.len(), 1);
        assert_eq!(counts.truncated, 1);
        assert_eq!(counts.malformed, 0);
        assert_eq!(
            damage(&f),
            None,
            "zeros are the end of the data, not damage"
        );
        // Also when they are fewer than a record header.
        assert_eq!(damage(&f[..24 + 16 + 3 + 10]), None);
        // A real record at the epoch with a length is still a record.
        let mut g = pcap_file_header(65535, 1).to_vec();
        g.extend_from_slice(&pcap_record_header(0, 1, 1));
        g.push(7);
        assert_eq!(collect(&g).0.len(), 1);
    }

    #[test]
    fn truncated_and_corrupt_pcap_never_panic() {
        let mut f = pcap_file_header(65535, 1).to_vec();
        f.extend_from_slice(&pcap_record_header(1, 3, 3));
        f.extend_from_slice(b"abc");
        f.extend_from_slice(&pcap_record_header(2, 10, 10));
        f.extend_from_slice(b"short");
        let (recs, counts) = collect(&f);
        assert_eq!(recs.len(), 1);
        assert_eq!(counts.truncated, 1);
        // Damage names where the record cut short starts.
        let d = damage(&f).expect("a cut record is damage");
        assert_eq!(d.offset, 24 + 16 + 3);
        assert!(d.what.contains("(21 of 26 bytes)"), "{}", d.what);
        let d = damage(&f[..24 + 16 + 3 + 5]).expect("a cut record header is damage");
        assert!(
            d.what.contains("record header") && d.what.contains("(5 of 16"),
            "{d:?}"
        );
        assert!(
            damage(&f[..24 + 16 + 3]).is_none(),
            "ends after a whole record"
        );
        for cut in 0..f.len() {
            let _ = CaptureReader::new(&f[..cut])
                .map(|mut r| while let Ok(Some(_)) = r.next_record() {});
        }
        let mut bad = pcap_file_header(65535, 1).to_vec();
        bad.extend_from_slice(&pcap_record_header(1, u32::MAX, 3));
        let (recs, counts) = collect(&bad);
        assert!(recs.is_empty());
        assert_eq!(counts.malformed, 1);
        assert_eq!(damage(&bad).map(|d| d.offset), Some(24));
        // A record longer than the file's snaplen; snaplen 0 bounds nothing.
        let mut snap = pcap_file_header(2, 1).to_vec();
        snap.extend_from_slice(&pcap_record_header(1, 3, 3));
        snap.extend_from_slice(b"abc");
        let d = damage(&snap).expect("longer than the snaplen");
        assert!(d.what.contains("snaplen (2)"), "{}", d.what);
        snap[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(collect(&snap).0.len(), 1);
        assert!(damage(&snap).is_none());
        assert!(CaptureReader::new(&b"GIF89a..."[..]).is_err());
        let e = CaptureReader::new(&pcap_file_header(65535, 1)[..20])
            .err()
            .unwrap();
        assert!(e.to_string().contains("(20 of 24 bytes)"), "{e}");
    }

    /// What ended `f` early, read to its end.
    fn damage(f: &[u8]) -> Option<Damage> {
        let mut r = CaptureReader::new(f).unwrap();
        while let Ok(Some(_)) = r.next_record() {}
        r.damage().cloned()
    }

    fn epb(ts: u64, data: &[u8]) -> Vec<u8> {
        let mut v = epb_header(ts, data.len() as u32, data.len() as u32).to_vec();
        v.extend_from_slice(data);
        let (t, n) = epb_trailer(data.len());
        v.extend_from_slice(&t[..n]);
        v
    }

    #[test]
    fn pcapng_packets_skip_bad_blocks() {
        let mut f = Vec::new();
        pcapng_file_header(&mut f, 65535, 1, "x");
        f.extend_from_slice(&epb(5, b"hello"));
        let mut broken = epb(6, b"bad");
        let n = broken.len();
        broken[n - 4..].copy_from_slice(&0u32.to_le_bytes()); // trailer mismatch
        f.extend_from_slice(&broken);
        let mut unknown_iface = epb(7, b"nope");
        unknown_iface[8..12].copy_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&unknown_iface);
        f.extend_from_slice(&epb(8, b"world!"));
        let full = f.len();
        f.extend_from_slice(&epb(9, b"cut off")[..10]);
        let (recs, counts) = collect(&f);
        assert_eq!(recs, vec![(5, b"hello".to_vec()), (8, b"world!".to_vec())]);
        assert_eq!(
            counts,
            ReadCounts {
                malformed: 2,
                truncated: 1
            }
        );
        assert_eq!(damage(&f).map(|d| d.offset), Some(full as u64));
        for cut in 0..full {
            if let Ok(mut r) = CaptureReader::new(&f[..cut]) {
                while let Ok(Some(_)) = r.next_record() {}
            }
        }
    }

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(to_ns(5, (10, 6), 0), 5000);
        assert_eq!(to_ns(5, (10, 9), 1), 1_000_000_005);
        assert_eq!(to_ns(5000, (10, 12), 0), 5);
        assert_eq!(to_ns(1 << 20, (2, 20), 0), 1_000_000_000);
    }
}
