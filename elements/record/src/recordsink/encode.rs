//! Turning buffers into file bytes for each format, straight into the staging blocks.
//!
//! Per datagram: one record header plus network headers built in a stack array, then
//! the payload copied once; no allocation, no lock, no `GstBuffer`. One buffer map per
//! batch.

use std::net::{Ipv4Addr, SocketAddr};

use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::meta::dest::{frame_headers, PacketDest, PacketDestMeta};
use firehose_core::meta::message;
use firehose_core::PacketBatchMeta;

use super::Format;
use crate::disk::stage::Stage;
use crate::disk::writer::Writer;
use crate::format::index::{self, Entry, Kind, NO_PTS};
use crate::format::net::{self, Destination, MAX_HEADERS};
use crate::format::pcap::{self, IfStats, EPB_HEADER_LEN, LINKTYPE_ETHERNET};

/// Upper bound of the bytes a format adds to one datagram (pcapng: block header, the
/// longest network headers, padding and trailing length).
pub const RECORD_OVERHEAD: usize = EPB_HEADER_LEN + MAX_HEADERS + 3 + 4;
/// Largest record header (pcapng's; pcap's is 16 bytes).
const HEAD_MAX: usize = EPB_HEADER_LEN;

/// What one buffer contributed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Datagrams (or buffers/heaps) recorded.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Datagrams cut to the largest UDP payload (pcap formats only).
    pub truncated: u64,
}

/// Per-recording encoding state.
#[derive(Debug)]
pub struct Encoder {
    format: Format,
    snaplen: u32,
    dst: Destination,
    ident: u16,
    /// Next packet number (format=raw, batches).
    packet_no: u64,
    /// Next buffer number (format=raw, plain buffers).
    buffer_no: u64,
    /// Capture time of the first record, for interface statistics.
    pub first_ts: Option<u64>,
}

pub use firehose_core::batch::unix_ns;

impl Encoder {
    /// An encoder for `format`, frames addressed to `dst`.
    pub fn new(format: Format, snaplen: u32, dst: SocketAddr) -> Self {
        Self {
            format,
            snaplen: snaplen.max(64),
            dst: Destination::new(dst),
            ident: 0,
            packet_no: 0,
            buffer_no: 0,
            first_ts: None,
        }
    }

    /// Changes where synthesized datagrams are addressed (before any is written).
    pub fn set_destination(&mut self, dst: SocketAddr) {
        self.dst = Destination::new(dst);
    }

    /// The bytes that start every file of this format.
    pub fn file_header(&self) -> Vec<u8> {
        match self.format {
            Format::Pcap => pcap::pcap_file_header(self.snaplen, LINKTYPE_ETHERNET).to_vec(),
            Format::Pcapng => {
                let mut v = Vec::new();
                pcap::pcapng_file_header(&mut v, self.snaplen, LINKTYPE_ETHERNET, "firehose");
                v
            }
            Format::Raw => Vec::new(),
        }
    }

    /// The index header for a new raw file (`None` for other formats).
    pub fn index_header(&self) -> Option<Vec<u8>> {
        (self.format == Format::Raw).then(|| index::header(unix_ns()).to_vec())
    }

    /// The bytes that end a file (pcapng interface statistics).
    pub fn file_trailer(&self, stats: &IfStats) -> Vec<u8> {
        let mut v = Vec::new();
        if self.format == Format::Pcapng {
            pcap::isb(&mut v, stats);
        }
        v
    }

    /// Most bytes `buf` can take in the file.
    pub fn bound(&self, buf: &gst::BufferRef) -> usize {
        // A batch's datagrams, not its buffer: a receive slab is usually far larger than
        // what it holds, and rotation by size decides on this bound.
        let (records, bytes) = match buf.meta::<PacketBatchMeta>() {
            Some(m) => (
                m.packets().len(),
                // Those encode() records: the ones that lie in the buffer.
                m.packets()
                    .iter()
                    .filter(|p| p.range().end <= buf.size())
                    .map(|p| p.len as usize)
                    .sum::<usize>(),
            ),
            None => (1, buf.size()),
        };
        match self.format {
            Format::Raw => bytes,
            _ => bytes + records * RECORD_OVERHEAD,
        }
    }

