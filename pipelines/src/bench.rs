//! `firehose bench udp`: stock `udpsrc` against `fhudpsrc` on loopback, side by side.
//!
//! The paced sender (`fhtestsrc ! fhudpsink rate=R`) runs in this process; each receiver
//! runs in a child process (`firehose bench-recv`) so its CPU time is its own. For every
//! payload size and offered rate, both receivers get the same step one after the other.
//! Loss = 1 − received/sent, where "sent" is fhudpsink's `packets-sent`; kernel drops
//! (Udp InErrors in /proc/net/snmp) are reported beside it — they are part of the loss.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::benchproc::{
    command_line, gbps, highest_sustained, publish_report, self_command, ReceiverProcess,
};
use crate::benchrecv::Kind;
use crate::cpulimit::CpuLimit;
use crate::launch::EXIT_ERROR;
use crate::session::{BusEvent, Session};
use crate::statsline::throughput;
use crate::{signals, sys};

/// Loss below this fraction counts as lossless (0.01 %).
pub const LOSSLESS: f64 = 1e-4;
/// Socket receive buffer given to both receivers.
pub const BUFFER_SIZE: u64 = 32 << 20;
/// What net.core.rmem_max must be for [`BUFFER_SIZE`] to be granted.
const RMEM_MAX: u64 = 64 << 20;
/// Time after the sender's EOS for queued datagrams to be read.
const DRAIN: Duration = Duration::from_millis(300);

/// Options of `firehose bench udp`.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Length of each step.
    pub seconds: f64,
    /// Payload sizes, bytes.
    pub sizes: Vec<u32>,
    /// Offered rates (bits/s) for every size; `None` = defaults per size.
    pub rates: Option<Vec<u64>>,
    /// Also write the report here.
    pub out: Option<PathBuf>,
    /// Fewer, shorter steps (a smoke test).
    pub quick: bool,
    /// Each receiver process held to this many cores (cgroup quota); `None` = unlimited.
    pub cpu_limit: Option<f64>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            seconds: 3.0,
            sizes: vec![8972, 1472],
            rates: None,
            out: None,
            quick: false,
            cpu_limit: None,
        }
    }
}

/// Default offered rates for a payload size: up to and past what loopback carries
/// (≈4.2 Gb/s with 1472-byte, ≈15 Gb/s with jumbo payloads on the reference VMs), so the
/// receivers' limits show; a sender that falls short shows as a lower offered rate.
pub fn default_rates(size: u32, quick: bool) -> Vec<u64> {
    let g = |x: f64| (x * 1e9) as u64;
    match (size >= 4000, quick) {
        (true, false) => vec![g(1.0), g(2.0), g(4.0), g(8.0), g(12.0), g(16.0), g(20.0)],
        (true, true) => vec![g(1.0), g(4.0)],
        (false, false) => vec![g(0.5), g(1.0), g(2.0), g(3.0), g(4.0), g(5.0), g(6.0)],
        (false, true) => vec![g(0.5), g(2.0)],
    }
}

/// One measured step: one receiver, one size, one offered rate.
#[derive(Debug, Clone)]
pub struct Step {
    /// Payload size, bytes.
    pub size: u32,
    /// Receiver.
    pub kind: Kind,
    /// Rate asked of the sender, bits/s.
    pub asked: u64,
    /// Packets and bytes the sender sent.
    pub sent: (u64, u64),
    /// Sender time from PLAYING to EOS.
    pub send_secs: f64,
    /// Packets and bytes the receiver delivered.
    pub received: (u64, u64),
    /// Receiver CPU seconds (user + system).
    pub cpu_s: f64,
    /// Busy CPU seconds of the whole machine while the sender ran (sender, receiver,
    /// softirq work no process is charged for, and anything else running).
    pub host_cpu_s: f64,
    /// Kernel UDP InErrors during the step (whole host).
    pub kernel_drops: u64,
    /// Drops counted by the element itself (pool, truncated; fhdpdksrc: the port's).
    pub element_drops: u64,
    /// Pool memory the receiver used ("hugepage", "system"; "-" for udpsrc).
    pub memory: String,
}

