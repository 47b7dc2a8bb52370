//! `firehose bench bypass`: `fhudpsrc`, `fhxdpsrc` and `fhdpdksrc` on the same offered
//! stream across a veth pair, side by side in one invocation.
//!
//! The benchmark makes its own network namespace and veth pair
//! ([`firehose_testkit::netns::VethPair`], removed at the end even on failure); the paced
//! sender (`fhtestsrc ! fhudpsink`) runs in this process on a thread inside the
//! namespace and sends to the host end's address; each receiver runs in a child process
//! (`firehose bench-recv`) on the host end, so its CPU time is its own. The peer gets a
//! static neighbour entry for the host end, because a DPDK or AF_XDP receiver takes
//! frames off the interface before the kernel could answer ARP.
//!
//! A veth is not a NIC: the receive work of the kernel path (and of AF_XDP in copy mode)
//! partly runs in the sender's softirq context, and no driver does zero-copy. The table
//! is a relative comparison on one machine, not a line-rate figure.
//!
//! `fhdpdksrc` lives in its own plugin (`libgstfirehosedpdk.so`, built only where libdpdk
//! is). The benchmark looks for it next to the `firehose` executable (or at
//! `--dpdk-plugin`) and loads it into the receiver process through `GST_PLUGIN_PATH`;
//! when it is not there, the report says so and the other receivers still run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use firehose_core::frame::build::format_mac;
use firehose_testkit::netns::{self, VethPair};

use crate::args::{parse_si, Args};
use crate::bench::{log_step, run_step, summary, PerCore, Route, Step, StepError};
use crate::benchproc::{command_line, gbps, publish_report};
use crate::benchrecv::Kind;
use crate::launch::EXIT_USAGE;
use crate::{signals, sys};

/// The UDP destination port of the benchmark stream.
pub const PORT: u16 = 7148;

/// Which DPDK poll-mode driver `fhdpdksrc` uses on the veth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pmd {
    /// `net_af_xdp`: DPDK's own AF_XDP driver.
    AfXdp,
    /// `net_af_packet`: a PACKET_MMAP ring.
    AfPacket,
}

impl Pmd {
    /// The `--vdev` device name DPDK gives the port.
    pub fn device(self) -> &'static str {
        match self {
            Pmd::AfXdp => "net_af_xdp0",
            Pmd::AfPacket => "net_af_packet0",
        }
    }

    /// The EAL arguments for this driver on `iface`.
    pub fn eal_args(self, iface: &str) -> String {
        match self {
            Pmd::AfXdp => format!("--no-huge --vdev={},iface={iface}", self.device()),
            // The default ring of 512 frames loses packets silently (MACHINES.md).
            Pmd::AfPacket => format!(
                "--no-huge --vdev={},iface={iface},framecnt=4096",
                self.device()
            ),
        }
    }
}

/// Options of `firehose bench bypass`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Length of each step.
    pub seconds: f64,
    /// Payload sizes, bytes (at most 1472: the veth keeps its 1500-byte MTU, which
    /// native XDP needs).
    pub sizes: Vec<u32>,
    /// Offered rates (bits/s).
    pub rates: Vec<u64>,
    /// Receivers, the first being the baseline of the ratios.
    pub receivers: Vec<Kind>,
    /// DPDK driver for `fhdpdksrc`.
    pub pmd: Pmd,
    /// `libgstfirehosedpdk.so`, if not next to the executable.
    pub dpdk_plugin: Option<PathBuf>,
    /// Let the sender use UDP GSO (64 KiB super-packets cross the veth whole).
    pub gso: bool,
    /// Also write the report here.
    pub out: Option<PathBuf>,
}

/// Default offered rates: from well inside what every receiver manages to past what the
/// in-namespace sender reaches over a veth on the reference VMs.
pub fn default_rates(quick: bool) -> Vec<u64> {
    let g = |x: f64| (x * 1e9) as u64;
    if quick {
        vec![g(0.5), g(2.0)]
    } else {
        vec![g(0.5), g(1.0), g(2.0), g(3.0), g(4.0), g(6.0)]
    }
}

