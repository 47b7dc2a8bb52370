//! `firehose bench hostile`: SPEAD receivers under attack. For every receiver, a
//! legitimate stream alone, then the same stream beside each class of bad packets
//! ([`firehose_spead::hostile`]) sent as fast as asked (default 1 Gb/s) over loopback.
//! Every legitimate heap is checked byte for byte where it leaves the receiver; the
//! report gives heaps intact of heaps sent, receiver CPU per GB of legitimate data (and
//! its ratio to the stream alone), peak and growth of the receiver's RSS and the
//! element's drop counters. `--check` makes a lost or damaged heap, or RSS growth above
//! `--rss-bound`, a failure (exit status 1): the CI form.
//!
//! Processes: the receiver runs in a child (`firehose bench-hostile recv`, the line
//! protocol of [`super::child`]); the legitimate sender and the attacker are two
//! threads of another child (`firehose bench-hostile send`), the attacker reading the
//! heap counter the sender is at, as one on the path would.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use firehose_core::meta::chunk::ChunkMeta;
use firehose_core::meta::message;
use firehose_spead::hostile::{self, Class, Generator, Legit};
use firehose_spead::send::PacketConfig;
use firehose_spead::wire::Flavour;
use gst::prelude::*;

use super::child::{self, num, parse_kv, ChildSide, ReceiverProcess};
use super::receiver::{description, Receiver, RecvConfig};
use super::report::median;
use super::{command_line, RunArgs, BUFFER_SIZE, DEFAULT_HEAPS_PER_CHUNK, DEFAULT_HEAP_SIZE};
use crate::args::{parse_rate, parse_seconds};
use crate::launch::{EXIT_ERROR, EXIT_OK};
use crate::session::{int_property, stats_property, BusEvent, Session};
use crate::statsline::counter;
use crate::sys;

/// The legitimate stop heap's counter, past the last data heap's.
const STOP_GAP: u64 = 16;
/// Time after the sender's end before the receiver is told to stop.
const DRAIN: Duration = Duration::from_millis(200);
/// Chunk placement: heap counter 1 (the first heap sent) is slot 0 of chunk 0.
const CHUNK_OFFSET: u64 = 1;
/// Counters of the receivers' stats worth a column when not zero.
const COUNTERS: [&str; 15] = [
    "malformed",
    "too-large",
    "too-far",
    "too-old",
    "duplicated",
    "descriptors-dropped",
    "descriptor-heaps",
    "heaps-incomplete",
    "drops-handler",
    "drops-pool",
    "pool-exhausted",
    "chunks-incomplete",
    "out-of-order-dropped",
    "truncated",
    "resyncs",
];

/// `firehose bench hostile`.
#[derive(Debug, Args)]
pub struct HostileArgs {
    /// Classes of bad packets, comma-separated [default: all]: truncated, lying-lengths,
    /// huge-offsets, huge-ids, descriptor-flood, descriptor-churn, duplicates, overlaps,
    /// window-thrash, stop-spoof, random-bytes
    #[arg(long, value_delimiter = ',', value_parser = parse_class)]
    classes: Option<Vec<Class>>,
    /// Receivers, comma-separated: spead-src, speaddepay, direct, chunk
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spead-src,speaddepay,direct"
    )]
    receivers: Vec<Receiver>,
    /// Seconds per run [default: 3, 1 with --quick]
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Rate of the legitimate stream, bits/s
    #[arg(long, default_value = "400M", value_parser = parse_rate)]
    legit_rate: u64,
    /// Rate of the bad packets, bits/s (the attacker sends as fast as it can if lower)
    #[arg(long, default_value = "1G", value_parser = parse_rate)]
    attack_rate: u64,
    /// Heap payload of the legitimate stream, bytes
    #[arg(long, default_value_t = DEFAULT_HEAP_SIZE, value_parser = clap::value_parser!(u32).range(64..=(64 << 20)))]
    heap_size: u32,
    /// Packet size of the legitimate stream, bytes
    #[arg(long, default_value_t = 8972, value_parser = clap::value_parser!(u32).range(1024..=9000))]
    packet_size: u32,
    /// landing of the receivers that land payloads (fhudpchunksrc, fhspeadsrc): auto, on,
    /// off [default: the elements']
    #[arg(long, value_parser = ["auto", "on", "off"])]
    landing: Option<String>,
    /// More properties of the kernel receiver element (fhudpsrc, fhspeadsrc,
    /// fhudpchunksrc), space-separated, e.g. "timestamps=true"
    #[arg(long)]
    src_props: Option<String>,
    /// Fail (exit status 1) when a legitimate heap is lost or damaged, or a receiver's
    /// RSS grows more than --rss-bound under attack than alone
    #[arg(long)]
    check: bool,
    /// Largest RSS growth over a run allowed by --check, MiB
    #[arg(long, default_value_t = 64)]
    rss_bound: u64,
    #[command(flatten)]
    run: RunArgs,
}

