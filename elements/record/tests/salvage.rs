//! `firehose_record::read::salvage`: the scan behind `firehose record check` and
//! `repair`, on files cut at every kind of place (inside a file header, a record header,
//! a record body, at a record boundary), on files with space never written (zeros) after
//! or inside the data as older versions left them, and on damaged ones; and the check
//! for a file that another process still has open for writing.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{run_tool, TempDir};
use firehose_record::format::pcap::{
    epb_header, epb_len, epb_trailer, isb, pcap_file_header, pcap_record_header,
    pcapng_file_header, IfStats, LINKTYPE_ETHERNET,
};
use firehose_record::index::{self, Entry, Kind, NO_PTS};
use firehose_record::read::salvage::{
    index_path, open_for_writing_by, repair, repaired_name, scan, Format, Scan, Tail,
};

/// A frame of `len` bytes that is never zero.
fn frame(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed * 31 + i) % 251 + 1) as u8)
        .collect()
}

/// A pcap file of `n` records of varied sizes, and where each record ends.
fn pcap(n: usize) -> (Vec<u8>, Vec<usize>) {
    let mut out = pcap_file_header(65535, LINKTYPE_ETHERNET).to_vec();
    let mut ends = Vec::new();
    for i in 0..n {
        let f = frame(i, 60 + (i * 397) % 1500);
        out.extend_from_slice(&pcap_record_header(
            1_700_000_001_000_000_000 + i as u64,
            f.len() as u32,
            f.len() as u32,
        ));
        out.extend_from_slice(&f);
        ends.push(out.len());
    }
    (out, ends)
}

/// A pcapng file (section, interface, `n` packets, statistics) and where each block ends.
fn pcapng(n: usize) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    pcapng_file_header(&mut out, 65535, LINKTYPE_ETHERNET, "test");
    let shb = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
    let mut ends = vec![shb, out.len()];
    for i in 0..n {
        let f = frame(i, 61 + (i * 397) % 1500);
        out.extend_from_slice(&epb_header(i as u64, f.len() as u32, f.len() as u32));
        out.extend_from_slice(&f);
        let (t, k) = epb_trailer(f.len());
        out.extend_from_slice(&t[..k]);
        assert_eq!(out.len() - ends.last().unwrap(), epb_len(f.len()));
        ends.push(out.len());
    }
    isb(&mut out, &IfStats::default());
    ends.push(out.len());
    (out, ends)
}

/// Scans every cut of `file` (each prefix, from empty to whole), written as `name` in a
/// fresh directory. `check` gets the cut, the scan, how many of the blocks that end at
/// `ends` the cut holds whole, and where the last of those ends (`start` if none).
fn scan_every_cut(
    name: &str,
    file: &[u8],
    start: usize,
    ends: &[usize],
    mut check: impl FnMut(usize, std::io::Result<Scan>, usize, usize),
) {
    let dir = TempDir::new(&format!("salvage-cut-{name}"));
    for cut in 0..=file.len() {
        let s = scan(&dir.write(name, &file[..cut]));
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let keep = if whole == 0 { start } else { ends[whole - 1] };
        check(cut, s, whole, keep);
    }
}

/// Every cut of a pcap file: inside the file header (nothing to keep), inside each
/// record's header and body, and at each boundary.
#[test]
fn pcap_cut_anywhere_keeps_exactly_the_whole_records_before_the_cut() {
    let (file, ends) = pcap(12);
    scan_every_cut("c.pcap", &file, 24, &ends, |cut, s, whole, keep| {
        if cut < 24 {
            let e = s.unwrap_err().to_string();
            assert!(
                e.contains("file header") || e.contains("empty"),
                "cut {cut}: {e}"
            );
            return;
        }
        let s = s.unwrap();
        assert_eq!(s.format, Format::Pcap);
        assert_eq!(
            (s.records, s.keep),
            (whole as u64, keep as u64),
            "cut {cut}"
        );
        if cut == keep {
            assert_eq!(s.tail, Tail::Clean, "cut {cut}");
            assert!(s.is_whole());
        } else {
            assert!(
                matches!(s.tail, Tail::Truncated { have, .. } if have == (cut - keep) as u64),
                "cut {cut}: {:?}",
                s.tail
            );
            assert!(!s.is_whole());
        }
    });
}