    /// Encodes `buf` into `stage` (space for [`Encoder::bound`] bytes reserved).
    pub fn encode(&mut self, buf: &gst::BufferRef, stage: &mut Stage, writer: &Writer) -> Written {
        let mut w = Written::default();
        let Ok(map) = buf.map_readable() else {
            return w;
        };
        let data = map.as_slice();
        let now = unix_ns();
        let pts = buf.pts().map_or(NO_PTS, |t| t.nseconds());
        if let Some(meta) = buf.meta::<PacketBatchMeta>() {
            let dests = buf.meta::<PacketDestMeta>();
            let dests = dests.as_ref().map_or(&[][..], |d| d.dests());
            for (i, p) in meta.packets().iter().enumerate() {
                let Some(payload) = data.get(p.range()) else {
                    continue;
                };
                let ts = if p.rx_time_ns != 0 { p.rx_time_ns } else { now };
                let src = p.src.to_socket_addr();
                match self.format {
                    Format::Raw => {
                        let id = post_inc(&mut self.packet_no);
                        let rec = RawRecord {
                            id,
                            kind: Kind::Packet,
                            complete: true,
                            ts,
                            pts,
                        };
                        self.raw(stage, writer, payload, rec);
                        w.bytes += payload.len() as u64;
                    }
                    _ => {
                        let dest = dests.get(i).copied().unwrap_or_default();
                        // The frame's own headers where the source left them in the
                        // buffer (and they still match this payload), else headers
                        // made from the source's word on the destination.
                        match frame_headers(data, p.offset as usize, payload.len(), dest.header_len)
                        {
                            Some(h) => self.put_record(stage, writer, h, payload, ts),
                            None => {
                                let cut = self.frame(stage, writer, src, dest, payload, ts);
                                w.truncated += u64::from(cut);
                            }
                        }
                        w.bytes += payload.len() as u64;
                    }
                }
                w.packets += 1;
                self.first_ts.get_or_insert(ts);
            }
            return w;
        }
        self.first_ts.get_or_insert(now);
        w.packets = 1;
        w.bytes = data.len() as u64;
        match self.format {
            Format::Raw if buf.meta::<ChunkMeta>().is_some() => {
                let meta = buf.meta::<ChunkMeta>().expect("checked");
                self.chunk(stage, writer, data, meta.info(), now, pts);
            }
            Format::Raw => {
                let (kind, complete, id) = match heap_info(buf) {
                    Some((complete, heap_cnt)) => (Kind::Heap, complete, heap_cnt),
                    None => (Kind::Buffer, true, post_inc(&mut self.buffer_no)),
                };
                let rec = RawRecord {
                    id,
                    kind,
                    complete,
                    ts: now,
                    pts,
                };
                self.raw(stage, writer, data, rec);
            }
            _ => {
                let unknown = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
                let dest = PacketDest::default();
                w.truncated += u64::from(self.frame(stage, writer, unknown, dest, data, now));
            }
        }
        w
    }

    /// One datagram as a pcap record or pcapng EPB, with synthesized headers; true if
    /// it had to be cut. The destination is `dest`'s when the source knew it, else the
    /// recording's.
    fn frame(
        &mut self,
        stage: &mut Stage,
        writer: &Writer,
        src: SocketAddr,
        dest: PacketDest,
        payload: &[u8],
        ts: u64,
    ) -> bool {
        let known = dest.dst.to_socket_addr();
        let dst = if known.port() != 0 && !known.ip().is_unspecified() {
            Destination::new(known)
        } else {
            self.dst
        };
        let max = net::max_payload(src, &dst);
        let cut = payload.len() > max;
        let payload = &payload[..payload.len().min(max)];
        let mut hdr = [0u8; MAX_HEADERS];
        self.ident = self.ident.wrapping_add(1);
        let hl = net::write_headers(&mut hdr, src, &dst, payload, self.ident);
        self.put_record(stage, writer, &hdr[..hl], payload, ts);
        cut
    }