impl Step {
    /// Achieved sender rate, bits/s.
    pub fn offered_bps(&self) -> f64 {
        self.sent.1 as f64 * 8.0 / self.send_secs.max(1e-9)
    }

    /// Received rate over the sender's time, bits/s.
    pub fn received_bps(&self) -> f64 {
        self.received.1 as f64 * 8.0 / self.send_secs.max(1e-9)
    }

    /// 1 − received/sent, clamped to [0, 1].
    pub fn loss(&self) -> f64 {
        if self.sent.0 == 0 {
            return 1.0;
        }
        (1.0 - self.received.0 as f64 / self.sent.0 as f64).clamp(0.0, 1.0)
    }

    /// Receiver CPU seconds per GB (1e9 bytes) received.
    pub fn cpu_per_gb(&self) -> f64 {
        self.cpu_s / (self.received.1 as f64 / 1e9).max(1e-12)
    }

    /// Cores the receiver kept busy while the stream flowed: its CPU seconds over the
    /// sender's seconds, at most 1 (every receiver is one streaming thread; a busy-polling
    /// one also burns CPU before and after the stream, which must not count above 1).
    pub fn cores(&self) -> f64 {
        (self.cpu_s / self.send_secs.max(1e-9)).min(1.0)
    }

    /// Cores the whole machine kept busy while the stream flowed.
    pub fn host_cores(&self) -> f64 {
        self.host_cpu_s / self.send_secs.max(1e-9)
    }

    /// True when loss is below [`LOSSLESS`] and something was sent.
    pub fn lossless(&self) -> bool {
        self.sent.0 > 0 && self.loss() < LOSSLESS
    }
}

/// Where a step's datagrams travel: over loopback (`bench udp`) or from a network
/// namespace across a veth pair (`bench bypass`).
pub struct Route<'a> {
    /// Destination address of the sender.
    pub dest: std::net::IpAddr,
    /// The pair whose namespace the sender runs in; `None` = this namespace.
    pub sender_ns: Option<&'a firehose_testkit::netns::VethPair>,
    /// Extra `bench-recv` arguments for a receiver kind (interface, port, EAL args).
    pub recv_args: &'a dyn Fn(Kind) -> Vec<String>,
    /// Extra environment of the receiver process (e.g. `GST_PLUGIN_PATH`).
    pub recv_env: Vec<(String, String)>,
    /// Extra `fhudpsink` properties of the sender (e.g. `gso=false`).
    pub sink_props: &'a str,
    /// The CPU budget every receiver process is moved into; `None` = unlimited.
    pub cpu_limit: Option<&'a CpuLimit>,
}

impl Route<'_> {
    /// `bench udp`'s route: loopback, any free port, no extra arguments.
    pub fn loopback() -> Route<'static> {
        Route {
            dest: std::net::Ipv4Addr::LOCALHOST.into(),
            sender_ns: None,
            recv_args: &|_| Vec::new(),
            recv_env: Vec::new(),
            sink_props: "",
            cpu_limit: None,
        }
    }
}

/// Starts a `bench-recv` child for `kind` and waits until it is bound.
fn spawn_receiver(
    route: &Route,
    kind: Kind,
    size: u32,
    seconds: f64,
) -> Result<ReceiverProcess, String> {
    let mut cmd = self_command()?;
    cmd.args([
        "bench-recv",
        "--kind",
        kind.name(),
        "--size",
        &size.to_string(),
        "--buffer-size",
        &BUFFER_SIZE.to_string(),
        "--timeout",
        &format!("{}", seconds * 3.0 + 30.0),
    ]);
    cmd.args((route.recv_args)(kind));
    cmd.envs(route.recv_env.iter().map(|(k, v)| (k, v)));
    ReceiverProcess::spawn(cmd, kind.name(), route.cpu_limit)
}

fn num<T: std::str::FromStr + Default>(kv: &BTreeMap<String, String>, key: &str) -> T {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_default()
}

/// Why a step did not produce a measurement.
pub enum StepError {
    /// Ctrl-C.
    Interrupted,
    /// Anything else, with the reason.
    Failed(String),
}

