//! `firehose bench spead`: SPEAD receivers side by side on loopback — spead2's own
//! receiver, `fhudpsrc ! speaddepay` (one buffer per heap), chunk mode
//! (`fhudpsrc ! fhdepay handler=spead`, heaps placed into chunks) and direct chunk mode
//! (`fhudpchunksrc handler=spead`, the kernel putting payloads straight into chunks).
//!
//! The sender runs in this process: `fakesrc ! speadpay ! fhudpsink rate=R`, one heap per
//! 1 MiB buffer, paced by fhudpsink. It is ours rather than spead2's on purpose: one
//! sender for every receiver, paced with UDP GSO so that it can offer more than the
//! receivers take on two cores, and its packets are byte-identical to spead2's sender's
//! (`elements/spead/tests/interop_engine.rs` checks that against spead2 itself).
//! Descriptors go in a heap of their own (`descriptors-separate`), as chunk receivers
//! need.
//!
//! Each receiver runs in a child process, so its CPU time (getrusage of the child,
//! spead2's threads included) is its own: spead2 via `tests/spead2/bench_recv.py`
//! (memory pool, one thread, the same socket buffer), ours via the hidden
//! `firehose bench-spead-recv`. For every packet size and offered rate the receivers
//! get the same step one after the other. Loss = 1 − complete heaps received / data
//! heaps sent.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::stats::names;
use gst::prelude::*;

use crate::args::{parse_list, parse_rate, parse_seconds, parse_size, Args};
use crate::bench::LOSSLESS;
use crate::benchproc::{
    command_line, gbps, highest_sustained, publish_report, self_command, ReceiverProcess,
};
use crate::cpulimit::{parse_cores, CpuLimit};
use crate::launch::{EXIT_ERROR, EXIT_OK};
use crate::session::{int_property, stats_property, BusEvent, Session};
use crate::statsline::counter;
use crate::{signals, sys, usage_error};

/// Socket receive buffer for every receiver.
pub const BUFFER_SIZE: u64 = 32 << 20;
/// What net.core.rmem_max must be for [`BUFFER_SIZE`] to be granted.
const RMEM_MAX: u64 = 64 << 20;
/// Time after the sender's EOS for queued datagrams to be read.
const DRAIN: Duration = Duration::from_millis(300);
/// Default heap payload: 1 MiB, the size spead2's benchmarks and MeerKAT use.
pub const DEFAULT_HEAP_SIZE: u32 = 1 << 20;
/// Default heaps per chunk in chunk mode: 8 MiB chunks of 1 MiB heaps.
pub const DEFAULT_HEAPS_PER_CHUNK: u32 = 8;
/// Where the repository (tests/spead2, .venv) was when this binary was built.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// How to make the venv the spead2 receiver needs.
const INSTALL: &str = "python3 -m venv .venv && .venv/bin/pip install spead2==4.5.1 numpy \
                       (in the repository root; or scripts/setup test)";

/// One receiver under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Receiver {
    /// spead2 4.5.1's receiver (Python, memory pool).
    Spead2,
    /// `fhudpsrc ! speaddepay ! fakesink`.
    Speaddepay,
    /// `fhudpsrc ! fhdepay handler=spead ! fakesink`.
    Chunk,
    /// `fhudpchunksrc handler=spead ! fakesink`: chunk mode receiving payloads straight
    /// into the chunks.
    Direct,
}

impl Receiver {
    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Receiver::Spead2 => "spead2",
            Receiver::Speaddepay => "speaddepay",
            Receiver::Chunk => "chunk",
            Receiver::Direct => "direct",
        }
    }

    /// Parses `spead2`, `speaddepay`, `chunk` or `direct`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "spead2" => Ok(Receiver::Spead2),
            "speaddepay" => Ok(Receiver::Speaddepay),
            "chunk" => Ok(Receiver::Chunk),
            "direct" => Ok(Receiver::Direct),
            _ => Err(format!(
                "receiver must be spead2, speaddepay, chunk or direct, not '{s}'"
            )),
        }
    }

    /// The element this receiver is built around, when it may be missing from a build.
    fn element(self) -> Option<&'static str> {
        match self {
            Receiver::Chunk => Some("fhdepay"),
            Receiver::Direct => Some("fhudpchunksrc"),
            _ => None,
        }
    }
}

/// True when a chunk-mode receiver can be built: its element and the `spead` handler
/// exist.
pub fn chunk_available(kind: Receiver) -> bool {
    kind.element()
        .is_none_or(|e| gst::ElementFactory::find(e).is_some())
        && firehose_core::handler::handler_names().contains(&"spead")
}

/// Options of `firehose bench spead`.
#[derive(Debug, Clone)]
pub struct SpeadBenchOptions {
    /// Length of each step.
    pub seconds: f64,
    /// Packet sizes (speadpay packet-size), bytes.
    pub sizes: Vec<u32>,
    /// Offered rates (bits/s of UDP payload) for every size; `None` = defaults.
    pub rates: Option<Vec<u64>>,
    /// Heap payload, bytes.
    pub heap_size: u32,
    /// Receivers to run, in this order.
    pub receivers: Vec<Receiver>,
    /// Python with spead2 (default: the repository's .venv).
    pub python: PathBuf,
    /// Also write the report here.
    pub out: Option<PathBuf>,
    /// Fewer, shorter steps.
    pub quick: bool,
    /// Each receiver process held to this many cores (cgroup quota); `None` = unlimited.
    pub cpu_limit: Option<f64>,
    /// `fhudpsrc coalesce-us` for our receivers; `None` = the element's default.
    pub coalesce_us: Option<u32>,
    /// Heaps per chunk in chunk mode.
    pub heaps_per_chunk: u32,
    /// `landing` of the direct receiver (`fhudpchunksrc`) and of `speaddepay`; `None` =
    /// the elements' default.
    pub landing: Option<String>,
}

