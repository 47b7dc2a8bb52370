//! `firehose bench`: receivers measured side by side, in one shape for every benchmark —
//! arguments ([`BenchCommand`]), runs ([`sweep`]: one step per receiver, size, rate and
//! repeat, each receiver in a child process of its own, [`child`]), receivers
//! ([`receiver`], the [`floor`] loop among them) and one report writer ([`report`],
//! markdown and SVG charts). `bench record` measures disk writers instead ([`record`]).
//!
//! Every sweep defaults to a plain sender: one datagram per send, no UDP GSO, the
//! traffic FPGAs and instruments send. `--gso` makes the sender use GSO; its reports say
//! so in their title and set-up, because a receiver with GRO then takes 64 KiB
//! super-packets whole, which no NIC-fed capture of such a sender sees.

pub mod child;
pub mod floor;
pub mod gpu;
pub mod hostile;
pub mod receiver;
pub mod record;
pub mod report;
pub mod shm;
pub mod spread;
pub mod sweep;
pub mod veth;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};

use crate::args::{parse_rate, parse_seconds, parse_size};
use crate::cpulimit::{parse_cores, CpuLimit};
use crate::launch::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use crate::sys;
use receiver::{Receiver, RecvConfig};
use report::Report;
use sweep::{Link, Plan, Traffic};

/// Socket receive buffer of every receiver.
pub const BUFFER_SIZE: u64 = 32 << 20;
/// What net.core.rmem_max must be for [`BUFFER_SIZE`] to be granted.
const RMEM_MAX: u64 = 64 << 20;
/// Default SPEAD heap payload: 1 MiB, the size spead2's benchmarks and MeerKAT use.
pub const DEFAULT_HEAP_SIZE: u32 = 1 << 20;
/// Default heaps per chunk in chunk mode: 8 MiB chunks of 1 MiB heaps.
pub const DEFAULT_HEAPS_PER_CHUNK: u32 = 8;

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Kernel UDP receivers side by side on loopback: the two floors (minimal recvmmsg
    /// loops, one blocking and one batching), stock udpsrc and fhudpsrc.
    Udp(UdpArgs),
    /// SPEAD receivers side by side: the two floors, spead2's own receiver, fhudpsrc !
    /// speaddepay, fhspeadsrc (heaps received in place), chunk mode and direct chunk
    /// mode (fhudpchunksrc); on a veth pair
    /// (`--link veth`) also fhxdpsrc feeding speaddepay and chunk mode.
    Spead(SpeadArgs),
    /// fhudpsrc, fhxdpsrc (AF_XDP) and fhdpdksrc (DPDK) on one stream across a veth pair
    /// the benchmark creates (sender in a private network namespace); needs root. Sizes
    /// above 1472 set the veth's MTU to 9000 (without fhdpdksrc)
    Bypass(BypassArgs),
    /// fhrecordsink (raw and pcap) against fio (O_DIRECT, libaio, several writes in
    /// flight) and filesink, on one filesystem.
    Record(RecordArgs),
    /// fhcudaupload's host-to-device throughput against a raw pinned cuMemcpyHtoDAsync
    /// loop of the same sizes (needs the CUDA driver and a GPU).
    Gpu(gpu::GpuArgs),
    /// The shared-memory transport between two processes: fhshmsink → fhshmsrc against
    /// stock shmsink → shmsrc, per buffer size.
    Shm(shm::ShmArgs),
    /// SPEAD receivers (fhspeadsrc, fhudpsrc ! speaddepay, fhudpchunksrc) keeping a
    /// legitimate stream intact while each class of bad packets floods them on loopback.
    Hostile(hostile::HostileArgs),
}

/// How many times, and where the results go: every benchmark's.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Runs (sweeps, or rounds of writers taking turns); figures are medians over them
    /// [default: 3, 1 with --quick]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    repeat: Option<u32>,
    /// Also write the markdown report to this file
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the charts (SVG) here; a sweep writes one per size, `-<size>` added when
    /// there are several [default: the --out file with .svg, else none]
    #[arg(long)]
    plot: Option<PathBuf>,
    /// A smoke test, not a measurement: one short run (two rates per size, 1 s steps)
    #[arg(long)]
    quick: bool,
}