fn parse_class(s: &str) -> Result<Class, String> {
    Class::parse(s).ok_or_else(|| {
        let names: Vec<_> = Class::ALL.iter().map(|c| c.name()).collect();
        format!("unknown class '{s}' (one of {})", names.join(", "))
    })
}

/// The hidden `firehose bench-hostile` children.
#[derive(Debug, Subcommand)]
pub enum ChildCommand {
    /// A receiver that checks every legitimate heap.
    Recv(RecvArgs),
    /// The legitimate sender and, with --class, the attacker.
    Send(SendArgs),
}

/// `bench-hostile recv`.
#[derive(Debug, Clone, Args)]
pub struct RecvArgs {
    /// Which receiver.
    #[arg(long, value_enum)]
    kind: Receiver,
    /// Legitimate heap payload, bytes.
    #[arg(long)]
    heap_size: u32,
    /// `landing` of fhudpchunksrc and fhspeadsrc, if not the elements' default.
    #[arg(long)]
    landing: Option<String>,
    /// More properties of the kernel receiver element.
    #[arg(long)]
    src_props: Option<String>,
    /// Stop on our own after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    timeout: f64,
}

/// `bench-hostile send`.
#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// Receiver port on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// Seconds to send.
    #[arg(long)]
    seconds: f64,
    /// Legitimate stream, bits/s.
    #[arg(long)]
    legit_rate: u64,
    /// Legitimate heap payload, bytes.
    #[arg(long)]
    heap_size: u32,
    /// Legitimate packet size, bytes.
    #[arg(long)]
    packet_size: u32,
    /// Class of bad packets (none: the legitimate stream alone).
    #[arg(long, value_parser = parse_class)]
    class: Option<Class>,
    /// Bad packets, bits/s.
    #[arg(long, default_value_t = 1_000_000_000)]
    attack_rate: u64,
    /// Seed of the bad packets.
    #[arg(long, default_value_t = 0x5EAD)]
    seed: u64,
}

/// Runs a hidden child; returns the exit status.
pub fn run_child(cmd: ChildCommand) -> i32 {
    let r = match cmd {
        ChildCommand::Recv(a) => recv(&a),
        ChildCommand::Send(a) => send(&a).map(|fields| child::print_result(&fields)),
    };
    match r {
        Ok(()) => EXIT_OK,
        Err(e) => child::print_error(&e),
    }
}

/// Sleeps until `due` if it is more than 50 µs away (pacing without a busy loop).
fn pace(due: Instant) {
    let now = Instant::now();
    if due > now + Duration::from_micros(50) {
        std::thread::sleep(due - now);
    }
}

