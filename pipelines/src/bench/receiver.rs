//! The receivers every benchmark can put side by side, and the hidden `firehose
//! bench-recv` that runs one of them in a child process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use firehose_core::stats::names;
use gst::prelude::*;

use super::child::{self, ChildSide};
use super::floor::{self, Floor, Wait};
use crate::session::{int_property, stats_property, BusEvent, Session};
use crate::statsline::counter;
use crate::sys;

/// Where the repository (tests/spead2, .venv) was when this binary was built.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// How to make the venv the spead2 receiver needs.
pub const SPEAD2_INSTALL: &str = "python3 -m venv .venv && .venv/bin/pip install spead2==4.5.1 \
                                  numpy (in the repository root; or scripts/setup test)";

/// One receiver under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Receiver {
    /// A minimal blocking `recvmmsg` loop, no GStreamer: the physical limit of a
    /// receiver woken for every call.
    Floor,
    /// A minimal batching `recvmmsg` loop (non-blocking calls, a 1 ms nap after a short
    /// one, into a 64 MiB ring), no GStreamer: the physical limit of a receiver that
    /// naps and batches as ours do.
    BatchFloor,
    /// Stock GStreamer `udpsrc` (one buffer per datagram).
    Udpsrc,
    /// `fhudpsrc` (batches).
    Fhudpsrc,
    /// `fhxdpsrc` (AF_XDP on an interface; veth only).
    Fhxdpsrc,
    /// `fhdpdksrc` (DPDK; its plugin comes from `GST_PLUGIN_PATH`; veth only).
    Fhdpdksrc,
    /// spead2 4.5.1's own receiver (Python, memory pool).
    Spead2,
    /// `fhudpsrc ! speaddepay`.
    Speaddepay,
    /// `fhspeadsrc`: socket and reassembler in one element, payloads straight into heaps.
    SpeadSrc,
    /// Chunk mode: `fhudpsrc ! fhdepay handler=spead`.
    Chunk,
    /// `fhudpchunksrc handler=spead`: payloads received straight into chunks.
    Direct,
    /// `fhxdpsrc ! speaddepay` (veth only).
    XdpSpeaddepay,
    /// `fhxdpsrc ! fhdepay handler=spead` (veth only).
    XdpChunk,
    /// `fhspeadsrc transport="fhxdpsrc …"`: the reassembler fed from the UMEM in place
    /// (veth only).
    XdpSpeadSrc,
    /// `fhudpchunksrc handler=spead transport="fhxdpsrc …"`: chunks placed from the
    /// UMEM in place (veth only).
    XdpDirect,
}