impl RunArgs {
    /// Runs asked for, or the default.
    fn repeat(&self) -> u32 {
        self.repeat.unwrap_or(if self.quick { 1 } else { 3 })
    }

    /// Where the charts go, if anywhere.
    fn plot(&self) -> Option<PathBuf> {
        self.plot
            .clone()
            .or_else(|| self.out.as_ref().map(|o| o.with_extension("svg")))
    }
}

/// The veth's MTU when a size needs jumbo frames.
const JUMBO_MTU: u32 = 9000;
/// The largest UDP payload a `JUMBO_MTU` carries (IPv4, no options).
const MAX_JUMBO_PAYLOAD: u32 = JUMBO_MTU - 28;

/// The options every rate sweep has.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Length of each step in seconds [default: 3, 1 with --quick]
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Payload (packet) sizes in bytes, comma-separated
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Option<Vec<u32>>,
    /// Offered rates in bits/s for every size, e.g. 0.5G,1G,2G [default: per size]
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    rates: Option<Vec<u64>>,
    #[command(flatten)]
    run: RunArgs,
    /// Hold each receiver process to this many cores of one CPU (cgroup quota, needs
    /// root), e.g. 0.25, so that the receivers' limits fall below what the sender
    /// reaches and their highest lossless rates compare
    #[arg(long, value_parser = parse_cores)]
    cpu_limit: Option<f64>,
    /// The sender uses UDP GSO (64 KiB super-packets; receivers with GRO take them
    /// whole). Not what an FPGA sends: reported as its own labelled variant
    #[arg(long)]
    gso: bool,
    /// Sender threads, each sending an equal share of every rate (SPEAD heap counters
    /// interleaved). One thread reaches about 3.5 Gb/s of 1472-byte datagrams on a
    /// veth; bypass receivers under --cpu-limit take more than that
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    senders: u32,
    /// coalesce-us of our kernel receivers (fhudpsrc, fhudpchunksrc): the longest nap
    /// after the socket ran empty, a latency bound (0 = wake on every datagram)
    /// [default: the elements']
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    coalesce_us: Option<u32>,
    /// More properties of our kernel receivers (fhudpsrc, fhspeadsrc, fhudpchunksrc),
    /// space-separated, e.g. "timestamps=true gro=false address=0.0.0.0" (a variant to
    /// compare; the report's receiver descriptions show it)
    #[arg(long)]
    src_props: Option<String>,
}

/// `firehose bench udp`.
#[derive(Debug, Args)]
pub struct UdpArgs {
    #[command(flatten)]
    sweep: SweepArgs,
    /// Receivers, comma-separated: floor (blocking recvmmsg loop), batch-floor (batching
    /// recvmmsg loop), udpsrc, fhudpsrc
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "floor,batch-floor,udpsrc,fhudpsrc"
    )]
    receivers: Vec<Receiver>,
}

/// `firehose bench spead`.
#[derive(Debug, Args)]
pub struct SpeadArgs {
    #[command(flatten)]
    sweep: SweepArgs,
    /// Receivers, comma-separated: floor, batch-floor, spead2, speaddepay, spead-src, chunk,
    /// direct, and with --link veth xdp-speaddepay, xdp-spead-src, xdp-chunk, xdp-direct
    /// [default: all that the link allows]
    #[arg(long, value_delimiter = ',')]
    receivers: Option<Vec<Receiver>>,
    /// Heap payload in bytes
    #[arg(long, default_value_t = DEFAULT_HEAP_SIZE, value_parser = clap::value_parser!(u32).range(1..=(1 << 30)))]
    heap_size: u32,
    /// Python with spead2 4.5.1 [default: <repo>/.venv/bin/python3]
    #[arg(long)]
    python: Option<PathBuf>,
    /// Chunk modes' heaps per chunk
    #[arg(long, default_value_t = DEFAULT_HEAPS_PER_CHUNK, value_parser = clap::value_parser!(u32).range(1..=4096))]
    heaps_per_chunk: u32,
    /// landing of the receivers that land payloads (fhudpchunksrc, fhspeadsrc): auto, on, off
    /// [default: the elements']
    #[arg(long, value_parser = ["auto", "on", "off"])]
    landing: Option<String>,
    /// Where the stream travels: loopback, or a veth pair from a private network
    /// namespace (needs root; payloads above 1472 bytes set its MTU to 9000)
    #[arg(long, value_enum, default_value = "loopback")]
    link: LinkKind,
}

