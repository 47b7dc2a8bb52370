//! A rate sweep: for every repeat, payload size and offered rate, each receiver in turn
//! gets the same paced stream, and one [`Step`] records what was sent, what arrived and
//! what it cost. `bench udp`, `bench spead` and `bench bypass` are sweeps that differ
//! in traffic, link and receivers.

use std::time::{Duration, Instant};

use firehose_core::stats::names;
use firehose_testkit::netns::VethPair;

use super::child::{num, ReceiverProcess};
use super::receiver::{Receiver, RecvConfig, SPEAD2_INSTALL};
use crate::cpulimit::{CpuLimit, Throttling};
use crate::session::{BusEvent, Session};
use crate::statsline::counter;
use crate::{signals, sys};

/// Loss below this fraction counts as lossless (0.01 %).
pub const LOSSLESS: f64 = 1e-4;
/// Time after the sender's EOS before the receiver is told to stop.
const DRAIN: Duration = Duration::from_millis(300);
/// The UDP port of the stream across a veth (an interface receiver filters on it).
pub const VETH_PORT: u16 = 7148;

/// What the sender sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Numbered test datagrams (`fhtestsrc`).
    Datagrams,
    /// SPEAD heaps of this many payload bytes, one item each, descriptors in a heap of
    /// their own (`speadpay descriptors-separate=true`), byte-identical to spead2's sender.
    Heaps(u32),
}

/// Where the stream travels.
pub enum Link {
    /// 127.0.0.1, sender and receivers in this namespace.
    Loopback,
    /// A veth pair: the sender in the pair's private namespace, receivers on the host end.
    Veth(VethPair),
}

impl Link {
    /// A one-line description for the report.
    pub fn describe(&self) -> String {
        match self {
            Link::Loopback => "loopback 127.0.0.1".into(),
            Link::Veth(p) => format!(
                "a veth pair ({} ↔ {}), the sender's end in the private network namespace {}, \
                 removed at the end",
                p.host_if, p.peer_if, p.ns
            ),
        }
    }
}

/// Everything a sweep needs.
pub struct Plan<'a> {
    /// What is sent.
    pub traffic: Traffic,
    /// Payload (packet) sizes.
    pub sizes: Vec<u32>,
    /// Offered rates per size.
    pub rates: &'a dyn Fn(u32) -> Vec<u64>,
    /// The receivers, in the report's order.
    pub receivers: Vec<Receiver>,
    /// Every receiver's configuration but its kind, size and link.
    pub base: RecvConfig,
    /// Seconds per step.
    pub seconds: f64,
    /// Sweeps to run; the receivers' order rotates from one to the next, so that no
    /// receiver always follows the same one.
    pub repeat: u32,
    /// The sender uses UDP GSO (labelled as such everywhere).
    pub gso: bool,
    /// Sender threads, each sending an equal share of the rate (SPEAD heaps with
    /// interleaved heap counters): one thread's ceiling is below what a bypass
    /// receiver under a CPU budget takes.
    pub senders: u32,
    /// The link.
    pub link: &'a Link,
    /// Extra environment of receiver processes (e.g. `GST_PLUGIN_PATH` for fhdpdksrc).
    pub env: Vec<(String, String)>,
    /// The CPU budget receiver processes are held to.
    pub cpu_limit: Option<&'a CpuLimit>,
}