impl Default for SpeadBenchOptions {
    fn default() -> Self {
        Self {
            seconds: 3.0,
            sizes: vec![8972, 1472],
            rates: None,
            heap_size: DEFAULT_HEAP_SIZE,
            receivers: vec![
                Receiver::Spead2,
                Receiver::Speaddepay,
                Receiver::Chunk,
                Receiver::Direct,
            ],
            python: PathBuf::from(REPO).join(".venv/bin/python3"),
            out: None,
            quick: false,
            cpu_limit: None,
            coalesce_us: None,
            heaps_per_chunk: DEFAULT_HEAPS_PER_CHUNK,
            landing: None,
        }
    }
}

/// Default offered rates: up to and past what a receiver on these VMs keeps up with
/// (spead2_bench: ≈7 Gb/s with 9000-byte packets; loopback carries ≈4 Gb/s of
/// 1472-byte packets).
pub fn default_rates(size: u32, quick: bool) -> Vec<u64> {
    let g = |x: f64| (x * 1e9) as u64;
    match (size >= 4000, quick) {
        (true, false) => vec![g(1.0), g(2.0), g(4.0), g(6.0), g(8.0), g(10.0)],
        (true, true) => vec![g(1.0), g(4.0)],
        (false, false) => vec![g(0.5), g(1.0), g(2.0), g(3.0), g(4.0)],
        (false, true) => vec![g(0.5), g(2.0)],
    }
}

/// One measured step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Packet size, bytes.
    pub size: u32,
    /// Receiver.
    pub receiver: Receiver,
    /// Rate asked of the sender, bits/s.
    pub asked: u64,
    /// Data heaps and UDP payload bytes the sender sent.
    pub sent: (u64, u64),
    /// Sender time from PLAYING to EOS.
    pub send_secs: f64,
    /// Complete heaps the receiver delivered.
    pub heaps: u64,
    /// Heaps the receiver saw incomplete (dropped or delivered as such).
    pub incomplete: u64,
    /// Heap payload bytes per heap.
    pub heap_size: u32,
    /// Receiver CPU seconds (user + system).
    pub cpu_s: f64,
    /// Kernel UDP InErrors during the step (whole host).
    pub kernel_drops: u64,
}

impl Step {
    /// Achieved sender rate, bits/s of UDP payload.
    pub fn offered_bps(&self) -> f64 {
        self.sent.1 as f64 * 8.0 / self.send_secs.max(1e-9)
    }

    /// Data heaps per second offered.
    pub fn offered_heaps(&self) -> f64 {
        self.sent.0 as f64 / self.send_secs.max(1e-9)
    }

    /// Complete heaps per second received (over the sender's time).
    pub fn received_heaps(&self) -> f64 {
        self.heaps as f64 / self.send_secs.max(1e-9)
    }

    /// 1 − received/sent heaps, clamped to [0, 1].
    pub fn loss(&self) -> f64 {
        if self.sent.0 == 0 {
            return 1.0;
        }
        (1.0 - self.heaps as f64 / self.sent.0 as f64).clamp(0.0, 1.0)
    }

    /// Receiver CPU seconds per GB (1e9 bytes) of heap payload received.
    pub fn cpu_per_gb(&self) -> f64 {
        self.cpu_s / (self.heaps as f64 * f64::from(self.heap_size) / 1e9).max(1e-12)
    }

    /// Loss below [`LOSSLESS`] with something sent.
    pub fn lossless(&self) -> bool {
        self.sent.0 > 0 && self.loss() < LOSSLESS
    }
}

/// Starts the child process for `receiver` and waits until it is bound.
fn spawn_receiver(
    opts: &SpeadBenchOptions,
    receiver: Receiver,
    limit: Option<&CpuLimit>,
) -> Result<ReceiverProcess, String> {
    let timeout = format!("{}", opts.seconds * 3.0 + 30.0);
    let heap = opts.heap_size.to_string();
    let buffer = BUFFER_SIZE.to_string();
    let coalesce = opts.coalesce_us.map(|n| n.to_string());
    let per_chunk = opts.heaps_per_chunk.to_string();
    let landing = opts.landing.clone();
    let cmd = match receiver {
        Receiver::Spead2 => {
            let script = PathBuf::from(REPO).join("tests/spead2/bench_recv.py");
            if !opts.python.exists() {
                return Err(format!(
                    "{} not found: the spead2 receiver needs a Python with spead2 4.5.1. \
                         Run: {INSTALL}; or pass --python, or leave spead2 out of --receivers",
                    opts.python.display()
                ));
            }
            let mut c = Command::new(&opts.python);
            c.arg(script).args([
                "--heap-size",
                &heap,
                "--buffer",
                &buffer,
                "--timeout",
                &timeout,
            ]);
            c
        }
        _ => {
            let mut c = self_command()?;
            c.args([
                "bench-spead-recv",
                "--kind",
                receiver.name(),
                "--heap-size",
                &heap,
                "--buffer-size",
                &buffer,
                "--heaps-per-chunk",
                &per_chunk,
                "--timeout",
                &timeout,
            ]);
            if let Some(n) = &coalesce {
                c.args(["--coalesce-us", n]);
            }
            if let Some(l) = &landing {
                c.args(["--landing", l]);
            }
            c
        }
    };
    ReceiverProcess::spawn(cmd, receiver.name(), limit).map_err(|e| {
        if receiver == Receiver::Spead2 {
            format!("{e}\n(spead2 receiver: is spead2 4.5.1 installed? {INSTALL})")
        } else {
            e
        }
    })
}

