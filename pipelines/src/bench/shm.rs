//! `firehose bench shm`: the shared-memory transport between two processes, per buffer
//! size, side by side in one run: `fhshmsink → fhshmsrc`, `fhshmsink →` the Python
//! consumer (`python/firehose_shm`), stock `shmsink → shmsrc` (gstreamer1.0-plugins-bad)
//! and SPDL's `SharedMemorySegmentPool` (spdl from PyPI, in the venv): throughput,
//! buffers/s, CPU per buffer and per GB on each side, stalls, and each row's CPU per
//! buffer as a ratio of stock `shmsink`'s.
//!
//! The GStreamer runs are two `firehose launch` children: a producer and a consumer.
//! Producers: `fakesrc filltype=zero` (a fresh zeroed allocation per buffer, not shared
//! memory, so both sinks copy each buffer once), and `fhtestsrc output=batch` with 16 pool
//! slots, writing every packet's test pattern or (`fill-payload=false`) only each packet's
//! 16-byte header: into its own pool in front of `shmsink` (which copies), into the
//! segments `fhshmsink` proposes in the allocation query in front of it (no copy; the
//! sink sends a small message). The same producer runs in front of both sinks, and each
//! `fhtestsrc` row is compared with the `shmsink` row of the same producer. The consumer
//! (`fhshmsrc` or `shmsrc`) stops after the buffers sent (`identity eos-after`: `shmsrc` never
//! receives an end-of-stream). A run whose consumer stops making progress (uses no CPU)
//! for 2 s, or has not got its buffers within `--timeout`, is a stall. CPU comes from
//! each child's `wait4` resource usage, less that of a run of 16 buffers (the
//! processes' start-up). The Python rows run `scripts/bench_shm_peers.py`, which
//! measures its own wall and CPU from the first item to the last (interpreter start-up
//! left out); SPDL's producer is a Python generator in a subprocess copying a numpy
//! array into the pool per item.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

/// `firehose bench shm` options.
#[derive(Debug, Args)]
pub struct ShmArgs {
    /// Buffer sizes in bytes (SI suffixes allowed), comma separated
    #[arg(long, value_delimiter = ',', value_parser = super::parse_bytes,
          default_value = "1472,65536,1048576,8388608")]
    sizes: Vec<u64>,
    /// Runs per transport and size (the table shows medians)
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// Seconds a run may take before it counts as a stall (so does a consumer that uses
    /// no CPU for 2 s)
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Python with numpy (and spdl for its row): the Python rows are left out without it
    #[arg(long, default_value = ".venv/bin/python3")]
    python: PathBuf,
    /// Buffers per Python run, as a fraction of the GStreamer runs' count
    #[arg(long, default_value_t = 0.25)]
    python_share: f64,
    /// More properties of `fhshmsrc`, space-separated, e.g. "readable-metas=false" (stock
    /// `shmsrc` makes no metas; fhshmsrc builds the readable FirehoseBatchMeta for the
    /// bench's `identity ! fakesink`, which do not say they read only the Rust metas)
    #[arg(long, default_value = "")]
    src_props: String,
    /// Multiplies the buffers per run (8 GiB per run from 256 KiB up, 2 GiB below,
    /// 200,000 small buffers): longer runs for CPU figures that come in 10 ms ticks
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
}

/// What one row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Firehose,
    FirehosePython,
    Stock,
    Spdl,
    /// `fhtestsrc` generating into the pool `fhshmsink` proposes (no copy), writing
    /// only each packet's header (`headers`) or every byte.
    FirehosePool {
        headers: bool,
    },
    /// The same `fhtestsrc` producer into stock `shmsink` (which copies).
    StockTestsrc {
        headers: bool,
    },
}

impl Peer {
    /// Every row, in the table's order.
    const ALL: [Self; 8] = [
        Self::Firehose,
        Self::FirehosePython,
        Self::Stock,
        Self::Spdl,
        Self::FirehosePool { headers: true },
        Self::StockTestsrc { headers: true },
        Self::FirehosePool { headers: false },
        Self::StockTestsrc { headers: false },
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Firehose => "fhshmsink → fhshmsrc",
            Self::FirehosePython => "fhshmsink → Python firehose_shm",
            Self::Stock => "shmsink → shmsrc",
            Self::Spdl => "SPDL SharedMemorySegmentPool (Python → Python)",
            Self::FirehosePool { headers: true } => {
                "fhtestsrc headers only → fhshmsink, producer writes into the segment pool → fhshmsrc"
            }
            Self::StockTestsrc { headers: true } => "fhtestsrc headers only → shmsink → shmsrc",
            Self::FirehosePool { headers: false } => {
                "fhtestsrc full pattern → fhshmsink, producer writes into the segment pool → fhshmsrc"
            }
            Self::StockTestsrc { headers: false } => "fhtestsrc full pattern → shmsink → shmsrc",
        }
    }

    /// The stock `shmsink` row with the same producer, that this row is compared with.
    fn baseline(self) -> Self {
        match self {
            Self::FirehosePool { headers } | Self::StockTestsrc { headers } => {
                Self::StockTestsrc { headers }
            }
            _ => Self::Stock,
        }
    }

    /// Whether it runs two `firehose launch` children (start-up measured and subtracted).
    fn gstreamer_pair(self) -> bool {
        !matches!(self, Self::FirehosePython | Self::Spdl)
    }

    /// Whether its sink is stock `shmsink`.
    fn stock(self) -> bool {
        matches!(self, Self::Stock | Self::StockTestsrc { .. })
    }
}

