//! The replay engine of `fhpcapsrc`, without GStreamer: the datagrams of a capture file
//! that pass the filter, one at a time, copied straight into the caller's memory.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::read::container::{CaptureReader, Damage, ReadCounts};
use crate::read::link::{self, Skip};
use firehose_core::split::DatagramSplitter;

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

/// Counts of [`Splitter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitCounts {
    /// Records cut into two or more packets.
    pub split: u64,
    /// Records whose packets could not all be cut out: the packets before the bytes that
    /// did not parse went out one by one, the rest as one datagram.
    pub unsplit: u64,
}

/// Cuts replayed datagrams into the pieces to deliver: whole (`split=none`), or by a
/// registered [`DatagramSplitter`] (`split=spead`: a record holding several SPEAD
/// packets back to back, a UDP GSO send captured before segmentation, is cut into its
/// packets, as the receiver of the live stream got them).
#[derive(Debug, Default)]
pub struct Splitter {
    by: Option<&'static dyn DatagramSplitter>,
    lens: Vec<u32>,
    counts: SplitCounts,
}

/// A record that could not be cut into packets all the way: where it stopped
/// ([`Splitter::describe`] says why, when that is reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsplit {
    /// Whole packets cut out before the bad bytes.
    pub packets: usize,
    /// Offset of the bytes that do not parse.
    pub at: usize,
    /// The datagram's length.
    pub len: usize,
}

impl Splitter {
    /// A splitter cutting with `by` (`None`: every record whole).
    pub fn new(by: Option<&'static dyn DatagramSplitter>) -> Self {
        Self {
            by,
            lens: Vec::with_capacity(64),
            counts: SplitCounts::default(),
        }
    }

    /// Counts so far.
    pub fn counts(&self) -> SplitCounts {
        self.counts
    }

    /// Cuts `datagram`: afterwards [`Splitter::pieces`] holds the length of each piece
    /// to deliver, in order (they add up to the datagram's length). Returns why the cut
    /// stopped short, if it did. Nothing is counted until [`Splitter::delivered`]: a
    /// datagram given back (the batch is full) is cut again later.
    pub fn cut(&mut self, datagram: &[u8]) -> Option<Unsplit> {
        let Some(by) = self.by else {
            self.lens.clear();
            self.lens.push(datagram.len() as u32);
            return None;
        };
        by.split(datagram, &mut self.lens).err().map(|p| Unsplit {
            packets: p.packets,
            at: p.at,
            len: datagram.len(),
        })
    }

    /// What `u`, from [`Splitter::cut`] of `datagram`, means in words: decoded again
    /// only when it is reported (rate-limited), so damaged records cost no allocation.
    pub fn describe(&self, u: &Unsplit, datagram: &[u8]) -> String {
        let (packet, why) = match self.by {
            Some(by) => (by.packet(), by.why(&datagram[u.at.min(datagram.len())..])),
            None => ("", String::new()),
        };
        format!(
            "a record of {} bytes holds {} {packet} packet(s), then bytes at offset {} that \
             are not a {packet} packet ({why})",
            u.len, u.packets, u.at
        )
    }

    /// The piece lengths of the last [`Splitter::cut`].
    pub fn pieces(&self) -> &[u32] {
        &self.lens
    }

    /// Counts the last cut, whose pieces were delivered; `unsplit` is whether
    /// [`Splitter::cut`] said why it stopped short.
    pub fn delivered(&mut self, unsplit: bool) {
        if unsplit {
            self.counts.unsplit += 1;
        } else if self.lens.len() > 1 {
            self.counts.split += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_leaves_records_whole_and_spead_cuts_them() {
        use firehose_spead::wire::{encode, ids, packet_len, Flavour, ItemPointer};
        let f = Flavour::SPEAD_64_40;
        let pkt = |cnt: u64| {
            let items = [
                ItemPointer::immediate(f, ids::HEAP_CNT, cnt),
                ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
                ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, 10),
            ];
            let mut out = vec![0u8; packet_len(3, 10)];
            encode(f, &items, &[cnt as u8; 10], &mut out).unwrap();
            out
        };
        let d = [pkt(1), pkt(2), pkt(3)].concat();
        let mut none = Splitter::new(None);
        assert_eq!(none.cut(&d), None);
        assert_eq!(none.pieces(), [d.len() as u32]);
        let mut s = Splitter::new(Some(&firehose_spead::coalesced::SPLITTER));
        assert_eq!(s.cut(&d), None);
        assert_eq!(s.pieces(), [42, 42, 42]);
        assert_eq!(s.counts().split, 0, "counted once delivered");
        s.delivered(false);
        assert_eq!(s.counts().split, 1);
        let mut bad = d.clone();
        bad[84] = 0;
        let u = s.cut(&bad).unwrap();
        assert_eq!((u.packets, u.at, u.len), (2, 84, 126));
        let text = s.describe(&u, &bad);
        assert!(
            text.contains("offset 84") && text.contains("2 SPEAD packet(s)"),
            "{text}"
        );
        assert_eq!(s.pieces(), [42, 42, 42]);
        s.delivered(true);
        assert_eq!(
            s.counts(),
            SplitCounts {
                split: 1,
                unsplit: 1
            }
        );
        assert_eq!(s.cut(&pkt(4)), None);
        s.delivered(false);
        assert_eq!(
            s.counts(),
            SplitCounts {
                split: 1,
                unsplit: 1
            },
            "one packet: not split"
        );
    }
}