/// One measured step: one receiver, one size, one offered rate, one repeat.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Which sweep (0-based).
    pub repeat: u32,
    /// Payload size, bytes.
    pub size: u32,
    /// Receiver.
    pub receiver: Receiver,
    /// Rate asked of the sender, bits/s.
    pub asked: u64,
    /// Datagrams the sender sent.
    pub sent_datagrams: u64,
    /// UDP payload bytes the sender sent.
    pub sent_bytes: u64,
    /// Data heaps the sender sent (0 for datagram traffic).
    pub sent_heaps: u64,
    /// Sender time from PLAYING to EOS.
    pub send_secs: f64,
    /// What the receiver delivered: data heaps for heap receivers, else datagrams.
    pub units: u64,
    /// Payload bytes of those units (heap payload, or UDP payload).
    pub bytes: u64,
    /// Heaps the receiver saw but could not complete.
    pub incomplete: u64,
    /// Receiver CPU seconds (user + system, all threads) over the window.
    pub cpu_s: f64,
    /// Busy CPU seconds of the whole machine while the sender ran: sender, receiver and
    /// softirq work. (The sender's own CPU cannot be taken out: without IRQ time
    /// accounting the receive softirq a veth runs in the sender's syscall is charged to
    /// the sender.)
    pub host_cpu_s: f64,
    /// Datagrams the kernel dropped at the receiver's socket (/proc/net/udp), or the
    /// host's UDP InErrors during the step where the socket was not found.
    pub kernel_drops: u64,
    /// Drops the element counted (pool, NIC, truncated).
    pub element_drops: u64,
    /// Pool memory the receiver got ("hugepage", "system"; "-" when not reported).
    pub memory: String,
    /// Datagrams the receiver read from its socket (0: not reported).
    pub datagrams: u64,
    /// Receive calls that brought datagrams (0: not reported): datagrams ÷ batches is
    /// what one wake-up of the receiver takes.
    pub batches: u64,
    /// How often the CPU budget held the receiver back during the step (`None`: no
    /// budget, or its counters could not be read).
    pub throttling: Option<Throttling>,
}

impl Step {
    /// Achieved sender rate, bits/s of UDP payload.
    pub fn offered_bps(&self) -> f64 {
        self.sent_bytes as f64 * 8.0 / self.send_secs.max(1e-9)
    }

    /// Received rate over the sender's time, bits/s of delivered payload.
    pub fn received_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.send_secs.max(1e-9)
    }

    /// Units offered: heaps to a heap receiver, datagrams to the others.
    pub fn sent_units(&self) -> u64 {
        if self.receiver.counts_heaps() {
            self.sent_heaps
        } else {
            self.sent_datagrams
        }
    }

    /// 1 − received/sent units, clamped to [0, 1].
    pub fn loss(&self) -> f64 {
        let sent = self.sent_units();
        if sent == 0 {
            return 1.0;
        }
        (1.0 - self.units as f64 / sent as f64).clamp(0.0, 1.0)
    }

    /// True when loss is below [`LOSSLESS`] and something was sent.
    pub fn lossless(&self) -> bool {
        self.sent_units() > 0 && self.loss() < LOSSLESS
    }

    /// Receiver CPU seconds per GB (1e9 bytes) delivered; `None` when nothing was.
    pub fn cpu_per_gb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.cpu_s / (self.bytes as f64 / 1e9))
    }

    /// Whole-machine busy CPU seconds per GB delivered.
    pub fn host_cpu_per_gb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.host_cpu_s / (self.bytes as f64 / 1e9))
    }

    /// Datagrams per receive call that brought any (`None`: not reported).
    pub fn per_batch(&self) -> Option<f64> {
        (self.batches > 0 && self.datagrams > 0)
            .then(|| self.datagrams as f64 / self.batches as f64)
    }

    /// The step's figures, formatted once for the report table and the progress log
    /// (named by [`Step::FIGURES`]).
    pub fn figures(&self) -> [String; 13] {
        [
            (self.repeat + 1).to_string(),
            format!("{} B", self.size),
            self.receiver.name().to_string(),
            format!("{:.2}", self.asked as f64 / 1e9),
            format!("{:.2}", self.offered_bps() / 1e9),
            format!("{:.2}", self.received_bps() / 1e9),
            format!("{:.4}", self.loss() * 100.0),
            self.incomplete.to_string(),
            self.kernel_drops.to_string(),
            self.element_drops.to_string(),
            opt3(self.cpu_per_gb()),
            self.per_batch().map_or("-".into(), |n| format!("{n:.1}")),
            self.throttling
                .and_then(|t| t.share())
                .map_or("-".into(), |f| format!("{:.0}", f * 100.0)),
        ]
    }

    /// What each of [`Step::figures`] is.
    pub const FIGURES: [&str; 13] = [
        "run",
        "payload",
        "receiver",
        "asked Gb/s",
        "offered Gb/s",
        "received Gb/s",
        "loss %",
        "incomplete",
        "kernel drops",
        "element drops",
        "CPU s/GB",
        "datagrams per receive",
        "throttled periods %",
    ];
}