fn num<T: std::str::FromStr + Default>(kv: &BTreeMap<String, String>, key: &str) -> T {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_default()
}

/// Why a step did not produce a measurement.
enum StepError {
    Interrupted,
    Failed(String),
}

impl From<String> for StepError {
    fn from(s: String) -> Self {
        StepError::Failed(s)
    }
}

/// The sender's description for `heaps` heaps to `port`.
fn sender_description(
    opts: &SpeadBenchOptions,
    size: u32,
    rate: u64,
    heaps: u64,
    port: u16,
) -> String {
    format!(
        "fakesrc num-buffers={heaps} sizetype=fixed sizemax={} filltype=nothing \
         ! speadpay name=speadpay packet-size={size} descriptors-separate=true \
         ! fhudpsink name=fhudpsink host=127.0.0.1 port={port} rate={rate}",
        opts.heap_size
    )
}

fn run_step(
    opts: &SpeadBenchOptions,
    limit: Option<&CpuLimit>,
    receiver: Receiver,
    size: u32,
    rate: u64,
) -> Result<Step, StepError> {
    let rx = spawn_receiver(opts, receiver, limit)?;
    let heaps = ((rate as f64 * opts.seconds) / (f64::from(opts.heap_size) * 8.0))
        .round()
        .max(2.0) as u64;
    let snmp0 = sys::UdpCounters::read().unwrap_or_default();
    let mut sender =
        Session::from_description(&sender_description(opts, size, rate, heaps, rx.port))?;
    sender.start()?;
    let cutoff = Instant::now() + Duration::from_secs_f64(opts.seconds * 2.0 + 1.0);
    loop {
        match sender.poll(Duration::from_millis(50)) {
            Some(BusEvent::Eos) => break,
            Some(BusEvent::Error(e)) => return Err(StepError::Failed(e)),
            None => {}
        }
        if signals::count() > 0 {
            return Err(StepError::Interrupted);
        }
        // A sender that cannot reach the asked rate is stopped after twice the planned
        // time; what it did send is the offered load.
        if Instant::now() >= cutoff {
            sender.send_eos();
            if let Some(BusEvent::Error(e)) = sender.wait_end(Duration::from_secs(3)) {
                return Err(StepError::Failed(e));
            }
            break;
        }
    }
    let send_secs = sender.elapsed().as_secs_f64();
    sender.refresh_stats();
    sender.stop();
    let field = |element: &str, name: &str| -> Result<u64, String> {
        sender
            .board
            .get(element)
            .map(|s| counter(s, name))
            .ok_or_else(|| format!("{element} reported no statistics"))
    };
    let sent = (
        field("speadpay", names::HEAPS)?,
        field("fhudpsink", names::BYTES_SENT)?,
    );
    std::thread::sleep(DRAIN);
    let kv = rx.finish()?;
    let snmp = sys::UdpCounters::read().unwrap_or_default().since(&snmp0);
    Ok(Step {
        size,
        receiver,
        asked: rate,
        sent,
        send_secs,
        heaps: num(&kv, "heaps"),
        incomplete: num(&kv, "incomplete"),
        heap_size: opts.heap_size,
        cpu_s: num(&kv, "cpu_s"),
        kernel_drops: snmp.in_errors,
    })
}