impl From<String> for StepError {
    fn from(s: String) -> Self {
        StepError::Failed(s)
    }
}

/// What the sender of one step did: packets, bytes, seconds from PLAYING to EOS.
struct Sent {
    packets: u64,
    bytes: u64,
    secs: f64,
}

/// Runs the paced sender of one step to the end (in the calling thread's namespace).
fn send(description: &str, seconds: f64) -> Result<Sent, StepError> {
    let mut sender = Session::from_description(description)?;
    sender.start()?;
    // A sender that cannot reach the asked rate is stopped after twice the planned time;
    // what it did send is still the offered load.
    let cutoff = Instant::now() + Duration::from_secs_f64(seconds * 2.0 + 1.0);
    loop {
        match sender.poll(Duration::from_millis(50)) {
            Some(BusEvent::Eos) => break,
            Some(BusEvent::Error(e)) => return Err(StepError::Failed(e)),
            None => {}
        }
        if signals::count() > 0 {
            return Err(StepError::Interrupted);
        }
        if Instant::now() >= cutoff {
            sender.send_eos();
            if let Some(BusEvent::Error(e)) = sender.wait_end(Duration::from_secs(3)) {
                return Err(StepError::Failed(e));
            }
            break;
        }
    }
    let secs = sender.elapsed().as_secs_f64();
    sender.refresh_stats();
    sender.stop();
    let sink = sender
        .board
        .get("fhudpsink")
        .map(|s| s.to_owned())
        .ok_or_else(|| "fhudpsink reported no statistics".to_string())?;
    let (bytes, packets) = throughput(&sink);
    Ok(Sent {
        packets,
        bytes,
        secs,
    })
}

/// One step: a receiver child for `kind`, then `fhtestsrc ! fhudpsink rate=R` along
/// `route` for about `seconds`.
pub fn run_step(
    route: &Route,
    kind: Kind,
    size: u32,
    rate: u64,
    seconds: f64,
) -> Result<Step, StepError> {
    let receiver = spawn_receiver(route, kind, size, seconds)?;
    let packets = ((rate as f64 * seconds) / (f64::from(size) * 8.0))
        .round()
        .max(1.0) as u64;
    let snmp0 = sys::UdpCounters::read().unwrap_or_default();
    let description = format!(
        "fhtestsrc name=fhtestsrc packet-size={size} num-packets={packets} \
         ! fhudpsink name=fhudpsink host={} port={} rate={rate} {}",
        route.dest, receiver.port, route.sink_props
    );
    let host0 = sys::host_busy_seconds();
    let sent = match route.sender_ns {
        None => send(&description, seconds)?,
        Some(pair) => pair
            .in_ns(move || send(&description, seconds))
            .map_err(|e| StepError::Failed(format!("sender in namespace: {e}")))??,
    };
    let host_cpu_s = sys::host_busy_seconds() - host0;
    std::thread::sleep(DRAIN);
    let kv = receiver.finish()?;
    let snmp = sys::UdpCounters::read().unwrap_or_default().since(&snmp0);
    Ok(Step {
        size,
        kind,
        asked: rate,
        sent: (sent.packets, sent.bytes),
        send_secs: sent.secs,
        received: (num(&kv, "packets"), num(&kv, "bytes")),
        cpu_s: num(&kv, "cpu_s"),
        host_cpu_s,
        kernel_drops: snmp.in_errors,
        element_drops: num::<u64>(&kv, "drops_pool")
            + num::<u64>(&kv, "drops_nic")
            + num::<u64>(&kv, "truncated"),
        memory: kv.get("memory").cloned().unwrap_or_else(|| "-".into()),
    })
}

/// One line of progress on stderr for a finished step.
pub fn log_step(step: &Step) {
    eprintln!(
        "bench: {} B, {:>9} asked {:.2} Gb/s: sent {:.2} Gb/s, received {:.2} Gb/s, loss {:.4} %, kernel drops {}, {:.2} CPU s/GB",
        step.size,
        step.kind.name(),
        step.asked as f64 / 1e9,
        step.offered_bps() / 1e9,
        step.received_bps() / 1e9,
        step.loss() * 100.0,
        step.kernel_drops,
        step.cpu_per_gb()
    );
}

