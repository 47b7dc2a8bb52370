//! SIGKILL at random moments in a live recording, in every format (pcap, pcapng, raw +
//! index), with rotation and a ring of files: every file left holds whole records that
//! were sent, in order, and nothing else — the standard tools (tcpdump, tshark,
//! capinfos; for raw the index reader and the Python reader) read exactly those, with at
//! most a truncation notice about the open file's last record (docs/recording.md, "What
//! survives a crash").
//!
//! Each run re-executes this test binary as a child that records a UDP stream on
//! loopback (`fhudpsrc ! fhrecordsink`) while this process sends it numbered test
//! packets, and kills the child at a moment drawn from the run's seed, as are the block
//! size, write depth, file size and ring. Every run prints its seed; to replay one:
//! `FHRECORD_CRASH_SEED=<seed> cargo test -p firehose-record --test crash <format>`.
//! `FHRECORD_CRASH_RUNS` sets the runs per format (default 20).

mod common;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TempDir;
use firehose_record::index;
use firehose_record::read::container::CaptureReader;
use firehose_record::read::link;
use firehose_record::read::salvage::{self, Tail};
use firehose_testkit::pattern;
use gst::prelude::*;

const CHILD_DIR: &str = "FHRECORD_CRASH_CHILD_DIR";
const CHILD_SEED: &str = "FHRECORD_CRASH_CHILD_SEED";
const CHILD_FORMAT: &str = "FHRECORD_CRASH_CHILD_FORMAT";
/// How the child says which port it records from.
const PORT_LINE: &str = "recording from port ";

/// splitmix64: a run's choices, reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// What one run records with, and when it is killed.
#[derive(Debug)]
struct Run {
    block: u64,
    depth: u32,
    max_size: u64,
    max_files: u32,
    payload: usize,
    /// Datagrams per second the sender offers.
    rate: u64,
    /// Time from the first datagram to the kill.
    kill_after: Duration,
}

impl Run {
    fn from_seed(seed: u64) -> Self {
        let mut r = Rng(seed);
        let block = r.pick(&[65536, 262_144, 1 << 20]);
        Self {
            block,
            depth: r.pick(&[1, 2, 4, 8]),
            max_size: block * r.range(2, 10) + r.range(0, block),
            max_files: r.pick(&[0, 2, 3, 5]),
            payload: r.pick(&[64, 1000, 1472, 8000]),
            rate: r.pick(&[5_000, 20_000, 50_000]),
            kill_after: Duration::from_millis(r.range(0, 1500)),
        }
    }
}