/// A figure to 3 decimals, "-" when there is none.
pub fn opt3(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.3}"))
}

/// Why a sweep stopped early.
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

/// Runs the sweep; returns the steps done and, if it stopped early, why.
pub fn run(plan: &Plan, log: impl Fn(&Step)) -> (Vec<Step>, Option<String>) {
    let _ = signals::install();
    let mut steps = Vec::new();
    for repeat in 0..plan.repeat {
        let mut order = plan.receivers.clone();
        let turn = repeat as usize % order.len().max(1);
        order.rotate_left(turn);
        for &size in &plan.sizes {
            for rate in (plan.rates)(size) {
                for &receiver in &order {
                    match step(plan, repeat, receiver, size, rate) {
                        Ok(s) => {
                            log(&s);
                            steps.push(s);
                        }
                        Err(StepError::Interrupted) => return (steps, Some("interrupted".into())),
                        Err(StepError::Failed(e)) => {
                            let f = format!(
                                "{} at {size} B, {:.2} Gb/s failed:\n{e}",
                                receiver.name(),
                                rate as f64 / 1e9
                            );
                            return (steps, Some(f));
                        }
                    }
                    if matches!(plan.link, Link::Veth(_)) {
                        // Let the interface settle between receivers (XDP programs
                        // detach, DPDK releases its socket).
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        }
    }
    (steps, None)
}

/// The receiver configuration of one step.
fn config(plan: &Plan, receiver: Receiver, size: u32) -> RecvConfig {
    let mut cfg = plan.base.clone();
    cfg.kind = receiver;
    cfg.size = size;
    cfg.timeout = plan.seconds * 3.0 + 30.0;
    if let Link::Veth(pair) = plan.link {
        cfg.address = pair.host_ip.to_string();
        cfg.port = VETH_PORT;
        if receiver.needs_interface() {
            cfg.interface = Some(pair.host_if.clone());
        }
    }
    cfg
}

/// The pipeline of sender `index` (of `plan.senders`) for one step to `port`: each
/// sends `rate / senders`; with several, SPEAD heap counters interleave (sender `i`
/// sends `i + 1, i + 1 + n, …`) and none sends the stop heap, which would end a heap
/// receiver's stream while the others still send (the receivers are stopped by us).
fn sender_description(plan: &Plan, size: u32, rate: u64, port: u16, index: u32) -> String {
    let n = plan.senders.max(1);
    let rate = rate / u64::from(n);
    let host = match plan.link {
        Link::Loopback => "127.0.0.1".to_string(),
        Link::Veth(pair) => pair.host_ip.to_string(),
    };
    let sink = format!(
        "fhudpsink name=fhudpsink host={host} port={port} rate={rate} gso={}",
        plan.gso
    );
    match plan.traffic {
        Traffic::Datagrams => {
            let packets = ((rate as f64 * plan.seconds) / (f64::from(size) * 8.0))
                .round()
                .max(1.0) as u64;
            format!("fhtestsrc name=fhtestsrc packet-size={size} num-packets={packets} ! {sink}")
        }
        Traffic::Heaps(heap) => {
            let heaps = ((rate as f64 * plan.seconds) / (f64::from(heap) * 8.0))
                .round()
                .max(2.0) as u64;
            let interleave = if n > 1 {
                format!(
                    " heap-cnt-start={} heap-cnt-step={n} stop-at-eos=false",
                    index + 1
                )
            } else {
                String::new()
            };
            format!(
                "fakesrc num-buffers={heaps} sizetype=fixed sizemax={heap} filltype=nothing \
                 ! speadpay name=speadpay packet-size={size} descriptors-separate=true\
                 {interleave} ! {sink}"
            )
        }
    }
}

/// Runs every sender of a step at once, each in its own thread; their counts added.
fn send_all(descriptions: Vec<String>, seconds: f64) -> Result<Sent, StepError> {
    let results: Vec<Result<Sent, StepError>> = std::thread::scope(|s| {
        let handles: Vec<_> = descriptions
            .iter()
            .map(|d| s.spawn(move || send(d, seconds)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StepError::Failed("a sender thread panicked".into())))
            })
            .collect()
    });
    let mut total = Sent {
        datagrams: 0,
        bytes: 0,
        heaps: 0,
        secs: 0.0,
    };
    for r in results {
        let one = r?;
        total.datagrams += one.datagrams;
        total.bytes += one.bytes;
        total.heaps += one.heaps;
        total.secs = total.secs.max(one.secs);
    }
    Ok(total)
}

/// What the sender of one step did.
struct Sent {
    datagrams: u64,
    bytes: u64,
    heaps: u64,
    secs: f64,
}

/// Runs a paced sender to its end (in the calling thread's namespace).
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
    let field = |element: &str, name: &str| -> Result<u64, String> {
        sender
            .board
            .get(element)
            .map(|s| counter(s, name))
            .ok_or_else(|| format!("{element} reported no statistics"))
    };
    Ok(Sent {
        datagrams: field("fhudpsink", names::PACKETS_SENT)?,
        bytes: field("fhudpsink", names::BYTES_SENT)?,
        heaps: field("speadpay", names::HEAPS).unwrap_or(0),
        secs,
    })
}