    /// A record of `headers` then `payload`, cut to the snap length.
    fn put_record(
        &mut self,
        stage: &mut Stage,
        writer: &Writer,
        hdr: &[u8],
        payload: &[u8],
        ts: u64,
    ) {
        let hl = hdr.len();
        let frame_len = hl + payload.len();
        let caplen = frame_len.min(self.snaplen as usize);
        let mut head = [0u8; HEAD_MAX];
        let rh = match self.format {
            Format::Pcapng => {
                head[..EPB_HEADER_LEN].copy_from_slice(&pcap::epb_header(
                    ts,
                    caplen as u32,
                    frame_len as u32,
                ));
                EPB_HEADER_LEN
            }
            _ => {
                head[..16].copy_from_slice(&pcap::pcap_record_header(
                    ts,
                    caplen as u32,
                    frame_len as u32,
                ));
                16
            }
        };
        let hcap = hl.min(caplen);
        stage.put(&head[..rh], writer);
        stage.put(&hdr[..hcap], writer);
        stage.put(&payload[..caplen - hcap], writer);
        if self.format == Format::Pcapng {
            let (t, n) = pcap::epb_trailer(caplen);
            stage.put(&t[..n], writer);
        }
    }

    /// A chunk: its bytes, an index entry for it and one per slot, so a reader finds
    /// each heap (and whether it arrived) without the meta.
    fn chunk(
        &mut self,
        stage: &mut Stage,
        writer: &Writer,
        data: &[u8],
        info: &ChunkInfo,
        ts: u64,
        pts: u64,
    ) {
        let base = stage.file_bytes();
        let entry = |id: u64, offset: u64, len: usize, complete: bool, kind: Kind| Entry {
            id,
            offset,
            len: len as u32,
            complete,
            kind: Some(kind),
            time_ns: ts,
            pts_ns: pts,
        };
        let whole = entry(
            info.chunk_id,
            base,
            data.len(),
            info.is_complete(),
            Kind::Chunk,
        );
        stage.put_index(&whole.encode());
        for i in 0..info.slots {
            let r = info.slot_range(i);
            if r.end <= data.len() {
                let e = entry(
                    i as u64,
                    base + r.start as u64,
                    r.len(),
                    info.is_present(i),
                    Kind::Slot,
                );
                stage.put_index(&e.encode());
            }
        }
        stage.put(data, writer);
    }

    /// One raw record and its index entry.
    fn raw(&mut self, stage: &mut Stage, writer: &Writer, payload: &[u8], rec: RawRecord) {
        let entry = Entry {
            id: rec.id,
            offset: stage.file_bytes(),
            len: payload.len() as u32,
            complete: rec.complete,
            kind: Some(rec.kind),
            time_ns: rec.ts,
            pts_ns: rec.pts,
        };
        stage.put_index(&entry.encode());
        stage.put(payload, writer);
    }
}

/// What the index says about one raw record.
struct RawRecord {
    id: u64,
    kind: Kind,
    complete: bool,
    ts: u64,
    pts: u64,
}

fn post_inc(v: &mut u64) -> u64 {
    let r = *v;
    *v += 1;
    r
}

/// A message buffer's completeness and id (a SPEAD heap's HEAP_CNT), from the generic
/// message meta: the recorder needs no engine's own meta.
fn heap_info(buf: &gst::BufferRef) -> Option<(bool, u64)> {
    let m = message::read(buf)?;
    Some((m.complete, m.id))
}