/// The child: records what arrives on a free port until it is killed; prints the port
/// once its socket is bound.
fn child(dir: &str, format: &str, seed: u64) -> ! {
    let run = Run::from_seed(seed);
    let pipeline = common::launch(&format!(
        "fhudpsrc name=src port=0 ! fhrecordsink location={dir}/c-%04d.{format} format={format} \
         block-size={} io-depth={} max-size={} max-files={}",
        run.block, run.depth, run.max_size, run.max_files
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    // The source has bound its socket once its port is known (the pipeline itself
    // completes PLAYING only with the first buffer).
    let src = pipeline.by_name("src").unwrap();
    let port = firehose_testkit::run::bound_port(&src, Duration::from_secs(60));
    // On a line of its own: the test harness has printed "test pcap ... " before it.
    println!("\n{PORT_LINE}{port}");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn child_if_asked() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let seed = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
        child(&dir, &std::env::var(CHILD_FORMAT).unwrap(), seed);
    }
}

/// Records one run: starts the child, sends until the kill, kills it. Returns the
/// directory and how many datagrams were sent.
fn record_and_kill(test: &str, format: &str, seed: u64, run: &Run) -> (TempDir, u64) {
    let dir = TempDir::new(&format!("crash-{format}"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir.0)
        .env(CHILD_SEED, seed.to_string())
        .env(CHILD_FORMAT, format)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines
            .next()
            .expect("the child ended before it printed its port")
            .unwrap();
        if let Some(p) = line.strip_prefix(PORT_LINE) {
            break p.parse().unwrap();
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Datagrams sent so far, numbered from 0.
    let sent = Arc::new(AtomicU64::new(0));
    let sender = std::thread::spawn({
        let stop = stop.clone();
        let sent = sent.clone();
        let (payload, rate) = (run.payload, run.rate);
        move || send(port, payload, rate, &stop, &sent)
    });
    // From the first datagram on: the kill comes while the stream flows.
    firehose_testkit::run::wait_until(
        Duration::from_secs(30),
        || "the sender never started".into(),
        || sent.load(Ordering::Acquire) > 0,
    );
    std::thread::sleep(run.kill_after);
    // SAFETY: kill() on our own child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    child.wait().unwrap();
    stop.store(true, Ordering::Release);
    sender.join().unwrap();
    (dir, sent.load(Ordering::Acquire))
}

/// Sends numbered test packets to 127.0.0.1:`port` at `rate` per second, one datagram
/// per send, until `stop`.
fn send(port: u16, payload: usize, rate: u64, stop: &AtomicBool, sent: &AtomicU64) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(("127.0.0.1", port)).unwrap();
    let mut buf = vec![0u8; payload];
    let start = Instant::now();
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        // Paced on the schedule, in small bursts; never catching up after a stall.
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if seq >= due {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        pattern::fill(seq, &mut buf);
        // A datagram the child's socket could not take is simply lost (counted by it);
        // a send error after the kill is expected.
        let _ = sock.send(&buf);
        seq += 1;
        sent.store(seq, Ordering::Release);
        if due - seq > 1000 {
            seq = due;
        }
    }
}

/// Runs `tool args`, returning its output whatever its exit status.
fn tool(tool: &str, args: &[&str]) -> Output {
    Command::new(tool).args(args).output().unwrap()
}

/// Checks a standard tool's reading of `path`: `packets` counted, and either a clean
/// exit or (`open`: the file the kill cut) only the tool's notice that the last record
/// is cut short.
fn tool_reads(name: &str, out: &Output, counted: usize, packets: u64, open: bool, path: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    // libpcap's notice ("truncated dump file", "truncated pcapng dump file") and
    // Wireshark's ("appears to have been cut short in the middle of a packet").
    let cut = ["truncated", "cut short in the middle of a packet"];
    let clean = out.status.success() && !cut.iter().any(|c| err.contains(c));
    assert!(
        clean || (open && cut.iter().any(|c| err.contains(c))),
        "{name} on {}: {}\n{err}",
        path.display(),
        out.status
    );
    assert_eq!(
        counted as u64,
        packets,
        "{name} counts {counted} packets in {}, the file holds {packets} whole ones\n{err}",
        path.display()
    );
}

/// The packet payloads of a pcap or pcapng file, each checked against the pattern;
/// returns their sequence numbers.
fn capture_seqs(path: &Path, open: bool) -> Vec<u64> {
    let mut r = CaptureReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut seqs = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let d = link::datagram(rec.linktype, rec.data).unwrap();
        let seq = pattern::verify(d.payload)
            .unwrap_or_else(|e| panic!("{}: record {}: {e:?}", path.display(), seqs.len()));
        seqs.push(seq);
    }
    // Only the file the kill cut may end in a record cut short.
    let cut = r
        .damage()
        .is_some_and(|d| d.what.contains("cut short by the end of the file"));
    assert!(
        r.damage().is_none() || (open && cut),
        "{}: {:?}",
        path.display(),
        r.damage()
    );
    seqs
}

/// The records of a raw file by its index (each checked against the pattern), and the
/// Python reader's records of it, which must be the same.
fn raw_seqs(path: &Path) -> Vec<u64> {
    let data = std::fs::read(path).unwrap();
    let entries = index::read(&salvage::index_path(path), data.len() as u64).unwrap();
    let mut seqs = Vec::new();
    let mut expect = String::new();
    for e in &entries {
        let r = e.range();
        let seq = pattern::verify(&data[r.start as usize..r.end as usize])
            .unwrap_or_else(|err| panic!("{}: entry {}: {err:?}", path.display(), seqs.len()));
        assert_eq!(e.kind, Some(index::Kind::Packet), "{}", path.display());
        seqs.push(seq);
        expect += &format!("packet {} {} {} 1\n", e.id, e.offset, e.len);
    }
    let py = Command::new("python3")
        .args(["-m", "firehose_raw", path.to_str().unwrap()])
        .env("PYTHONPATH", python_dir())
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "the Python reader on {}: {}",
        path.display(),
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&py.stdout),
        expect,
        "the Python reader and the index reader disagree on {}",
        path.display()
    );
    seqs
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