fn step(
    plan: &Plan,
    repeat: u32,
    receiver: Receiver,
    size: u32,
    rate: u64,
) -> Result<Step, StepError> {
    let cfg = config(plan, receiver, size);
    let mut cmd = cfg.command()?;
    cmd.envs(plan.env.iter().map(|(k, v)| (k, v)));
    let mut rx = ReceiverProcess::spawn(cmd, receiver.name(), plan.cpu_limit).map_err(|e| {
        if receiver == Receiver::Spead2 {
            format!("{e}\n(spead2 receiver: is spead2 4.5.1 installed? {SPEAD2_INSTALL})")
        } else {
            e
        }
    })?;
    let descriptions: Vec<String> = (0..plan.senders.max(1))
        .map(|i| sender_description(plan, size, rate, rx.port, i))
        .collect();
    let snmp0 = sys::UdpCounters::read().unwrap_or_default();
    let throttled0 = plan.cpu_limit.and_then(CpuLimit::throttling);
    rx.go();
    let host0 = sys::host_busy_seconds();
    let seconds = plan.seconds;
    let sent = match plan.link {
        Link::Loopback => send_all(descriptions, seconds)?,
        Link::Veth(pair) => pair
            .in_ns(move || send_all(descriptions, seconds))
            .map_err(|e| StepError::Failed(format!("sender in namespace: {e}")))??,
    };
    let host_cpu_s = sys::host_busy_seconds() - host0;
    std::thread::sleep(DRAIN);
    // The receiver's own socket's drops, while it is still open (spead2 and the floor
    // included); the host's UDP errors when it cannot be found.
    let socket_drops = sys::udp_socket_drops(rx.port);
    let kv = rx.finish()?;
    let snmp = sys::UdpCounters::read().unwrap_or_default().since(&snmp0);
    // From "go" until the receiver's count stopped moving (it has exited since, so
    // nothing after its window is added).
    let throttling = plan
        .cpu_limit
        .and_then(CpuLimit::throttling)
        .zip(throttled0)
        .map(|(now, then)| now.since(&then));
    Ok(Step {
        repeat,
        size,
        receiver,
        asked: rate,
        sent_datagrams: sent.datagrams,
        sent_bytes: sent.bytes,
        sent_heaps: sent.heaps,
        send_secs: sent.secs,
        units: num(&kv, "units"),
        bytes: num(&kv, "bytes"),
        incomplete: num(&kv, "incomplete"),
        cpu_s: num(&kv, "cpu_s"),
        host_cpu_s,
        kernel_drops: socket_drops.unwrap_or(snmp.in_errors),
        element_drops: num(&kv, "element_drops"),
        memory: kv.get("memory").cloned().unwrap_or_else(|| "-".into()),
        datagrams: num(&kv, "datagrams"),
        batches: num(&kv, "batches"),
        throttling,
    })
}

