//! `firehose bench record`: sustained write throughput of `fhrecordsink` (raw and pcap)
//! against the disk's ceiling, `fio` sequential `O_DIRECT` writes with `libaio` and
//! several writes in flight at the same block size on the same filesystem, with GStreamer's
//! `filesink` as a labelled reference, in one invocation.
//!
//! Every writer writes the same number of bytes into a fresh file in `--dir`; the writers
//! take turns, round after round (`--repeat`), and each is reported as the median and
//! range of its rounds. Ratios to fio are taken within a round (a writer against the fio
//! run just before it), since a shared VM's disk drifts by tens of per cent over minutes,
//! and the headline is the median of those ratios. The Firehose and filesink runs are fed
//! by `fhtestsrc` (packet batches, as from a capture) in this process; each pipeline is
//! brought to PAUSED first (files opened, queues allocated: fio's job setup is not timed
//! either), and time runs from PLAYING to EOS and then to the end of an `fsync` of the
//! file, so page-cache writers are timed until their data is on disk too.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use firehose_core::stats::names;

use gst::prelude::*;

use super::spread::Spread;
use crate::launch::{EXIT_ERROR, EXIT_OK};
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
    /// Write a bar chart (SVG) of the writers' GB/s here.
    pub plot: Option<PathBuf>,
    /// Short runs.
    pub quick: bool,
    /// The writers, in the order they take their turn in each round.
    pub writers: Vec<Writer>,
}

/// One of the writers `bench record` can run (`--writers`: fio, fio-fresh, raw, pcap,
/// filesink).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Writer {
    /// fio as is: the reference every ratio is taken against.
    Fio,
    /// fio with `--refill_buffers`.
    FioFresh,
    /// fhrecordsink format=raw.
    Raw,
    /// fhrecordsink format=pcap.
    Pcap,
    /// filesink (page cache).
    Filesink,
}

/// Parses a `--writers` entry by its name (the derived one), refusing others with the
/// list.
pub fn parse_writer(s: &str) -> Result<Writer, String> {
    <Writer as clap::ValueEnum>::from_str(s.trim(), false).map_err(|_| {
        format!(
            "unknown writer '{}': choose from fio, fio-fresh, raw, pcap, filesink",
            s.trim()
        )
    })
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
            plot: None,
            quick: false,
            writers: <Writer as clap::ValueEnum>::value_variants().to_vec(),
        }
    }
}

/// Writes fio keeps in flight (`--iodepth`): enough to keep the device busy between
/// completions, as a recorder with a queue of blocks could.
pub const FIO_DEPTH: u32 = 4;

/// The row name of fio as is (one buffer written again and again).
const FIO: &str = "fio libaio";
/// The row name of fio writing fresh data each time.
const FIO_FRESH: &str = "fio libaio --refill_buffers";
/// The row name of the page-cache reference.
const FILESINK: &str = "filesink";
/// The row name of fhrecordsink format=raw.
const RAW: &str = "fhrecordsink format=raw";
/// The row name of fhrecordsink format=pcap.
const PCAP: &str = "fhrecordsink format=pcap";
/// What fhrecordsink must reach, as a share of fio's figure in the same round.
pub const TARGET: f64 = 0.95;

/// One run of one writer.
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

/// fio's arguments, for the run and for the report.
fn fio_args(block_size: u64) -> String {
    format!(
        "--rw=write --direct=1 --ioengine=libaio --iodepth={FIO_DEPTH} --bs={block_size} \
         --end_fsync=1"
    )
}

/// Runs `fio` once; its bandwidth figure includes the end_fsync. By default fio writes
/// the same buffer again and again (still in the host's caches under a VM, which
/// flatters it); with `fresh` it refills the buffer before each write, as a recorder
/// writes new data every time (which costs fio CPU time instead).
fn run_fio(o: &Options, path: &Path, fresh: bool) -> Result<Row, String> {
    let mut cmd = Command::new("fio");
    if fresh {
        cmd.arg("--refill_buffers");
    }
    let out = cmd
        .args(["--name=seqwrite", "--output-format=json"])
        .args(fio_args(o.block_size).split_whitespace())
        .arg(format!("--filename={}", path.display()))
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
    let (bytes, bw) = parse_fio(&json)?;
    let secs = bytes as f64 / bw.max(1.0);
    Ok(Row {
        writer: if fresh { FIO_FRESH } else { FIO }.into(),
        bytes,
        secs,
        secs_on_disk: secs,
    })
}

