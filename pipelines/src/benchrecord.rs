//! `firehose bench record`: sustained write throughput of `fhrecordsink` (raw and pcap)
//! against `fio` sequential `O_DIRECT` writes of the same block size on the same
//! filesystem, and against GStreamer's `filesink`, in one invocation.
//!
//! Every writer writes the same number of bytes into a fresh file in `--dir`, one after
//! the other, `--repeat` times each (the best run is reported: the question is what
//! each can sustain, and a shared VM only ever makes a run slower). The Firehose and
//! filesink runs are fed by `fhtestsrc` (packet batches, as from a capture) in this
//! process; time runs from PLAYING to the EOS message, and then to the end of an
//! `fsync` of the file, so page-cache writers are timed until their data is on disk too.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use firehose_core::stats::names;

use crate::args::{parse_si, Args};
use crate::launch::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use crate::session::{stats_property, BusEvent, Session};
use crate::statsline::counter;
use crate::sys;

/// Options of `firehose bench record`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory (filesystem) written to.
    pub dir: PathBuf,
    /// Bytes each run writes.
    pub bytes: u64,
    /// Block size: fio's `bs` and fhrecordsink's `block-size`.
    pub block_size: u64,
    /// Payload bytes per packet of the test stream.
    pub packet_size: u32,
    /// Runs per writer.
    pub repeat: u32,
    /// Also write the report here.
    pub out: Option<PathBuf>,
    /// Short runs.
    pub quick: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir(),
            bytes: 4 << 30,
            block_size: 4 << 20,
            packet_size: 8192,
            repeat: 3,
            out: None,
            quick: false,
        }
    }
}

const USAGE: &str = "firehose bench record [--dir DIR] [--size BYTES] [--block-size BYTES] \
                     [--packet-size BYTES] [--repeat N] [--out FILE.md] [--quick]";

/// Parses the options after `bench record` and runs the benchmark.
pub fn cmd(mut args: Args) -> i32 {
    let mut o = Options::default();
    let mut size = None;
    let mut repeat = None;
    while let Some(flag) = args.next_flag() {
        let value = |args: &mut Args| args.value(&flag);
        let bytes = |v: String| -> Result<u64, String> {
            parse_si(&v).map(|x| x as u64).and_then(|x| {
                (x > 0)
                    .then_some(x)
                    .ok_or(format!("{} must be above 0", flag.name))
            })
        };
        let r = match flag.name.as_str() {
            "--dir" => value(&mut args).map(|v| o.dir = PathBuf::from(v)),
            "--size" => value(&mut args).and_then(bytes).map(|v| size = Some(v)),
            "--block-size" => value(&mut args).and_then(bytes).map(|v| o.block_size = v),
            "--packet-size" => value(&mut args)
                .and_then(bytes)
                .map(|v| o.packet_size = v.min(65507) as u32),
            "--repeat" => value(&mut args)
                .and_then(bytes)
                .map(|v| repeat = Some(v as u32)),
            "--out" => value(&mut args).map(|v| o.out = Some(PathBuf::from(v))),
            "--quick" => {
                o.quick = true;
                Ok(())
            }
            other => Err(format!("unknown bench record option '{other}'")),
        };
        if let Err(e) = r {
            eprintln!("firehose: {e}\nusage: {USAGE}");
            return EXIT_USAGE;
        }
    }
    o.bytes = size.unwrap_or(if o.quick { 256 << 20 } else { o.bytes });
    o.repeat = repeat.unwrap_or(if o.quick { 1 } else { o.repeat });
    if !o.block_size.is_multiple_of(4096) {
        eprintln!("firehose: --block-size must be a multiple of 4096\nusage: {USAGE}");
        return EXIT_USAGE;
    }
    // Whole blocks, so fio (which writes whole blocks only) writes what the others do.
    o.bytes = o.bytes.next_multiple_of(o.block_size);
    run(&o)
}