/// `--link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkKind {
    /// 127.0.0.1.
    Loopback,
    /// A veth pair the benchmark creates and removes.
    Veth,
}

/// `firehose bench bypass`.
#[derive(Debug, Args)]
pub struct BypassArgs {
    #[command(flatten)]
    sweep: SweepArgs,
    /// Receivers, comma-separated; the ratios are taken against fhudpsrc
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "floor,fhudpsrc,fhxdpsrc,fhdpdksrc"
    )]
    receivers: Vec<Receiver>,
    /// fhdpdksrc's DPDK driver on the veth
    #[arg(long, value_enum, default_value = "af_xdp")]
    pmd: veth::Pmd,
    /// libgstfirehosedpdk.so [default: next to the firehose executable; without it
    /// fhdpdksrc is left out, with a note]
    #[arg(long)]
    dpdk_plugin: Option<PathBuf>,
}

/// `firehose bench record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Where to write: the filesystem under test [default: the temp dir]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Bytes per run, SI suffixes allowed [default: 4G, 256M with --quick]
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// fio bs and fhrecordsink block-size, a multiple of 4096
    #[arg(long, default_value_t = 4 << 20, value_parser = parse_block)]
    block_size: u64,
    /// Payload bytes per packet of the test stream feeding the GStreamer writers
    #[arg(long, default_value_t = 8192, value_parser = parse_size)]
    packet_size: u32,
    /// Writers, in the order they take their turn in each round: fio (the reference
    /// the ratios are taken against), fio-fresh, raw, pcap, filesink
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fio,fio-fresh,raw,pcap,filesink",
        value_parser = record::parse_writer
    )]
    writers: Vec<record::Writer>,
    #[command(flatten)]
    run: RunArgs,
}

/// A byte count with an SI suffix, above 0.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let v = crate::args::parse_si(s)? as u64;
    if v == 0 {
        return Err(format!("'{s}' must be above 0 bytes"));
    }
    Ok(v)
}

/// A block size: bytes, a multiple of 4096 (O_DIRECT).
fn parse_block(s: &str) -> Result<u64, String> {
    let v = parse_bytes(s)?;
    if !v.is_multiple_of(4096) {
        return Err(format!("'{s}' must be a multiple of 4096 (O_DIRECT)"));
    }
    Ok(v)
}

/// Runs `firehose bench …`; returns the exit status.
pub fn run(cmd: BenchCommand) -> i32 {
    match cmd {
        BenchCommand::Udp(a) => udp(a),
        BenchCommand::Spead(a) => spead(a),
        BenchCommand::Bypass(a) => bypass(a),
        BenchCommand::Record(a) => record(a),
        BenchCommand::Gpu(a) => gpu::run(a),
        BenchCommand::Shm(a) => shm::shm(a),
        BenchCommand::Hostile(a) => hostile::run(a),
    }
}

/// Default offered rates (bits/s) for one benchmark and payload size.
fn default_rates(bench: &str, size: u32, quick: bool) -> Vec<u64> {
    let g = |v: &[f64]| v.iter().map(|x| (x * 1e9) as u64).collect();
    let big = size >= 4000;
    match (bench, big, quick) {
        (_, true, true) => g(&[1.0, 4.0]),
        (_, false, true) => g(&[0.5, 2.0]),
        // Up to and past what a plain sender offers over loopback on the reference VMs
        // (≈ 4 Gb/s of 1472-byte datagrams, ≈ 12 Gb/s of jumbo ones).
        ("udp", true, false) => g(&[1.0, 2.0, 4.0, 8.0, 12.0]),
        ("spead", true, false) => g(&[1.0, 2.0, 4.0, 6.0, 8.0]),
        (_, _, false) => g(&[0.5, 1.0, 2.0, 3.0, 4.0]),
    }
}