fn send(a: &SendArgs) -> Result<Vec<(&'static str, String)>, String> {
    let legit = Legit::new(
        Flavour::SPEAD_64_40,
        a.packet_size as usize,
        a.heap_size as usize,
    )
    .map_err(|e| format!("legitimate stream: {e}"))?;
    let to: SocketAddr = ([127, 0, 0, 1], a.port).into();
    let bind = || UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("sender socket: {e}"));
    let cnt = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicBool::new(false));
    let attacker = a.class.map(|class| {
        let sock = bind();
        let (cnt, done) = (cnt.clone(), done.clone());
        let (rate, seed) = (a.attack_rate, a.seed);
        std::thread::spawn(move || -> Result<(u64, u64, u64, f64), String> {
            let sock = sock?;
            let mut g = Generator::new(class, seed, legit);
            let mut buf = vec![0u8; hostile::MAX_PACKET];
            let (mut packets, mut bytes, mut errors) = (0u64, 0u64, 0u64);
            // The attack begins once the stream's first heap is out: bad packets
            // *while a stream flows* (issue 18). A flood already running when a
            // capture starts is the engine suite's case
            // (`a_flood_that_starts_before_the_stream_does_not_keep_the_chunk_window`):
            // a chunk receiver's window may open at a bad packet and then costs the
            // stream its first chunk, which this run's count would charge to the class.
            while cnt.load(Ordering::Relaxed) < 2 && !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_micros(200));
            }
            let t0 = Instant::now();
            while !done.load(Ordering::Relaxed) {
                let n = g.next(cnt.load(Ordering::Relaxed), &mut buf);
                if sock.send_to(&buf[..n], to).is_ok() {
                    packets += 1;
                    bytes += n as u64;
                } else {
                    errors += 1;
                }
                if packets % 32 == 0 {
                    pace(t0 + Duration::from_secs_f64(bytes as f64 * 8.0 / rate as f64));
                }
            }
            Ok((packets, bytes, errors, t0.elapsed().as_secs_f64()))
        })
    });
    let sock = bind()?;
    let heaps =
        ((a.legit_rate as f64 * a.seconds) / (f64::from(a.heap_size) * 8.0)).max(2.0) as u64;
    let per_heap = Duration::from_secs_f64(f64::from(a.heap_size) * 8.0 / a.legit_rate as f64);
    let per_packet = per_heap / legit.packets_per_heap() as u32;
    let mut buf = vec![0u8; hostile::MAX_PACKET];
    let (mut sent, mut errors) = (0u64, 0u64);
    let t0 = Instant::now();
    for h in 0..heaps {
        let c = h + 1;
        cnt.store(c, Ordering::Relaxed);
        for k in 0..legit.packets_per_heap() {
            let n = legit.packet(c, k, &mut buf);
            // A full socket buffer (ENOBUFS) is retried: the legitimate sender loses nothing.
            let mut tries = 0;
            while sock.send_to(&buf[..n], to).is_err() {
                errors += 1;
                tries += 1;
                if tries > 1000 {
                    return Err("legitimate sender: sends keep failing".into());
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            sent += n as u64;
            pace(t0 + per_heap * h as u32 + per_packet * (k as u32 + 1));
        }
    }
    let legit_secs = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let attack = match attacker {
        Some(t) => t.join().map_err(|_| "attacker thread panicked")??,
        None => (0, 0, 0, 0.0),
    };
    // The stream's own end: a stop heap, after the attack, so that chunk receivers
    // emit their last chunk. Its counter is clear of those the attackers aimed at
    // (theirs reach a few past the last heap): a stop heap whose counter a replayed or
    // lying packet already claimed is taken as part of that heap, not as the end.
    std::thread::sleep(Duration::from_millis(50));
    let stop = PacketConfig::new(Flavour::SPEAD_64_40, a.packet_size as usize)
        .map_err(|e| e.to_string())?;
    let items = [firehose_spead::send::Item::stop()];
    let mut hp = stop
        .heap(heaps + STOP_GAP, &items)
        .map_err(|e| e.to_string())?;
    while let Some(n) = hp.write_next(&mut buf) {
        let _ = sock.send_to(&buf[..n], to);
    }
    Ok(vec![
        ("legit_heaps", heaps.to_string()),
        ("legit_bytes", sent.to_string()),
        ("legit_secs", format!("{legit_secs:.4}")),
        ("legit_retries", errors.to_string()),
        ("attack_packets", attack.0.to_string()),
        ("attack_bytes", attack.1.to_string()),
        ("attack_errors", attack.2.to_string()),
        ("attack_secs", format!("{:.4}", attack.3)),
    ])
}

/// What the receiver's probe found.
#[derive(Default)]
struct Seen {
    /// Heap counters delivered intact (index: counter).
    ok: Vec<bool>,
    /// Legitimate-sized heaps or slots delivered with wrong or missing bytes.
    damaged: u64,
    /// Heaps delivered twice.
    twice: u64,
    /// Other buffers (descriptor heaps, attackers' heaps).
    other: u64,
}

impl Seen {
    fn mark(&mut self, cnt: u64, ok: bool) {
        if !ok {
            self.damaged += 1;
            return;
        }
        let i = cnt as usize;
        if i >= self.ok.len() {
            // Counters the sender never reaches in a run are not legitimate heaps.
            if i >= 1 << 24 {
                self.other += 1;
                return;
            }
            self.ok.resize(i + 1, false);
        }
        if self.ok[i] {
            self.twice += 1;
        }
        self.ok[i] = true;
    }
}

/// Checks one buffer leaving the receiver: a heap (its message meta names the counter)
/// or a chunk (every present slot a heap).
fn inspect(b: &gst::BufferRef, heap_size: usize, seen: &Mutex<Seen>) {
    let Ok(map) = b.map_readable() else { return };
    let bytes = map.as_slice();
    let mut seen = seen.lock().expect("probe lock");
    if let Some(meta) = b.meta::<ChunkMeta>() {
        let info = meta.info();
        for i in 0..info.slots {
            if !info.is_present(i) {
                continue;
            }
            let cnt = info.chunk_id * info.slots as u64 + i as u64 + CHUNK_OFFSET;
            let r = info.slot_range(i);
            let ok = bytes
                .get(r.start..r.start + heap_size)
                .is_some_and(|s| hostile::check_bytes(cnt, s));
            seen.mark(cnt, ok);
        }
        return;
    }
    match message::read(b) {
        Some(m) if bytes.len() == heap_size => {
            seen.mark(m.id, m.complete && hostile::check_bytes(m.id, bytes))
        }
        _ => seen.other += 1,
    }
}

/// VmRSS and VmHWM of this process, KiB.
fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn recv(a: &RecvArgs) -> Result<(), String> {
    let mut cfg = RecvConfig::new(a.kind);
    cfg.heap_size = a.heap_size;
    cfg.heaps_per_chunk = DEFAULT_HEAPS_PER_CHUNK;
    cfg.landing = a.landing.clone();
    cfg.src_props = a.src_props.clone();
    let mut session = Session::from_description(&description(&cfg))?;
    let src = session.element("src").expect("named in the description");
    let depay = session.element("depay");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = session.element("sink").expect("named in the description");
    let pad = sink.static_pad("sink").expect("fakesink has a sink pad");
    let (s, heap_size) = (seen.clone(), a.heap_size as usize);
    pad.add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
        move |_, info| {
            if let Some(b) = info.buffer() {
                inspect(b, heap_size, &s);
            } else if let Some(list) = info.buffer_list() {
                list.iter().for_each(|b| inspect(b, heap_size, &s));
            }
            gst::PadProbeReturn::Ok
        },
    );
    session.start()?;
    let t0 = Instant::now();
    let port = loop {
        match int_property(&src, "port") {
            Some(p) if p > 0 => break p as u16,
            _ if t0.elapsed() > Duration::from_secs(20) => {
                return Err(format!(
                    "{} did not report the port it bound",
                    a.kind.name()
                ))
            }
            _ => {
                if let Some(BusEvent::Error(e)) = session.poll(Duration::from_millis(20)) {
                    return Err(e);
                }
            }
        }
    };
    let side = ChildSide::ready(port, Duration::from_secs_f64(a.timeout.max(1.0)));
    // When the stream ended (a stop heap, the sender's or a spoofed one), in ms from `go`.
    let eos_ms: Arc<AtomicU64> = Arc::new(AtomicU64::new(u64::MAX));
    let go = Arc::new(Mutex::new(Instant::now()));
    let mut idle = || match session.poll(Duration::from_millis(50)) {
        Some(BusEvent::Error(e)) => Err(e),
        Some(BusEvent::Eos) => {
            let ms = go.lock().expect("go lock").elapsed().as_millis() as u64;
            eos_ms.fetch_min(ms, Ordering::Relaxed);
            Ok(())
        }
        None => Ok(()),
    };
    side.wait_go(&mut idle)?;
    *go.lock().expect("go lock") = Instant::now();
    let (rss_go, _) = rss_kib();
    let cpu0 = sys::cpu_seconds();
    side.wait_stop(&mut idle)?;
    // The stream ends with its own stop heap: until the receiver has reached it (or a
    // spoofed one before it), what it has not yet taken from its socket is a backlog,
    // not a loss. A loaded receiver can be seconds behind a flood.
    let t = Instant::now();
    while eos_ms.load(Ordering::Relaxed) == u64::MAX && t.elapsed() < Duration::from_secs(15) {
        idle()?;
    }
    let count = || {
        let s = seen.lock().expect("probe lock");
        s.ok.iter().filter(|&&b| b).count() as u64 + s.damaged + s.other
    };
    child::settle(count);
    let cpu = sys::cpu_seconds() - cpu0;
    let (rss_end, hwm) = rss_kib();
    let s = seen.lock().expect("probe lock");
    let mut fields = vec![
        ("intact", s.ok.iter().filter(|&&b| b).count().to_string()),
        ("damaged", s.damaged.to_string()),
        ("twice", s.twice.to_string()),
        ("other", s.other.to_string()),
        ("cpu_s", format!("{cpu:.4}")),
        ("rss_go_kib", rss_go.to_string()),
        ("rss_end_kib", rss_end.to_string()),
        ("hwm_kib", hwm.to_string()),
        (
            "eos_s",
            match eos_ms.load(Ordering::Relaxed) {
                u64::MAX => "-".to_string(),
                ms => format!("{:.3}", ms as f64 / 1e3),
            },
        ),
    ];
    drop(s);
    // Every counter of the elements' stats, summed over src and depay.
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    for e in std::iter::once(&src).chain(depay.as_ref()) {
        if let Some(st) = stats_property(e) {
            for (name, _) in st.iter() {
                *counters.entry(name.to_string()).or_default() += counter(&st, name);
            }
        }
    }
    let counters: Vec<(String, String)> = counters
        .into_iter()
        .map(|(k, v)| (format!("c.{k}"), v.to_string()))
        .collect();
    fields.extend(counters.iter().map(|(k, v)| (k.as_str(), v.clone())));
    child::print_result(&fields);
    session.stop();
    Ok(())
}