const USAGE: &str = "firehose bench bypass [--seconds S] [--sizes 1472,…] [--rates 1G,…] \
                     [--receivers fhudpsrc,fhxdpsrc,fhdpdksrc] [--pmd af_xdp|af_packet] \
                     [--dpdk-plugin PATH] [--gso] [--out FILE.md] [--quick]";

/// Parses the options after `bench bypass` and runs the benchmark.
pub fn cmd(mut args: Args) -> i32 {
    let mut quick = false;
    let mut seconds = None;
    let mut rates = None;
    let mut o = Options {
        seconds: 3.0,
        sizes: vec![1472],
        rates: Vec::new(),
        receivers: vec![Kind::Fhudpsrc, Kind::Fhxdpsrc, Kind::Fhdpdksrc],
        pmd: Pmd::AfXdp,
        dpdk_plugin: None,
        gso: false,
        out: None,
    };
    while let Some(flag) = args.next_flag() {
        let value = |args: &mut Args| args.value(&flag);
        let list = |v: String| -> Result<Vec<f64>, String> {
            v.split(',').map(|x| parse_si(x.trim())).collect()
        };
        let r = match flag.name.as_str() {
            "--seconds" => value(&mut args).and_then(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0)
                    .map(|s| seconds = Some(s))
                    .ok_or(format!("--seconds '{v}' is not a positive number"))
            }),
            "--sizes" => value(&mut args).and_then(list).and_then(|v| {
                o.sizes = v.into_iter().map(|x| x as u32).collect();
                match o.sizes.iter().find(|&&s| s == 0 || s > 1472) {
                    Some(s) => Err(format!(
                        "--sizes: {s} is not within 1..=1472 (the veth's MTU is 1500)"
                    )),
                    None => Ok(()),
                }
            }),
            "--rates" => value(&mut args)
                .and_then(list)
                .map(|v| rates = Some(v.into_iter().map(|x| x as u64).collect())),
            "--receivers" => value(&mut args).and_then(|v| {
                o.receivers = v
                    .split(',')
                    .map(|k| Kind::parse(k.trim()))
                    .collect::<Result<_, _>>()?;
                Ok(())
            }),
            "--pmd" => value(&mut args).and_then(|v| {
                o.pmd = match v.as_str() {
                    "af_xdp" => Pmd::AfXdp,
                    "af_packet" => Pmd::AfPacket,
                    _ => return Err(format!("--pmd must be af_xdp or af_packet, not '{v}'")),
                };
                Ok(())
            }),
            "--dpdk-plugin" => value(&mut args).map(|v| o.dpdk_plugin = Some(PathBuf::from(v))),
            "--out" => value(&mut args).map(|v| o.out = Some(PathBuf::from(v))),
            "--gso" => {
                o.gso = true;
                Ok(())
            }
            "--quick" => {
                quick = true;
                Ok(())
            }
            other => Err(format!("unknown bench bypass option '{other}'")),
        };
        if let Err(e) = r {
            eprintln!("firehose: {e}\nusage: {USAGE}");
            return EXIT_USAGE;
        }
    }
    o.seconds = seconds.unwrap_or(if quick { 1.0 } else { 3.0 });
    o.rates = rates.unwrap_or_else(|| default_rates(quick));
    run(&o)
}

/// Where `libgstfirehosedpdk.so` is: `explicit`, or next to the running executable.
fn find_dpdk_plugin(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidate = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the firehose executable: {e}"))?
            .with_file_name("libgstfirehosedpdk.so"),
    };
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(format!(
            "{} not found; build it with `cargo build --release -p gstfirehosedpdk` \
             (needs libdpdk-dev) or pass --dpdk-plugin",
            candidate.display()
        ))
    }
}