/// What every sweep shares: the resolved common options.
struct Common {
    seconds: f64,
    repeat: u32,
    limit: Option<CpuLimit>,
    rmem: String,
    started: Instant,
}

fn common(a: &SweepArgs) -> Result<Common, String> {
    let rmem = sys::ensure_sysctl_at_least("net.core.rmem_max", RMEM_MAX);
    eprintln!("bench: {rmem}");
    let limit = a.cpu_limit.map(CpuLimit::create).transpose()?;
    Ok(Common {
        seconds: a.seconds.unwrap_or(if a.run.quick { 1.0 } else { 3.0 }),
        repeat: a.run.repeat(),
        limit,
        rmem,
        started: Instant::now(),
    })
}

/// The report's first lines, the same for every sweep.
fn setup_lines(c: &Common, link: &Link, sender: &str, gso: bool) -> Vec<String> {
    vec![
        format!("command: `{}`", command_line()),
        format!(
            "host: Linux {}, {} CPUs, {}; {}; took {:.0} s",
            sys::kernel_release(),
            sys::cpus(),
            gst::version_string(),
            link.describe(),
            c.started.elapsed().as_secs_f64()
        ),
        format!(
            "sender (this process): `{sender}`, {:.1} s per step — {}",
            c.seconds,
            sender_label(gso)
        ),
        format!(
            "each receiver in its own child process, one after the other, socket buffer \
             {BUFFER_SIZE} bytes; {}",
            c.rmem
        ),
    ]
}

/// How the sender's traffic is labelled in every report.
fn sender_label(gso: bool) -> &'static str {
    if gso {
        "**GSO sender**: 64 KiB super-packets on the wire of loopback/veth; receivers with \
         GRO take them whole, which a capture of an FPGA never sees — a labelled variant, \
         not the headline"
    } else {
        "plain sender: one datagram per send (sendmmsg of single datagrams, no GSO), as \
         FPGAs and instruments send"
    }
}

/// Prints the report, writes it (and the charts) where asked; returns the exit status.
fn publish(r: &Report, run: &RunArgs, failure: Option<&str>) -> i32 {
    let mut md = r.markdown();
    let out = run.out.as_ref();
    let plot = run.plot();
    let mut status = EXIT_OK;
    if let Some(base) = plot {
        let charts = r.charts(&format!(
            "{} — {}",
            sys::utc_now(),
            command_line().chars().take(110).collect::<String>()
        ));
        let several = charts.len() > 1;
        for (size, chart) in charts {
            let path = report::chart_path(&base, size, several);
            match crate::plot::sweep_svg(&chart).and_then(|svg| crate::plot::write_svg(&path, &svg))
            {
                Ok(()) => {
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                    md.push_str(&format!(
                        "\n![{} {size} B: CPU per GB and loss against offered rate]({})\n",
                        r.bench,
                        name.unwrap_or_default()
                    ));
                    eprintln!("bench: chart written to {}", path.display());
                }
                Err(e) => {
                    eprintln!("bench: chart {}: {e}", path.display());
                    status = EXIT_ERROR;
                }
            }
        }
    }
    println!("{md}");
    if let Some(path) = out {
        if let Err(e) = std::fs::write(path, &md) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            return EXIT_ERROR;
        }
        eprintln!("bench: report written to {}", path.display());
    }
    if let Some(f) = failure {
        eprintln!("bench: stopped early: {f}");
        return EXIT_ERROR;
    }
    status
}

