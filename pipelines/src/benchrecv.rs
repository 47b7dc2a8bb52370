//! `firehose bench-recv` (hidden): one benchmark receiver in its own process, so that its
//! CPU time (getrusage RUSAGE_SELF) covers the receiver and nothing else.
//!
//! Protocol with the parent (`bench`), one line each on stdout:
//! - `ready port=P` once the pipeline is PLAYING and bound;
//! - then, after the parent writes `stop` (or closes stdin, or `--timeout` passes):
//!   `result packets=… bytes=… cpu_s=… wall_s=… drops_kernel=… drops_pool=… drops_nic=… truncated=… memory=…`;
//! - `error <text>` instead, when something fails (exit status 1).

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::stats::names;
use gst::prelude::*;

use crate::session::{int_property, stats_property, BusEvent, Session};
use crate::signals;
use crate::statsline::counter;
use crate::sys;

/// Which receiver to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Stock GStreamer `udpsrc` (one buffer per datagram).
    Udpsrc,
    /// Firehose `fhudpsrc` (batches).
    Fhudpsrc,
    /// Firehose `fhxdpsrc` (AF_XDP on an interface).
    Fhxdpsrc,
    /// Firehose `fhdpdksrc` (DPDK; its plugin is loaded from `GST_PLUGIN_PATH`).
    Fhdpdksrc,
}

impl Kind {
    /// The element name, as written in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Udpsrc => "udpsrc",
            Kind::Fhudpsrc => "fhudpsrc",
            Kind::Fhxdpsrc => "fhxdpsrc",
            Kind::Fhdpdksrc => "fhdpdksrc",
        }
    }

    /// Parses an element name ([`Self::name`]).
    pub fn parse(s: &str) -> Result<Self, String> {
        [
            Kind::Udpsrc,
            Kind::Fhudpsrc,
            Kind::Fhxdpsrc,
            Kind::Fhdpdksrc,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| format!("--kind must be udpsrc, fhudpsrc, fhxdpsrc or fhdpdksrc, not '{s}'"))
    }
}

/// Options of `firehose bench-recv`.
#[derive(Debug, Clone)]
pub struct RecvOptions {
    /// Receiver element.
    pub kind: Kind,
    /// Largest payload expected, bytes.
    pub size: u32,
    /// SO_RCVBUF to ask for, bytes.
    pub buffer_size: u64,
    /// Stop on our own after this long, in case the parent vanished without closing stdin.
    pub timeout: Duration,
    /// Address to receive on (kernel sources) or to filter on.
    pub address: String,
    /// UDP port; 0 = any free one (kernel sources only).
    pub port: u16,
    /// Network interface (`fhxdpsrc`).
    pub interface: Option<String>,
    /// `fhdpdksrc`'s `eal-args` and `dpdk-port`.
    pub dpdk: Option<(String, String)>,
}

impl RecvOptions {
    /// Loopback, any free port: the `bench udp` receiver.
    pub fn loopback(kind: Kind, size: u32, buffer_size: u64, timeout: Duration) -> Self {
        Self {
            kind,
            size,
            buffer_size,
            timeout,
            address: "127.0.0.1".into(),
            port: 0,
            interface: None,
            dpdk: None,
        }
    }
}

/// The receiver pipeline for `opts`. Both end in the same cheapest sink.
pub fn description(opts: &RecvOptions) -> String {
    let sink = "fakesink name=sink sync=false async=false enable-last-sample=false";
    match opts.kind {
        // Stock udpsrc in its best configuration: a buffer pool sized to the payload
        // (mtu) and no sender-address meta.
        Kind::Udpsrc => format!(
            "udpsrc name=src address={} port={} buffer-size={} mtu={} \
             retrieve-sender-address=false ! {sink}",
            opts.address,
            opts.port,
            opts.buffer_size,
            opts.size.max(1492)
        ),
        Kind::Fhudpsrc => format!(
            "fhudpsrc name=src address={} port={} buffer-size={} ! {sink}",
            opts.address, opts.port, opts.buffer_size
        ),
        Kind::Fhxdpsrc => format!(
            "fhxdpsrc name=src interface={} port={} ! {sink}",
            opts.interface.as_deref().unwrap_or("lo"),
            opts.port
        ),
        Kind::Fhdpdksrc => {
            let (eal, dev) = opts.dpdk.clone().unwrap_or_default();
            format!(
                "fhdpdksrc name=src eal-args=\"{eal}\" dpdk-port={dev} port={} ! {sink}",
                opts.port
            )
        }
    }
}