/// One run: a receiver, a class (none: the stream alone), what happened.
struct Run {
    receiver: Receiver,
    class: Option<Class>,
    sent: BTreeMap<String, String>,
    got: BTreeMap<String, String>,
    /// Datagrams the kernel dropped at the receiver's socket (/proc/net/udp), or the
    /// host's UDP InErrors where the socket was not listed.
    kernel_drops: u64,
}

impl Run {
    fn legit_heaps(&self) -> u64 {
        num(&self.sent, "legit_heaps")
    }
    fn intact(&self) -> u64 {
        num(&self.got, "intact")
    }
    fn cpu_per_gb(&self) -> f64 {
        let gb = num::<f64>(&self.sent, "legit_bytes") / 1e9;
        num::<f64>(&self.got, "cpu_s") / gb.max(1e-9)
    }
    fn attack_gbps(&self) -> f64 {
        num::<f64>(&self.sent, "attack_bytes") * 8.0
            / num::<f64>(&self.sent, "attack_secs").max(1e-9)
            / 1e9
    }
    fn attack_kpps(&self) -> f64 {
        num::<f64>(&self.sent, "attack_packets")
            / num::<f64>(&self.sent, "attack_secs").max(1e-9)
            / 1e3
    }
    fn rss_growth_mib(&self) -> f64 {
        (num::<f64>(&self.got, "rss_end_kib") - num::<f64>(&self.got, "rss_go_kib")) / 1024.0
    }
    fn hwm_mib(&self) -> f64 {
        num::<f64>(&self.got, "hwm_kib") / 1024.0
    }
    /// When the receiver's stream ended before the sender's did (a spoofed stop), in s.
    fn ended_early(&self) -> Option<f64> {
        let eos = self.got.get("eos_s")?.parse::<f64>().ok()?;
        // The receiver's clock starts before the sender process does: allow for that.
        (eos + 0.1 < num::<f64>(&self.sent, "legit_secs")).then_some(eos)
    }

