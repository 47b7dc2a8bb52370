//! Where a recording's whole records end, and cutting it there: the engine of
//! `firehose record check` and `firehose record repair`.
//!
//! A recording this version leaves after a kill holds whole records and at most a last
//! one cut short by the end of the file. Older versions, killed with writes in flight
//! (`io-depth` above 1), also left space never written inside the file's size: zeros
//! after the data or between blocks. [`scan`] walks a file's framing (pcap and pcapng)
//! or its index (raw) from the start and stops at the first thing that is not a whole
//! record: the end of the file, a record cut short, space never written, or bytes that
//! cannot be framed. [`repair`] keeps exactly what comes before it.
//!
//! It walks the framing itself rather than through [`super::container::CaptureReader`]:
//! that reader skips a block it cannot understand to deliver the packets after it,
//! and hides non-packet blocks, where a repair must stop at the first block that is not
//! whole and know where every block (a trailing statistics block too) ends.
//!
//! Every length read from the file is checked against the file's size and against
//! [`MAX_RECORD`] before anything is read or allocated for it, so no input makes the
//! scan read past the file or allocate more than one record's worth.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::format::index;
use crate::format::pcap::{
    BT_EPB, BT_PB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, PCAP_FILE_HEADER_LEN, PCAP_MAGIC_NS,
    PCAP_MAGIC_US, PCAP_RECORD_HEADER_LEN,
};

/// Largest record or block the scan accepts; anything claiming more is damage.
pub const MAX_RECORD: u64 = 16 << 20;

/// The granule space is allocated and written in: a block a recording wrote begins on a
/// multiple of it, so space never written begins on one too.
const GRANULE: u64 = 4096;

/// The kind of file scanned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap (µs or ns, either byte order).
    Pcap,
    /// pcapng.
    Pcapng,
    /// `fhrecordsink format=raw`: payloads and a `.idx` index beside them.
    Raw,
}

impl Format {
    /// Its name as the `format` property spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pcap => "pcap",
            Format::Pcapng => "pcapng",
            Format::Raw => "raw",
        }
    }
}

/// What follows the last whole record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing: the file ends right after its last whole record.
    Clean,
    /// A record cut short by the end of the file: `have` of its `need` bytes.
    Truncated {
        /// Bytes the record (or its header) needs.
        need: u64,
        /// Bytes of it in the file.
        have: u64,
    },
    /// Space never written (zeros) where the next record should begin (or inside the
    /// last one, see [`Scan::dropped_last`]): `zeros` bytes of them, then `data_after` bytes that are not all zero (later blocks of an older
    /// version's writes in flight that completed first: with no framing to find their
    /// first record, they cannot be kept).
    Unwritten {
        /// Zero bytes from the cut.
        zeros: u64,
        /// Bytes after those zeros, up to the end of the file.
        data_after: u64,
    },
    /// Bytes that are not a record (`what`), e.g. a length no record can have.
    Damaged {
        /// What is wrong there.
        what: String,
    },
    /// Raw only: data the index has no entry for (the index is behind the data; raw
    /// data has no framing of its own to find records by).
    Unindexed {
        /// Bytes of data past the last indexed record.
        bytes: u64,
    },
}

/// What the scan of a raw file's index found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexScan {
    /// The index file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Whole entries in it.
    pub entries: u64,
    /// Entries kept (their records lie wholly in the data, in order).
    pub kept: u64,
    /// Bytes of the index to keep: its header and the kept entries.
    pub keep: u64,
}