/// `firehose bench spead …`: parses the options and runs.
pub fn cmd(mut args: Args) -> i32 {
    let mut opts = SpeadBenchOptions::default();
    let mut seconds = None;
    let mut receivers_given = false;
    while let Some(flag) = args.next_flag() {
        let v = |args: &mut Args| args.value(&flag);
        let r = match flag.name.as_str() {
            "--seconds" => v(&mut args)
                .and_then(|x| parse_seconds(&x))
                .map(|x| seconds = Some(x)),
            "--sizes" => v(&mut args)
                .and_then(|x| parse_list(&x, parse_size))
                .map(|x| opts.sizes = x),
            "--rates" => v(&mut args)
                .and_then(|x| parse_list(&x, parse_rate))
                .map(|x| opts.rates = Some(x)),
            "--heap-size" => v(&mut args).and_then(|x| {
                x.parse::<u32>()
                    .ok()
                    .filter(|&n| (1..=1 << 30).contains(&n))
                    .map(|n| opts.heap_size = n)
                    .ok_or_else(|| format!("--heap-size '{x}' must be 1 to 2^30 bytes"))
            }),
            "--receivers" => v(&mut args)
                .and_then(|x| parse_list(&x, Receiver::parse))
                .map(|x| {
                    receivers_given = true;
                    opts.receivers = x
                }),
            "--python" => v(&mut args).map(|x| opts.python = PathBuf::from(x)),
            "--out" => v(&mut args).map(|x| opts.out = Some(PathBuf::from(x))),
            "--quick" => {
                opts.quick = true;
                Ok(())
            }
            "--cpu-limit" => v(&mut args)
                .and_then(|x| parse_cores(&x))
                .map(|x| opts.cpu_limit = Some(x)),
            "--coalesce-us" => v(&mut args)
                .and_then(|x| parse_coalesce(&x))
                .map(|n| opts.coalesce_us = Some(n)),
            "--heaps-per-chunk" => v(&mut args)
                .and_then(|x| parse_heaps_per_chunk(&x))
                .map(|n| opts.heaps_per_chunk = n),
            "--landing" => v(&mut args)
                .and_then(|x| parse_landing(&x))
                .map(|l| opts.landing = Some(l)),
            other => Err(format!("unknown bench spead option '{other}'")),
        };
        if let Err(e) = r {
            return usage_error(&e);
        }
    }
    if let Some(&bad) = opts.sizes.iter().find(|&&s| s < 64) {
        return usage_error(&format!("packet size {bad} is below SPEAD's minimum of 64"));
    }
    opts.seconds = seconds.unwrap_or(if opts.quick { 1.0 } else { 3.0 });
    run(&opts, receivers_given)
}

/// Runs the benchmark; returns the exit status. Without `--receivers`, a chunk-mode
/// receiver is left out (and said so) when its element or the `spead` handler is
/// missing.
pub fn run(opts: &SpeadBenchOptions, receivers_given: bool) -> i32 {
    let _ = signals::install();
    let rmem = sys::ensure_sysctl_at_least("net.core.rmem_max", RMEM_MAX);
    eprintln!("bench: {rmem}");
    let mut opts = opts.clone();
    let mut notes = Vec::new();
    for kind in [Receiver::Chunk, Receiver::Direct] {
        if !opts.receivers.contains(&kind) || chunk_available(kind) {
            continue;
        }
        let element = kind.element().unwrap_or_default();
        if receivers_given {
            eprintln!(
                "bench: {} needs {element} with the spead handler, which this build lacks",
                kind.name()
            );
            return EXIT_ERROR;
        }
        opts.receivers.retain(|&r| r != kind);
        notes.push(format!(
            "{} left out: this build has no {element} / spead handler",
            kind.name()
        ));
    }
    let limit = match opts.cpu_limit.map(CpuLimit::create).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bench: {e}");
            return EXIT_ERROR;
        }
    };
    if let Some(l) = &limit {
        notes.push(format!(
            "CPU budget: {}; compare the highest lossless rates. A receiver using its \
             whole budget shows CPU s/GB ≈ budget ÷ rate, so compare CPU per GB in a run \
             without --cpu-limit",
            l.describe()
        ));
    }
    let started = Instant::now();
    let mut steps = Vec::new();
    let mut failure = None;
    'all: for &size in &opts.sizes {
        let rates = opts
            .rates
            .clone()
            .unwrap_or_else(|| default_rates(size, opts.quick));
        for &rate in &rates {
            for &receiver in &opts.receivers {
                match run_step(&opts, limit.as_ref(), receiver, size, rate) {
                    Ok(step) => {
                        eprintln!(
                            "bench: {size} B, {:>10} asked {:.2} Gb/s: offered {:.2} Gb/s = {:.0} heaps/s, received {:.0} heaps/s, loss {:.4} %, incomplete {}, kernel drops {}, {:.2} CPU s/GB",
                            receiver.name(),
                            rate as f64 / 1e9,
                            step.offered_bps() / 1e9,
                            step.offered_heaps(),
                            step.received_heaps(),
                            step.loss() * 100.0,
                            step.incomplete,
                            step.kernel_drops,
                            step.cpu_per_gb()
                        );
                        steps.push(step);
                    }
                    Err(StepError::Interrupted) => {
                        failure = Some("interrupted".to_string());
                        break 'all;
                    }
                    Err(StepError::Failed(e)) => {
                        failure = Some(format!(
                            "{} at {size} B, {:.2} Gb/s failed:\n{e}",
                            receiver.name(),
                            rate as f64 / 1e9
                        ));
                        break 'all;
                    }
                }
            }
        }
    }
    let report = report(
        &opts,
        &steps,
        &rmem,
        &notes,
        started.elapsed(),
        failure.as_deref(),
    );
    publish_report(&report, opts.out.as_deref(), failure.as_deref())
}

/// Parses `--coalesce-us` (the `fhudpsrc` property's range).
fn parse_coalesce(x: &str) -> Result<u32, String> {
    x.parse::<u32>()
        .ok()
        .filter(|&n| n <= 100_000)
        .ok_or_else(|| format!("--coalesce-us '{x}' must be 0 to 100000 microseconds"))
}

/// Parses `--landing` (`fhudpchunksrc` and `speaddepay` `landing`).
fn parse_landing(x: &str) -> Result<String, String> {
    match x {
        "auto" | "on" | "off" => Ok(x.to_string()),
        _ => Err(format!("--landing '{x}' must be auto, on or off")),
    }
}