    fn counter(&self, name: &str) -> u64 {
        num(&self.got, &format!("c.{name}"))
    }
}

fn one(
    a: &HostileArgs,
    receiver: Receiver,
    class: Option<Class>,
    seconds: f64,
) -> Result<Run, String> {
    let mut cmd = child::self_command()?;
    cmd.args(["bench-hostile", "recv", "--kind", receiver.name()]);
    cmd.args(["--heap-size", &a.heap_size.to_string()]);
    if let Some(p) = &a.src_props {
        cmd.args(["--src-props", p]);
    }
    if let Some(l) = &a.landing {
        cmd.args(["--landing", l]);
    }
    let mut rx = ReceiverProcess::spawn(cmd, receiver.name(), None)?;
    let mut tx = child::self_command()?;
    tx.args(["bench-hostile", "send", "--port", &rx.port.to_string()]);
    tx.args(["--seconds", &seconds.to_string()]);
    tx.args(["--legit-rate", &a.legit_rate.to_string()]);
    tx.args(["--attack-rate", &a.attack_rate.to_string()]);
    tx.args(["--heap-size", &a.heap_size.to_string()]);
    tx.args(["--packet-size", &a.packet_size.to_string()]);
    if let Some(c) = class {
        tx.args(["--class", c.name()]);
    }
    let snmp0 = sys::UdpCounters::read().unwrap_or_default();
    rx.go();
    let out = tx
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start the sender: {e}"))?;
    std::thread::sleep(DRAIN);
    // The receiver's own socket's drops while it is still open, as `bench spead`
    // counts them; the host's UDP errors where it is not listed.
    let socket_drops = sys::udp_socket_drops(rx.port);
    let got = rx.finish()?;
    let snmp = sys::UdpCounters::read().unwrap_or_default().since(&snmp0);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    if let Some(e) = line.strip_prefix("error ") {
        return Err(format!("sender: {e}"));
    }
    let sent = parse_kv(
        line.strip_prefix("result")
            .ok_or("the sender said no result")?,
    );
    Ok(Run {
        receiver,
        class,
        sent,
        got,
        kernel_drops: socket_drops.unwrap_or(snmp.in_errors),
    })
}