/// A repaired copy of a cut file is what tcpdump and capinfos read without complaint,
/// and holds exactly the whole records; the original stays as it was.
#[test]
fn pcap_repair_writes_a_copy_the_standard_tools_read_whole() {
    common::require_tool("tcpdump", "tcpdump");
    common::require_tool("capinfos", "tshark");
    let dir = TempDir::new("salvage-copy");
    let (file, ends) = pcap(40);
    let cut = ends[29] + 700;
    let p = dir.write("cap-00003.pcap", &file[..cut]);
    let s = scan(&p).unwrap();
    let r = repair(&s, false).unwrap();
    assert_eq!(r.data, dir.join("cap-00003.repaired.pcap"));
    assert_eq!(
        std::fs::read(&p).unwrap().len(),
        cut,
        "the original is untouched"
    );
    let fixed = std::fs::read(&r.data).unwrap();
    assert_eq!(fixed, file[..ends[29]]);
    let out = run_tool("tcpdump", &["-r", r.data.to_str().unwrap(), "-nn", "-q"]);
    assert_eq!(out.lines().count(), 30, "{out}");
    let info = run_tool("capinfos", &["-c", "-M", r.data.to_str().unwrap()]);
    assert!(info.contains("Number of packets:   30"), "{info}");
    assert!(scan(&r.data).unwrap().is_whole());
    // A copy is never written over one that exists.
    let again = repair(&s, false).unwrap_err();
    assert!(again.to_string().contains("never replaced"), "{again}");
}

/// What an older version left when killed with writes in flight: zeros after the data
/// (the size ran ahead of it), and zeros between blocks (a later block completed before
/// an earlier one). A record whose end lies in such zeros is not kept.
#[test]
fn pcap_space_never_written_ends_the_data_and_takes_a_record_it_cut() {
    let dir = TempDir::new("salvage-zeros");
    let (file, ends) = pcap(60);
    // Zeros after the last record, up to whole blocks.
    let mut padded = file.clone();
    padded.resize(file.len().next_multiple_of(4096) + 3 * 65536, 0);
    let s = scan(&dir.write("a.pcap", &padded)).unwrap();
    assert_eq!((s.records, s.keep), (60, file.len() as u64));
    assert!(
        matches!(s.tail, Tail::Unwritten { zeros, data_after: 0 } if zeros == (padded.len() - file.len()) as u64),
        "{:?}",
        s.tail
    );
    assert!(!s.dropped_last);
    // A granule in the middle never written, later data written: the record that runs
    // into the zeros is dropped, and so is everything after them.
    let g = 8192usize;
    let mut holed = file.clone();
    holed[g..g + 4096].fill(0);
    let cut_record = ends.iter().position(|&e| e > g).unwrap();
    let start = if cut_record == 0 {
        24
    } else {
        ends[cut_record - 1]
    };
    let s = scan(&dir.write("b.pcap", &holed)).unwrap();
    assert_eq!(
        (s.records, s.keep),
        (cut_record as u64, start as u64),
        "{s:?}"
    );
    assert!(s.dropped_last, "{s:?}");
    assert!(
        matches!(s.tail, Tail::Unwritten { data_after, .. } if data_after > 0),
        "{:?}",
        s.tail
    );
    // A record whose payload really ends in zeros, not across a granule boundary, is
    // data: kept.
    let mut out = pcap_file_header(65535, LINKTYPE_ETHERNET).to_vec();
    let mut f = frame(1, 100);
    f[90..].fill(0);
    out.extend_from_slice(&pcap_record_header(1, 100, 100));
    out.extend_from_slice(&f);
    let real = out.len();
    out.resize(4096 * 2, 0);
    let s = scan(&dir.write("c.pcap", &out)).unwrap();
    assert_eq!((s.records, s.keep, s.dropped_last), (1, real as u64, false));
    // Zero bytes before the end that are too few for a record header: space never
    // written too.
    let mut short = file.clone();
    short.extend_from_slice(&[0; 10]);
    let s = scan(&dir.write("d.pcap", &short)).unwrap();
    assert_eq!((s.records, s.keep), (60, file.len() as u64));
    assert!(matches!(s.tail, Tail::Unwritten { zeros: 10, .. }));
}

#[test]
fn pcap_damage_ends_the_data_where_it_begins() {
    let dir = TempDir::new("salvage-damage");
    let (mut file, ends) = pcap(10);
    // Record 6 claims more than the snaplen.
    file[ends[5] + 8..ends[5] + 12].copy_from_slice(&70000u32.to_le_bytes());
    let s = scan(&dir.write("a.pcap", &file)).unwrap();
    assert_eq!((s.records, s.keep), (6, ends[5] as u64));
    assert!(
        matches!(&s.tail, Tail::Damaged { what } if what.contains("snaplen")),
        "{:?}",
        s.tail
    );
    // In place: the file is cut there.
    let p = dir.join("a.pcap");
    repair(&s, true).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), file[..ends[5]]);
    assert!(scan(&p).unwrap().is_whole());
}