/// Parses `--heaps-per-chunk`.
fn parse_heaps_per_chunk(x: &str) -> Result<u32, String> {
    x.parse::<u32>()
        .ok()
        .filter(|n| (1..=4096).contains(n))
        .ok_or_else(|| format!("--heaps-per-chunk '{x}' must be 1 to 4096"))
}

/// The receivers' descriptions, for the report.
fn receiver_text(r: Receiver, setup: &RecvSetup) -> String {
    let heap_size = setup.heap_size;
    match r {
        Receiver::Spead2 => format!(
            "spead2: `tests/spead2/bench_recv.py` (spead2 4.5.1 recv.Stream, 1 thread, \
             MemoryPool of {heap_size}-byte buffers, max_heaps=4, Python loop counting heaps)"
        ),
        _ => format!("{}: `{}`", r.name(), recv_description(r, setup)),
    }
}

/// The markdown report.
pub fn report(
    opts: &SpeadBenchOptions,
    steps: &[Step],
    rmem: &str,
    notes: &[String],
    took: Duration,
    failure: Option<&str>,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "## firehose bench spead — {}\n", sys::utc_now());
    let _ = writeln!(r, "- command: `{}`", command_line());
    let _ = writeln!(
        r,
        "- host: Linux {}, {} CPUs, {}; loopback 127.0.0.1; took {:.0} s",
        sys::kernel_release(),
        sys::cpus(),
        gst::version_string(),
        took.as_secs_f64()
    );
    let _ = writeln!(
        r,
        "- sender (this process): `fakesrc num-buffers=N sizetype=fixed sizemax={} filltype=nothing ! speadpay packet-size=S descriptors-separate=true ! fhudpsink rate=R` — SPEAD-64-40 heaps of {} bytes (one item), packets byte-identical to spead2's sender; {:.1} s per step",
        opts.heap_size, opts.heap_size, opts.seconds
    );
    let _ = writeln!(
        r,
        "- receivers (one child process each, one after the other, socket buffer {BUFFER_SIZE} bytes; {rmem}):"
    );
    for &rx in &opts.receivers {
        let _ = writeln!(r, "  - {}", receiver_text(rx, &RecvSetup::of(opts)));
    }
    for n in notes {
        let _ = writeln!(r, "- note: {n}");
    }
    let _ = writeln!(
        r,
        "- loss = 1 − complete heaps received / data heaps sent; incomplete = heaps the receiver saw but could not complete; kernel drops = Δ Udp InErrors (host-wide); CPU = receiver user+sys per GB (1e9 bytes) of heap payload received; lossless = loss < {} %; highest lossless = the highest rate with every lower step lossless too\n",
        LOSSLESS * 100.0
    );
    if let Some(f) = failure {
        let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
    }
    let _ = writeln!(
        r,
        "| packet | receiver | asked Gb/s | offered Gb/s | offered heaps/s | received heaps/s | loss % | incomplete | kernel drops | CPU s/GB |"
    );
    let _ = writeln!(r, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in steps {
        let _ = writeln!(
            r,
            "| {} B | {} | {} | {} | {:.0} | {:.0} | {:.4} | {} | {} | {:.2} |",
            s.size,
            s.receiver.name(),
            gbps(s.asked as f64),
            gbps(s.offered_bps()),
            s.offered_heaps(),
            s.received_heaps(),
            s.loss() * 100.0,
            s.incomplete,
            s.kernel_drops,
            s.cpu_per_gb()
        );
    }
    r.push('\n');
    r.push_str(&summary(opts, steps));
    r
}

/// One receiver's figures at one packet size.
struct Figures {
    /// Highest lossless offered heap rate (and its step), if any step was lossless.
    best: Option<(f64, f64)>,
    /// Lossless at the highest rate it was offered: `best` is a lower bound.
    top_lossless: bool,
    /// CPU s/GB at the common rate.
    cpu: Option<f64>,
}