/// Runs the benchmark; returns the exit status.
pub fn run(opts: &BenchOptions) -> i32 {
    let _ = signals::install();
    let rmem = sys::ensure_sysctl_at_least("net.core.rmem_max", RMEM_MAX);
    eprintln!("bench: {rmem}");
    let limit = match opts.cpu_limit.map(CpuLimit::create).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bench: {e}");
            return EXIT_ERROR;
        }
    };
    let route = Route {
        cpu_limit: limit.as_ref(),
        ..Route::loopback()
    };
    let started = Instant::now();
    let mut steps = Vec::new();
    let mut failure = None;
    'all: for &size in &opts.sizes {
        let rates = opts
            .rates
            .clone()
            .unwrap_or_else(|| default_rates(size, opts.quick));
        for &rate in &rates {
            for kind in [Kind::Udpsrc, Kind::Fhudpsrc] {
                match run_step(&route, kind, size, rate, opts.seconds) {
                    Ok(step) => {
                        log_step(&step);
                        steps.push(step);
                    }
                    Err(StepError::Interrupted) => {
                        failure = Some("interrupted".to_string());
                        break 'all;
                    }
                    Err(StepError::Failed(e)) => {
                        failure = Some(format!(
                            "{} at {size} B, {:.2} Gb/s failed:\n{e}",
                            kind.name(),
                            rate as f64 / 1e9
                        ));
                        break 'all;
                    }
                }
            }
        }
    }
    let budget = limit.as_ref().map(CpuLimit::describe);
    let report = report(
        opts,
        &steps,
        &rmem,
        budget.as_deref(),
        started.elapsed(),
        failure.as_deref(),
    );
    publish_report(&report, opts.out.as_deref(), failure.as_deref())
}

/// The markdown report.
pub fn report(
    opts: &BenchOptions,
    steps: &[Step],
    rmem: &str,
    budget: Option<&str>,
    took: Duration,
    failure: Option<&str>,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "## firehose bench udp — {}\n", sys::utc_now());
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
        "- sender (this process): `fhtestsrc packet-size=S num-packets=N ! fhudpsink rate=R`, {:.1} s per step",
        opts.seconds
    );
    let memory: Vec<&str> = {
        let mut m: Vec<&str> = steps
            .iter()
            .filter(|s| s.kind == Kind::Fhudpsrc)
            .map(|s| s.memory.as_str())
            .collect();
        m.dedup();
        m
    };
    let _ = writeln!(
        r,
        "- receivers (one child process each, one after the other): `udpsrc buffer-size={BUFFER_SIZE} mtu=max(S,1492) retrieve-sender-address=false ! fakesink` (buffers counted by a pad probe) and `fhudpsrc buffer-size={BUFFER_SIZE} ! fakesink` (its stats; pool memory: {}); {rmem}",
        if memory.is_empty() { "-".to_string() } else { memory.join(", ") }
    );
    if let Some(b) = budget {
        let _ = writeln!(
            r,
            "- CPU budget: {b}; compare the highest lossless rates (a receiver using its whole budget shows CPU s/GB ≈ budget ÷ rate)"
        );
    }
    let _ = writeln!(
        r,
        "- loss = 1 − received/sent (sent = fhudpsink packets-sent); kernel drops = Δ Udp InErrors in /proc/net/snmp (host-wide, includes RcvbufErrors); CPU = receiver getrusage user+sys from its start to the end, per GB (1e9 bytes) received; lossless = loss < {} %; highest lossless = the highest rate with every lower step lossless too\n",
        LOSSLESS * 100.0
    );
    if let Some(f) = failure {
        let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
    }
    let _ = writeln!(
        r,
        "| payload | receiver | asked Gb/s | offered Gb/s | received Gb/s | loss % | kernel drops | element drops | CPU s/GB |"
    );
    let _ = writeln!(r, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in steps {
        let _ = writeln!(
            r,
            "| {} B | {} | {} | {} | {} | {:.4} | {} | {} | {:.2} |",
            s.size,
            s.kind.name(),
            gbps(s.asked as f64),
            gbps(s.offered_bps()),
            gbps(s.received_bps()),
            s.loss() * 100.0,
            s.kernel_drops,
            s.element_drops,
            s.cpu_per_gb()
        );
    }
    r.push('\n');
    r.push_str(&summary(
        &opts.sizes,
        steps,
        &[Kind::Udpsrc, Kind::Fhudpsrc],
        PerCore::Receiver,
    ));
    r
}

