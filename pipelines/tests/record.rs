//! `firehose record check` and `firehose record repair` on recordings a kill left
//! behind: this version's (whole records, at most the last one cut short), an older
//! version's (zeros after the data, which tcpdump reads as empty packets), raw files
//! with their index, and a recording that is still being written (refused).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{run, spawn, temp_path, Output};
use firehose_record::format::pcap::{pcap_file_header, pcap_record_header, LINKTYPE_ETHERNET};

const T: Duration = Duration::from_secs(60);

fn fresh_dir(name: &str) -> PathBuf {
    let d = temp_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `firehose record ARGS… PATH`.
fn record(args: &[&str], path: &Path) -> Output {
    let mut all = vec!["record"];
    all.extend(args);
    all.push(path.to_str().unwrap());
    run(&all, T)
}

/// Packets tcpdump reads from `path`, and whether it read the file without complaint.
fn tcpdump(path: &Path) -> (usize, bool, String) {
    let out = Command::new("tcpdump")
        .args(["-r", path.to_str().unwrap(), "-nn", "-q"])
        .output()
        .expect("tcpdump is installed (apt-get install -y tcpdump, or scripts/setup test)");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        String::from_utf8_lossy(&out.stdout).lines().count(),
        out.status.success(),
        err,
    )
}

/// In a fresh directory `name`, records test packets to `file` in `format` with
/// `firehose launch` and kills it with SIGKILL once the file holds five blocks; returns
/// the directory, the recording and what `record check` says of it.
fn killed_recording(name: &str, file: &str, format: &str) -> (PathBuf, PathBuf, Output) {
    let dir = fresh_dir(name);
    let path = dir.join(file);
    let rec = spawn(&[
        "launch",
        "-q",
        &format!(
            "fhtestsrc packet-size=1000 rate=100000000 ! fhrecordsink format={format} location={} block-size=65536",
            path.display()
        ),
    ]);
    wait_for_size(&path, 5 * 65536);
    rec.signal(libc::SIGKILL);
    rec.finish(T);
    let check = record(&["check"], &path);
    (dir, path, check)
}