impl Receiver {
    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Receiver::Floor => "floor",
            Receiver::BatchFloor => "batch-floor",
            Receiver::Udpsrc => "udpsrc",
            Receiver::Fhudpsrc => "fhudpsrc",
            Receiver::Fhxdpsrc => "fhxdpsrc",
            Receiver::Fhdpdksrc => "fhdpdksrc",
            Receiver::Spead2 => "spead2",
            Receiver::Speaddepay => "speaddepay",
            Receiver::SpeadSrc => "spead-src",
            Receiver::Chunk => "chunk",
            Receiver::Direct => "direct",
            Receiver::XdpSpeaddepay => "xdp-speaddepay",
            Receiver::XdpChunk => "xdp-chunk",
            Receiver::XdpSpeadSrc => "xdp-spead-src",
            Receiver::XdpDirect => "xdp-direct",
        }
    }

    /// True for receivers that count SPEAD heaps; the others count datagrams.
    pub fn counts_heaps(self) -> bool {
        matches!(
            self,
            Receiver::Spead2
                | Receiver::Speaddepay
                | Receiver::SpeadSrc
                | Receiver::Chunk
                | Receiver::Direct
                | Receiver::XdpSpeaddepay
                | Receiver::XdpChunk
                | Receiver::XdpSpeadSrc
                | Receiver::XdpDirect
        )
    }

    /// True for receivers that take frames off an interface and so need the veth link
    /// (on loopback they would have nothing of their own to receive from).
    pub fn needs_interface(self) -> bool {
        matches!(
            self,
            Receiver::Fhxdpsrc
                | Receiver::Fhdpdksrc
                | Receiver::XdpSpeaddepay
                | Receiver::XdpChunk
                | Receiver::XdpSpeadSrc
                | Receiver::XdpDirect
        )
    }

    /// The elements this receiver needs that a build may lack (checked before a run).
    pub fn elements(self) -> &'static [&'static str] {
        match self {
            Receiver::Chunk => &["fhdepay"],
            Receiver::Direct => &["fhudpchunksrc"],
            Receiver::SpeadSrc => &["fhspeadsrc"],
            Receiver::XdpChunk => &["fhxdpsrc", "fhdepay"],
            Receiver::XdpSpeadSrc => &["fhxdpsrc", "fhspeadsrc"],
            Receiver::XdpDirect => &["fhxdpsrc", "fhudpchunksrc"],
            _ => &[],
        }
    }

    /// How the report describes it.
    pub fn describe(self, cfg: &RecvConfig) -> String {
        match self {
            Receiver::Floor => format!(
                "floor: a minimal Rust loop of blocking `recvmmsg` ({} messages per call, \
                 MSG_WAITFORONE: a wake-up per call) into one preallocated buffer; nothing \
                 parsed, copied or pushed; no GStreamer",
                floor::BATCH
            ),
            Receiver::BatchFloor => format!(
                "batch-floor: a minimal Rust loop of non-blocking `recvmmsg` ({} messages \
                 per call, MSG_DONTWAIT, a {} ms nap after a call that brought fewer) into \
                 consecutive slots of a pre-faulted {} MiB ring, as a batching capture \
                 fills its pool; nothing parsed, copied or pushed; no GStreamer",
                floor::BATCH,
                floor::NAP.as_millis(),
                floor::RING_BYTES >> 20
            ),
            Receiver::Spead2 => format!(
                "spead2: `tests/spead2/bench_recv.py` (spead2 4.5.1 recv.Stream, 1 thread, \
                 MemoryPool of {}-byte buffers, max_heaps=4, Python loop counting heaps)",
                cfg.heap_size
            ),
            _ => format!("{}: `{}`", self.name(), description(cfg)),
        }
    }
}

/// Everything a receiver child needs: the options of the hidden `bench-recv`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct RecvConfig {
    /// Which receiver.
    #[arg(long, value_enum)]
    pub kind: Receiver,
    /// Address to bind (kernel receivers) or to filter on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// UDP port; 0 = any free one (kernel receivers only).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Network interface (`fhxdpsrc`).
    #[arg(long)]
    pub interface: Option<String>,
    /// `fhdpdksrc eal-args` (itself a list of options, so it may start with '-').
    #[arg(long, allow_hyphen_values = true)]
    pub eal_args: Option<String>,
    /// `fhdpdksrc dpdk-port`.
    #[arg(long)]
    pub dpdk_port: Option<String>,
    /// Largest datagram payload expected, bytes.
    #[arg(long, default_value_t = 9000)]
    pub size: u32,
    /// SO_RCVBUF to ask for, bytes.
    #[arg(long, default_value_t = super::BUFFER_SIZE)]
    pub buffer_size: u64,
    /// SPEAD heap payload, bytes.
    #[arg(long, default_value_t = super::DEFAULT_HEAP_SIZE)]
    pub heap_size: u32,
    /// Chunk mode's heaps per chunk.
    #[arg(long, default_value_t = super::DEFAULT_HEAPS_PER_CHUNK)]
    pub heaps_per_chunk: u32,
    /// `fhudpsrc coalesce-us`, if not the element's default.
    #[arg(long)]
    pub coalesce_us: Option<u32>,
    /// More properties of the kernel receiver element (fhudpsrc, fhspeadsrc,
    /// fhudpchunksrc), `name=value` separated by spaces, e.g. `timestamps=true`.
    #[arg(long)]
    pub src_props: Option<String>,
    /// `landing` of fhudpchunksrc and fhspeadsrc, if not the elements' default.
    #[arg(long)]
    pub landing: Option<String>,
    /// Python with spead2 (spead2 receiver only).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Stop on our own after this many seconds, in case the parent vanished.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