/// A directory holding only a link to the DPDK plugin, for the receiver's
/// `GST_PLUGIN_PATH` (pointing it at the whole build directory would also load a second
/// copy of the main plugin, which `firehose` registers statically).
fn dpdk_plugin_dir(plugin: &Path) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("firehose-bench-dpdk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let plugin = plugin
        .canonicalize()
        .map_err(|e| format!("{}: {e}", plugin.display()))?;
    std::os::unix::fs::symlink(&plugin, dir.join("libgstfirehosedpdk.so"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The `bench-recv` arguments that put receiver `kind` on the host end of `pair`.
fn receiver_args(pair: &VethPair, pmd: Pmd, kind: Kind) -> Vec<String> {
    let mut a = vec![
        "--address".to_string(),
        pair.host_ip.to_string(),
        "--port".to_string(),
        PORT.to_string(),
    ];
    match kind {
        Kind::Udpsrc | Kind::Fhudpsrc => {}
        Kind::Fhxdpsrc => a.extend(["--interface".to_string(), pair.host_if.clone()]),
        Kind::Fhdpdksrc => a.extend([
            "--eal-args".to_string(),
            pmd.eal_args(&pair.host_if),
            "--dpdk-port".to_string(),
            pmd.device().to_string(),
        ]),
    }
    a
}

/// Runs the benchmark; returns the exit status.
pub fn run(o: &Options) -> i32 {
    let _ = signals::install();
    let started = Instant::now();
    let mut notes = Vec::new();
    let mut receivers = o.receivers.clone();
    let mut env = Vec::new();
    if receivers.contains(&Kind::Fhdpdksrc) {
        match find_dpdk_plugin(o.dpdk_plugin.as_deref()).and_then(|p| dpdk_plugin_dir(&p)) {
            Ok(dir) => env.push(("GST_PLUGIN_PATH".to_string(), dir.display().to_string())),
            Err(e) => {
                notes.push(format!("fhdpdksrc not run: {e}"));
                receivers.retain(|k| *k != Kind::Fhdpdksrc);
            }
        }
    }
    let pair = match VethPair::create("b") {
        Ok(p) => p,
        Err(e) => {
            let f = format!(
                "cannot create the benchmark's network namespace and veth pair ({e}); \
                 run as root, with iproute2 installed"
            );
            return publish_report(
                &report(o, &[], &[], &notes, started.elapsed(), Some(&f)),
                o.out.as_deref(),
                Some(&f),
            );
        }
    };
    if let Err(e) = netns::ip(&[
        "-n",
        &pair.ns,
        "neigh",
        "replace",
        &pair.host_ip.to_string(),
        "lladdr",
        &format_mac(&pair.host_mac),
        "dev",
        &pair.peer_if,
        "nud",
        "permanent",
    ]) {
        let f = format!("static neighbour entry: {e}");
        return publish_report(
            &report(o, &[], &receivers, &notes, started.elapsed(), Some(&f)),
            o.out.as_deref(),
            Some(&f),
        );
    }
    let args_of = |kind: Kind| receiver_args(&pair, o.pmd, kind);
    let route = Route {
        dest: pair.host_ip.into(),
        sender_ns: Some(&pair),
        recv_args: &args_of,
        recv_env: env,
        // A NIC delivers wire-sized frames. With GSO a veth hands the receiver 64 KiB
        // super-packets instead, which af_packet cannot capture and XDP must split.
        sink_props: if o.gso { "gso=true" } else { "gso=false" },
        cpu_limit: None,
    };
    let mut steps = Vec::new();
    let mut failure = None;
    'all: for &size in &o.sizes {
        for &rate in &o.rates {
            for &kind in &receivers {
                match run_step(&route, kind, size, rate, o.seconds) {
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
                // Let the interface settle between receivers (XDP programs detach,
                // DPDK releases its socket).
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    drop(pair);
    let r = report(
        o,
        &steps,
        &receivers,
        &notes,
        started.elapsed(),
        failure.as_deref(),
    );
    publish_report(&r, o.out.as_deref(), failure.as_deref())
}

/// Seconds per GB received, or "-" when nothing was.
fn per_gb(secs: f64, bytes: u64) -> String {
    if bytes == 0 {
        "-".into()
    } else {
        format!("{:.2}", secs / (bytes as f64 / 1e9))
    }
}

/// The markdown report.
pub fn report(
    o: &Options,
    steps: &[Step],
    receivers: &[Kind],
    notes: &[String],
    took: Duration,
    failure: Option<&str>,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "## firehose bench bypass — {}\n", sys::utc_now());
    let _ = writeln!(r, "- command: `{}`", command_line());
    let _ = writeln!(
        r,
        "- host: Linux {}, {} CPUs, {}; a veth pair, the sender's end in a private network namespace; took {:.0} s",
        sys::kernel_release(),
        sys::cpus(),
        gst::version_string(),
        took.as_secs_f64()
    );
    let _ = writeln!(
        r,
        "- sender (this process, a thread inside the namespace): `fhtestsrc packet-size=S num-packets=N ! fhudpsink host=<host end> port={PORT} rate=R gso={}` ({}), {:.1} s per step",
        o.gso,
        if o.gso {
            "UDP GSO: 64 KiB super-packets cross the veth whole"
        } else {
            "wire-sized frames, as a NIC delivers them"
        },
        o.seconds
    );
    let _ = writeln!(
        r,
        "- receivers (one child process each, one after the other, on the host end; all `! fakesink`): \
         `fhudpsrc address=<host end> port={PORT}`, `fhxdpsrc interface=<host end> port={PORT}`, \
         `fhdpdksrc eal-args=\"{}\" dpdk-port={} port={PORT}`",
        o.pmd.eal_args("<host end>"),
        o.pmd.device()
    );
    let _ = writeln!(
        r,
        "- loss = 1 − received/sent (sent = fhudpsink packets-sent); CPU = receiver getrusage user+sys, per GB (1e9 bytes) received; receiver cores = receiver CPU seconds / sender seconds, at most 1 (one streaming thread each); busy host cores = the whole machine's busy CPU seconds (/proc/stat: sender, receiver, softirq packet work no process is charged for) / sender seconds; per busy host core = highest lossless offered rate / busy host cores at that step — on a veth much of the receive path runs in softirq on the sender's CPU, so only the whole machine's CPU compares kernel and bypass receivers fairly; lossless = loss < {} %; highest lossless = the highest rate with every lower step lossless too",
        crate::bench::LOSSLESS * 100.0
    );
    let _ = writeln!(
        r,
        "- a veth is not a NIC: part of the kernel's receive work runs in the sender's softirq context and no driver does zero-copy; read the table as a relative comparison on this machine\n"
    );
    for n in notes {
        let _ = writeln!(r, "**{n}**\n");
    }
    if let Some(f) = failure {
        let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
    }
    let _ = writeln!(
        r,
        "| payload | receiver | asked Gb/s | offered Gb/s | received Gb/s | loss % | element drops | receiver cores | busy host cores | receiver CPU s/GB | host CPU s/GB |"
    );
    let _ = writeln!(r, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in steps {
        let _ = writeln!(
            r,
            "| {} B | {} | {} | {} | {} | {:.4} | {} | {:.2} | {:.2} | {} | {} |",
            s.size,
            s.kind.name(),
            gbps(s.asked as f64),
            gbps(s.offered_bps()),
            gbps(s.received_bps()),
            s.loss() * 100.0,
            s.element_drops,
            s.cores(),
            s.host_cores(),
            per_gb(s.cpu_s, s.received.1),
            per_gb(s.host_cpu_s, s.received.1)
        );
    }
    r.push('\n');
    r.push_str(&summary(&o.sizes, steps, receivers, PerCore::Host));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eal_args_per_driver() {
        assert_eq!(
            Pmd::AfPacket.eal_args("v0"),
            "--no-huge --vdev=net_af_packet0,iface=v0,framecnt=4096"
        );
        assert_eq!(
            Pmd::AfXdp.eal_args("v0"),
            "--no-huge --vdev=net_af_xdp0,iface=v0"
        );
    }

    #[test]
    fn a_missing_dpdk_plugin_says_how_to_build_it() {
        let e =
            find_dpdk_plugin(Some(Path::new("/nonexistent/libgstfirehosedpdk.so"))).unwrap_err();
        assert!(
            e.contains("cargo build --release -p gstfirehosedpdk"),
            "{e}"
        );
    }
}