/// One writer's best run.
#[derive(Debug, Clone)]
pub struct Row {
    /// What wrote.
    pub writer: String,
    /// Bytes in the file.
    pub bytes: u64,
    /// Seconds to EOS (fio: its own runtime).
    pub secs: f64,
    /// Seconds to EOS plus the final fsync.
    pub secs_on_disk: f64,
}

impl Row {
    /// Bytes per second until the data was on disk.
    pub fn rate(&self) -> f64 {
        self.bytes as f64 / self.secs_on_disk.max(1e-9)
    }
}

fn fsync_file(path: &Path) -> Result<Duration, String> {
    let t = Instant::now();
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| format!("fsync {}: {e}", path.display()))?;
    Ok(t.elapsed())
}

/// The name of the fio run that writes fresh data each time.
const FIO_FRESH: &str = "fio --refill_buffers";

/// Runs `fio` once; its bandwidth figure includes the end_fsync. By default fio writes
/// the same buffer again and again (still in the host's caches under a VM, which
/// flatters it); with `fresh` it refills the buffer before each write, as a recorder
/// writes new data every time.
fn run_fio(o: &Options, path: &Path, fresh: bool) -> Result<Row, String> {
    let mut cmd = Command::new("fio");
    if fresh {
        cmd.arg("--refill_buffers");
    }
    let out = cmd
        .args([
            "--name=seqwrite",
            "--rw=write",
            "--direct=1",
            "--ioengine=psync",
            "--iodepth=1",
            "--end_fsync=1",
            "--output-format=json",
        ])
        .arg(format!("--filename={}", path.display()))
        .arg(format!("--bs={}", o.block_size))
        .arg(format!("--size={}", o.bytes))
        .output()
        .map_err(|e| {
            format!(
                "cannot run fio ({e}): install it with apt-get install -y fio (or scripts/setup)"
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let json = String::from_utf8_lossy(&out.stdout);
    // The job's write statistics (not the `"rw" : "write"` option).
    let write = json
        .find("\"write\" : {")
        .map(|i| &json[i..])
        .ok_or("fio printed no write section")?;
    let num = |key: &str| -> Result<f64, String> {
        let at = write
            .find(&format!("\"{key}\""))
            .ok_or(format!("fio printed no {key}"))?;
        write[at..]
            .split(':')
            .nth(1)
            .and_then(|v| v.split([',', '\n']).next())
            .and_then(|v| v.trim().parse().ok())
            .ok_or(format!("fio's {key} is not a number"))
    };
    let bytes = num("io_bytes")? as u64;
    let bw = num("bw_bytes")?;
    let secs = bytes as f64 / bw.max(1.0);
    Ok(Row {
        writer: if fresh { FIO_FRESH } else { "fio" }.into(),
        bytes,
        secs,
        secs_on_disk: secs,
    })
}

/// Runs one GStreamer writer; `sink` is the pipeline's tail (named `rec` for ours).
fn run_pipeline(o: &Options, writer: &str, sink: &str, path: &Path) -> Result<Row, String> {
    let batch = ((1u64 << 20) / u64::from(o.packet_size)).clamp(1, 1024);
    let packets = o.bytes / u64::from(o.packet_size);
    let desc = format!(
        "fhtestsrc packet-size={} batch-size={batch} num-packets={packets} ! {sink}",
        o.packet_size
    );
    let mut session = Session::from_description(&desc)?;
    let t = Instant::now();
    session.start()?;
    let end = session.wait_end(Duration::from_secs(600));
    let secs = t.elapsed().as_secs_f64();
    let rec = session.element("rec");
    let stats = rec.as_ref().and_then(stats_property);
    session.stop();
    match end {
        Some(BusEvent::Eos) => {}
        Some(BusEvent::Error(e)) => return Err(format!("{writer}: {e}")),
        None => return Err(format!("{writer}: no EOS within 600 s")),
    }
    if let Some(s) = &stats {
        let drops = counter(s, names::DROPS_DISK);
        if drops > 0 {
            return Err(format!(
                "{writer}: {drops} packets dropped (when-full=block expected)"
            ));
        }
    }
    let sync = fsync_file(path)?;
    let bytes = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    Ok(Row {
        writer: writer.into(),
        bytes,
        secs,
        secs_on_disk: secs + sync.as_secs_f64(),
    })
}

fn writers(o: &Options) -> Vec<(String, String, PathBuf)> {
    let p = |name: &str| {
        o.dir.join(format!(
            "firehose-bench-record-{}.{name}",
            std::process::id()
        ))
    };
    let rec = |format: &str, path: &Path| {
        format!(
            "fhrecordsink name=rec format={format} location={} block-size={} when-full=block",
            path.display(),
            o.block_size
        )
    };
    let raw = p("raw");
    let pcap = p("pcap");
    let file = p("filesink");
    vec![
        ("fhrecordsink format=raw".into(), rec("raw", &raw), raw),
        ("fhrecordsink format=pcap".into(), rec("pcap", &pcap), pcap),
        (
            "filesink".into(),
            format!("filesink location={} sync=false", file.display()),
            file,
        ),
    ]
}

fn cleanup(path: &Path) {
    let _ = std::fs::remove_file(path);
    let mut idx = path.as_os_str().to_owned();
    idx.push(".idx");
    let _ = std::fs::remove_file(PathBuf::from(idx));
}

fn best(rows: Vec<Row>) -> Option<Row> {
    rows.into_iter()
        .max_by(|a, b| a.rate().total_cmp(&b.rate()))
}

/// Runs the benchmark and prints (and maybe writes) the report; returns the exit status.
///
/// The writers take turns, round after round, so that a disk whose speed drifts over
/// the minutes (shared VMs) weighs on all of them alike.
pub fn run(o: &Options) -> i32 {
    let started = Instant::now();
    let fio_path = o
        .dir
        .join(format!("firehose-bench-record-{}.fio", std::process::id()));
    let gst_writers = writers(o);
    let mut names = vec!["fio".to_string(), FIO_FRESH.to_string()];
    names.extend(gst_writers.iter().map(|w| w.0.clone()));
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); names.len()];
    let mut failure = None;
    'rounds: for round in 0..o.repeat {
        for (i, name) in names.iter().enumerate() {
            let result = if i < 2 {
                let r = run_fio(o, &fio_path, i == 1);
                cleanup(&fio_path);
                r
            } else {
                let (_, sink, path) = &gst_writers[i - 2];
                let r = run_pipeline(o, name, sink, path);
                cleanup(path);
                r
            };
            match result {
                Ok(row) => {
                    eprintln!(
                        "bench record: round {}: {name} {:.2} GB/s ({:.2} GB/s to EOS)",
                        round + 1,
                        row.rate() / 1e9,
                        row.bytes as f64 / row.secs / 1e9
                    );
                    runs[i].push(row);
                }
                Err(e) => {
                    failure = Some(e);
                    break 'rounds;
                }
            }
        }
    }
    let rows: Vec<(Row, f64)> = runs
        .into_iter()
        .filter_map(|r| {
            let median = median(r.iter().map(Row::rate).collect());
            best(r).map(|b| (b, median))
        })
        .collect();
    let report = report(o, &rows, started.elapsed(), failure.as_deref());
    println!("{report}");
    if let Some(path) = &o.out {
        if let Err(e) = std::fs::write(path, &report) {
            eprintln!("bench record: cannot write {}: {e}", path.display());
            return EXIT_ERROR;
        }
    }
    match failure {
        Some(e) => {
            eprintln!("bench record: stopped early: {e}");
            EXIT_ERROR
        }
        None => EXIT_OK,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn filesystem(dir: &Path) -> String {
    Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE,SOURCE", "-T"])
        .arg(dir)
        .output()
        .ok()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.split_whitespace().collect::<Vec<_>>().join(" on ")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown filesystem".into())
}

/// The markdown report.
pub fn report(o: &Options, rows: &[(Row, f64)], took: Duration, failure: Option<&str>) -> String {
    let mut r = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(r, "## firehose bench record — {}\n", sys::utc_now());
    let _ = writeln!(r, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(
        r,
        "- host: Linux {}, {} CPUs, {}; {} ({}); took {:.0} s",
        sys::kernel_release(),
        sys::cpus(),
        gst::version_string(),
        o.dir.display(),
        filesystem(&o.dir),
        took.as_secs_f64()
    );
    let _ = writeln!(
        r,
        "- each writer writes {} MiB into a new file, {} round(s) taking turns; best and \
         median of the rounds; block size {} KiB; GStreamer writers are fed \
         `fhtestsrc packet-size={}` batches of 1 MiB",
        o.bytes >> 20,
        o.repeat,
        o.block_size >> 10,
        o.packet_size
    );
    let _ = writeln!(
        r,
        "- fio: `--rw=write --direct=1 --ioengine=psync --bs={} --end_fsync=1` (its bw figure), \
         as is (one buffer written again and again) and with `--refill_buffers` (new data \
         for every write, as a recorder has); \
         fhrecordsink: `block-size={} when-full=block` (O_DIRECT); filesink: `sync=false`. \
         GB/s = bytes in the file / time until on disk (PLAYING → EOS → fsync of the file)\n",
        o.block_size, o.block_size
    );
    if let Some(f) = failure {
        let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
    }
    let fio = rows
        .iter()
        .find(|x| x.0.writer == "fio")
        .map(|x| x.0.rate());
    let fresh = rows
        .iter()
        .find(|x| x.0.writer == FIO_FRESH)
        .map(|x| x.0.rate());
    let filesink = rows
        .iter()
        .find(|x| x.0.writer == "filesink")
        .map(|x| x.0.rate());
    let _ = writeln!(
        r,
        "| writer | MiB written | s to EOS | s on disk | GB/s (best) | GB/s (median) | vs fio | vs fio fresh | vs filesink |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let ratio = |a: f64, b: Option<f64>| b.map_or("-".into(), |b| format!("{:.2}×", a / b));
    for (x, median) in rows {
        let _ = writeln!(
            r,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            x.writer,
            x.bytes >> 20,
            x.secs,
            x.secs_on_disk,
            x.rate() / 1e9,
            median / 1e9,
            ratio(x.rate(), fio),
            ratio(x.rate(), fresh),
            ratio(x.rate(), filesink)
        );
    }
    r.push('\n');
    for (x, _) in rows
        .iter()
        .filter(|x| x.0.writer.starts_with("fhrecordsink"))
    {
        let met = |v: Option<f64>, t: f64| match v {
            Some(b) if x.rate() >= t * b => "met",
            Some(_) => "**missed**",
            None => "-",
        };
        let _ = writeln!(
            r,
            "- {}: ≥ 90 % of fio {} (of fio with fresh data {}), ≥ 2× filesink {}",
            x.writer,
            met(fio, 0.9),
            met(fresh, 0.9),
            met(filesink, 2.0)
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_ratios_and_verdicts() {
        let row = |w: &str, secs: f64| Row {
            writer: w.into(),
            bytes: 1 << 30,
            secs,
            secs_on_disk: secs,
        };
        let rows = vec![
            (row("fio", 1.0), 1e9),
            (row("fhrecordsink format=raw", 1.05), 1e9),
            (row("fhrecordsink format=pcap", 2.0), 1e9),
            (row("filesink", 3.0), 1e9),
        ];
        let r = report(&Options::default(), &rows, Duration::from_secs(1), None);
        assert!(r.contains("| fio | 1024 |"), "{r}");
        assert!(r.contains("| 1.02 | 1.00 | 0.95× | - | 2.86× |"), "{r}");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(
            r.contains(
                "format=raw: ≥ 90 % of fio met (of fio with fresh data -), ≥ 2× filesink met"
            ),
            "{r}"
        );
        assert!(r.contains("format=pcap: ≥ 90 % of fio **missed**"), "{r}");
    }
}