impl RecvConfig {
    /// A loopback receiver of `kind` on any free port with the defaults.
    pub fn new(kind: Receiver) -> Self {
        Self {
            kind,
            address: "127.0.0.1".into(),
            port: 0,
            interface: None,
            eal_args: None,
            dpdk_port: None,
            size: 9000,
            buffer_size: super::BUFFER_SIZE,
            heap_size: super::DEFAULT_HEAP_SIZE,
            heaps_per_chunk: super::DEFAULT_HEAPS_PER_CHUNK,
            coalesce_us: None,
            src_props: None,
            landing: None,
            python: None,
            timeout: 60.0,
        }
    }

    /// The command that runs this receiver in a child process.
    pub fn command(&self) -> Result<Command, String> {
        if self.kind == Receiver::Spead2 {
            let python = self
                .python
                .clone()
                .unwrap_or_else(|| PathBuf::from(REPO).join(".venv/bin/python3"));
            if !python.exists() {
                return Err(format!(
                    "{} not found: the spead2 receiver needs a Python with spead2 4.5.1. \
                     Run: {SPEAD2_INSTALL}; or pass --python, or leave spead2 out of --receivers",
                    python.display()
                ));
            }
            let mut c = Command::new(python);
            c.arg(PathBuf::from(REPO).join("tests/spead2/bench_recv.py"));
            c.args(["--bind", &self.address, "--port", &self.port.to_string()]);
            c.args(["--heap-size", &self.heap_size.to_string()]);
            c.args(["--buffer", &self.buffer_size.to_string()]);
            c.args(["--max-size", &(self.size.max(9000) + 200).to_string()]);
            c.args(["--timeout", &self.timeout.to_string()]);
            return Ok(c);
        }
        let mut c = child::self_command()?;
        c.arg("bench-recv");
        c.args(["--kind", self.kind.name(), "--address", &self.address]);
        c.args(["--port", &self.port.to_string()]);
        c.args(["--size", &self.size.to_string()]);
        c.args(["--buffer-size", &self.buffer_size.to_string()]);
        c.args(["--heap-size", &self.heap_size.to_string()]);
        c.args(["--heaps-per-chunk", &self.heaps_per_chunk.to_string()]);
        c.args(["--timeout", &self.timeout.to_string()]);
        let optional = [
            ("--interface", self.interface.clone()),
            ("--eal-args", self.eal_args.clone()),
            ("--dpdk-port", self.dpdk_port.clone()),
            ("--coalesce-us", self.coalesce_us.map(|n| n.to_string())),
            ("--landing", self.landing.clone()),
            ("--src-props", self.src_props.clone()),
        ];
        for (flag, v) in optional {
            if let Some(v) = v {
                c.args([flag, &v]);
            }
        }
        Ok(c)
    }
}