/// Per packet size and receiver: the highest lossless offered heap rate and the CPU
/// per GB at the highest asked rate every receiver was lossless at; then each of our
/// receivers against spead2 when it ran.
fn summary(opts: &SpeadBenchOptions, steps: &[Step]) -> String {
    let mut r = String::new();
    let _ = writeln!(
        r,
        "| packet | receiver | highest lossless heaps/s (Gb/s offered) | CPU s/GB at common rate |"
    );
    let _ = writeln!(r, "|---:|---|---:|---:|");
    let mut ratios = String::new();
    for &size in &opts.sizes {
        let at: Vec<&Step> = steps.iter().filter(|s| s.size == size).collect();
        if at.is_empty() {
            continue;
        }
        let rates: Vec<u64> = {
            let mut v: Vec<u64> = at.iter().map(|s| s.asked).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        // The highest asked rate at which every receiver that ran it was lossless; else
        // the lowest rate (marked lossy).
        let common = rates
            .iter()
            .rev()
            .find(|&&rate| at.iter().filter(|s| s.asked == rate).all(|s| s.lossless()))
            .map(|&rate| (rate, true))
            .or_else(|| rates.first().map(|&rate| (rate, false)));
        let mut figures = Vec::new();
        for &rx in &opts.receivers {
            let mine: Vec<&&Step> = at.iter().filter(|s| s.receiver == rx).collect();
            if mine.is_empty() {
                continue;
            }
            let best =
                highest_sustained(mine.iter().copied().copied(), |s| s.asked, Step::lossless);
            let top_lossless = mine
                .iter()
                .max_by_key(|s| s.asked)
                .is_some_and(|s| s.lossless());
            let rate_text = match best {
                Some(b) => format!(
                    "{}{:.0} ({})",
                    if top_lossless { "≥ " } else { "" },
                    b.offered_heaps(),
                    gbps(b.offered_bps())
                ),
                None => "none".into(),
            };
            let at_common = common.and_then(|(rate, lossless)| {
                mine.iter()
                    .find(|s| s.asked == rate)
                    .map(|s| (s.cpu_per_gb(), rate, lossless))
            });
            let cpu_text = at_common
                .map(|(cpu, rate, lossless)| {
                    format!(
                        "{cpu:.2} at {} Gb/s{}",
                        gbps(rate as f64),
                        if lossless { "" } else { " (lossy)" }
                    )
                })
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(r, "| {size} B | {} | {rate_text} | {cpu_text} |", rx.name());
            figures.push((
                rx,
                Figures {
                    best: best.map(|b| (b.offered_heaps(), b.offered_bps())),
                    top_lossless,
                    cpu: at_common.map(|c| c.0),
                },
            ));
        }
        let Some((_, base)) = figures.iter().find(|(rx, _)| *rx == Receiver::Spead2) else {
            continue;
        };
        for (rx, f) in figures.iter().filter(|(rx, _)| *rx != Receiver::Spead2) {
            let _ = writeln!(
                ratios,
                "| {size} B | {} / spead2 | {} | {} |",
                rx.name(),
                rate_ratio(f, base),
                match (f.cpu, base.cpu) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
                    _ => "-".into(),
                }
            );
        }
    }
    if !ratios.is_empty() {
        let _ = writeln!(
            r,
            "\n| packet | against spead2 | highest lossless rate | CPU per GB at common rate |"
        );
        let _ = writeln!(r, "|---:|---|---:|---:|");
        r.push_str(&ratios);
    }
    r
}

/// `ours`'s highest lossless rate over `base`'s, with "≥" or "≤" where a receiver was
/// lossless at the highest rate offered (its own limit was not reached).
fn rate_ratio(ours: &Figures, base: &Figures) -> String {
    match (ours.best, base.best) {
        (Some((a, _)), Some((b, _))) if b > 0.0 => {
            let bound = match (ours.top_lossless, base.top_lossless) {
                (true, false) => "≥ ",
                (false, true) => "≤ ",
                // Both capped by the sender: the ratio says nothing.
                (true, true) => return "- (both lossless at every rate)".into(),
                (false, false) => "",
            };
            format!("{bound}{:.2}×", a / b)
        }
        (Some(_), None) => "spead2 lost heaps at every rate".into(),
        _ => "-".into(),
    }
}

/// How one of our receivers is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvSetup {
    /// Heap payload, bytes (chunk mode's slot size).
    pub heap_size: u32,
    /// `fhudpsrc buffer-size`.
    pub buffer_size: u64,
    /// `fhudpsrc coalesce-us`, if not the default.
    pub coalesce_us: Option<u32>,
    /// Chunk mode's `slots-per-chunk`.
    pub heaps_per_chunk: u32,
    /// The direct receiver's and speaddepay's `landing`, if not the default.
    pub landing: Option<String>,
}

impl RecvSetup {
    /// The setup `opts` asks for.
    pub fn of(opts: &SpeadBenchOptions) -> Self {
        Self {
            heap_size: opts.heap_size,
            buffer_size: BUFFER_SIZE,
            coalesce_us: opts.coalesce_us,
            heaps_per_chunk: opts.heaps_per_chunk,
            landing: opts.landing.clone(),
        }
    }
}

/// The pipeline of one of our receivers.
pub fn recv_description(kind: Receiver, setup: &RecvSetup) -> String {
    let RecvSetup {
        heap_size,
        buffer_size,
        coalesce_us,
        heaps_per_chunk,
        landing,
    } = setup;
    let mut src = format!("fhudpsrc name=src address=127.0.0.1 port=0 buffer-size={buffer_size}");
    if let Some(n) = coalesce_us {
        src.push_str(&format!(" coalesce-us={n}"));
    }
    let sink = "fakesink name=sink sync=false async=false enable-last-sample=false";
    let chunks = format!(
        "handler=spead handler-config=spead,offset=1 slot-size={heap_size} \
         slots-per-chunk={heaps_per_chunk}"
    );
    let landing = landing
        .as_ref()
        .map_or(String::new(), |l| format!(" landing={l}"));
    match kind {
        Receiver::Chunk => format!("{src} ! fhdepay name=depay {chunks} ! {sink}"),
        // One element receives and places: it is both `src` and `depay`.
        Receiver::Direct => format!(
            "{} {chunks}{landing} ! {sink}",
            src.replacen("fhudpsrc name=src", "fhudpchunksrc name=src", 1),
        ),
        _ => format!("{src} ! speaddepay name=depay{landing} ! {sink}"),
    }
}