/// Every cut of a pcapng file: inside the section header (nothing to keep), inside the
/// interface block, each packet block's header, body and trailing length, the
/// statistics block, and at each boundary.
#[test]
fn pcapng_cut_anywhere_keeps_exactly_the_whole_blocks_before_the_cut() {
    let (file, ends) = pcapng(8);
    scan_every_cut("c.pcapng", &file, 0, &ends, |cut, s, whole, keep| {
        if whole == 0 {
            assert!(s.is_err(), "cut {cut}: {s:?}");
            return;
        }
        let s = s.unwrap();
        let packets = whole.saturating_sub(2).min(8) as u64;
        assert_eq!(s.format, Format::Pcapng);
        assert_eq!((s.records, s.keep), (packets, keep as u64), "cut {cut}");
        assert_eq!(
            s.tail == Tail::Clean,
            cut == keep,
            "cut {cut}: {:?}",
            s.tail
        );
    });
}

#[test]
fn pcapng_blocks_cut_by_zeros_or_damage_end_the_data() {
    let dir = TempDir::new("salvage-pcapng-zeros");
    let (file, ends) = pcapng(50);
    // A granule never written inside a packet block: its trailing length is gone.
    let g = 16384usize;
    let mut holed = file.clone();
    holed[g..g + 4096].fill(0);
    let i = ends.iter().position(|&e| e > g).unwrap();
    let s = scan(&dir.write("a.pcapng", &holed)).unwrap();
    assert_eq!(s.keep, ends[i - 1] as u64, "{s:?}");
    assert_eq!(s.records, (i - 2) as u64);
    assert!(matches!(s.tail, Tail::Unwritten { data_after, .. } if data_after > 0));
    // Zeros after the end.
    let mut padded = file.clone();
    padded.resize(file.len().next_multiple_of(4096) + 8192, 0);
    let s = scan(&dir.write("b.pcapng", &padded)).unwrap();
    assert_eq!((s.records, s.keep), (50, file.len() as u64));
    // A trailing length that disagrees (not zeros): damage.
    let mut bad = file.clone();
    let e = ends[10];
    bad[e - 4..e].copy_from_slice(&12345u32.to_le_bytes());
    let s = scan(&dir.write("c.pcapng", &bad)).unwrap();
    assert_eq!(s.keep, ends[9] as u64);
    assert!(matches!(&s.tail, Tail::Damaged { what } if what.contains("12345")));
    // A length no block can have.
    let mut bad = file.clone();
    bad[ends[20] + 4..ends[20] + 8].copy_from_slice(&7u32.to_le_bytes());
    let s = scan(&dir.write("d.pcapng", &bad)).unwrap();
    assert_eq!((s.keep, s.records), (ends[20] as u64, 19));
    assert!(matches!(s.tail, Tail::Damaged { .. }));
}

/// A raw data file and its index: `n` packets of varied sizes.
fn raw(dir: &TempDir, name: &str, n: usize) -> (Vec<u8>, Vec<u8>, Vec<usize>) {
    let mut data = Vec::new();
    let mut idx = index::header(1).to_vec();
    let mut ends = Vec::new();
    for i in 0..n {
        let f = frame(i, 100 + (i * 211) % 900);
        idx.extend_from_slice(
            &Entry {
                id: i as u64,
                offset: data.len() as u64,
                len: f.len() as u32,
                complete: true,
                kind: Some(Kind::Packet),
                time_ns: 0,
                pts_ns: NO_PTS,
            }
            .encode(),
        );
        data.extend_from_slice(&f);
        ends.push(data.len());
    }
    dir.write(name, &data);
    dir.write(&format!("{name}.idx"), &idx);
    (data, idx, ends)
}

