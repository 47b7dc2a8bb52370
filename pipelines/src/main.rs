//! The `firehose` command: run Firehose GStreamer pipelines with live statistics
//! (`launch`), check a loopback capture end to end (`demo`) and compare receivers
//! (`bench udp`). The Firehose elements are registered statically, so no
//! GST_PLUGIN_PATH is needed.

mod args;
mod bench;
mod benchbypass;
mod benchproc;
mod benchrecord;
mod benchrecv;
mod benchspead;
mod cpulimit;
mod demo;
mod launch;
mod pipelinefile;
mod session;
mod signals;
mod statsline;
mod sys;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use args::{parse_list, parse_rate, parse_seconds, parse_size, Args};
use launch::{EXIT_ERROR, EXIT_USAGE};

/// The usage text, printed by `firehose help` and on usage errors.
const USAGE: &str = "\
firehose — run Firehose GStreamer pipelines at line rate

USAGE:
    firehose launch [OPTIONS] <PIPELINE DESCRIPTION>...
    firehose launch [OPTIONS] -f <FILE.pipeline> [KEY=VALUE]...
    firehose demo [--seconds S] [--rate BITS]
    firehose bench udp [--seconds S] [--sizes 8972,1472] [--rates R,R,...] [--cpu-limit CORES]
                       [--out FILE.md] [--quick]
    firehose bench record [--dir DIR] [--size BYTES] [--block-size BYTES] [--repeat N] [--out FILE.md] [--quick]
    firehose bench spead [--seconds S] [--sizes 8972,1472] [--rates R,...] [--heap-size B]
                         [--receivers spead2,speaddepay,chunk,direct] [--python PY] [--cpu-limit CORES]
                         [--coalesce-us N] [--heaps-per-chunk N] [--landing auto|on|off]
                         [--out FILE.md] [--quick]
    firehose bench bypass [--seconds S] [--sizes 1472] [--rates R,...] [--pmd af_xdp|af_packet]
                          [--receivers fhudpsrc,fhxdpsrc,fhdpdksrc] [--dpdk-plugin PATH] [--gso] [--out FILE.md] [--quick]
    firehose help | --version

launch: runs a gst-launch style pipeline (Firehose and stock elements), prints a
statistics line every second on stderr and a summary on stdout at the end.
Ctrl-C or SIGTERM sends EOS and waits for it (Ctrl-C again stops at once).
    -f, --file FILE      read the pipeline from FILE: '#' lines are comments, newlines
                         are spaces, ${KEY} and ${KEY:-default} take KEY=VALUE arguments
    -q, --quiet          no live statistics line
    --eos-timeout S      seconds to wait for EOS after Ctrl-C before stopping (default 5)
    --dry-run            build the pipeline, print its description and exit
  exit status: 0 end of stream or stopped by a signal, 1 element error, 2 bad usage or
  a pipeline that does not parse

demo: fhtestsrc ! fhudpsink sends verifiable packets over 127.0.0.1 to
fhudpsrc ! fhcheck; exits 0 only if nothing was lost, duplicated, corrupted or dropped.
    --seconds S          how long to send (default 3)
    --rate BITS          offered rate in bits/s, SI suffixes allowed (default 200M)

bench udp: stock udpsrc against fhudpsrc on loopback at stepped offered rates, each
receiver in its own process; prints a markdown report (raises net.core.rmem_max to
64 MiB when run as root).
    --seconds S          length of each step (default 3, 1 with --quick)
    --sizes LIST         payload sizes in bytes (default 8972,1472)
    --rates LIST         offered rates for every size, e.g. 0.5G,1G,2G
                         (default: 1,2,4,8,12,16,20G for sizes >= 4000 B,
                         0.5,1,2,3,4,5,6G otherwise)
    --cpu-limit CORES    hold each receiver process to CORES of one CPU (cgroup quota,
                         10 ms period; needs root), e.g. 0.25, so that the receivers' own
                         limits fall below what the sender reaches and their highest
                         lossless rates compare
    --out FILE.md        also write the report to FILE.md
    --quick              two rates per size, 1 s steps (about 15 s in all)

bench record: fhrecordsink (raw and pcap) against fio sequential O_DIRECT writes of the
same block size and against filesink, on one filesystem; prints a markdown report.
    --dir DIR            where to write (default the temp dir); the filesystem under test
    --size BYTES         bytes per run (default 4G, 256M with --quick)
    --block-size BYTES   fio bs and fhrecordsink block-size (default 4M)
    --packet-size BYTES  test packet size feeding the GStreamer writers (default 8192)
    --repeat N           runs per writer, best reported (default 3, 1 with --quick)
    --out FILE.md        also write the report to FILE.md