/// The job's written bytes and bandwidth (bytes/s) from fio's JSON output.
fn parse_fio(json: &str) -> Result<(u64, f64), String> {
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
    Ok((num("io_bytes")? as u64, num("bw_bytes")?))
}

/// Runs one GStreamer writer; `sink` is the pipeline's tail (named `rec` for ours).
fn run_pipeline(o: &Options, writer: &str, sink: &str, path: &Path) -> Result<Row, String> {
    let batch = ((1u64 << 20) / u64::from(o.packet_size)).clamp(1, 1024);
    let packets = o.bytes / u64::from(o.packet_size);
    let desc = format!(
        // output=batch: filesink too gets the 1 MiB batches (contiguous packets), not
        // one buffer per packet.
        "fhtestsrc output=batch packet-size={} batch-size={batch} num-packets={packets} ! {sink}",
        o.packet_size
    );
    let pipeline = crate::session::parse(&desc)?;
    // Open the file and allocate the queues before the clock starts, as fio does its
    // job setup before it counts.
    let ready = pipeline
        .set_state(gst::State::Paused)
        .map_err(|_| format!("{writer}: the pipeline could not be paused"))
        .and_then(|_| match pipeline.state(gst::ClockTime::from_seconds(30)) {
            (Ok(_), gst::State::Paused, _) => Ok(()),
            _ => Err(format!("{writer}: the pipeline did not reach PAUSED")),
        });
    let mut session = Session::new(pipeline);
    if let Err(e) = ready {
        session.stop();
        return Err(e);
    }
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

/// The row name, pipeline tail and file of each GStreamer writer.
fn gst_writer(o: &Options, w: Writer) -> Option<(String, String, PathBuf)> {
    let p = |name: &str| {
        o.dir.join(format!(
            "firehose-bench-record-{}.{name}",
            std::process::id()
        ))
    };
    let rec = |format: &str, path: &Path| {
        format!(
            "fhrecordsink name=rec format={format} location={} block-size={} when-full=block overwrite=true",
            path.display(),
            o.block_size
        )
    };
    Some(match w {
        Writer::Fio | Writer::FioFresh => return None,
        Writer::Raw => {
            let raw = p("raw");
            (RAW.into(), rec("raw", &raw), raw)
        }
        Writer::Pcap => {
            let pcap = p("pcap");
            (PCAP.into(), rec("pcap", &pcap), pcap)
        }
        Writer::Filesink => {
            let file = p("filesink");
            (
                FILESINK.into(),
                format!("filesink location={} sync=false", file.display()),
                file,
            )
        }
    })
}

fn cleanup(path: &Path) {
    let _ = std::fs::remove_file(path);
    let mut idx = path.as_os_str().to_owned();
    idx.push(".idx");
    let _ = std::fs::remove_file(PathBuf::from(idx));
}

/// One writer's rounds, summed up.
#[derive(Debug, Clone)]
pub struct Summary {
    /// What wrote.
    pub writer: String,
    /// Bytes in the file (of the first run).
    pub bytes: u64,
    /// Rounds completed.
    pub runs: usize,
    /// GB/s until on disk, over the rounds.
    pub rate: Spread,
    /// This writer's rate over fio's in the same round, over the rounds.
    pub vs_fio: Option<Spread>,
    /// The same against fio with `--refill_buffers`.
    pub vs_fresh: Option<Spread>,
    /// The same against filesink.
    pub vs_filesink: Option<Spread>,
    /// The same against fhrecordsink format=raw.
    pub vs_raw: Option<Spread>,
}

/// Sums up `runs[i]` (writer i's rounds, in order), each against the reference writers'
/// run of the same round.
pub fn summarize(runs: &[Vec<Row>]) -> Vec<Summary> {
    let find = |name: &str| {
        runs.iter()
            .find(|r| r.first().is_some_and(|x| x.writer == name))
    };
    let per_round = |mine: &[Row], reference: Option<&Vec<Row>>| {
        let r: Vec<f64> = mine
            .iter()
            .zip(reference?)
            .map(|(a, b)| a.rate() / b.rate().max(1e-9))
            .collect();
        Spread::of(&r)
    };
    runs.iter()
        .filter_map(|r| {
            let first = r.first()?;
            let rates: Vec<f64> = r.iter().map(|x| x.rate() / 1e9).collect();
            Some(Summary {
                writer: first.writer.clone(),
                bytes: first.bytes,
                runs: r.len(),
                rate: Spread::of(&rates)?,
                vs_fio: per_round(r, find(FIO)),
                vs_fresh: per_round(r, find(FIO_FRESH)),
                vs_filesink: per_round(r, find(FILESINK)),
                vs_raw: per_round(r, find(RAW)),
            })
        })
        .collect()
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
    // Each writer once, in the order given.
    let mut order: Vec<Writer> = Vec::new();
    for &w in &o.writers {
        if !order.contains(&w) {
            order.push(w);
        }
    }
    let names: Vec<String> = order
        .iter()
        .map(|&w| match w {
            Writer::Fio => FIO.to_string(),
            Writer::FioFresh => FIO_FRESH.to_string(),
            _ => gst_writer(o, w).map(|g| g.0).unwrap_or_default(),
        })
        .collect();
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); names.len()];
    let mut failure = None;
    'rounds: for round in 0..o.repeat {
        for (i, (name, &w)) in names.iter().zip(&order).enumerate() {
            let result = match gst_writer(o, w) {
                None => {
                    let r = run_fio(o, &fio_path, w == Writer::FioFresh);
                    cleanup(&fio_path);
                    r
                }
                Some((_, sink, path)) => {
                    let r = run_pipeline(o, name, &sink, &path);
                    cleanup(&path);
                    r
                }
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
    let rows = summarize(&runs);
    let mut report = report(o, &rows, started.elapsed(), failure.as_deref());
    if let Some(path) = &o.plot {
        let chart = crate::plot::BarChart {
            title: "firehose bench record: GB/s until the data is on disk".into(),
            subtitle: format!(
                "{} — median of {} round(s), range as error bars",
                crate::sys::utc_now(),
                o.repeat
            ),
            unit: "GB/s".into(),
            bars: rows
                .iter()
                .map(|r| crate::plot::Bar {
                    label: r.writer.clone(),
                    median: r.rate.median,
                    range: (r.runs > 1).then_some((r.rate.min, r.rate.max)),
                })
                .collect(),
        };
        match crate::plot::bars_svg(&chart).and_then(|svg| crate::plot::write_svg(path, &svg)) {
            Ok(()) => {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                report.push_str(&format!(
                    "\n![bench record: GB/s per writer]({})\n",
                    name.unwrap_or_default()
                ));
            }
            Err(e) => eprintln!("bench record: chart: {e}"),
        }
    }
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

/// Physical memory in bytes (0 when unknown).
fn mem_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Why these figures are not the disk's, or `None` when they are as good as this bench
/// can make them.
fn caveat(o: &Options, fs: &str) -> Option<String> {
    if fs.starts_with("tmpfs") || fs.starts_with("ramfs") {
        return Some(format!(
            "**Not a disk measurement: {} is on {fs}, in memory.** Give --dir on the disk \
             to be measured.",
            o.dir.display()
        ));
    }
    if o.quick {
        return Some(format!(
            "**--quick: not a disk measurement.** Each writer wrote {} MiB, {} round(s): \
             the run checks that every writer works and that the report is produced. The \
             writers are timed until the data is on the device as far as this machine can \
             tell (O_DIRECT completion, or fsync for filesink), but a run this short is \
             mostly start-up and a few hundred milliseconds of transfer, well within what \
             a device's write cache (or, under a VM, the host's page cache) absorbs \
             without reaching the medium. The ratios below are printed, not judged; for \
             figures, run without --quick ({} MiB, {} rounds, more for a noisy disk).",
            o.bytes >> 20,
            o.repeat,
            Options::default().bytes >> 20,
            Options::default().repeat
        ));
    }
    let mem = mem_total();
    (mem > 0 && o.bytes < mem / 4).then(|| {
        format!(
            "Each run writes {} MiB, under a quarter of this machine's {} MiB of memory: \
             the writers are timed until the data is on the device, but a VM host's page \
             cache may hold that much; prefer --size of at least the guest's memory when \
             the disk allows.",
            o.bytes >> 20,
            mem >> 20
        )
    })
}

fn fmt_ratio(s: Option<&Spread>) -> String {
    s.map_or("-".into(), |s| {
        format!("{:.2}× ({:.2}–{:.2})", s.median, s.min, s.max)
    })
}

/// The markdown report.
pub fn report(o: &Options, rows: &[Summary], took: Duration, failure: Option<&str>) -> String {
    let mut r = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let fs = filesystem(&o.dir);
    let _ = writeln!(r, "## firehose bench record — {}\n", sys::utc_now());
    let _ = writeln!(r, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(
        r,
        "- host: Linux {}, {} CPUs, {}; {} ({}); took {:.0} s",
        sys::kernel_release(),
        sys::cpus(),
        gst::version_string(),
        o.dir.display(),
        fs,
        took.as_secs_f64()
    );
    let _ = writeln!(
        r,
        "- each writer writes {} MiB into a new file, {} round(s), the writers taking \
         turns; GB/s is the median of the rounds with their range; a ratio is taken \
         within each round (against the reference's run of the same round) and given as \
         the median with its range; block size {} KiB; GStreamer writers are fed \
         `fhtestsrc packet-size={}` batches of 1 MiB",
        o.bytes >> 20,
        o.repeat,
        o.block_size >> 10,
        o.packet_size
    );
    let _ = writeln!(
        r,
        "- fio (the disk's ceiling): `{}` (its bw figure), as is (one buffer written \
         again and again) and with `--refill_buffers` (new data for every write, as a \
         recorder has, at a CPU cost to fio); fhrecordsink: `block-size={} when-full=block` \
         (O_DIRECT); filesink (reference: the page cache): `sync=false`. GStreamer \
         writers: GB/s = bytes in the file / time from PLAYING (after PAUSED: files open, \
         queues allocated) through EOS to the end of an fsync of the file\n",
        fio_args(o.block_size),
        o.block_size
    );
    let caveat = caveat(o, &fs);
    if let Some(c) = &caveat {
        let _ = writeln!(r, "{c}\n");
    }
    if let Some(f) = failure {
        let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
    }
    let _ = writeln!(
        r,
        "| writer | MiB written | rounds | GB/s median | GB/s range | vs {FIO} | vs fio fresh | vs filesink |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for x in rows {
        let name = if x.writer == FILESINK {
            format!("{FILESINK} (reference)")
        } else {
            x.writer.clone()
        };
        let _ = writeln!(
            r,
            "| {} | {} | {} | {:.2} | {:.2}–{:.2} | {} | {} | {} |",
            name,
            x.bytes >> 20,
            x.runs,
            x.rate.median,
            x.rate.min,
            x.rate.max,
            fmt_ratio(x.vs_fio.as_ref()),
            fmt_ratio(x.vs_fresh.as_ref()),
            fmt_ratio(x.vs_filesink.as_ref()),
        );
    }
    r.push('\n');
    let judged = !o.quick && caveat.as_deref().is_none_or(|c| !c.starts_with("**Not"));
    for x in rows.iter().filter(|x| x.writer.starts_with("fhrecordsink")) {
        let verdict = match (&x.vs_fio, judged) {
            (None, _) => "-".to_string(),
            (Some(_), false) => "not judged (see above)".to_string(),
            // Three decimals: a median of 0.947 shows as 0.95× above.
            (Some(s), true) if s.median >= TARGET => format!("met ({:.3}×)", s.median),
            (Some(s), true) => format!("**missed** ({:.3}×)", s.median),
        };
        let _ = writeln!(
            r,
            "- {}: {} of {FIO} (median of per-round ratios), target ≥ {TARGET:.2}×: {verdict}; \
             {} of fio with fresh data",
            x.writer,
            fmt_ratio(x.vs_fio.as_ref()),
            fmt_ratio(x.vs_fresh.as_ref()),
        );
    }
    if let Some(p) = rows.iter().find(|x| x.writer == PCAP) {
        if let Some(v) = &p.vs_raw {
            let _ = writeln!(
                r,
                "- {PCAP} against {RAW} in the same round (GB/s of file bytes, record \
                 headers included): {}",
                fmt_ratio(Some(v))
            );
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: &str, secs: f64) -> Row {
        Row {
            writer: w.into(),
            bytes: 1 << 30,
            secs,
            secs_on_disk: secs,
        }
    }

    #[test]
    fn ratios_are_taken_within_each_round() {
        // fio is twice as fast in round 2; the recorder follows it: every per-round
        // ratio is 0.9, although the ratio of the medians is not.
        let runs = vec![
            vec![row(FIO, 1.0), row(FIO, 0.5), row(FIO, 1.0)],
            vec![
                row(FIO_FRESH, 1.25),
                row(FIO_FRESH, 1.25),
                row(FIO_FRESH, 1.25),
            ],
            vec![
                row("fhrecordsink format=raw", 1.0 / 0.9),
                row("fhrecordsink format=raw", 0.5 / 0.9),
                row("fhrecordsink format=raw", 1.0 / 0.9),
            ],
        ];
        let s = summarize(&runs);
        assert_eq!(s.len(), 3);
        let raw = &s[2].vs_fio.unwrap();
        assert!((raw.median - 0.9).abs() < 1e-9 && (raw.max - 0.9).abs() < 1e-9);
        assert_eq!(s[2].runs, 3);
        assert!(s[2].vs_filesink.is_none());
    }

    #[test]
    fn report_has_medians_ranges_ratios_and_verdicts() {
        let runs = vec![
            vec![row(FIO, 1.0), row(FIO, 1.0), row(FIO, 1.0)],
            vec![
                row(FIO_FRESH, 1.0),
                row(FIO_FRESH, 1.1),
                row(FIO_FRESH, 1.2),
            ],
            vec![
                row("fhrecordsink format=raw", 1.02),
                row("fhrecordsink format=raw", 1.04),
                row("fhrecordsink format=raw", 1.0),
            ],
            vec![
                row("fhrecordsink format=pcap", 1.2),
                row("fhrecordsink format=pcap", 1.25),
                row("fhrecordsink format=pcap", 1.3),
            ],
            vec![row(FILESINK, 3.0), row(FILESINK, 3.0), row(FILESINK, 3.0)],
        ];
        let o = Options {
            bytes: 64 << 30,
            ..Options::default()
        };
        let r = report(&o, &summarize(&runs), Duration::from_secs(1), None);
        assert!(
            r.contains("| fio libaio | 1024 | 3 | 1.07 | 1.07–1.07 | 1.00× (1.00–1.00) |"),
            "{r}"
        );
        assert!(
            r.contains(
                "| fhrecordsink format=raw | 1024 | 3 | 1.05 | 1.03–1.07 | 0.98× (0.96–1.00) |"
            ),
            "{r}"
        );
        assert!(r.contains("| filesink (reference) | 1024 | 3 |"), "{r}");
        assert!(r.contains("--ioengine=libaio --iodepth=4"), "{r}");
        assert!(
            r.contains("format=raw: 0.98× (0.96–1.00) of fio libaio (median of per-round ratios), target ≥ 0.95×: met"),
            "{r}"
        );
        assert!(r.contains("format=pcap: 0.80× (0.77–0.83)"), "{r}");
        assert!(r.contains("0.95×: **missed**"), "{r}");
        // pcap against raw, round by round: 1.02/1.2, 1.04/1.25, 1.0/1.3.
        assert!(
            r.contains(
                "fhrecordsink format=pcap against fhrecordsink format=raw in the same round \
                 (GB/s of file bytes, record headers included): 0.83× (0.77–0.85)"
            ),
            "{r}"
        );
        assert!(!r.contains("not a disk measurement"), "{r}");
    }

    #[test]
    fn quick_reports_say_they_are_not_disk_figures_and_judge_nothing() {
        let runs = vec![
            vec![row(FIO, 1.0)],
            vec![row("fhrecordsink format=raw", 2.0)],
        ];
        let o = Options {
            quick: true,
            bytes: 64 << 20,
            ..Options::default()
        };
        let r = report(&o, &summarize(&runs), Duration::from_secs(1), None);
        assert!(r.contains("**--quick: not a disk measurement.**"), "{r}");
        assert!(r.contains("target ≥ 0.95×: not judged"), "{r}");
    }

    #[test]
    fn writers_are_parsed_by_name_and_unknown_ones_are_refused() {
        let ws: Result<Vec<Writer>, String> = "fio,pcap,raw".split(',').map(parse_writer).collect();
        assert_eq!(ws, Ok(vec![Writer::Fio, Writer::Pcap, Writer::Raw]));
        let all: Result<Vec<Writer>, String> = "fio,fio-fresh,raw,pcap,filesink"
            .split(',')
            .map(parse_writer)
            .collect();
        assert_eq!(
            all,
            Ok(<Writer as clap::ValueEnum>::value_variants().to_vec())
        );
        let e = parse_writer("pcapng").unwrap_err();
        assert!(
            e.contains("unknown writer 'pcapng'") && e.contains("filesink"),
            "{e}"
        );
    }

    #[test]
    fn fio_json_gives_bytes_and_bandwidth() {
        let json = r#"{"jobs" : [ { "jobname" : "seqwrite", "job options" : { "rw" : "write" },
            "read" : { "io_bytes" : 0, "bw_bytes" : 0 },
            "write" : { "io_bytes" : 4294967296, "io_kbytes" : 4194304, "bw_bytes" : 2147483648,
            "bw" : 2097152 } } ] }"#;
        assert_eq!(parse_fio(json), Ok((4 << 30, 2147483648.0)));
        assert!(parse_fio("{}").is_err());
    }
}