/// `firehose bench hostile`; returns the exit status.
pub fn run(a: HostileArgs) -> i32 {
    let rmem = sys::ensure_sysctl_at_least("net.core.rmem_max", 64 << 20);
    eprintln!("bench: {rmem}");
    let started = Instant::now();
    let seconds = a.seconds.unwrap_or(if a.run.quick { 1.0 } else { 3.0 });
    let classes = a.classes.clone().unwrap_or_else(|| Class::ALL.to_vec());
    let repeat = a.run.repeat.unwrap_or(if a.run.quick { 1 } else { 3 });
    let mut runs = Vec::new();
    for r in 0..repeat {
        for &receiver in &a.receivers {
            for class in std::iter::once(None).chain(classes.iter().copied().map(Some)) {
                let name = class.map_or("alone", Class::name);
                match one(&a, receiver, class, seconds) {
                    Ok(run) => {
                        eprintln!(
                            "bench hostile: #{r} {} {name}: {}/{} heaps intact, attack {:.2} Gb/s, \
                             cpu {:.3} s/GB, rss +{:.1} MiB",
                            receiver.name(),
                            run.intact(),
                            run.legit_heaps(),
                            run.attack_gbps(),
                            run.cpu_per_gb(),
                            run.rss_growth_mib()
                        );
                        runs.push(run);
                    }
                    Err(e) => {
                        eprintln!("bench hostile: {} {name}: {e}", receiver.name());
                        return EXIT_ERROR;
                    }
                }
            }
        }
    }
    let md = markdown(&a, &runs, &classes, seconds, &rmem, started);
    println!("{md}");
    if let Some(out) = &a.run.out {
        if let Err(e) = std::fs::write(out, &md) {
            eprintln!("bench hostile: cannot write {}: {e}", out.display());
            return EXIT_ERROR;
        }
    }
    let failures = failures(&runs, a.rss_bound as f64);
    if a.check && !failures.is_empty() {
        for f in &failures {
            eprintln!("bench hostile: FAIL {f}");
        }
        return EXIT_ERROR;
    }
    EXIT_OK
}