/// What [`scan`] found in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// The file scanned (a raw file's data file).
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its size in bytes.
    pub size: u64,
    /// Whole records (packets; raw: records of the index, slots not counted).
    pub records: u64,
    /// Bytes of the file to keep: its header and the whole records. [`repair`] cuts here.
    pub keep: u64,
    /// What lies from `keep` on.
    pub tail: Tail,
    /// The last record that framed was dropped too: its end lies in the zeros that
    /// follow it and begins on a [`GRANULE`] boundary, so it may be space never written
    /// rather than data (a record whose real payload ends in zeros across a 4096-byte
    /// boundary cannot be told from it).
    pub dropped_last: bool,
    /// Raw: the index.
    pub index: Option<IndexScan>,
    /// Disk space allocated beyond the end of the file (a killed recording's
    /// preallocation); cutting the file releases it.
    pub reserved: u64,
}

impl Scan {
    /// Whether the file holds only whole records (with its index, for raw) and nothing
    /// else: nothing for [`repair`] to cut.
    pub fn is_whole(&self) -> bool {
        self.keep == self.size
            && self.index.as_ref().is_none_or(|i| i.keep == i.size)
            && matches!(self.tail, Tail::Clean)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A window of the file, read in large pieces, so walking millions of small records
/// costs a read per piece, not per record.
struct Window {
    file: File,
    size: u64,
    buf: Vec<u8>,
    base: u64,
    len: usize,
}

/// Bytes read at a time.
const PIECE: usize = 1 << 20;

impl Window {
    fn new(file: File, size: u64) -> Self {
        Self {
            file,
            size,
            buf: Vec::new(),
            base: 0,
            len: 0,
        }
    }

    /// Up to `n` bytes at `pos` (fewer only where the file ends). `n` must be bounded
    /// by the caller ([`MAX_RECORD`] at most).
    fn at(&mut self, pos: u64, n: u64) -> io::Result<&[u8]> {
        debug_assert!(n <= MAX_RECORD + 64);
        let end = pos.saturating_add(n).min(self.size);
        let pos = pos.min(end);
        if pos < self.base || end > self.base + self.len as u64 {
            let want = (n as usize).max(PIECE);
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            let avail = (self.size - pos).min(want as u64) as usize;
            self.file.read_exact_at(&mut self.buf[..avail], pos)?;
            self.base = pos;
            self.len = avail;
        }
        let s = (pos - self.base) as usize;
        Ok(&self.buf[s..s + (end - pos) as usize])
    }

    /// Zero bytes from `pos` on (up to the end of the file).
    fn zeros_from(&mut self, pos: u64) -> io::Result<u64> {
        let mut p = pos;
        while p < self.size {
            let b = self.at(p, PIECE as u64)?;
            match b.iter().position(|&x| x != 0) {
                Some(i) => return Ok(p + i as u64 - pos),
                None => p += b.len() as u64,
            }
        }
        Ok(p - pos)
    }

    /// Where the run of zero bytes that ends at `end` begins, looking back no further
    /// than `floor`.
    fn zeros_back_to(&mut self, end: u64, floor: u64) -> io::Result<u64> {
        let b = self.at(floor, end - floor)?;
        let nonzero = b.iter().rposition(|&x| x != 0);
        Ok(nonzero.map_or(floor, |i| floor + i as u64 + 1))
    }
}

/// The tail at `pos`, where the next record should begin but `need` bytes of header or
/// record are not all there, or are zeros.
fn short_tail(w: &mut Window, pos: u64, need: u64) -> io::Result<Tail> {
    let zeros = w.zeros_from(pos)?;
    if zeros > 0 && (zeros >= need || pos + zeros == w.size) {
        return Ok(Tail::Unwritten {
            zeros,
            data_after: w.size - pos - zeros,
        });
    }
    Ok(Tail::Truncated {
        need,
        have: w.size - pos,
    })
}

/// Scans `path`: pcap or pcapng by its magic, raw when it has neither and `path.idx`
/// exists (or `path` is a `.idx` file: its data file is scanned).
pub fn scan(path: &Path) -> io::Result<Scan> {
    let data_path = data_path(path);
    if let Some(stem) = path.to_str().and_then(|s| s.strip_suffix(".idx")) {
        if !Path::new(stem).exists() {
            // The sink creates the index first: a kill before the data file leaves this.
            return Err(invalid(format!(
                "{} is a raw index whose data file {stem} was never created (a recording \
                 stopped as it opened the file): nothing to keep; remove it",
                path.display()
            )));
        }
    }
    let file = File::open(&data_path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{} is not a regular file",
            data_path.display()
        )));
    }
    let size = meta.len();
    let reserved = (meta.blocks() * 512).saturating_sub(size.next_multiple_of(GRANULE));
    let mut head = [0u8; 4];
    let got = file.read_at(&mut head, 0)?;
    let magic = u32::from_le_bytes(head);
    let idx = index_path(&data_path);
    let mut w = Window::new(file, size);
    let mut s = if got == 4 && is_pcap_magic(magic) {
        scan_pcap(&mut w)?
    } else if got == 4 && magic == BT_SHB {
        scan_pcapng(&mut w)?
    } else if idx.exists() {
        scan_raw(&mut w, &idx)?
    } else if got < 4 && is_magic_prefix(&head[..got]) {
        return Err(invalid(format!(
            "{} is cut short in its file header ({got} bytes): nothing to keep",
            data_path.display()
        )));
    } else if got == 0 {
        return Err(invalid(format!(
            "{} is empty: not even a file header was written (nothing to keep)",
            data_path.display()
        )));
    } else {
        return Err(invalid(format!(
            "{} is not a pcap or pcapng file (it starts with {:02x?}) and has no {} beside it (raw)",
            data_path.display(),
            &head[..got],
            idx.display()
        )));
    };
    s.path = data_path;
    s.reserved = reserved;
    Ok(s)
}