/// Checks every file a killed run left.
fn check_run(dir: &TempDir, format: &str, run: &Run, sent: u64) {
    let names: Vec<String> = dir
        .files()
        .into_iter()
        .filter(|f| !f.ends_with(".idx"))
        .collect();
    if format == "raw" {
        for f in &names {
            assert!(dir.join(&format!("{f}.idx")).exists(), "{f} has its index");
        }
        // The index is created first: a kill before its data file leaves only an index
        // of no entries, and only as the newest file.
        for f in dir.files().iter().filter(|f| f.ends_with(".idx")) {
            let data = f.strip_suffix(".idx").unwrap();
            if names.iter().any(|n| n == data) {
                continue;
            }
            assert!(
                names.last().is_none_or(|last| data > last.as_str()),
                "{f} without its data file is not the newest: {names:?}"
            );
            let entries = index::read(&dir.join(f), 0).unwrap();
            assert!(entries.is_empty(), "{f} without its data file has entries");
        }
    }
    let numbers: Vec<u32> = names.iter().map(|n| n[2..6].parse().unwrap()).collect();
    for w in numbers.windows(2) {
        assert_eq!(w[1], w[0] + 1, "the files left are consecutive: {names:?}");
    }
    if run.max_files > 0 {
        // The ring removes the oldest just after the next file opens.
        assert!(
            names.len() <= run.max_files as usize + 1,
            "ring of {}: {names:?}",
            run.max_files
        );
    }
    let mut last_seq: Option<u64> = None;
    let mut total = 0usize;
    for (i, name) in names.iter().enumerate() {
        let path = dir.join(name);
        let open = i + 1 == names.len();
        let scan = salvage::scan(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Only whole records, and at most the open file's last one cut short: no space
        // never written, no damage.
        // For raw the index is written ahead of the data, so only the record the end of
        // the data file cuts can lack its entry.
        let record = run.payload as u64 + 100;
        match (&scan.tail, open) {
            (Tail::Clean, _) => {}
            (Tail::Truncated { have, .. }, true) if format != "raw" && *have < record => {}
            (Tail::Unindexed { bytes }, true) if format == "raw" && *bytes < record => {}
            (t, _) => panic!("{name} (open: {open}): {t:?}\n{scan:?}"),
        }
        let seqs = if format == "raw" {
            raw_seqs(&path)
        } else {
            capture_seqs(&path, open)
        };
        assert_eq!(seqs.len() as u64, scan.records, "{name}");
        if format != "raw" {
            let p = path.to_str().unwrap();
            let t = tool("tcpdump", &["-r", p, "-nn", "-q"]);
            let n = String::from_utf8_lossy(&t.stdout).lines().count();
            tool_reads("tcpdump", &t, n, scan.records, open, &path);
            let t = tool("capinfos", &["-c", "-M", p]);
            let text = String::from_utf8_lossy(&t.stdout);
            let n = text
                .lines()
                .find_map(|l| l.strip_prefix("Number of packets:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            tool_reads("capinfos", &t, n, scan.records, open, &path);
            // tshark takes a second to start: the file the kill cut, and the first.
            if open || i == 0 {
                let t = tool("tshark", &["-r", p, "-T", "fields", "-e", "frame.number"]);
                let n = String::from_utf8_lossy(&t.stdout).lines().count();
                tool_reads("tshark", &t, n, scan.records, open, &path);
            }
        }
        for s in seqs {
            assert!(s < sent, "{name}: packet {s} was never sent ({sent} were)");
            assert!(
                last_seq.is_none_or(|l| s > l),
                "{name}: packet {s} after {last_seq:?}: out of order or repeated"
            );
            last_seq = Some(s);
            total += 1;
        }
    }
    eprintln!(
        "  {} files, {total} packets of {sent} sent, the last file {}",
        names.len(),
        names.last().map_or("-".into(), |n| {
            let s = salvage::scan(&dir.join(n)).unwrap();
            format!("{} bytes, {:?}", s.size, s.tail)
        })
    );
}

/// Kills recordings of `format` at random moments and checks what each left.
fn kill_at_random_moments(test: &str, format: &str) {
    child_if_asked();
    common::require_tool("tcpdump", "tcpdump");
    common::require_tool("tshark", "tshark");
    common::require_tool("capinfos", "tshark");
    let runs: u64 = std::env::var("FHRECORD_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seeds: Vec<u64> = match std::env::var("FHRECORD_CRASH_SEED") {
        Ok(s) => vec![s.parse().expect("FHRECORD_CRASH_SEED is a number")],
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            let mut r = Rng(t ^ u64::from(std::process::id()));
            (0..runs).map(|_| r.next() >> 1).collect()
        }
    };
    for (i, &seed) in seeds.iter().enumerate() {
        let run = Run::from_seed(seed);
        eprintln!("{format} run {i}: FHRECORD_CRASH_SEED={seed} replays it: {run:?}");
        let (dir, sent) = record_and_kill(test, format, seed, &run);
        check_run(&dir, format, &run, sent);
    }
}

#[test]
fn pcap() {
    kill_at_random_moments("pcap", "pcap");
}

#[test]
fn pcapng() {
    kill_at_random_moments("pcapng", "pcapng");
}

#[test]
fn raw() {
    kill_at_random_moments("raw", "raw");
}