/// The GStreamer pipeline of a receiver (the floors and spead2 have none: their text
/// is for the report only). Every one ends in the same cheapest sink.
pub fn description(cfg: &RecvConfig) -> String {
    let sink = "fakesink name=sink sync=false async=false enable-last-sample=false";
    let (a, p, b) = (&cfg.address, cfg.port, cfg.buffer_size);
    let mut udp = format!("fhudpsrc name=src address={a} port={p} buffer-size={b}");
    if let Some(n) = cfg.coalesce_us {
        udp.push_str(&format!(" coalesce-us={n}"));
    }
    if let Some(props) = cfg.src_props.as_deref().filter(|p| !p.trim().is_empty()) {
        udp.push(' ');
        udp.push_str(props.trim());
    }
    let transport = format!(
        "fhxdpsrc interface={} port={p}",
        cfg.interface.as_deref().unwrap_or("lo")
    );
    let xdp = transport.replacen("fhxdpsrc", "fhxdpsrc name=src", 1);
    let chunks = format!(
        "handler=spead handler-config=spead,place-offset=1 heap-size={} heaps-per-chunk={}",
        cfg.heap_size, cfg.heaps_per_chunk
    );
    let landing = cfg
        .landing
        .as_ref()
        .map_or(String::new(), |l| format!(" landing={l}"));
    match cfg.kind {
        Receiver::Floor => format!("recvmmsg loop on {a}:{p}"),
        Receiver::BatchFloor => format!("batching recvmmsg loop on {a}:{p}"),
        Receiver::Spead2 => format!("spead2 recv.Stream on {a}:{p}"),
        // Stock udpsrc in its best configuration: a buffer pool sized to the payload
        // (mtu) and no sender-address meta.
        Receiver::Udpsrc => format!(
            "udpsrc name=src address={a} port={p} buffer-size={b} mtu={} \
             retrieve-sender-address=false ! {sink}",
            cfg.size.max(1492)
        ),
        // Batches, as a Firehose consumer gets them (fakesink takes anything, so at
        // output=auto it would get one buffer per datagram).
        Receiver::Fhudpsrc => format!("{udp} output=batch ! {sink}"),
        Receiver::Fhxdpsrc => format!("{xdp} output=batch ! {sink}"),
        Receiver::Fhdpdksrc => format!(
            "fhdpdksrc name=src eal-args=\"{}\" dpdk-port={} port={p} output=batch ! {sink}",
            cfg.eal_args.as_deref().unwrap_or_default(),
            cfg.dpdk_port.as_deref().unwrap_or_default()
        ),
        Receiver::Speaddepay => format!("{udp} ! speaddepay name=depay ! {sink}"),
        // Receives and reassembles: it is both `src` and `depay`.
        Receiver::SpeadSrc => format!(
            "{}{landing} ! {sink}",
            udp.replacen("fhudpsrc name=src", "fhspeadsrc name=src", 1)
        ),
        Receiver::Chunk => format!("{udp} ! fhdepay name=depay {chunks} ! {sink}"),
        // One element receives and places: it is both `src` and `depay`.
        Receiver::Direct => format!(
            "{} {chunks}{landing} ! {sink}",
            udp.replacen("fhudpsrc name=src", "fhudpchunksrc name=src", 1)
        ),
        Receiver::XdpSpeaddepay => format!("{xdp} ! speaddepay name=depay ! {sink}"),
        Receiver::XdpChunk => format!("{xdp} ! fhdepay name=depay {chunks} ! {sink}"),
        // The engine's element is both `src` and `depay`; AF_XDP is its transport.
        Receiver::XdpSpeadSrc => {
            format!("fhspeadsrc name=src transport=\"{transport}\" ! {sink}")
        }
        Receiver::XdpDirect => {
            format!("fhudpchunksrc name=src {chunks} transport=\"{transport}\" ! {sink}")
        }
    }
}

/// `firehose bench-recv` (hidden): runs one receiver until the parent says stop;
/// returns the exit status.
pub fn run_child(cfg: &RecvConfig) -> i32 {
    let timeout = Duration::from_secs_f64(cfg.timeout.max(1.0));
    let r = match cfg.kind {
        Receiver::Spead2 => Err("the spead2 receiver runs as tests/spead2/bench_recv.py".into()),
        Receiver::Floor | Receiver::BatchFloor => run_floor(cfg, timeout),
        _ => run_pipeline(cfg, timeout),
    };
    match r {
        Ok(()) => crate::launch::EXIT_OK,
        Err(e) => child::print_error(&e),
    }
}

/// Either floor: the blocking one into one call's worth of slots, the batching one
/// into its ring.
fn run_floor(cfg: &RecvConfig, timeout: Duration) -> Result<(), String> {
    let addr: SocketAddr = format!("{}:{}", cfg.address, cfg.port)
        .parse()
        .map_err(|e| format!("floor receiver: address {}: {e}", cfg.address))?;
    let (ring, wait) = if cfg.kind == Receiver::BatchFloor {
        (floor::RING_BYTES, Wait::Nap { nap: floor::NAP })
    } else {
        (
            0,
            Wait::Block {
                tick: Duration::from_millis(20),
            },
        )
    };
    let mut floor = Floor::bind(
        addr,
        cfg.buffer_size as usize,
        cfg.size.max(1472) as usize,
        ring,
        wait,
    )?;
    let side = ChildSide::ready(floor.local_addr()?.port(), timeout);
    // The sender starts right after `go`: its first datagrams may arrive before this
    // thread sees the word, so they are received (and counted) while waiting.
    side.wait_go(|| floor.receive().map(|_| ()))?;
    let cpu0 = sys::cpu_seconds();
    while !side.stopping() {
        floor.receive()?;
    }
    // Settle: keep receiving until nothing has come for a while.
    floor.drain()?;
    let cpu = sys::cpu_seconds() - cpu0;
    child::print_result(&[
        ("units", floor.counts.datagrams.to_string()),
        ("datagrams", floor.counts.datagrams.to_string()),
        ("bytes", floor.counts.bytes.to_string()),
        ("batches", floor.counts.batches.to_string()),
        ("cpu_s", format!("{cpu:.4}")),
    ]);
    Ok(())
}