bench spead: SPEAD receivers on loopback at stepped offered rates — spead2 4.5.1's own
receiver (Python, memory pool), fhudpsrc ! speaddepay, chunk mode (fhudpsrc !
fhdepay handler=spead) and direct chunk mode (fhudpchunksrc handler=spead, payloads
received straight into chunks) — each in its own process, fed by fakesrc ! speadpay ! fhudpsink
(1 MiB heaps, byte-identical to spead2's sender). Reports the highest lossless heap rate
and receiver CPU per GB as markdown. spead2 comes from .venv (see README).
    --sizes LIST         packet sizes (default 8972,1472)
    --rates LIST         offered rates in bits/s (default 1,2,4,6,8,10G for 8972,
                         0.5,1,2,3,4G for 1472; --quick: two of them)
    --heap-size B        heap payload in bytes (default 1048576)
    --receivers LIST     which receivers (default all; chunk and direct are left out,
                         with a note, when this build lacks fhdepay / fhudpchunksrc)
    --python PY          Python with spead2 4.5.1 (default <repo>/.venv/bin/python3)
    --coalesce-us N      fhudpsrc coalesce-us for our receivers (default: the element's,
                         2000; 0 = wake on every datagram)
    --heaps-per-chunk N  chunk and direct modes' heaps per chunk (default 8: 8 MiB chunks)
    --landing MODE       landing of the direct receiver (fhudpchunksrc) and speaddepay:
                         auto (default: lands into chunks or heaps of at most 2 MiB), on,
                         off
    --seconds, --out, --quick, --cpu-limit   as for bench udp

bench bypass: fhudpsrc, fhxdpsrc (AF_XDP) and fhdpdksrc (DPDK) on the same stream across
a veth pair that the benchmark creates (sender in a private network namespace, removed
at the end); each receiver in its own process. Reports the highest lossless rate, that
rate per receiver core and CPU per GB as markdown; a veth is not a NIC, so the figures
compare the receivers, they are not line rates. Needs root.
    --sizes LIST         payload sizes, at most 1472 (default 1472)
    --rates LIST         offered rates (default 0.5,1,2,3,4,6G; --quick: 0.5,2G)
    --receivers LIST     which receivers, the first is the ratios' baseline
                         (default fhudpsrc,fhxdpsrc,fhdpdksrc)
    --pmd DRIVER         fhdpdksrc's DPDK driver on the veth: af_xdp (default) or af_packet
    --dpdk-plugin PATH   libgstfirehosedpdk.so (default: next to the firehose executable;
                         without it fhdpdksrc is left out, with a note)
    --gso                sender uses UDP GSO: 64 KiB super-packets cross the veth whole
                         (default: wire-sized frames, as a NIC delivers them; af_packet
                         cannot capture GSO super-packets)
    --seconds, --out, --quick   as for bench udp
";

fn usage_error(msg: &str) -> i32 {
    eprintln!("firehose: {msg}\n\n{USAGE}");
    EXIT_USAGE
}

fn init() -> Result<(), String> {
    gst::init().map_err(|e| format!("cannot initialise GStreamer: {e}"))?;
    gstfirehose::register_static()
        .map_err(|e| format!("cannot register the Firehose elements: {e}"))
}

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    let Some(command) = argv.next() else {
        return ExitCode::from(usage_error("no command given") as u8);
    };
    let args = Args::new(argv);
    if matches!(command.as_str(), "help" | "-h" | "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if matches!(command.as_str(), "--version" | "-V") {
        println!("firehose {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if let Err(e) = init() {
        eprintln!("firehose: {e}");
        return ExitCode::from(EXIT_ERROR as u8);
    }
    let status = match command.as_str() {
        "launch" => cmd_launch(args),
        "demo" => cmd_demo(args),
        "bench" => cmd_bench(args),
        "bench-recv" => cmd_bench_recv(args),
        "bench-spead-recv" => benchspead::cmd_recv(args),
        other => usage_error(&format!("unknown command '{other}'")),
    };
    ExitCode::from(status as u8)
}

/// Reads a flag value or turns the problem into a usage error.
macro_rules! value {
    ($args:expr, $flag:expr, $parse:expr) => {
        match $args.value(&$flag).and_then(|v| $parse(&v)) {
            Ok(v) => v,
            Err(e) => return usage_error(&e),
        }
    };
}

fn cmd_launch(mut args: Args) -> i32 {
    let mut opts = launch::LaunchOptions::default();
    let mut file: Option<PathBuf> = None;
    let mut dry_run = false;
    let mut words = Vec::new();
    while let Some(flag) = args.next_flag() {
        // Options come first; the first other word starts the pipeline, whose own
        // words (e.g. a property value starting with '-') are never taken as options.
        if !words.is_empty() || (file.is_some() && !flag.name.starts_with('-')) {
            words.push(flag.name);
            words.extend(args.rest());
            break;
        }
        match flag.name.as_str() {
            "-f" | "--file" => {
                file = Some(value!(args, flag, |v: &str| Ok::<_, String>(
                    PathBuf::from(v)
                )))
            }
            "-q" | "--quiet" => opts.quiet = true,
            "--dry-run" => dry_run = true,
            "--eos-timeout" => {
                opts.eos_timeout = Duration::from_secs_f64(value!(args, flag, parse_seconds))
            }
            "--" => {
                words.extend(args.rest());
                break;
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return usage_error(&format!("unknown launch option '{s}'"))
            }
            _ => words.push(flag.name),
        }
    }
    let description = match file {
        Some(path) => {
            let vars = match pipelinefile::parse_assignments(&words) {
                Ok(v) => v,
                Err(e) => return usage_error(&e),
            };
            match pipelinefile::load(&path, &vars) {
                Ok(filled) => {
                    for key in &filled.unused {
                        eprintln!(
                            "firehose: warning: {key} is not used by {} (typo?)",
                            path.display()
                        );
                    }
                    filled.description
                }
                Err(e) => {
                    eprintln!("firehose: {e}");
                    return EXIT_USAGE;
                }
            }
        }
        None if words.is_empty() => {
            return usage_error("launch needs a pipeline description or -f FILE")
        }
        // As with gst-launch, unquoted words ("fakesrc ! fakesink") are joined.
        None => words.join(" "),
    };
    if dry_run {
        return match session::parse(&description) {
            Ok(_) => {
                println!("{description}");
                0
            }
            Err(e) => {
                eprintln!("firehose: could not build the pipeline: {e}");
                eprintln!("  pipeline: {description}");
                EXIT_USAGE
            }
        };
    }
    launch::run(&description, &opts)
}

fn cmd_demo(mut args: Args) -> i32 {
    let mut opts = demo::DemoOptions::default();
    while let Some(flag) = args.next_flag() {
        match flag.name.as_str() {
            "--seconds" => opts.seconds = value!(args, flag, parse_seconds),
            "--rate" => opts.rate = value!(args, flag, parse_rate),
            other => return usage_error(&format!("unknown demo option '{other}'")),
        }
    }
    demo::run(&opts)
}

fn cmd_bench(mut args: Args) -> i32 {
    match args.next_flag().map(|f| f.name) {
        Some(kind) if kind == "udp" => {}
        Some(kind) if kind == "spead" => return benchspead::cmd(args),
        Some(kind) if kind == "record" => return benchrecord::cmd(args),
        Some(kind) if kind == "bypass" => return benchbypass::cmd(args),
        Some(kind) => {
            return usage_error(&format!(
                "unknown benchmark '{kind}' (known: udp, spead, record, bypass)"
            ))
        }
        None => return usage_error("bench needs a benchmark name: firehose bench udp"),
    }
    let mut opts = bench::BenchOptions::default();
    let mut seconds = None;
    while let Some(flag) = args.next_flag() {
        match flag.name.as_str() {
            "--seconds" => seconds = Some(value!(args, flag, parse_seconds)),
            "--sizes" => opts.sizes = value!(args, flag, |v: &str| parse_list(v, parse_size)),
            "--rates" => opts.rates = Some(value!(args, flag, |v: &str| parse_list(v, parse_rate))),
            "--out" => {
                opts.out = Some(value!(args, flag, |v: &str| Ok::<_, String>(
                    PathBuf::from(v)
                )))
            }
            "--quick" => opts.quick = true,
            "--cpu-limit" => opts.cpu_limit = Some(value!(args, flag, cpulimit::parse_cores)),
            other => return usage_error(&format!("unknown bench option '{other}'")),
        }
    }
    opts.seconds = seconds.unwrap_or(if opts.quick { 1.0 } else { 3.0 });
    bench::run(&opts)
}

/// The hidden receiver process of `bench`; its usage is in [`benchrecv`].
fn cmd_bench_recv(mut args: Args) -> i32 {
    let mut kind = None;
    let mut size = 1472;
    let mut buffer_size = bench::BUFFER_SIZE;
    let mut timeout = Duration::from_secs(60);
    let mut address = "127.0.0.1".to_string();
    let mut port = 0u16;
    let mut interface = None;
    let mut eal_args = None;
    let mut dpdk_port = None;
    let text = |v: &str| Ok::<_, String>(v.to_string());
    while let Some(flag) = args.next_flag() {
        match flag.name.as_str() {
            "--kind" => kind = Some(value!(args, flag, benchrecv::Kind::parse)),
            "--address" => address = value!(args, flag, text),
            "--port" => {
                port = value!(args, flag, |v: &str| v
                    .parse::<u16>()
                    .map_err(|_| format!("--port '{v}' is not a UDP port")))
            }
            "--interface" => interface = Some(value!(args, flag, text)),
            "--eal-args" => eal_args = Some(value!(args, flag, text)),
            "--dpdk-port" => dpdk_port = Some(value!(args, flag, text)),
            "--size" => size = value!(args, flag, parse_size),
            "--buffer-size" => {
                buffer_size = value!(args, flag, |v: &str| v
                    .parse::<u64>()
                    .map_err(|_| format!("--buffer-size '{v}' is not a byte count")))
            }
            "--timeout" => timeout = Duration::from_secs_f64(value!(args, flag, parse_seconds)),
            other => return usage_error(&format!("unknown bench-recv option '{other}'")),
        }
    }
    let Some(kind) = kind else {
        return usage_error("bench-recv needs --kind udpsrc|fhudpsrc|fhxdpsrc|fhdpdksrc");
    };
    let mut opts = benchrecv::RecvOptions::loopback(kind, size, buffer_size, timeout);
    opts.address = address;
    opts.port = port;
    opts.interface = interface;
    opts.dpdk = eal_args.zip(dpdk_port);
    benchrecv::run(&opts)
}