/// The data file `path` names: `path` itself, or for a raw index (`x.raw.idx`) the data
/// file beside it.
pub fn data_path(path: &Path) -> PathBuf {
    match path.to_str().and_then(|s| s.strip_suffix(".idx")) {
        Some(stem) if Path::new(stem).exists() => PathBuf::from(stem),
        _ => path.to_owned(),
    }
}

/// The index file of raw data file `data`.
pub fn index_path(data: &Path) -> PathBuf {
    let mut p = data.as_os_str().to_owned();
    p.push(".idx");
    PathBuf::from(p)
}

/// Whether `b` (under 4 bytes) begins a pcap or pcapng magic.
fn is_magic_prefix(b: &[u8]) -> bool {
    let magics = [PCAP_MAGIC_US, PCAP_MAGIC_NS, BT_SHB];
    !b.is_empty()
        && magics
            .iter()
            .flat_map(|m| [m.to_le_bytes(), m.to_be_bytes()])
            .any(|m| m.starts_with(b))
}

fn is_pcap_magic(m: u32) -> bool {
    [PCAP_MAGIC_US, PCAP_MAGIC_NS].contains(&m)
        || [PCAP_MAGIC_US, PCAP_MAGIC_NS].contains(&m.swap_bytes())
}

fn u32_of(b: &[u8], i: usize, swapped: bool) -> u32 {
    let v = u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

fn empty_scan(format: Format, size: u64) -> Scan {
    Scan {
        path: PathBuf::new(),
        format,
        size,
        records: 0,
        keep: 0,
        tail: Tail::Clean,
        dropped_last: false,
        index: None,
        reserved: 0,
    }
}

fn scan_pcap(w: &mut Window) -> io::Result<Scan> {
    let size = w.size;
    let mut s = empty_scan(Format::Pcap, size);
    let h = w.at(0, PCAP_FILE_HEADER_LEN as u64)?;
    if h.len() < PCAP_FILE_HEADER_LEN {
        return Err(invalid(format!(
            "a pcap file cut short in its file header ({} of {PCAP_FILE_HEADER_LEN} bytes): nothing to keep",
            h.len()
        )));
    }
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    let swapped = ![PCAP_MAGIC_US, PCAP_MAGIC_NS].contains(&magic);
    let nanos = magic == PCAP_MAGIC_NS || magic.swap_bytes() == PCAP_MAGIC_NS;
    let snaplen = u64::from(u32_of(h, 16, swapped));
    let limit = if snaplen > 0 {
        snaplen.min(MAX_RECORD)
    } else {
        MAX_RECORD
    };
    let hdr = PCAP_RECORD_HEADER_LEN as u64;
    let mut pos = PCAP_FILE_HEADER_LEN as u64;
    let mut last_start = None;
    s.tail = loop {
        if pos == size {
            break Tail::Clean;
        }
        let h = w.at(pos, hdr)?;
        if h.len() < PCAP_RECORD_HEADER_LEN || h.iter().all(|&b| b == 0) {
            break short_tail(w, pos, hdr)?;
        }
        let frac = u32_of(h, 4, swapped);
        let caplen = u64::from(u32_of(h, 8, swapped));
        if caplen > limit {
            break Tail::Damaged {
                what: format!(
                    "a record at byte {pos} claims {caplen} bytes, more than the file's snaplen ({snaplen}) allows"
                ),
            };
        }
        if frac >= if nanos { 1_000_000_000 } else { 1_000_000 } {
            break Tail::Damaged {
                what: format!("a record at byte {pos} has a timestamp fraction of {frac}"),
            };
        }
        if pos + hdr + caplen > size {
            break short_tail(w, pos, hdr + caplen)?;
        }
        last_start = Some(pos);
        s.records += 1;
        pos += hdr + caplen;
    };
    s.keep = pos;
    if let (Tail::Unwritten { .. }, Some(start)) = (&s.tail, last_start) {
        // The zeros may begin inside the last record: its end was then never written
        // either. Space never written begins on a granule boundary.
        let from = w.zeros_back_to(pos, start + 1)?;
        if from.next_multiple_of(GRANULE) < pos {
            s.records -= 1;
            s.keep = start;
            s.dropped_last = true;
            let zeros = w.zeros_from(from)?;
            s.tail = Tail::Unwritten {
                zeros,
                data_after: size - from - zeros,
            };
        }
    }
    Ok(s)
}

fn scan_pcapng(w: &mut Window) -> io::Result<Scan> {
    let size = w.size;
    let mut s = empty_scan(Format::Pcapng, size);
    let mut pos = 0u64;
    let mut swapped = false;
    s.tail = loop {
        if pos == size {
            break Tail::Clean;
        }
        let b = w.at(pos, 12)?;
        if b.len() < 12 {
            break short_tail(w, pos, 12)?;
        }
        let raw_type = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        if raw_type == BT_SHB {
            match u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) {
                BYTE_ORDER_MAGIC => swapped = false,
                m if m == BYTE_ORDER_MAGIC.swap_bytes() => swapped = true,
                m => {
                    break Tail::Damaged {
                        what: format!(
                            "a section header at byte {pos} has the byte-order magic {m:#010x}"
                        ),
                    }
                }
            }
        } else if pos == 0 {
            break Tail::Damaged {
                what: "the file does not begin with a section header block".into(),
            };
        }
        let block_type = u32_of(b, 0, swapped);
        let len = u64::from(u32_of(b, 4, swapped));
        if block_type == 0 && len == 0 {
            break short_tail(w, pos, 12)?;
        }
        if len < 12 || len % 4 != 0 || len > MAX_RECORD {
            break Tail::Damaged {
                what: format!(
                    "a block of type {block_type:#x} at byte {pos} claims a length of {len} bytes"
                ),
            };
        }
        if pos + len > size {
            break short_tail(w, pos, len)?;
        }
        let trailer = u64::from(u32_of(w.at(pos + len - 4, 4)?, 0, swapped));
        if trailer != len {
            // The block's end is not what its start says: never written (zeros from a
            // granule boundary inside it), or damaged.
            let from = w.zeros_back_to(pos + len, pos + 8)?;
            if from.next_multiple_of(GRANULE) < pos + len {
                let run = w.zeros_from(from)?;
                break Tail::Unwritten {
                    zeros: run,
                    data_after: size - from - run,
                };
            }
            break Tail::Damaged {
                what: format!(
                    "a block of {len} bytes at byte {pos} ends with the length {trailer}"
                ),
            };
        }
        if matches!(block_type, BT_EPB | BT_PB | BT_SPB) {
            s.records += 1;
        }
        pos += len;
    };
    s.keep = pos;
    if s.keep == 0 {
        return Err(invalid(format!(
            "a pcapng file cut short in its section header: nothing to keep ({})",
            match &s.tail {
                Tail::Damaged { what } => what.clone(),
                _ => format!("{size} bytes"),
            }
        )));
    }
    Ok(s)
}