/// `fhtestsrc`'s packet size and batch size for buffers of `size` bytes: one packet up
/// to the largest datagram, else 32 KiB packets (`None` when `size` is not a multiple).
fn testsrc_shape(size: u64) -> Option<(u64, u64)> {
    match size {
        16..=65507 => Some((size, 1)),
        _ if size.is_multiple_of(32768) => Some((32768, size / 32768)),
        _ => None,
    }
}

/// The producer pipeline up to its sink for `peer`: `n` buffers of `size` bytes.
fn producer(peer: Peer, size: u64, n: u64) -> String {
    match peer {
        Peer::FirehosePool { headers } | Peer::StockTestsrc { headers } => {
            let (packet, batch) = testsrc_shape(size).expect("checked before the run");
            format!(
                "fhtestsrc packet-size={packet} batch-size={batch} num-packets={} \
                 output=batch pool-size={} fill-payload={}",
                n * batch,
                size * POOL_SLOTS,
                !headers
            )
        }
        _ => format!("fakesrc num-buffers={n} sizetype=fixed sizemax={size} filltype=zero"),
    }
}

/// Slots of `fhtestsrc`'s pool: as many as `fhshmsink`'s copy pool has by default.
const POOL_SLOTS: u64 = 16;

/// One run's outcome.
struct Run {
    wall: f64,
    producer_cpu: f64,
    consumer_cpu: f64,
    stalled: bool,
}

/// Buffers per run: enough bytes that the processes' start is a small part of a run.
fn count(size: u64) -> u64 {
    match size {
        0..=4095 => 200_000,
        4096..=262_143 => (2u64 << 30) / size,
        _ => ((8u64 << 30) / size).max(16),
    }
}