#[test]
fn raw_keeps_the_indexed_records_wholly_in_the_data() {
    let dir = TempDir::new("salvage-raw");
    let (data, idx, ends) = raw(&dir, "a.raw", 30);
    let p = dir.join("a.raw");
    let s = scan(&p).unwrap();
    assert!(s.is_whole(), "{s:?}");
    assert_eq!((s.format, s.records), (Format::Raw, 30));
    // Scanning the index names the same recording.
    assert_eq!(scan(&index_path(&p)).unwrap(), s);
    // The data cut inside record 20; the index a torn entry further on.
    for data_cut in [ends[19] + 5, ends[19]] {
        std::fs::write(&p, &data[..data_cut]).unwrap();
        std::fs::write(index_path(&p), &idx[..32 + 25 * 40 + 17]).unwrap();
        let s = scan(&p).unwrap();
        assert_eq!((s.records, s.keep), (20, ends[19] as u64));
        let i = s.index.clone().unwrap();
        assert_eq!((i.entries, i.kept, i.keep), (25, 20, 32 + 20 * 40));
        let r = repair(&s, false).unwrap();
        assert_eq!(r.data, dir.join("a.repaired.raw"));
        let fixed = std::fs::read(&r.data).unwrap();
        assert_eq!(fixed, data[..ends[19]]);
        let entries = index::read(r.index.as_ref().unwrap(), fixed.len() as u64).unwrap();
        assert_eq!(entries.len(), 20);
        assert_eq!(
            std::fs::metadata(r.index.unwrap()).unwrap().len(),
            32 + 20 * 40
        );
        assert!(scan(&r.data).unwrap().is_whole());
        std::fs::remove_file(dir.join("a.repaired.raw")).unwrap();
        std::fs::remove_file(dir.join("a.repaired.raw.idx")).unwrap();
    }
    // The index behind the data: the data it has no entry for is cut.
    std::fs::write(&p, &data).unwrap();
    std::fs::write(index_path(&p), &idx[..32 + 10 * 40]).unwrap();
    let s = scan(&p).unwrap();
    assert_eq!((s.records, s.keep), (10, ends[9] as u64));
    assert_eq!(
        s.tail,
        Tail::Unindexed {
            bytes: (data.len() - ends[9]) as u64
        }
    );
    // Zeros after the data (an older version's size ahead of it).
    let mut z = data.clone();
    z.resize(data.len().next_multiple_of(4096) + 4096, 0);
    std::fs::write(&p, &z).unwrap();
    std::fs::write(index_path(&p), &idx).unwrap();
    let s = scan(&p).unwrap();
    assert_eq!((s.records, s.keep), (30, data.len() as u64));
    assert!(matches!(s.tail, Tail::Unwritten { data_after: 0, .. }));
    repair(&s, true).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    // An entry that is not where the records before it end: damage.
    let mut bad = idx.clone();
    bad[32 + 7 * 40 + 8..32 + 7 * 40 + 16].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(index_path(&p), &bad).unwrap();
    let s = scan(&p).unwrap();
    assert_eq!(s.records, 7);
    assert!(matches!(&s.tail, Tail::Damaged { what } if what.contains("entry 7")));
    // Not an index at all.
    std::fs::write(
        index_path(&p),
        b"FHRAWIX9 and more bytes than a header holds",
    )
    .unwrap();
    assert!(scan(&p)
        .unwrap_err()
        .to_string()
        .contains("not a Firehose raw index"));
    std::fs::write(index_path(&p), b"FHRAW").unwrap();
    assert!(scan(&p).unwrap_err().to_string().contains("cut short"));
}

#[test]
fn files_that_are_no_recording_are_refused_with_the_reason() {
    let dir = TempDir::new("salvage-none");
    let e = scan(&dir.write("x.pcap", b"hello world")).unwrap_err();
    assert!(e.to_string().contains("not a pcap or pcapng"), "{e}");
    let e = scan(&dir.write("y.pcap", b"")).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    assert!(scan(&dir.join("missing.pcap")).is_err());
    // What a kill between the raw index and its data file leaves.
    let e = scan(&dir.write("z.raw.idx", b"FHIDX")).unwrap_err();
    assert!(e.to_string().contains("never created"), "{e}");
    assert_eq!(
        repaired_name(Path::new("/d/cap-00003.pcap")),
        Path::new("/d/cap-00003.repaired.pcap")
    );
    assert_eq!(repaired_name(Path::new("/d/x")), Path::new("/d/x.repaired"));
}

/// A file another process has open for writing is seen as such (the recording is still
/// running), and no longer once that process has closed it.
#[test]
fn a_file_open_for_writing_elsewhere_is_seen_with_its_writer() {
    let dir = TempDir::new("salvage-open");
    let (file, _) = pcap(3);
    let p = dir.write("live.pcap", &file);
    assert_eq!(open_for_writing_by(&p).unwrap(), None);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>>'{}'; echo ready; exec sleep 60",
            p.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let who = open_for_writing_by(&p).unwrap();
    let pid = child.id().to_string();
    assert!(
        who.as_deref().is_some_and(|w| w.contains(&pid)),
        "{who:?} (child {pid})"
    );
    // Being open for reading elsewhere is no writer.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while open_for_writing_by(&p).unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the writer's exit was never seen"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let reader = std::fs::File::open(&p).unwrap();
    assert_eq!(open_for_writing_by(&p).unwrap(), None);
    drop(reader);
}