fn scan_raw(w: &mut Window, idx_path: &Path) -> io::Result<Scan> {
    let size = w.size;
    let mut s = empty_scan(Format::Raw, size);
    let idx = File::open(idx_path)?;
    let idx_size = idx.metadata()?.len();
    let mut r = io::BufReader::with_capacity(PIECE, idx);
    let mut head = [0u8; index::HEADER_LEN];
    if idx_size < index::HEADER_LEN as u64 {
        return Err(invalid(format!(
            "{} is cut short in its header ({idx_size} of {} bytes): no record can be found in the data",
            idx_path.display(),
            index::HEADER_LEN
        )));
    }
    r.read_exact(&mut head)?;
    let hlen = u64::from(u32::from_le_bytes(head[8..12].try_into().expect("4")));
    let elen = u64::from(u32::from_le_bytes(head[12..16].try_into().expect("4")));
    if head[0..8] != index::MAGIC
        || hlen < index::HEADER_LEN as u64
        || !(index::ENTRY_LEN as u64..=4096).contains(&elen)
        || hlen > idx_size
    {
        return Err(invalid(format!(
            "{} is not a Firehose raw index (bad magic or lengths)",
            idx_path.display()
        )));
    }
    io::copy(
        &mut (&mut r).take(hlen - index::HEADER_LEN as u64),
        &mut io::sink(),
    )?;
    let entries = (idx_size - hlen) / elen;
    let mut entry = vec![0u8; elen as usize];
    let mut end = 0u64; // where the records kept so far end
    let mut chunk = 0..0u64; // the kept chunk that slots must lie in
    let mut kept = 0u64;
    let mut stop = None;
    for n in 0..entries {
        r.read_exact(&mut entry)?;
        let e = index::Entry::decode(&entry).expect("a whole entry");
        let range = e.offset..e.offset.saturating_add(u64::from(e.len));
        if e.kind == Some(index::Kind::Slot) {
            if range.start < chunk.start || range.end > chunk.end {
                stop = Some(format!(
                    "index entry {n} (a slot at byte {}) lies outside its chunk",
                    e.offset
                ));
                break;
            }
        } else {
            if e.offset != end {
                stop = Some(format!(
                    "index entry {n} says byte {}, where the records before it end at {end}",
                    e.offset
                ));
                break;
            }
            if range.end > size {
                break; // its record did not all reach the data file
            }
            end = range.end;
            chunk = range.clone();
            s.records += 1;
        }
        kept += 1;
    }
    s.keep = end;
    s.index = Some(IndexScan {
        path: idx_path.to_owned(),
        size: idx_size,
        entries,
        kept,
        keep: hlen + kept * elen,
    });
    s.tail = if let Some(what) = stop {
        Tail::Damaged { what }
    } else if end == size {
        Tail::Clean
    } else {
        let zeros = w.zeros_from(end)?;
        if zeros == size - end {
            Tail::Unwritten {
                zeros,
                data_after: 0,
            }
        } else {
            Tail::Unindexed { bytes: size - end }
        }
    };
    Ok(s)
}