/// How `summary` counts cores for its "per core" column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerCore {
    /// The receiver process's own CPU ([`Step::cores`]).
    Receiver,
    /// The whole machine's busy CPU ([`Step::host_cores`]).
    Host,
}

/// Per size: each receiver's highest lossless offered rate, that rate per core (counted
/// as `per_core` says), CPU per GB at the highest asked rate every receiver was lossless
/// at, and the ratios of each receiver to the first of `kinds` (the baseline).
pub fn summary(sizes: &[u32], steps: &[Step], kinds: &[Kind], per_core: PerCore) -> String {
    let mut r = String::new();
    let _ = writeln!(
        r,
        "| payload | receiver | highest lossless offered Gb/s | lossless Gb/s per {} | CPU s/GB at common rate |",
        match per_core {
            PerCore::Receiver => "receiver core",
            PerCore::Host => "busy host core",
        }
    );
    let _ = writeln!(r, "|---:|---|---:|---:|---:|");
    for &size in sizes {
        let of = |kind: Kind| -> Vec<&Step> {
            steps
                .iter()
                .filter(|s| s.size == size && s.kind == kind)
                .collect()
        };
        let runs: Vec<(Kind, Vec<&Step>)> = kinds
            .iter()
            .map(|&k| (k, of(k)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        if runs.is_empty() {
            continue;
        }
        // The highest step with every step up to it lossless.
        let best_step = |v: &[&Step]| -> Option<Step> {
            highest_sustained(v.iter().copied(), |s| s.asked, Step::lossless).cloned()
        };
        let best = |v: &[&Step]| best_step(v).map(|s| s.offered_bps());
        let cores = |s: &Step| match per_core {
            PerCore::Receiver => s.cores(),
            PerCore::Host => s.host_cores(),
        };
        let per_core = |v: &[&Step]| best_step(v).map(|s| s.offered_bps() / cores(&s).max(1e-3));
        // The highest asked rate at which every receiver was lossless; else the lowest
        // asked rate all ran at (marked lossy).
        let common: Option<(u64, bool)> = {
            let all: Vec<u64> = runs[0]
                .1
                .iter()
                .map(|a| a.asked)
                .filter(|&rate| runs.iter().all(|(_, v)| v.iter().any(|s| s.asked == rate)))
                .collect();
            let lossless = all.iter().copied().filter(|&rate| {
                runs.iter()
                    .flat_map(|(_, v)| v.iter())
                    .filter(|s| s.asked == rate)
                    .all(|s| s.lossless())
            });
            lossless
                .max()
                .map(|r| (r, true))
                .or_else(|| all.iter().copied().min().map(|r| (r, false)))
        };
        let cpu_at = |v: &[&Step]| -> Option<f64> {
            let (rate, _) = common?;
            // Nothing received: no CPU per GB to speak of.
            v.iter()
                .find(|s| s.asked == rate && s.received.1 > 0)
                .map(|s| s.cpu_per_gb())
        };
        let common_text = match common {
            Some((rate, true)) => format!(" at {} Gb/s", gbps(rate as f64)),
            Some((rate, false)) => format!(" at {} Gb/s (lossy)", gbps(rate as f64)),
            None => String::new(),
        };
        // "≥" when even the top step was lossless: the limit lies beyond this bench.
        let top_lossless = |v: &[&Step]| {
            v.iter()
                .max_by_key(|s| s.asked)
                .is_some_and(|s| s.lossless())
        };
        let bound = |v: &[&Step], x: Option<f64>| -> String {
            match x {
                Some(b) if top_lossless(v) => format!("≥ {}", gbps(b)),
                Some(b) => gbps(b),
                None => "none".into(),
            }
        };
        let cpu_text =
            |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.2}{common_text}"));
        for (kind, v) in &runs {
            let _ = writeln!(
                r,
                "| {size} B | {} | {} | {} | {} |",
                kind.name(),
                bound(v, best(v)),
                bound(v, per_core(v)),
                cpu_text(cpu_at(v))
            );
        }
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "-".into(),
        };
        let (base_kind, base) = &runs[0];
        for (kind, v) in &runs[1..] {
            // A rate ratio is only a bound when a receiver never lost anything: "≥" when
            // only this receiver's limit lies beyond the bench, unknown when both do.
            let bounded =
                |a: Option<f64>, b: Option<f64>| match (top_lossless(v), top_lossless(base)) {
                    (true, true) => "- (both lossless at every step)".to_string(),
                    (true, false) => format!("≥ {}", ratio(a, b)),
                    (false, true) => format!("≤ {}", ratio(a, b)),
                    (false, false) => ratio(a, b),
                };
            let _ = writeln!(
                r,
                "| {size} B | {}/{} | {} | {} | {} |",
                kind.name(),
                base_kind.name(),
                bounded(best(v), best(base)),
                // Efficiency at each one's highest lossless rate: a plain ratio even
                // when those rates are only lower bounds.
                ratio(per_core(v), per_core(base)),
                ratio(cpu_at(v), cpu_at(base))
            );
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchproc::parse_kv;

    fn step(kind: Kind, asked: u64, sent: u64, received: u64, cpu: f64) -> Step {
        Step {
            size: 1472,
            kind,
            asked,
            sent: (sent, sent * 1472),
            send_secs: 1.0,
            received: (received, received * 1472),
            cpu_s: cpu,
            host_cpu_s: 1.0,
            kernel_drops: sent - received,
            element_drops: 0,
            memory: "-".into(),
        }
    }

    #[test]
    fn step_figures() {
        let s = step(Kind::Udpsrc, 1_000_000_000, 100_000, 99_999, 0.5);
        assert!(s.lossless()); // 0.001 %
        let s = step(Kind::Udpsrc, 1_000_000_000, 100_000, 99_000, 0.5);
        assert!(!s.lossless());
        assert!((s.loss() - 0.01).abs() < 1e-9);
        assert!((s.cpu_per_gb() - 0.5 / (99_000.0 * 1472.0 / 1e9)).abs() < 1e-9);
    }

    #[test]
    fn summary_picks_common_lossless_rate_and_ratios() {
        let g = 1_000_000_000;
        let steps = vec![
            step(Kind::Udpsrc, g, 84_918, 84_918, 0.4),
            step(Kind::Fhudpsrc, g, 84_918, 84_918, 0.1),
            step(Kind::Udpsrc, 2 * g, 169_836, 150_000, 0.8),
            step(Kind::Fhudpsrc, 2 * g, 169_836, 169_836, 0.2),
        ];
        let s = summary(
            &[1472],
            &steps,
            &[Kind::Udpsrc, Kind::Fhudpsrc],
            PerCore::Receiver,
        );
        // udpsrc's best is 1 Gb/s at 0.4 cores; fhudpsrc's 2 Gb/s at 0.2 cores.
        assert!(s.contains("| 1472 B | udpsrc | 1.00 | 2.50 |"), "{s}");
        assert!(
            s.contains("| 1472 B | fhudpsrc | ≥ 2.00 | ≥ 10.00 |"),
            "{s}"
        );
        assert!(s.contains("at 1.00 Gb/s |"), "{s}");
        assert!(
            s.contains("| 1472 B | fhudpsrc/udpsrc | ≥ 2.00× | 4.00× | 0.25× |"),
            "{s}"
        );
    }

    #[test]
    fn kv_lines() {
        let kv = parse_kv(" packets=10 bytes=20 cpu_s=0.5");
        assert_eq!(num::<u64>(&kv, "packets"), 10);
        assert_eq!(num::<f64>(&kv, "cpu_s"), 0.5);
        assert_eq!(num::<u64>(&kv, "missing"), 0);
    }
}