/// Leaves out receivers whose elements this build lacks (said in `notes`), unless the
/// user named them: then it is an error.
fn available(
    receivers: Vec<Receiver>,
    given: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<Receiver>, String> {
    let mut kept = Vec::new();
    for rx in receivers {
        let missing: Vec<&str> = rx
            .elements()
            .iter()
            .copied()
            .filter(|e| gst::ElementFactory::find(e).is_none())
            .collect();
        let no_handler = matches!(
            rx,
            Receiver::Chunk | Receiver::Direct | Receiver::XdpChunk | Receiver::XdpDirect
        ) && !firehose_chunk::handler::handler_names().contains(&"spead");
        if missing.is_empty() && !no_handler {
            kept.push(rx);
        } else if given {
            return Err(format!(
                "{} needs {} with the spead handler, which this build lacks",
                rx.name(),
                rx.elements().join(", ")
            ));
        } else {
            notes.push(format!(
                "{} left out: this build has no {} / spead handler",
                rx.name(),
                rx.elements().join(", ")
            ));
        }
    }
    Ok(kept)
}

fn usage(e: &str) -> i32 {
    eprintln!("firehose: {e}");
    EXIT_USAGE
}

/// One rate sweep as a benchmark defines it; [`run_sweep`] runs and reports it.
struct Sweep {
    /// `udp`, `spead`, `bypass`.
    name: &'static str,
    traffic: Traffic,
    sizes: Vec<u32>,
    receivers: Vec<Receiver>,
    /// Every receiver's configuration but its kind, size and link.
    base: RecvConfig,
    link: Link,
    /// Extra environment of the receiver processes.
    env: Vec<(String, String)>,
    /// The sender's pipeline, for the report.
    sender: String,
    /// Report lines before the receivers' descriptions.
    lines: Vec<String>,
    /// Report lines after them.
    notes: Vec<String>,
    /// The peer the ratios are taken against, when it runs.
    baseline: Receiver,
}

/// Runs `b` with the common options `a` (resolved in `c`) and publishes its report.
fn run_sweep(mut b: Sweep, a: &SweepArgs, c: Common) -> i32 {
    b.base.coalesce_us = a.coalesce_us;
    b.base.src_props = a.src_props.clone();
    let (name, quick, given) = (b.name, a.run.quick, a.rates.clone());
    let rates = move |size| {
        given
            .clone()
            .unwrap_or_else(|| default_rates(name, size, quick))
    };
    let plan = Plan {
        traffic: b.traffic,
        sizes: b.sizes,
        rates: &rates,
        receivers: b.receivers,
        base: b.base,
        seconds: c.seconds,
        repeat: c.repeat,
        gso: a.gso,
        senders: a.senders,
        link: &b.link,
        env: b.env,
        cpu_limit: c.limit.as_ref(),
    };
    let (steps, failure) = sweep::run(&plan, sweep::log_step);
    let mut setup = setup_lines(&c, &b.link, &b.sender, a.gso);
    if a.senders > 1 {
        setup.push(format!(
            "{} sender threads at once, each sending 1/{} of every rate{}",
            a.senders,
            a.senders,
            if matches!(b.traffic, Traffic::Heaps(_)) {
                " (heap counters interleaved: heap-cnt-start=1…N heap-cnt-step=N, \
                 stop-at-eos=false)"
            } else {
                ""
            }
        ));
    }
    setup.extend(b.lines);
    for rx in &plan.receivers {
        let mut cfg = plan.base.clone();
        cfg.kind = *rx;
        cfg.size = plan.sizes.first().copied().unwrap_or(1472);
        if let Link::Veth(p) = &b.link {
            cfg.address = p.host_ip.to_string();
            cfg.port = sweep::VETH_PORT;
            cfg.interface = Some(p.host_if.clone());
        }
        setup.push(format!("  {}", rx.describe(&cfg)));
    }
    setup.extend(b.notes);
    let r = Report {
        bench: if a.gso {
            format!("{} --gso", b.name)
        } else {
            b.name.to_string()
        },
        setup,
        steps: &steps,
        receivers: &plan.receivers,
        baseline: plan.receivers.contains(&b.baseline).then_some(b.baseline),
        host_cpu: matches!(b.link, Link::Veth(_)),
        budget: budget(&c),
        failure: failure.as_deref(),
    };
    publish(&r, &a.run, failure.as_deref())
}

fn udp(a: UdpArgs) -> i32 {
    if let Some(rx) = a
        .receivers
        .iter()
        .find(|r| r.counts_heaps() || r.needs_interface())
    {
        return usage(&format!(
            "bench udp runs floor, batch-floor, udpsrc and fhudpsrc on loopback; {} belongs \
             to bench {}",
            rx.name(),
            if rx.needs_interface() {
                "bypass"
            } else {
                "spead"
            }
        ));
    }
    let c = match common(&a.sweep) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let sender = format!(
        "fhtestsrc packet-size=S num-packets=N ! fhudpsink rate=R gso={}",
        a.sweep.gso
    );
    run_sweep(
        Sweep {
            name: "udp",
            traffic: Traffic::Datagrams,
            sizes: a.sweep.sizes.clone().unwrap_or(vec![8972, 1472]),
            receivers: a.receivers.clone(),
            base: RecvConfig::new(Receiver::Floor),
            link: Link::Loopback,
            env: Vec::new(),
            sender,
            lines: vec!["receivers (counted where they leave: udpsrc by a pad probe, fhudpsrc by its stats, the floors by their own counts):".into()],
            notes: Vec::new(),
            baseline: Receiver::Udpsrc,
        },
        &a.sweep,
        c,
    )
}

/// The budget as the report gives it.
fn budget(c: &Common) -> Option<(f64, String)> {
    c.limit.as_ref().map(|l| (l.cores(), l.describe()))
}

fn fail(e: &str) -> i32 {
    eprintln!("bench: {e}");
    EXIT_ERROR
}

/// Whether every size fits a veth's payload: at most [`MAX_JUMBO_PAYLOAD`] bytes (a
/// 9000-byte MTU).
fn veth_sizes(sizes: &[u32]) -> Result<(), String> {
    match sizes.iter().find(|&&s| s > MAX_JUMBO_PAYLOAD) {
        Some(bad) => Err(format!(
            "a veth carries payloads of at most {MAX_JUMBO_PAYLOAD} bytes (a {JUMBO_MTU}-byte \
             MTU), not {bad}"
        )),
        None => Ok(()),
    }
}

/// The sweep's veth pair, with a [`JUMBO_MTU`] (and a note saying so) only where a size
/// needs jumbo frames, so that 1472-byte runs keep the 1500-byte MTU (and fhxdpsrc its
/// single-frame mode).
fn veth_for(
    sizes: &[u32],
    notes: &mut Vec<String>,
) -> Result<firehose_testkit::netns::VethPair, String> {
    let pair = veth::create_pair()?;
    if sizes.iter().any(|&s| s > 1472) {
        pair.set_mtu(JUMBO_MTU)
            .map_err(|e| format!("veth MTU {JUMBO_MTU}: {e}"))?;
        notes.push(format!(
            "the veth's MTU is {JUMBO_MTU} (jumbo frames) for every size: fhxdpsrc joins \
             datagrams longer than a 4096-byte UMEM frame from the frames the kernel splits \
             them into (multi-buffer AF_XDP)"
        ));
    }
    Ok(pair)
}

/// `bench spead`'s receivers when none are named: both floors, spead2 and ours; the
/// bypass ones too on a veth.
fn spead_receivers(veth: bool) -> Vec<Receiver> {
    let mut v = vec![
        Receiver::Floor,
        Receiver::BatchFloor,
        Receiver::Spead2,
        Receiver::Speaddepay,
        Receiver::SpeadSrc,
        Receiver::Chunk,
        Receiver::Direct,
    ];
    if veth {
        v.extend([
            Receiver::XdpSpeaddepay,
            Receiver::XdpSpeadSrc,
            Receiver::XdpChunk,
            Receiver::XdpDirect,
        ]);
    }
    v
}

fn spead(a: SpeadArgs) -> i32 {
    let veth = a.link == LinkKind::Veth;
    let sizes = a
        .sweep
        .sizes
        .clone()
        .unwrap_or(if veth { vec![1472] } else { vec![8972, 1472] });
    if let Some(&bad) = sizes.iter().find(|&&s| s < 64) {
        return usage(&format!("packet size {bad} is below SPEAD's minimum of 64"));
    }
    if veth {
        if let Err(e) = veth_sizes(&sizes) {
            return usage(&e);
        }
    }
    let given = a.receivers.is_some();
    let receivers = a.receivers.clone().unwrap_or_else(|| spead_receivers(veth));
    if let Some(rx) = receivers.iter().find(|r| {
        matches!(
            r,
            Receiver::Udpsrc | Receiver::Fhudpsrc | Receiver::Fhxdpsrc | Receiver::Fhdpdksrc
        )
    }) {
        return usage(&format!(
            "{} is a datagram receiver: bench spead runs floor, batch-floor, spead2, \
             speaddepay, spead-src, chunk, direct, xdp-speaddepay, xdp-spead-src, xdp-chunk \
             and xdp-direct",
            rx.name()
        ));
    }
    if !veth {
        if let Some(rx) = receivers.iter().find(|r| r.needs_interface()) {
            return usage(&format!(
                "{} receives from an interface: run it with --link veth",
                rx.name()
            ));
        }
    }
    let mut notes = Vec::new();
    let receivers = match available(receivers, given, &mut notes) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let c = match common(&a.sweep) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let link = if veth {
        match veth_for(&sizes, &mut notes) {
            Ok(p) => Link::Veth(p),
            Err(e) => return fail(&e),
        }
    } else {
        Link::Loopback
    };
    let mut base = RecvConfig::new(Receiver::Floor);
    base.heap_size = a.heap_size;
    base.heaps_per_chunk = a.heaps_per_chunk;
    base.landing = a.landing.clone();
    base.python = a.python.clone();
    let sender = format!(
        "fakesrc num-buffers=N sizetype=fixed sizemax={h} filltype=nothing ! speadpay \
         packet-size=S descriptors-separate=true ! fhudpsink rate=R gso={}",
        a.sweep.gso,
        h = a.heap_size
    );
    run_sweep(
        Sweep {
            name: "spead",
            traffic: Traffic::Heaps(a.heap_size),
            sizes,
            receivers,
            base,
            link,
            env: Vec::new(),
            sender,
            lines: vec![
                format!(
                    "SPEAD-64-40 heaps of {} bytes (one item), packets byte-identical to spead2's sender",
                    a.heap_size
                ),
                "receivers (heap receivers count complete data heaps and their payload; the floors count datagrams and UDP payload, SPEAD headers included):".into(),
            ],
            notes: notes.into_iter().map(|n| format!("note: {n}")).collect(),
            baseline: Receiver::Spead2,
        },
        &a.sweep,
        c,
    )
}

fn bypass(a: BypassArgs) -> i32 {
    let sizes = a.sweep.sizes.clone().unwrap_or(vec![1472]);
    if let Err(e) = veth_sizes(&sizes) {
        return usage(&e);
    }
    if sizes.iter().any(|&s| s > 1472) && a.receivers.contains(&Receiver::Fhdpdksrc) {
        return usage(
            "fhdpdksrc's PMDs on a veth take frames of one mbuf: run sizes above 1472 \
             without it (--receivers floor,fhudpsrc,fhxdpsrc)",
        );
    }
    if let Some(rx) = a.receivers.iter().find(|r| r.counts_heaps()) {
        return usage(&format!(
            "{} is a SPEAD receiver: run it with bench spead --link veth",
            rx.name()
        ));
    }
    let mut notes = Vec::new();
    let mut receivers = a.receivers.clone();
    let mut env = Vec::new();
    if receivers.contains(&Receiver::Fhdpdksrc) {
        match veth::find_dpdk_plugin(a.dpdk_plugin.as_deref())
            .and_then(|p| veth::dpdk_plugin_dir(&p))
        {
            Ok(dir) => env.push(("GST_PLUGIN_PATH".to_string(), dir.display().to_string())),
            Err(e) => {
                notes.push(format!("note: fhdpdksrc not run: {e}"));
                receivers.retain(|k| *k != Receiver::Fhdpdksrc);
            }
        }
    }
    let c = match common(&a.sweep) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let pair = match veth_for(&sizes, &mut notes) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let mut base = RecvConfig::new(Receiver::Floor);
    a.pmd.configure(&mut base, &pair);
    let sender = format!(
        "fhtestsrc packet-size=S num-packets=N ! fhudpsink host=<host end> port={} rate=R gso={}",
        sweep::VETH_PORT,
        a.sweep.gso
    );
    notes.push(
        "a veth is not a NIC: part of the kernel's receive work runs in the sender's softirq \
         context and no driver does zero-copy; read the table as a relative comparison on \
         this machine"
            .into(),
    );
    run_sweep(
        Sweep {
            name: "bypass",
            traffic: Traffic::Datagrams,
            sizes,
            receivers,
            base,
            link: Link::Veth(pair),
            env,
            sender,
            lines: vec![
                "receivers (on the host end, counted by their stats; the floor by its own count):"
                    .into(),
            ],
            notes,
            baseline: Receiver::Fhudpsrc,
        },
        &a.sweep,
        c,
    )
}

fn record(a: RecordArgs) -> i32 {
    let mut o = record::Options {
        quick: a.run.quick,
        out: a.run.out.clone(),
        plot: a.run.plot(),
        repeat: a.run.repeat(),
        block_size: a.block_size,
        packet_size: a.packet_size,
        writers: a.writers,
        ..Default::default()
    };
    if let Some(d) = a.dir {
        o.dir = d;
    }
    o.bytes = a
        .size
        .unwrap_or(if a.run.quick { 256 << 20 } else { o.bytes });
    // Whole blocks, so fio (which writes whole blocks only) writes what the others do.
    o.bytes = o.bytes.next_multiple_of(o.block_size);
    record::run(&o)
}

/// The command line that is running, quoted for copying into a shell (for reports).
pub fn command_line() -> String {
    std::env::args()
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes a command-line argument for display when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("--sizes=1472,8972"), "--sizes=1472,8972");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn default_rates_per_bench() {
        assert_eq!(
            default_rates("udp", 1472, true),
            vec![500_000_000, 2_000_000_000]
        );
        assert_eq!(default_rates("spead", 8972, false).len(), 5);
        assert!(default_rates("bypass", 1472, false)
            .iter()
            .all(|&r| r <= 4_000_000_000));
    }

    #[test]
    fn both_floors_run_by_default() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            bench: BenchCommand,
        }
        use clap::Parser;
        let Cli {
            bench: BenchCommand::Udp(a),
        } = Cli::try_parse_from(["x", "udp"]).unwrap()
        else {
            panic!("bench udp")
        };
        assert_eq!(
            a.receivers,
            [
                Receiver::Floor,
                Receiver::BatchFloor,
                Receiver::Udpsrc,
                Receiver::Fhudpsrc
            ]
        );
        for veth in [false, true] {
            assert_eq!(
                spead_receivers(veth)[..2],
                [Receiver::Floor, Receiver::BatchFloor]
            );
        }
        // Named on the command line like any receiver.
        let Cli {
            bench: BenchCommand::Spead(a),
        } = Cli::try_parse_from(["x", "spead", "--receivers", "batch-floor,spead2"]).unwrap()
        else {
            panic!("bench spead")
        };
        assert_eq!(
            a.receivers,
            Some(vec![Receiver::BatchFloor, Receiver::Spead2])
        );
    }

    #[test]
    fn block_sizes() {
        assert_eq!(parse_block("4194304"), Ok(4 << 20));
        // SI suffixes are decimal: 4M is not a whole number of 4 KiB pages.
        assert!(parse_block("4M").is_err());
        assert!(parse_block("1000").unwrap_err().contains("4096"));
        assert!(parse_bytes("0").is_err());
    }
}