/// `firehose bench-spead-recv` (hidden): one of our receivers in its own process.
///
/// Protocol on stdout: `ready port=P` once bound; after `stop` on stdin (or EOF, or
/// `--timeout`): `result heaps=H bytes=B incomplete=I packets=P cpu_s=C wall_s=W`;
/// `error <text>` instead when something fails (exit status 1).
pub fn cmd_recv(mut args: Args) -> i32 {
    let mut kind = None;
    let mut setup = RecvSetup::of(&SpeadBenchOptions::default());
    let mut timeout = Duration::from_secs(60);
    while let Some(flag) = args.next_flag() {
        let v = args.value(&flag);
        let r = match flag.name.as_str() {
            "--kind" => v.and_then(|x| Receiver::parse(&x)).and_then(|k| match k {
                Receiver::Spead2 => Err("--kind spead2 runs as tests/spead2/bench_recv.py".into()),
                k => {
                    kind = Some(k);
                    Ok(())
                }
            }),
            "--heap-size" => v.and_then(|x| {
                x.parse()
                    .map(|n| setup.heap_size = n)
                    .map_err(|_| format!("--heap-size '{x}' is not a byte count"))
            }),
            "--buffer-size" => v.and_then(|x| {
                x.parse()
                    .map(|n| setup.buffer_size = n)
                    .map_err(|_| format!("--buffer-size '{x}' is not a byte count"))
            }),
            "--timeout" => v
                .and_then(|x| parse_seconds(&x))
                .map(|s| timeout = Duration::from_secs_f64(s)),
            "--coalesce-us" => v
                .and_then(|x| parse_coalesce(&x))
                .map(|n| setup.coalesce_us = Some(n)),
            "--heaps-per-chunk" => v
                .and_then(|x| parse_heaps_per_chunk(&x))
                .map(|n| setup.heaps_per_chunk = n),
            "--landing" => v
                .and_then(|x| parse_landing(&x))
                .map(|l| setup.landing = Some(l)),
            other => Err(format!("unknown bench-spead-recv option '{other}'")),
        };
        if let Err(e) = r {
            return usage_error(&e);
        }
    }
    let Some(kind) = kind else {
        return usage_error("bench-spead-recv needs --kind speaddepay|chunk|direct");
    };
    // The parent decides when we stop; a terminal Ctrl-C reaches us too, so ignore it.
    let _ = signals::ignore_interrupt();
    match recv(kind, &setup, timeout) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            println!("error {}", e.replace('\n', " | "));
            EXIT_ERROR
        }
    }
}