fn spawn(pipeline: &str) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["launch", "-q", pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Buffers of the run that measures a GStreamer row's start-up CPU.
const BASE: u64 = 16;

/// A run stalls when its consumer makes no progress (uses no CPU) for this long.
const STALL: Duration = Duration::from_secs(2);

/// CPU clock ticks `pid` has used so far (`/proc/PID/stat` utime + stime), if readable.
fn ticks(pid: libc::pid_t) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    // After the name: state is field 3, utime 14, stime 15.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Waits for `child` until `deadline`, or, with `stall`, until it has used no CPU for
/// [`STALL`] (a consumer that stopped making progress), then kills it: (exited by
/// itself with success, CPU seconds).
fn reap(child: &mut Child, deadline: Instant, stall: bool) -> (bool, f64) {
    let pid = child.id() as libc::pid_t;
    let mut killed = false;
    let (mut last, mut since) = (None, Instant::now());
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child; `status` and `ru` are live.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
            let ok = !killed && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            return (ok, t(ru.ru_utime) + t(ru.ru_stime));
        }
        if r < 0 {
            return (false, 0.0);
        }
        if stall {
            let now = ticks(pid);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        if !killed && (Instant::now() > deadline || (stall && since.elapsed() > STALL)) {
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The Python peer script and the repository root it runs in.
fn peers_script() -> PathBuf {
    PathBuf::from("scripts/bench_shm_peers.py")
}

/// Parses `key=value` words of a Python peer's summary line.
fn kv(out: &str, key: &str) -> Option<f64> {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// Runs a Python peer with `args` until `deadline`: its summary line, or `None` (a stall
/// or a failure).
fn python(a: &ShmArgs, args: &[String], deadline: Instant) -> std::io::Result<Option<String>> {
    let mut child = Command::new(&a.python)
        .arg(peers_script())
        .args(args)
        .env("PYTHONPATH", "python")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let (ok, _) = reap(&mut child, deadline, true);
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut out);
    }
    Ok((ok && out.contains("items=")).then_some(out))
}

fn run_once(a: &ShmArgs, peer: Peer, size: u64, n: u64) -> Result<Run, String> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.timeout);
    if peer == Peer::Spdl {
        let out = python(
            a,
            &["spdl".into(), size.to_string(), n.to_string()],
            deadline,
        )
        .map_err(|e| e.to_string())?;
        return Ok(match out {
            Some(o) => Run {
                wall: kv(&o, "wall").unwrap_or(f64::NAN),
                producer_cpu: kv(&o, "producer_cpu").unwrap_or(f64::NAN),
                consumer_cpu: kv(&o, "consumer_cpu").unwrap_or(f64::NAN),
                stalled: false,
            },
            None => Run {
                wall: start.elapsed().as_secs_f64(),
                producer_cpu: 0.0,
                consumer_cpu: 0.0,
                stalled: true,
            },
        });
    }
    let dir = std::env::temp_dir().join(format!("firehose-bench-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let sock = dir.join("s.sock");
    let _ = std::fs::remove_file(&sock);
    let sock = sock.display();
    let (sink, src) = if peer.stock() {
        (
            format!(
                "shmsink socket-path={sock} wait-for-connection=true shm-size={} sync=false",
                size * 8 + 65536
            ),
            format!("shmsrc socket-path={sock} is-live=true"),
        )
    } else {
        (
            format!("fhshmsink socket-path={sock} wait-for-connection=true"),
            format!("fhshmsrc socket-path={sock} {}", a.src_props),
        )
    };
    let mut producer =
        spawn(&format!("{} ! {sink}", producer(peer, size, n))).map_err(|e| e.to_string())?;
    while !std::path::Path::new(&sock.to_string()).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (ok, mut wall, mut consumer_cpu) = if peer == Peer::FirehosePython {
        let out = python(
            a,
            &["firehose".into(), sock.to_string(), n.to_string()],
            deadline,
        )
        .map_err(|e| e.to_string())?;
        match out {
            Some(o) => (
                true,
                kv(&o, "wall").unwrap_or(f64::NAN),
                kv(&o, "consumer_cpu").unwrap_or(f64::NAN),
            ),
            None => (false, 0.0, 0.0),
        }
    } else {
        // fhshmsrc hands packet batches to an element that reads them and splits them
        // into a list of datagrams for any other (identity would count datagrams): the
        // capsfilter says batches are read, so one buffer goes out per batch, as from
        // shmsrc.
        let batches = if matches!(peer, Peer::FirehosePool { .. }) {
            " ! capsfilter caps=application/x-firehose-packets"
        } else {
            ""
        };
        let mut consumer = spawn(&format!(
            "{src}{batches} ! identity eos-after={n} ! fakesink sync=false"
        ))
        .map_err(|e| e.to_string())?;
        let (ok, cpu) = reap(&mut consumer, deadline, true);
        (ok, start.elapsed().as_secs_f64(), cpu)
    };
    if !ok {
        wall = start.elapsed().as_secs_f64();
        consumer_cpu = 0.0;
    }
    // shmsink ends with an error once its consumer leaves; fhshmsink after its EOS.
    let (_, producer_cpu) = reap(
        &mut producer,
        Instant::now() + Duration::from_secs(5),
        false,
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Run {
        wall,
        producer_cpu,
        consumer_cpu,
        stalled: !ok,
    })
}

/// Whether `a.python` runs and imports `module`.
fn python_has(a: &ShmArgs, module: &str) -> bool {
    Command::new(&a.python)
        .args(["-c", &format!("import {module}")])
        .env("PYTHONPATH", "python")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[(v.len() - 1) / 2])
}

/// One row's medians.
struct Row {
    peer: Peer,
    size: u64,
    gbps: Option<f64>,
    bufs: Option<f64>,
    /// CPU µs per buffer, producer and consumer.
    pus: Option<f64>,
    cus: Option<f64>,
    pgb: Option<f64>,
    cgb: Option<f64>,
    stalls: u32,
    runs: u32,
}

/// Runs the benchmark; prints one line per run, then markdown tables of medians and of
/// CPU per buffer against stock `shmsink`.
pub fn shm(a: ShmArgs) -> i32 {
    let stock = gst::ElementFactory::find("shmsink").is_some();
    if !stock {
        eprintln!(
            "firehose: stock shmsink is not installed (apt-get install \
             gstreamer1.0-plugins-bad): its rows are left out"
        );
    }
    let py = python_has(&a, "numpy, firehose_shm") && peers_script().exists();
    if !py {
        eprintln!(
            "firehose: {} cannot import numpy and firehose_shm (run from the repository \
             root after scripts/setup): the Python rows are left out",
            a.python.display()
        );
    }
    let spdl = py && python_has(&a, "spdl.pipeline");
    if py && !spdl {
        eprintln!(
            "firehose: spdl is not installed in {} (pip install spdl): its row is left out",
            a.python.display()
        );
    }
    let mut rows = Vec::new();
    for &size in &a.sizes {
        for peer in Peer::ALL {
            let wanted = match peer {
                Peer::Firehose => true,
                Peer::FirehosePython => py,
                Peer::Stock => stock,
                Peer::Spdl => spdl,
                Peer::FirehosePool { .. } => testsrc_shape(size).is_some(),
                Peer::StockTestsrc { .. } => stock && testsrc_shape(size).is_some(),
            };
            if !wanted {
                continue;
            }
            let n = if peer.gstreamer_pair() {
                ((count(size) as f64 * a.scale) as u64).max(16)
            } else {
                ((count(size) as f64 * a.scale * a.python_share) as u64).max(16)
            };
            let gb = (size * n) as f64 / 1e9;
            let name = peer.name();
            let (mut rates, mut bufs, mut pcpu, mut ccpu, mut pus, mut cus, mut stalls) =
                (vec![], vec![], vec![], vec![], vec![], vec![], 0);
            for r in 1..=a.repeats {
                let run = match run_once(&a, peer, size, n) {
                    Ok(run) => run,
                    Err(e) => {
                        eprintln!("firehose: cannot run {name}: {e}");
                        return crate::launch::EXIT_ERROR;
                    }
                };
                println!(
                    "{name} {size} B × {n}, run {r}: {:.3} s, producer {:.2} s CPU, consumer \
                     {:.2} s CPU{}",
                    run.wall,
                    run.producer_cpu,
                    run.consumer_cpu,
                    if run.stalled { ", STALLED" } else { "" }
                );
                if run.stalled {
                    stalls += 1;
                    continue;
                }
                // The GStreamer processes' CPU includes their start-up (GStreamer's and
                // the plugins' initialisation): a run of BASE buffers measures it, and
                // only the difference is charged to the buffers. The Python peers
                // measure from their first item on already.
                let (mut p, mut c, mut m) = (run.producer_cpu, run.consumer_cpu, n);
                if peer.gstreamer_pair() {
                    match run_once(&a, peer, size, BASE) {
                        Ok(b) if !b.stalled => {
                            p = (p - b.producer_cpu).max(0.0);
                            c = (c - b.consumer_cpu).max(0.0);
                            m = n - BASE;
                            println!(
                                "  start-up run of {BASE}: producer {:.3} s CPU, consumer {:.3} \
                                 s CPU (subtracted)",
                                b.producer_cpu, b.consumer_cpu
                            );
                        }
                        _ => println!("  start-up run of {BASE} failed: nothing subtracted"),
                    }
                }
                let mgb = (size * m) as f64 / 1e9;
                rates.push(gb / run.wall);
                bufs.push(n as f64 / run.wall);
                pcpu.push(p / mgb);
                ccpu.push(c / mgb);
                pus.push(p / m as f64 * 1e6);
                cus.push(c / m as f64 * 1e6);
            }
            rows.push(Row {
                peer,
                size,
                gbps: median(rates),
                bufs: median(bufs),
                pus: median(pus),
                cus: median(cus),
                pgb: median(pcpu),
                cgb: median(ccpu),
                stalls,
                runs: a.repeats,
            });
        }
    }
    let f = |v: Option<f64>, p: usize| v.map_or("–".into(), |x| format!("{x:.p$}"));
    println!();
    println!(
        "| transport | buffer bytes | GB/s | buffers/s | producer CPU µs/buffer | consumer \
         CPU µs/buffer | producer CPU s/GB | consumer CPU s/GB | stalls |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
            r.peer.name(),
            r.size,
            f(r.gbps, 2),
            f(r.bufs, 0),
            f(r.pus, 2),
            f(r.cus, 2),
            f(r.pgb, 3),
            f(r.cgb, 3),
            r.stalls,
            r.runs
        );
    }
    println!();
    println!(
        "| transport | buffer bytes | producer CPU/buffer ÷ shmsink's | consumer CPU/buffer \
         ÷ shmsink's | both ÷ shmsink's | GB/s ÷ shmsink's | against |"
    );
    println!("|---|---|---|---|---|---|---|");
    let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if y > 0.0 => format!("{:.2}×", x / y),
        _ => "–".into(),
    };
    let sum = |r: &Row| Some(r.pus? + r.cus?);
    for r in rows.iter().filter(|r| !r.peer.stock()) {
        let base = r.peer.baseline();
        let Some(s) = rows.iter().find(|s| s.peer == base && s.size == r.size) else {
            continue;
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.peer.name(),
            r.size,
            ratio(r.pus, s.pus),
            ratio(r.cus, s.cus),
            ratio(sum(r), sum(s)),
            ratio(r.gbps, s.gbps),
            base.name()
        );
    }
    crate::launch::EXIT_OK
}