fn run_pipeline(cfg: &RecvConfig, timeout: Duration) -> Result<(), String> {
    let kind = cfg.kind;
    let mut session = Session::from_description(&description(cfg))?;
    let src = session.element("src").expect("named in the description");
    // The element whose stats count what the receiver delivered.
    let counted = session
        .element(
            if kind.counts_heaps()
                && !matches!(
                    kind,
                    Receiver::Direct
                        | Receiver::SpeadSrc
                        | Receiver::XdpSpeadSrc
                        | Receiver::XdpDirect
                )
            {
                "depay"
            } else {
                "src"
            },
        )
        .expect("named in the description");
    // udpsrc has no stats: count its buffers where they leave. speaddepay counts every
    // heap, the descriptor heap too: count the data heaps (the buffers of exactly one
    // heap payload) where they leave it. fhdepay's `heaps` are data heaps already.
    let probed = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    if matches!(
        kind,
        Receiver::Udpsrc
            | Receiver::Speaddepay
            | Receiver::SpeadSrc
            | Receiver::XdpSpeaddepay
            | Receiver::XdpSpeadSrc
    ) {
        let sink = session.element("sink").expect("named in the description");
        let pad = sink.static_pad("sink").expect("fakesink has a sink pad");
        let c = probed.clone();
        let only = (kind != Receiver::Udpsrc).then_some(cfg.heap_size as usize);
        let wanted = move |b: &gst::BufferRef| only.is_none_or(|n| b.size() == n);
        pad.add_probe(
            gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
            move |_, info| {
                let add = |b: &gst::BufferRef| {
                    if wanted(b) {
                        c.0.fetch_add(1, Ordering::Relaxed);
                        c.1.fetch_add(b.size() as u64, Ordering::Relaxed);
                    }
                };
                if let Some(b) = info.buffer() {
                    add(b);
                } else if let Some(list) = info.buffer_list() {
                    list.iter().for_each(add);
                }
                gst::PadProbeReturn::Ok
            },
        );
    }
    session.start()?;
    // The socket is bound in the source's start(), done by the time set_state returns;
    // don't wait for PLAYING: a live pipeline may reach it only with the first packet.
    let t0 = std::time::Instant::now();
    // An engine over AF_XDP: the port is its transport's, the one asked for (the
    // element's own `port` is its unused socket's).
    let transport_port =
        matches!(kind, Receiver::XdpSpeadSrc | Receiver::XdpDirect).then_some(u64::from(cfg.port));
    let port = loop {
        if let Some(p) = transport_port {
            break p;
        }
        match int_property(&src, "port") {
            Some(p) if p > 0 => break p,
            // Generous: a loaded CI machine can take seconds to start a pipeline.
            _ if t0.elapsed() > Duration::from_secs(20) => {
                return Err(format!(
                    "{} did not report the port it bound (its port property stayed 0)",
                    kind.name()
                ))
            }
            _ => {
                if let Some(BusEvent::Error(e)) = session.poll(Duration::from_millis(20)) {
                    return Err(e);
                }
            }
        }
    };
    let side = ChildSide::ready(port as u16, timeout);
    let mut idle = || match session.poll(Duration::from_millis(50)) {
        // EOS (a SPEAD stop heap) is expected: keep counting until told to stop.
        Some(BusEvent::Error(e)) => Err(e),
        _ => Ok(()),
    };
    side.wait_go(&mut idle)?;
    let cpu0 = sys::cpu_seconds();
    side.wait_stop(&mut idle)?;
    let read = || -> (u64, u64, Option<gst::Structure>) {
        let s = stats_property(&counted);
        let (units, bytes) = match kind {
            Receiver::Udpsrc | Receiver::Speaddepay | Receiver::XdpSpeaddepay => (
                probed.0.load(Ordering::Relaxed),
                probed.1.load(Ordering::Relaxed),
            ),
            k if k.counts_heaps() => s.as_ref().map_or((0, 0), |s| {
                (counter(s, names::HEAPS), counter(s, names::BYTES))
            }),
            _ => s.as_ref().map_or((0, 0), |s| {
                (counter(s, names::PACKETS), counter(s, names::BYTES))
            }),
        };
        (units, bytes, s)
    };
    child::settle(|| read().0);
    let cpu = sys::cpu_seconds() - cpu0;
    let (units, bytes, stats) = read();
    let field = |n: &str| stats.as_ref().map_or(0, |s| counter(s, n));
    // Stopped before the source's own counters are read: fhxdpsrc reads the kernel's
    // drop counters of its socket at stop (and after each 100 ms without a packet), so
    // they are exact, not up to 100 ms old.
    session.stop();
    let src_stats = stats_property(&src);
    let src_field = |n: &str| src_stats.as_ref().map_or(0, |s| counter(s, n));
    // Which memory the pool got (hugepages or not) matters for the CPU figure.
    let memory = src_stats
        .as_ref()
        .and_then(|s| s.get::<String>("memory").ok())
        .unwrap_or_else(|| "-".into());
    child::print_result(&[
        ("units", units.to_string()),
        ("bytes", bytes.to_string()),
        (
            "datagrams",
            // fhudpsrc counts datagrams as `packets`; the landing sources count heaps
            // or chunks there and datagrams as `datagrams`.
            if matches!(kind, Receiver::Direct | Receiver::SpeadSrc) {
                src_field(names::DATAGRAMS)
            } else {
                src_field(names::PACKETS)
            }
            .to_string(),
        ),
        ("batches", src_field(names::BATCHES).to_string()),
        ("incomplete", field(names::HEAPS_INCOMPLETE).to_string()),
        (
            // fhdpdksrc's drops-nic: imissed + ierrors + rx_nombuf of the DPDK port.
            "element_drops",
            // fhxdpsrc's drops-pool (fill ring empty), drops-kernel (RX ring full:
            // no socket of its own in /proc/net/udp) and unjoined (jumbo datagrams
            // whose frames could not be joined).
            (src_field(names::DROPS_POOL)
                + if kind.needs_interface() {
                    src_field(names::DROPS_KERNEL) + src_field(names::UNJOINED)
                } else {
                    0
                }
                + src_field("drops-nic")
                + src_field(names::TRUNCATED)
                // Chunk mode's own: packets of chunks already gone (too old), and those
                // its pool or handler refused.
                + if matches!(kind, Receiver::Chunk | Receiver::XdpChunk) {
                    field(names::TOO_OLD) + field(names::DROPS_POOL) + field(names::DROPS_HANDLER)
                } else {
                    0
                })
            .to_string(),
        ),
        ("cpu_s", format!("{cpu:.4}")),
        ("memory", memory),
    ]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_over_af_xdp_name_it_as_their_transport() {
        let mut cfg = RecvConfig::new(Receiver::XdpSpeadSrc);
        cfg.interface = Some("veth0".into());
        cfg.port = 7148;
        let d = description(&cfg);
        assert_eq!(
            d.split(" ! ").next().unwrap(),
            "fhspeadsrc name=src transport=\"fhxdpsrc interface=veth0 port=7148\"",
            "{d}"
        );
        cfg.kind = Receiver::XdpDirect;
        let d = description(&cfg);
        assert!(
            d.starts_with("fhudpchunksrc name=src handler=spead")
                && d.contains("transport=\"fhxdpsrc interface=veth0 port=7148\""),
            "{d}"
        );
        assert!(Receiver::XdpDirect.needs_interface() && Receiver::XdpSpeadSrc.counts_heaps());
    }

    #[test]
    fn descriptions() {
        let mut cfg = RecvConfig::new(Receiver::Chunk);
        let d = description(&cfg);
        assert!(d.contains("fhdepay name=depay handler=spead"), "{d}");
        assert!(d.contains("heap-size=1048576 heaps-per-chunk=8"), "{d}");
        assert!(!d.contains("coalesce-us"), "{d}");
        cfg.coalesce_us = Some(0);
        cfg.kind = Receiver::Speaddepay;
        let d = description(&cfg);
        assert!(
            d.contains("fhudpsrc name=src") && d.contains(" coalesce-us=0 "),
            "{d}"
        );
        // The sources that reassemble themselves: landing set, and no depayloader after.
        cfg.landing = Some("on".into());
        for (kind, source, no_depay) in [
            (Receiver::Direct, "fhudpchunksrc", "fhdepay"),
            (Receiver::SpeadSrc, "fhspeadsrc", "speaddepay"),
        ] {
            cfg.kind = kind;
            let d = description(&cfg);
            assert!(
                d.starts_with(&format!("{source} name=src address=127.0.0.1 port=0"))
                    && d.contains(" landing=on !")
                    && !d.contains(no_depay),
                "{d}"
            );
        }
        cfg.kind = Receiver::XdpChunk;
        cfg.interface = Some("veth0".into());
        let d = description(&cfg);
        assert!(d.starts_with("fhxdpsrc name=src interface=veth0 port=0 ! fhdepay"));
        cfg.kind = Receiver::Udpsrc;
        cfg.size = 1472;
        assert!(description(&cfg).contains(" mtu=1492 "));
    }

    #[test]
    fn kinds() {
        assert!(Receiver::Direct.counts_heaps() && !Receiver::Floor.counts_heaps());
        assert!(!Receiver::BatchFloor.counts_heaps() && !Receiver::BatchFloor.needs_interface());
        assert_eq!(Receiver::BatchFloor.name(), "batch-floor");
        assert!(Receiver::XdpChunk.needs_interface() && !Receiver::Speaddepay.needs_interface());
        use clap::ValueEnum;
        for r in Receiver::value_variants() {
            let parsed = Receiver::from_str(r.name(), false).unwrap();
            assert_eq!(parsed, *r, "clap's name and ours agree");
        }
    }

    #[test]
    fn eal_args_reach_the_child_whole() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cfg: RecvConfig,
        }
        let mut cfg = RecvConfig::new(Receiver::Fhdpdksrc);
        cfg.eal_args = Some("--no-huge --vdev=net_af_xdp0,iface=v0".into());
        cfg.dpdk_port = Some("net_af_xdp0".into());
        let c = cfg.command().unwrap();
        let args = c
            .get_args()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned());
        use clap::Parser;
        let parsed = Cli::try_parse_from(std::iter::once("x".to_string()).chain(args)).unwrap();
        assert_eq!(parsed.cfg, cfg);
    }

    #[test]
    fn the_batching_floor_runs_as_its_own_kind() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cfg: RecvConfig,
        }
        let cfg = RecvConfig::new(Receiver::BatchFloor);
        let c = cfg.command().unwrap();
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        assert!(
            args.join(" ").starts_with("bench-recv --kind batch-floor "),
            "{args:?}"
        );
        use clap::Parser;
        let parsed =
            Cli::try_parse_from(std::iter::once("x".to_string()).chain(args.into_iter().skip(1)))
                .unwrap();
        assert_eq!(parsed.cfg, cfg);
        let d = cfg.kind.describe(&cfg);
        assert!(
            d.starts_with("batch-floor: ")
                && d.contains("MSG_DONTWAIT")
                && d.contains("64 MiB ring"),
            "{d}"
        );
        assert_eq!(description(&cfg), "batching recvmmsg loop on 127.0.0.1:0");
    }

    #[test]
    fn child_command_carries_the_config() {
        let mut cfg = RecvConfig::new(Receiver::Direct);
        cfg.landing = Some("off".into());
        let c = cfg.command().unwrap();
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        let joined = args.join(" ");
        assert!(joined.starts_with("bench-recv --kind direct"), "{joined}");
        assert!(joined.contains("--landing off"), "{joined}");
        cfg.kind = Receiver::Spead2;
        cfg.python = Some("/nonexistent/python3".into());
        assert!(cfg
            .command()
            .unwrap_err()
            .contains("pip install spead2==4.5.1"));
    }
}