fn recv(kind: Receiver, setup: &RecvSetup, timeout: Duration) -> Result<(), String> {
    let heap_size = setup.heap_size;
    let mut session = Session::from_description(&recv_description(kind, setup))?;
    let src = session.element("src").expect("named in the description");
    let depay = session
        .element(if kind == Receiver::Direct {
            "src"
        } else {
            "depay"
        })
        .expect("named in the description");
    // speaddepay counts every heap, the descriptor heap too: count the data heaps (the
    // buffers of exactly one heap payload) where they leave it. fhdepay's `heaps` are
    // data heaps already (its handler drops descriptor heaps).
    let data_heaps = Arc::new(AtomicU64::new(0));
    if kind == Receiver::Speaddepay {
        let sink = session.element("sink").expect("named in the description");
        let pad = sink.static_pad("sink").expect("fakesink has a sink pad");
        let count = data_heaps.clone();
        let size = heap_size as usize;
        pad.add_probe(
            gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
            move |_, info| {
                let n = match (info.buffer(), info.buffer_list()) {
                    (Some(b), _) => u64::from(b.size() == size),
                    (_, Some(l)) => l.iter().filter(|b| b.size() == size).count() as u64,
                    _ => 0,
                };
                count.fetch_add(n, Ordering::Relaxed);
                gst::PadProbeReturn::Ok
            },
        );
    }
    session.start()?;
    let cpu0 = sys::cpu_seconds();
    let t0 = Instant::now();
    let port = loop {
        match int_property(&src, "port") {
            Some(p) if p > 0 => break p,
            // Generous: a loaded CI machine can take seconds to start a pipeline.
            _ if t0.elapsed() > Duration::from_secs(20) => {
                return Err("fhudpsrc did not report the port it bound".into())
            }
            _ => {
                if let Some(BusEvent::Error(e)) = session.poll(Duration::from_millis(20)) {
                    return Err(e);
                }
            }
        }
    };
    println!("ready port={port}");
    let _ = std::io::stdout().flush();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Any line or EOF means stop: the parent either says so or went away.
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            stop.store(true, Ordering::SeqCst);
        });
    }
    while !stop.load(Ordering::SeqCst) && t0.elapsed() < timeout {
        // EOS (the stop heap) is expected: keep counting until told to stop.
        if let Some(BusEvent::Error(e)) = session.poll(Duration::from_millis(50)) {
            return Err(e);
        }
    }
    let read = || stats_property(&depay);
    let heaps = |s: &Option<gst::Structure>| match kind {
        Receiver::Speaddepay => data_heaps.load(Ordering::Relaxed),
        _ => s.as_ref().map_or(0, |s| counter(s, names::HEAPS)),
    };
    // Datagrams still queued in the socket buffer are not lost: wait until the count
    // stops moving (bounded).
    let settle = Instant::now() + Duration::from_secs(2);
    let mut last = heaps(&read());
    while Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(50));
        let now = heaps(&read());
        if now == last {
            break;
        }
        last = now;
    }
    let cpu = sys::cpu_seconds() - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let stats = read();
    let n = heaps(&stats);
    let s = stats.ok_or("the depayloader has no stats")?;
    println!(
        "result heaps={n} bytes={} incomplete={} packets={} cpu_s={cpu:.4} wall_s={wall:.3}",
        counter(&s, names::BYTES),
        counter(&s, names::HEAPS_INCOMPLETE),
        counter(&s, names::PACKETS),
    );
    let _ = std::io::stdout().flush();
    session.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(receiver: Receiver, asked: u64, sent: u64, heaps: u64, cpu: f64) -> Step {
        Step {
            size: 8972,
            receiver,
            asked,
            sent: (sent, sent * (1 << 20)),
            send_secs: 1.0,
            heaps,
            incomplete: sent - heaps,
            heap_size: 1 << 20,
            cpu_s: cpu,
            kernel_drops: 0,
        }
    }

    #[test]
    fn figures_and_summary() {
        let s = step(Receiver::Spead2, 1_000_000_000, 1000, 999, 0.5);
        assert!(!s.lossless());
        assert!((s.loss() - 0.001).abs() < 1e-12);
        assert!((s.cpu_per_gb() - 0.5 / (999.0 * 1048576.0 / 1e9)).abs() < 1e-9);
        let g = 1_000_000_000;
        let opts = SpeadBenchOptions {
            sizes: vec![8972],
            receivers: vec![Receiver::Spead2, Receiver::Speaddepay],
            ..Default::default()
        };
        let steps = vec![
            step(Receiver::Spead2, g, 119, 119, 0.2),
            step(Receiver::Speaddepay, g, 119, 119, 0.1),
            step(Receiver::Spead2, 4 * g, 477, 300, 0.6),
            step(Receiver::Speaddepay, 4 * g, 477, 477, 0.3),
        ];
        let t = summary(&opts, &steps);
        assert!(
            t.contains("| 8972 B | spead2 | 119 (1.00) | 1.60 at 1.00 Gb/s |"),
            "{t}"
        );
        assert!(t.contains("| 8972 B | speaddepay | ≥ 477 (4.00) |"), "{t}");
        // speaddepay kept up at 4 Gb/s where spead2 did not: a lower bound; CPU at the
        // common rate (1 Gb/s): 0.1 / 0.2.
        assert!(
            t.contains("| 8972 B | speaddepay / spead2 | ≥ 4.01× | 0.50× |"),
            "{t}"
        );
    }

    #[test]
    fn rate_ratio_bounds() {
        let f = |best: Option<f64>, top_lossless| Figures {
            best: best.map(|b| (b, b)),
            top_lossless,
            cpu: None,
        };
        assert_eq!(
            rate_ratio(&f(Some(300.0), false), &f(Some(200.0), false)),
            "1.50×"
        );
        assert_eq!(
            rate_ratio(&f(Some(300.0), true), &f(Some(200.0), false)),
            "≥ 1.50×"
        );
        assert_eq!(
            rate_ratio(&f(Some(100.0), false), &f(Some(200.0), true)),
            "≤ 0.50×"
        );
        assert!(rate_ratio(&f(Some(1.0), true), &f(Some(1.0), true)).starts_with("- "));
        assert_eq!(rate_ratio(&f(None, false), &f(Some(1.0), false)), "-");
    }

    #[test]
    fn descriptions() {
        let mut setup = RecvSetup::of(&SpeadBenchOptions::default());
        let d = recv_description(Receiver::Chunk, &setup);
        assert!(d.contains("fhdepay name=depay handler=spead"), "{d}");
        assert!(d.contains("slot-size=1048576 slots-per-chunk=8"), "{d}");
        assert!(!d.contains("coalesce-us"), "{d}");
        setup.coalesce_us = Some(0);
        setup.heaps_per_chunk = 1;
        let d = recv_description(Receiver::Chunk, &setup);
        assert!(d.contains("slots-per-chunk=1 "), "{d}");
        assert!(parse_heaps_per_chunk("0").is_err());
        let d = recv_description(Receiver::Speaddepay, &setup);
        assert!(
            d.contains("fhudpsrc name=src") && d.contains(" coalesce-us=0 "),
            "{d}"
        );
        assert_eq!(parse_coalesce("250"), Ok(250));
        assert!(parse_coalesce("100001")
            .unwrap_err()
            .contains("0 to 100000"));
        let s = sender_description(&SpeadBenchOptions::default(), 1472, 1_000_000_000, 10, 9);
        assert!(
            s.contains("packet-size=1472") && s.contains("port=9"),
            "{s}"
        );
        assert_eq!(Receiver::parse("chunk"), Ok(Receiver::Chunk));
        assert_eq!(Receiver::parse("direct"), Ok(Receiver::Direct));
        assert!(parse_landing("sometimes").is_err());
        setup.landing = Some("on".into());
        assert!(recv_description(Receiver::Direct, &setup).contains(" landing=on !"));
        assert!(recv_description(Receiver::Speaddepay, &setup)
            .contains("speaddepay name=depay landing=on !"));
        setup.landing = None;
        let d = recv_description(Receiver::Direct, &setup);
        assert!(
            d.starts_with("fhudpchunksrc name=src address=127.0.0.1 port=0")
                && d.contains(" handler=spead ")
                && !d.contains("fhdepay"),
            "{d}"
        );
        assert!(Receiver::parse("x").is_err());
    }
}