/// Runs the receiver; returns the exit status.
pub fn run(opts: &RecvOptions) -> i32 {
    // The parent decides when we stop; a terminal Ctrl-C reaches us too, so ignore it.
    let _ = signals::ignore_interrupt();
    match run_inner(opts) {
        Ok(()) => 0,
        Err(e) => {
            println!("error {}", e.replace('\n', " | "));
            1
        }
    }
}

fn run_inner(opts: &RecvOptions) -> Result<(), String> {
    let mut session = Session::from_description(&description(opts))?;
    let src = session.element("src").expect("named in the description");
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    if opts.kind == Kind::Udpsrc {
        let sink = session.element("sink").expect("named in the description");
        let pad = sink.static_pad("sink").expect("fakesink has a sink pad");
        let c = counts.clone();
        pad.add_probe(
            gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
            move |_, info| {
                if let Some(b) = info.buffer() {
                    c.0.fetch_add(1, Ordering::Relaxed);
                    c.1.fetch_add(b.size() as u64, Ordering::Relaxed);
                } else if let Some(list) = info.buffer_list() {
                    c.0.fetch_add(list.len() as u64, Ordering::Relaxed);
                    let bytes: usize = list.iter().map(|b| b.size()).sum();
                    c.1.fetch_add(bytes as u64, Ordering::Relaxed);
                }
                gst::PadProbeReturn::Ok
            },
        );
    }
    session.start()?;
    // The socket is bound in the source's start(), done by the time set_state returns;
    // don't wait for PLAYING: a live pipeline may reach it only with the first packet.
    let cpu0 = sys::cpu_seconds();
    let t0 = Instant::now();
    let port = loop {
        match int_property(&src, "port") {
            Some(p) if p > 0 => break p,
            _ if t0.elapsed() > Duration::from_secs(20) => {
                return Err(format!(
                    "{} did not report the port it bound (its port property stayed 0)",
                    opts.kind.name()
                ))
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
    let kind = opts.kind;
    let read = |counts: &(AtomicU64, AtomicU64)| -> (u64, u64, Option<gst::Structure>) {
        match kind {
            Kind::Udpsrc => (
                counts.0.load(Ordering::Relaxed),
                counts.1.load(Ordering::Relaxed),
                None,
            ),
            Kind::Fhudpsrc | Kind::Fhxdpsrc | Kind::Fhdpdksrc => {
                let s = stats_property(&src);
                let (p, b) = s
                    .as_ref()
                    .map(|s| (counter(s, names::PACKETS), counter(s, names::BYTES)))
                    .unwrap_or((0, 0));
                (p, b, s)
            }
        }
    };
    while !stop.load(Ordering::SeqCst) && t0.elapsed() < opts.timeout {
        if let Some(BusEvent::Error(e)) = session.poll(Duration::from_millis(50)) {
            return Err(e);
        }
    }
    // Datagrams still queued in the socket buffer are not lost: wait until the count
    // stops moving (bounded) before reading it.
    let settle_deadline = Instant::now() + Duration::from_secs(2);
    let mut last = read(&counts).0;
    while Instant::now() < settle_deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = read(&counts).0;
        if now == last {
            break;
        }
        last = now;
    }
    let cpu = sys::cpu_seconds() - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let (packets, bytes, stats) = read(&counts);
    let field = |n: &str| stats.as_ref().map(|s| counter(s, n)).unwrap_or(0);
    // Which memory fhudpsrc's pool got (hugepages or not) matters for its CPU figure.
    let memory = stats
        .as_ref()
        .and_then(|s| s.get::<String>("memory").ok())
        .unwrap_or_else(|| "-".into());
    println!(
        "result packets={packets} bytes={bytes} cpu_s={cpu:.4} wall_s={wall:.3} \
         drops_kernel={} drops_pool={} drops_nic={} truncated={} memory={}",
        field(names::DROPS_KERNEL),
        field(names::DROPS_POOL),
        // fhdpdksrc: imissed + ierrors + rx_nombuf of the DPDK port.
        field("drops-nic"),
        field(names::TRUNCATED),
        memory.replace(char::is_whitespace, "_")
    );
    let _ = std::io::stdout().flush();
    session.stop();
    Ok(())
}