/// Waits until `path` holds at least `bytes`.
fn wait_for_size(path: &Path, bytes: u64) {
    let deadline = Instant::now() + T;
    while std::fs::metadata(path).map_or(0, |m| m.len()) < bytes {
        assert!(
            Instant::now() < deadline,
            "{} never reached {bytes} bytes",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A pcap recording killed mid-way: check says what is there, repair writes a copy that
/// tcpdump reads whole, and the copy checks whole.
#[test]
fn a_killed_recording_is_checked_and_repaired_to_what_tcpdump_reads_whole() {
    let (dir, path, check) = killed_recording("record-killed", "k.pcap", "pcap");
    let (before, clean, err) = tcpdump(&path);
    assert!(
        check.stdout.contains(&format!("records: {before} whole")),
        "tcpdump read {before} packets\n{}",
        check.all()
    );
    if check.code == Some(0) {
        // The kill fell between records: nothing to cut, and tcpdump agrees.
        assert!(clean, "{err}\n{}", check.all());
        check.assert_stdout(&["whole: nothing to cut"]);
        return;
    }
    check
        .assert_code(1)
        .assert_stdout(&["cut short by the end of the file"]);
    assert!(err.contains("truncated dump file"), "{err}");
    let fixed = dir.join("k.repaired.pcap");
    record(&["repair"], &path)
        .assert_code(0)
        .assert_stdout(&[fixed.to_str().unwrap()]);
    let (after, clean, err) = tcpdump(&fixed);
    assert!(clean, "{err}");
    assert_eq!(after, before);
    record(&["check"], &fixed).assert_code(0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a version before the in-order writes left after a kill with writes in flight:
/// records, then blocks of zeros, which tcpdump counts as empty packets. Repair (a copy,
/// then in place) keeps the records only.
#[test]
fn an_older_versions_zeros_are_found_and_cut() {
    let dir = fresh_dir("record-old");
    let mut file = pcap_file_header(262_144, LINKTYPE_ETHERNET).to_vec();
    for i in 0..100u32 {
        let frame: Vec<u8> = (0..1042).map(|j| (i as usize + j) as u8 | 1).collect();
        file.extend_from_slice(&pcap_record_header(
            1_700_000_001_000_000_000 + u64::from(i),
            1042,
            1042,
        ));
        file.extend_from_slice(&frame);
    }
    let real = file.len();
    file.resize(real.next_multiple_of(4096) + 8 * 65536, 0);
    let path = dir.join("old.pcap");
    std::fs::write(&path, &file).unwrap();
    let (phantoms, _, _) = tcpdump(&path);
    assert!(
        phantoms > 100,
        "tcpdump reads the zeros as packets: {phantoms}"
    );
    record(&["check"], &path)
        .assert_code(1)
        .assert_stdout(&["records: 100 whole", "space never written"]);
    record(&["repair"], &path).assert_code(0);
    let (n, clean, err) = tcpdump(&dir.join("old.repaired.pcap"));
    assert!(clean && n == 100, "{n} packets\n{err}");
    // A second copy is never written over the first.
    record(&["repair"], &path)
        .assert_code(1)
        .assert_stderr(&["never replaced"]);
    record(&["repair", "--in-place"], &path).assert_code(0);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), real as u64);
    let (n, clean, _) = tcpdump(&path);
    assert!(clean && n == 100);
    record(&["check"], &path).assert_code(0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A raw recording killed mid-way: its data and index are cut at the last indexed
/// record wholly present, and the Python reader reads the repaired copy.
#[test]
fn a_killed_raw_recording_is_repaired_with_its_index() {
    let (dir, path, check) = killed_recording("record-raw", "r.raw", "raw");
    check.assert_stdout(&["r.raw: raw,", "index: "]);
    record(&["repair"], &path).assert_code(0);
    let fixed = if check.code == Some(0) {
        path.clone()
    } else {
        dir.join("r.repaired.raw")
    };
    let whole = record(&["check"], &fixed);
    whole.assert_code(0);
    let records: u64 = whole
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("records: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(records > 0, "{}", whole.all());
    let py = Command::new("python3")
        .args(["-m", "firehose_raw", fixed.to_str().unwrap()])
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../python"),
        )
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let lines = String::from_utf8_lossy(&py.stdout).lines().count() as u64;
    assert_eq!(lines, records, "the Python reader reads every whole record");
    // The example a Python user starts from says the same, with the system Python's
    // numpy viewing each record in place.
    let ex = Command::new("/usr/bin/python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/read_raw.py"
        ))
        .arg(&fixed)
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../python"),
        )
        .output()
        .unwrap();
    let ex_out = String::from_utf8_lossy(&ex.stdout);
    assert!(
        ex.status.success()
            && ex_out.starts_with(&format!(
                "{records} records ({records} packet), {records} complete"
            )),
        "examples/read_raw.py (apt-get install -y python3-numpy): {ex_out}{}",
        String::from_utf8_lossy(&ex.stderr)
    );
    // A test packet starts with its magic, FHT1.
    assert!(ex_out.contains("first bytes [70, 72, 84, 49"), "{ex_out}");
    // Every record ends where the data file does: nothing is left after them.
    let size = std::fs::metadata(&fixed).unwrap().len();
    whole.assert_stdout(&[&format!("in the first {size} bytes")]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording that is still running is not checked or cut: the command names the
/// process that writes it.
#[test]
fn a_recording_still_being_written_is_refused() {
    let dir = fresh_dir("record-live");
    let path = dir.join("live.pcap");
    let rec = spawn(&[
        "launch",
        &format!(
            "fhtestsrc packet-size=1000 rate=1000000 ! fhrecordsink location={} block-size=65536",
            path.display()
        ),
    ]);
    wait_for_size(&path, 24);
    let pid = rec.pid().to_string();
    for args in [&["check"][..], &["repair", "--in-place"]] {
        record(args, &path).assert_code(1).assert_stderr(&[
            "is open for writing by pid ",
            &pid,
            "still being recorded",
        ]);
    }
    rec.signal(libc::SIGINT);
    rec.finish(T).assert_code(0);
    // After EOS the file is whole.
    record(&["check"], &path).assert_code(0);
    let _ = std::fs::remove_dir_all(&dir);
}