/// Where [`repair`] put what it kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repaired {
    /// The repaired file (the original with `in_place`).
    pub data: PathBuf,
    /// Its index (raw).
    pub index: Option<PathBuf>,
}

/// The name a repaired copy of `path` gets: `.repaired` before its extension
/// (`cap-00003.pcap` → `cap-00003.repaired.pcap`).
pub fn repaired_name(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.repaired.{}", ext.to_string_lossy()),
        None => format!("{stem}.repaired"),
    };
    path.with_file_name(name)
}

/// Keeps what `s` found whole: with `in_place` the file (and index) is cut there, which
/// also releases space a killed recording left reserved; otherwise the whole records go
/// to a new file ([`repaired_name`], never replacing one that exists) and the original
/// is left as it was. Call [`open_for_writing_by`] first: a file still being written
/// must not be cut.
pub fn repair(s: &Scan, in_place: bool) -> io::Result<Repaired> {
    if in_place {
        cut(&s.path, s.keep)?;
        if let Some(i) = &s.index {
            cut(&i.path, i.keep)?;
        }
        return Ok(Repaired {
            data: s.path.clone(),
            index: s.index.as_ref().map(|i| i.path.clone()),
        });
    }
    let data = repaired_name(&s.path);
    copy_prefix(&s.path, &data, s.keep)?;
    let index = match &s.index {
        Some(i) => {
            let to = index_path(&data);
            if let Err(e) = copy_prefix(&i.path, &to, i.keep) {
                let _ = std::fs::remove_file(&data);
                return Err(e);
            }
            Some(to)
        }
        None => None,
    };
    Ok(Repaired { data, index })
}