/// Weaknesses known and open (issue 18), reported by `--check` but not failed, so that
/// the suite guards every other class. (The heap receivers' window floods — huge-ids and
/// window-thrash against `fhspeadsrc` and `speaddepay` — were here: a heap's first
/// packet is now held apart until its second arrives, so a flood of one-packet heaps
/// evicts only itself, and `--check` enforces it. `direct` under huge-ids was here too:
/// the attack started with the stream, and when a bad packet arrived first the chunk
/// window opened at it and held every heap out (0 of 143 in 2 of 8 runs); a window no
/// message completed in now follows the stream's messages, and the attack starts once
/// the stream's first heap is out.)
pub const KNOWN_WEAK: &[(Receiver, Class)] = &[
    // Empty since 2026-11-26 late evening. `speaddepay` under descriptor-flood and
    // descriptor-churn was the last entry: it lost heaps in some runs on the loaded
    // 2-core machine, every time with kernel drops (its receive thread starved by the
    // sender's threads and other work; `perf` gave it a quarter of a core), never to the
    // flood's state (descriptor heaps are learnt and counted, a descriptor costs a
    // lookup). On the quiet machine it kept 143/143 in 6 of 6 release runs under
    // descriptor-flood (3 on 2026-11-26 evening, 3 late evening) and 3 of 3 under
    // descriptor-churn, as the debug CI form did.
];

/// What `--check` refuses: a legitimate heap lost or damaged, RSS growth above the bound
/// (a loss in a [`KNOWN_WEAK`] case is printed as such, not refused).
fn failures(runs: &[Run], rss_bound: f64) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        let what = format!(
            "{} {}",
            r.receiver.name(),
            r.class.map_or("alone", Class::name)
        );
        let (sent, intact, damaged) = (r.legit_heaps(), r.intact(), num::<u64>(&r.got, "damaged"));
        // The receivers run at their defaults, where a stop heap ends the stream (as in
        // spead2): heaps after a spoofed one are not lost to a flaw but to that choice,
        // documented with its defence (stop-is-eos=false, handler stop=false), which the
        // engine suite (elements/spead/tests/hostile_engine.rs) tests. Damage still fails.
        let stopped_by_spoof = r.class == Some(Class::StopSpoof) && r.ended_early().is_some();
        let known = r
            .class
            .is_some_and(|c| KNOWN_WEAK.contains(&(r.receiver, c)));
        if intact < sent && known && damaged == 0 {
            eprintln!(
                "bench hostile: KNOWN WEAKNESS {what}: {intact} of {sent} legitimate heaps \
                 intact (see KNOWN_WEAK)"
            );
        } else if (intact < sent && !stopped_by_spoof) || damaged > 0 {
            out.push(format!(
                "{what}: {intact} of {sent} legitimate heaps intact, {damaged} damaged \
                 (kernel drops {}, stream ended {})",
                r.kernel_drops,
                r.ended_early()
                    .map_or("at its end".into(), |s| format!("early, at {s:.2} s"))
            ));
        }
        if r.rss_growth_mib() > rss_bound {
            out.push(format!(
                "{what}: RSS grew {:.1} MiB over the run (bound {rss_bound} MiB)",
                r.rss_growth_mib()
            ));
        }
    }
    out
}