/// One line of progress on stderr for a finished step.
pub fn log_step(s: &Step) {
    let line: Vec<String> = Step::FIGURES
        .iter()
        .zip(s.figures())
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    eprintln!("bench: {}", line.join(", "));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A step for report tests: `units` of `sent`, 1472-byte datagrams, 1 s.
    pub fn step(
        receiver: Receiver,
        repeat: u32,
        asked: u64,
        sent: u64,
        units: u64,
        cpu: f64,
    ) -> Step {
        Step {
            repeat,
            size: 1472,
            receiver,
            asked,
            sent_datagrams: sent,
            sent_bytes: sent * 1472,
            sent_heaps: sent,
            send_secs: 1.0,
            units,
            bytes: units * 1472,
            incomplete: 0,
            cpu_s: cpu,
            host_cpu_s: 2.0 * cpu,
            kernel_drops: sent - units,
            element_drops: 0,
            memory: "-".into(),
            datagrams: sent,
            batches: sent / 8,
            throttling: None,
        }
    }

    #[test]
    fn step_figures() {
        let s = step(Receiver::Udpsrc, 0, 1_000_000_000, 100_000, 99_999, 0.5);
        assert!(s.lossless()); // 0.001 %
        let s = step(Receiver::Udpsrc, 0, 1_000_000_000, 100_000, 99_000, 0.5);
        assert!(!s.lossless());
        assert!((s.loss() - 0.01).abs() < 1e-9);
        let cpu = s.cpu_per_gb().unwrap();
        assert!((cpu - 0.5 / (99_000.0 * 1472.0 / 1e9)).abs() < 1e-9);
        let f = s.figures();
        assert_eq!((f[11].as_str(), f[12].as_str()), ("8.0", "-"));
        let mut t = s.clone();
        t.batches = 0;
        t.throttling = Some(Throttling {
            periods: 300,
            throttled: 75,
            throttled_us: 1,
        });
        let f = t.figures();
        assert_eq!((f[11].as_str(), f[12].as_str()), ("-", "25"));
        let mut s = step(Receiver::Speaddepay, 0, 1, 10, 0, 0.1);
        assert_eq!(s.cpu_per_gb(), None, "nothing received: no CPU per GB");
        // A heap receiver is judged against heaps sent, not datagrams.
        s.units = 5;
        s.sent_heaps = 5;
        s.sent_datagrams = 4000;
        assert!(s.lossless());
    }

    /// Several senders split the rate and interleave SPEAD heap counters, and none
    /// sends the stop heap; one sender is the plain pipeline.
    #[test]
    fn senders_split_the_rate_and_interleave_heap_counters() {
        let rates = |_| vec![4_000_000_000];
        let mut plan = Plan {
            traffic: Traffic::Heaps(1 << 20),
            sizes: vec![1472],
            rates: &rates,
            receivers: vec![Receiver::Spead2],
            base: RecvConfig::new(Receiver::Spead2),
            seconds: 1.0,
            repeat: 1,
            gso: false,
            senders: 1,
            link: &Link::Loopback,
            env: Vec::new(),
            cpu_limit: None,
        };
        let one = sender_description(&plan, 1472, 4_000_000_000, 7148, 0);
        assert!(one.contains("rate=4000000000"), "{one}");
        assert!(!one.contains("heap-cnt"), "{one}");
        assert!(
            one.contains("num-buffers=477"),
            "4 Gb/s for 1 s of 1 MiB heaps: {one}"
        );
        plan.senders = 2;
        let second = sender_description(&plan, 1472, 4_000_000_000, 7148, 1);
        assert!(second.contains("rate=2000000000"), "{second}");
        assert!(second.contains("num-buffers=238"), "{second}");
        assert!(
            second.contains("heap-cnt-start=2 heap-cnt-step=2 stop-at-eos=false"),
            "{second}"
        );
        plan.traffic = Traffic::Datagrams;
        let d = sender_description(&plan, 1472, 4_000_000_000, 7148, 1);
        assert!(
            d.contains("rate=2000000000") && d.contains("num-packets=169837"),
            "{d}"
        );
    }
}