fn cut(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // Also at the same size: truncating releases blocks allocated beyond the end.
    f.set_len(len)?;
    f.sync_all()
}

fn copy_prefix(from: &Path, to: &Path, len: u64) -> io::Result<()> {
    let src = File::open(from)?;
    let mut dst = crate::disk::file::open_for_writing(to, false, 0).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create {}: {e} (it is never replaced)", to.display()),
        )
    })?;
    let copied = io::copy(&mut src.take(len), &mut dst)?;
    if copied != len {
        return Err(io::Error::other(format!(
            "{} changed while it was copied ({copied} of {len} bytes)",
            from.display()
        )));
    }
    dst.sync_all()
}

/// Whether another process has `path` open for writing (a recording still running):
/// `Some` with who, as far as can be told (`pid 123 (gst-launch-1.0)`), else `None`.
///
/// Asked of the kernel with a read lease (`F_SETLEASE`, refused while any process has
/// the file open for writing, whoever and wherever it is); where leases are not
/// available (another owner without `CAP_LEASE`, a filesystem without them), by the
/// open files `/proc` shows.
pub fn open_for_writing_by(path: &Path) -> io::Result<Option<String>> {
    let f = File::open(path)?;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with plain integer arguments.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) };
    if rc == 0 {
        // SAFETY: as above; gives the lease back.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Ok(None);
    }
    let leased_out = io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
    let meta = f.metadata()?;
    let who = writers_in_proc(meta.dev(), meta.ino());
    Ok(match who {
        Some(w) => Some(w),
        None if leased_out => Some("another process".into()),
        None => None,
    })
}

/// Processes `/proc` shows with the file (`dev`, `ino`) open for writing.
fn writers_in_proc(dev: u64, ino: u64) -> Option<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let same = std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
            if !same {
                continue;
            }
            let info = p.path().join("fdinfo").join(fd.file_name());
            let writes = std::fs::read_to_string(info).is_ok_and(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|v| i64::from_str_radix(v.trim(), 8).ok())
                    .is_some_and(|fl| {
                        let mode = fl & i64::from(libc::O_ACCMODE);
                        mode == i64::from(libc::O_WRONLY) || mode == i64::from(libc::O_RDWR)
                    })
            });
            if writes {
                let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
                found.push(format!("pid {pid} ({})", comm.trim()));
                break;
            }
        }
    }
    (!found.is_empty()).then(|| found.join(", "))
}