fn markdown(
    a: &HostileArgs,
    runs: &[Run],
    classes: &[Class],
    seconds: f64,
    rmem: &str,
    started: Instant,
) -> String {
    let mut md = String::from("## Hostile traffic: legitimate SPEAD stream under attack\n\n");
    md.push_str(&format!("- command: `{}`\n", command_line()));
    md.push_str(&format!(
        "- host: Linux {}, {} CPUs, {}; loopback 127.0.0.1; {}; took {:.0} s\n",
        sys::kernel_release(),
        sys::cpus(),
        gst::version_string(),
        sys::utc_now(),
        started.elapsed().as_secs_f64()
    ));
    md.push_str(&format!(
        "- legitimate stream: {} MiB heaps (one item, bytes checked at the receiver's output), \
         {}-byte packets, {:.0} Mb/s, one datagram per send, {seconds:.1} s per run, then a \
         stop heap; bad packets from a second thread of the sender process at up to {:.2} Gb/s \
         (achieved rate below); socket buffer {BUFFER_SIZE} bytes; {rmem}\n",
        f64::from(a.heap_size) / f64::from(1u32 << 20),
        a.packet_size,
        a.legit_rate as f64 / 1e6,
        a.attack_rate as f64 / 1e9,
    ));
    let repeat = runs
        .iter()
        .map(|r| r.receiver)
        .filter(|&r| r == runs[0].receiver)
        .count()
        / (classes.len() + 1).max(1);
    md.push_str(&format!(
        "- figures: medians over {repeat} run(s); heaps intact: the worst run; CPU: the \
         receiver process's, per GB of legitimate data sent, and its ratio to the same \
         receiver with the stream alone; RSS: peak (VmHWM) and growth from the stream's \
         start to its end; counters: the element's `stats` (src and depay summed), not zero\n\n"
    ));
    for &receiver in &a.receivers {
        let mine: Vec<&Run> = runs.iter().filter(|r| r.receiver == receiver).collect();
        let Some(first) = mine.first() else { continue };
        let mut cfg = RecvConfig::new(receiver);
        cfg.heap_size = a.heap_size;
        cfg.landing = a.landing.clone();
        cfg.src_props = a.src_props.clone();
        md.push_str(&format!(
            "### {}\n\n`{}`\n\n",
            receiver.name(),
            description(&cfg).replace("port=0", "port=P")
        ));
        let _ = first;
        md.push_str(
            "| class | attack Gb/s | attack kpps | heaps intact | CPU s/GB | CPU vs alone | \
             peak RSS MiB | RSS growth MiB | kernel drops | counters |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        let alone = median(
            mine.iter()
                .filter(|r| r.class.is_none())
                .map(|r| r.cpu_per_gb())
                .collect(),
        );
        for class in std::iter::once(None).chain(classes.iter().copied().map(Some)) {
            let these: Vec<&&Run> = mine.iter().filter(|r| r.class == class).collect();
            if these.is_empty() {
                continue;
            }
            let med = |f: &dyn Fn(&Run) -> f64| {
                median(these.iter().map(|r| f(r)).collect()).unwrap_or(0.0)
            };
            let worst = these
                .iter()
                .min_by_key(|r| (r.intact() as i64 - r.legit_heaps() as i64, r.intact()))
                .expect("not empty");
            let cpu = med(&|r| r.cpu_per_gb());
            let ratio = alone
                .filter(|&x| x > 0.0)
                .map_or("-".into(), |x| format!("{:.2}", cpu / x));
            let counters: Vec<String> = COUNTERS
                .iter()
                .filter_map(|n| {
                    let v = med(&|r| r.counter(n) as f64);
                    (v > 0.0).then(|| format!("{n} {v:.0}"))
                })
                .collect();
            let early = these
                .iter()
                .filter_map(|r| r.ended_early())
                .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.min(e))));
            md.push_str(&format!(
                "| {} | {:.2} | {:.0} | {}/{}{} | {:.3} | {} | {:.0} | {:.1} | {:.0} | {} |\n",
                class.map_or("none (stream alone)", Class::name),
                med(&|r| r.attack_gbps()),
                med(&|r| r.attack_kpps()),
                worst.intact(),
                worst.legit_heaps(),
                early.map_or(String::new(), |e| format!(" (stream ended at {e:.2} s)")),
                cpu,
                if class.is_none() {
                    "1.00".into()
                } else {
                    ratio
                },
                med(&|r| r.hwm_mib()),
                med(&|r| r.rss_growth_mib()),
                med(&|r| r.kernel_drops as f64),
                if counters.is_empty() {
                    "-".into()
                } else {
                    counters.join(", ")
                },
            ));
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_counts_each_heap_once() {
        let mut s = Seen::default();
        s.mark(3, true);
        s.mark(3, true);
        s.mark(4, false);
        s.mark(1 << 30, true);
        assert_eq!(s.ok.iter().filter(|&&b| b).count(), 1);
        assert_eq!((s.twice, s.damaged, s.other), (1, 1, 1));
    }

    #[test]
    fn classes_parse() {
        assert_eq!(parse_class("stop-spoof"), Ok(Class::StopSpoof));
        assert!(parse_class("nope").unwrap_err().contains("window-thrash"));
    }
}
