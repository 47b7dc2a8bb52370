//! The replay engine of `fhpcapsrc`, without GStreamer: the datagrams of a capture file
//! that pass the filter, one at a time, copied straight into the caller's memory.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::read::container::{CaptureReader, Damage, ReadCounts};
use crate::read::link::{self, Skip};

/// Which datagrams to deliver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// UDP destination port (`None`: any).
    pub port: Option<u16>,
    /// Destination address (`None`: any). IPv4-mapped IPv6 matches its IPv4 form.
    pub address: Option<IpAddr>,
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Filter {
    fn accepts(&self, dst: SocketAddr) -> bool {
        self.port.is_none_or(|p| p == dst.port())
            && self
                .address
                .is_none_or(|a| canonical(a) == canonical(dst.ip()))
    }
}

/// Counts over every pass of the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Records or frames that could not be understood.
    pub malformed: u64,
    /// Records cut short (snap length, end of file) or IP fragments.
    pub truncated: u64,
    /// Frames that were not UDP or did not match the filter.
    pub filtered: u64,
}

/// One datagram delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Capture time, Unix ns.
    pub ts_ns: u64,
    /// Sender.
    pub src: SocketAddr,
    /// Payload bytes written to the caller's buffer.
    pub len: usize,
}

/// Reads one capture file, possibly several times over.
pub struct Replay {
    path: PathBuf,
    reader: CaptureReader<File>,
    filter: Filter,
    /// Counts of passes already finished.
    done: ReplayCounts,
    /// Frame-level counts of the current pass.
    current: ReplayCounts,
    /// A datagram taken back by [`Replay::unread`].
    pending: Option<Delivered>,
    pending_bytes: Vec<u8>,
}

fn open(path: &Path) -> io::Result<CaptureReader<File>> {
    let f = File::open(path)?;
    CaptureReader::new(f)
}

impl Replay {
    /// Opens `path`; fails if it cannot be read or is not a capture.
    pub fn open(path: &Path, filter: Filter) -> io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            reader: open(path)?,
            filter,
            done: ReplayCounts::default(),
            current: ReplayCounts::default(),
            pending: None,
            pending_bytes: Vec::with_capacity(65536),
        })
    }

    /// Counts so far.
    pub fn counts(&self) -> ReplayCounts {
        let r: ReadCounts = self.reader.counts();
        ReplayCounts {
            malformed: self.done.malformed + self.current.malformed + r.malformed,
            truncated: self.done.truncated + self.current.truncated + r.truncated,
            filtered: self.done.filtered + self.current.filtered,
        }
    }

    /// What ended the current pass before the end of the file, if something did
    /// ([`Replay::next`] fails from then on).
    pub fn damage(&self) -> Option<&Damage> {
        self.reader.damage()
    }

    /// Starts the file again from its first record.
    pub fn rewind(&mut self) -> io::Result<()> {
        self.done = self.counts();
        self.current = ReplayCounts::default();
        self.pending = None;
        self.reader = open(&self.path)?;
        Ok(())
    }

    /// Gives back a datagram taken with [`Replay::next`] (its bytes are in `bytes`): the
    /// next call returns it again.
    pub fn unread(&mut self, d: Delivered, bytes: &[u8]) {
        self.pending_bytes.clear();
        self.pending_bytes.extend_from_slice(bytes);
        self.pending = Some(d);
    }

    /// Copies the next accepted datagram into `dst` (at least 65535 bytes long, enough
    /// for any UDP payload), or returns `None` at the end of the file.
    pub fn next(&mut self, dst: &mut [u8]) -> io::Result<Option<Delivered>> {
        if let Some(d) = self.pending.take() {
            dst[..d.len].copy_from_slice(&self.pending_bytes[..d.len]);
            return Ok(Some(d));
        }
        loop {
            let Some(rec) = self.reader.next_record()? else {
                return match self.reader.damage() {
                    // Not the end of the capture: a damaged file (every call says so).
                    Some(d) => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "damaged at byte {}: {}; the records before it were read",
                            d.offset, d.what
                        ),
                    )),
                    None => Ok(None),
                };
            };
            if !link::link_supported(rec.linktype) {
                // Not a damaged record but a capture of another kind: every record of
                // that interface would be skipped, and the replay would end "fine"
                // having sent nothing.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "link type {} is not supported: fhpcapsrc reads captures of \
                         Ethernet (1), Linux cooked (113, 276), raw IP (101, 12, 14, 228, \
                         229) and loopback (0, 108) interfaces; re-capture on such an \
                         interface, e.g. tcpdump -i any or -i eth0",
                        rec.linktype
                    ),
                ));
            }
            match link::datagram(rec.linktype, rec.data) {
                Ok(d) if self.filter.accepts(d.dst) => {
                    let Some(out) = dst.get_mut(..d.payload.len()) else {
                        self.current.truncated += 1;
                        continue;
                    };
                    out.copy_from_slice(d.payload);
                    return Ok(Some(Delivered {
                        ts_ns: rec.ts_ns,
                        src: d.src,
                        len: d.payload.len(),
                    }));
                }
                Ok(_) | Err(Skip::NotUdp) => self.current.filtered += 1,
                Err(Skip::Malformed) => self.current.malformed += 1,
                Err(Skip::Truncated) => self.current.truncated += 1,
            }
        }
    }
}
