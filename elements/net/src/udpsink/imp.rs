//! `fhudpsink` implementation: a thin `BaseSink` over [`crate::send::UdpSender`].

use firehose_core::sync::lock;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use firehose_core::element::prelude::*;
use firehose_core::property::{OrDefault, SettingsElement};
use firehose_core::stats::{self, names, Counter, StatsInterval, StatsTimer};
use firehose_core::{PacketBatchMeta, PacketInfo};
use gst_base::prelude::*;

use crate::send::{Datagrams, Interrupt, SendError, SendStats, SenderConfig, UdpSender};
use crate::sockaddr::{parse_clients, resolve};

firehose_core::debug_category!(CAT, "fhudpsink", "Firehose UDP sink");

const DEFAULT_HOST: &str = "localhost";
const DEFAULT_PORT: i32 = 5004;
const DEFAULT_BURST: u32 = 65536;
const DEFAULT_TTL: i32 = 64;
const DEFAULT_TTL_MC: i32 = 1;

/// The element's properties, declared once below.
#[derive(Debug, Clone)]
pub struct Settings {
    host: String,
    port: i32,
    clients: String,
    rate: u64,
    burst: u32,
    gso: bool,
    ttl: i32,
    ttl_mc: i32,
    multicast_loop: bool,
    multicast_iface: Option<String>,
    bind_address: Option<String>,
    bind_port: i32,
    buffer_size: i32,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            host: DEFAULT_HOST.into(),
            port: DEFAULT_PORT,
            clients: String::new(),
            rate: 0,
            burst: DEFAULT_BURST,
            gso: true,
            ttl: DEFAULT_TTL,
            ttl_mc: DEFAULT_TTL_MC,
            multicast_loop: true,
            multicast_iface: None,
            bind_address: None,
            bind_port: 0,
            buffer_size: 0,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        host: OrDefault => glib::ParamSpecString::builder("host")
            .nick("Host")
            .blurb("Address or name to send to (unless clients is set)")
            .default_value(Some(DEFAULT_HOST))
            .mutable_ready()
            .build();
        port => glib::ParamSpecInt::builder("port")
            .nick("Port")
            .blurb("UDP port to send to (unless clients is set)")
            .minimum(0)
            .maximum(65535)
            .default_value(DEFAULT_PORT)
            .mutable_ready()
            .build();
        clients: OrDefault => glib::ParamSpecString::builder("clients")
            .nick("Clients")
            .blurb(
                "host:port,host:port… ([addr]:port for IPv6); every datagram goes \
                        to every client. Overrides host and port when set",
            )
            .mutable_ready()
            .build();
        rate => glib::ParamSpecUInt64::builder("rate")
            .nick("Rate")
            .blurb(
                "Target rate in bits/s of UDP payload, all clients together \
                     (0 = as fast as possible). The rate paces the sink, so sync \
                     defaults to false",
            )
            .mutable_ready()
            .build();
        burst => glib::ParamSpecUInt::builder("burst")
            .nick("Burst")
            .blurb("Bytes sent back-to-back before pacing applies (with rate)")
            .default_value(DEFAULT_BURST)
            .mutable_ready()
            .build();
        gso => glib::ParamSpecBoolean::builder("gso")
            .nick("GSO")
            .blurb(
                "Send runs of equal-size datagrams as one UDP GSO send when the \
                        kernel allows it",
            )
            .default_value(true)
            .mutable_ready()
            .build();
        ttl => glib::ParamSpecInt::builder("ttl")
            .nick("TTL")
            .blurb("Unicast TTL / hop limit")
            .minimum(1)
            .maximum(255)
            .default_value(DEFAULT_TTL)
            .mutable_ready()
            .build();
        ttl_mc => glib::ParamSpecInt::builder("ttl-mc")
            .nick("Multicast TTL")
            .blurb("Multicast TTL / hop limit")
            .minimum(0)
            .maximum(255)
            .default_value(DEFAULT_TTL_MC)
            .mutable_ready()
            .build();
        multicast_loop => glib::ParamSpecBoolean::builder("loop")
            .nick("Multicast loopback")
            .blurb("Deliver sent multicast to receivers on this machine too")
            .default_value(true)
            .mutable_ready()
            .build();
        multicast_iface => glib::ParamSpecString::builder("multicast-iface")
            .nick("Multicast interface")
            .blurb("Network interface to send multicast on (e.g. eth0)")
            .mutable_ready()
            .build();
        bind_address => glib::ParamSpecString::builder("bind-address")
            .nick("Bind address")
            .blurb("Local address to send from (default: chosen by the route)")
            .mutable_ready()
            .build();
        bind_port => glib::ParamSpecInt::builder("bind-port")
            .nick("Bind port")
            .blurb("Local port to send from (0 = any)")
            .minimum(0)
            .maximum(65535)
            .default_value(0)
            .mutable_ready()
            .build();
        buffer_size => glib::ParamSpecInt::builder("buffer-size")
            .nick("Send buffer size")
            .blurb("SO_SNDBUF in bytes (0 = system default)")
            .minimum(0)
            .default_value(0)
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

struct State {
    sender: UdpSender,
    timer: StatsTimer,
    /// Send errors already reported in the log, to warn once per new error kind.
    logged_errno: Option<i32>,
}

/// The `fhudpsink` element.
#[derive(Default)]
pub struct UdpSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Outside `state`, so reading `stats` never waits for a paced send.
    stats: Arc<SendStats>,
    batches: Counter,
    interrupt: Interrupt,
}

/// A batch buffer's datagrams: slices of one mapped buffer.
struct Batch<'a> {
    data: &'a [u8],
    packets: &'a [PacketInfo],
}

impl Datagrams for Batch<'_> {
    fn count(&self) -> usize {
        self.packets.len()
    }
    fn datagram(&self, i: usize) -> &[u8] {
        &self.data[self.packets[i].range()]
    }
}

impl UdpSink {
    /// The socket configuration from the properties, with user-facing errors.
    fn sender_config(&self, s: &Settings) -> Result<SenderConfig, gst::ErrorMessage> {
        let settings_error =
            |msg: String| gst::error_msg!(gst::ResourceError::Settings, ("{}", msg));
        let destinations = if s.clients.trim().is_empty() {
            vec![resolve(&s.host, s.port as u16).map_err(|e| {
                settings_error(format!(
                    "{e}: set host to an IP address or a name this machine can resolve"
                ))
            })?]
        } else {
            parse_clients(&s.clients).map_err(|e| {
                settings_error(format!(
                    "bad clients '{}': {e}; write host:port pairs separated by commas, \
                     IPv6 as [addr]:port",
                    s.clients
                ))
            })?
        };
        let bind_ip = match s.bind_address.as_deref().filter(|a| !a.is_empty()) {
            Some(a) => Some(a.trim_matches(['[', ']']).parse::<IpAddr>().map_err(|_| {
                settings_error(format!(
                    "bind-address '{a}' is not an IP address: give a local address (see `ip addr`)"
                ))
            })?),
            None => None,
        };
        let bind = match (bind_ip, s.bind_port) {
            (None, 0) => None,
            (ip, port) => {
                let any_v6 = destinations.iter().any(SocketAddr::is_ipv6);
                let unspecified = if any_v6 {
                    IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
                } else {
                    IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED)
                };
                Some(SocketAddr::new(ip.unwrap_or(unspecified), port as u16))
            }
        };
        Ok(SenderConfig {
            destinations,
            bind,
            ttl: s.ttl as u32,
            ttl_mc: s.ttl_mc as u32,
            multicast_loop: s.multicast_loop,
            multicast_iface: s.multicast_iface.clone(),
            send_buffer: s.buffer_size as usize,
            gso: s.gso,
            rate_bps: s.rate,
            burst_bytes: s.burst.into(),
        })
    }
}

impl ElementStats for UdpSink {
    fn stats(&self) -> gst::Structure {
        let st = &self.stats;
        stats::structure(&[
            (names::PACKETS_SENT, st.packets.get()),
            (names::BYTES_SENT, st.bytes.get()),
            (names::BATCHES, self.batches.get()),
            (names::SEND_ERRORS, st.errors.get()),
            (names::GSO_SENDS, st.gso_sends.get()),
            (names::GSO_FALLBACKS, st.gso_fallbacks.get()),
            (names::PACING_SLIP_NS, st.pacing_slip_ns.get()),
        ])
    }
}

impl UdpSink {
    /// Sends one batch, waiting in preroll when a state change interrupts the pacing
    /// (and resuming after it, unless flushing).
    fn send<D: Datagrams + ?Sized>(
        &self,
        state: &mut State,
        data: &D,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut from = 0;
        let result = loop {
            match state.sender.send(data, from, &self.interrupt) {
                Ok(()) => break Ok(gst::FlowSuccess::Ok),
                Err(SendError::TooLarge { index, size, max }) => {
                    gst::element_imp_error!(
                        self,
                        gst::ResourceError::Write,
                        ("Datagram {index} of the batch has {size} bytes, more than the UDP \
                             maximum of {max}: make the datagrams smaller upstream \
                             (e.g. a payloader's mtu)")
                    );
                    break Err(gst::FlowError::Error);
                }
                Err(SendError::Interrupted { resume_at }) => {
                    gst::debug!(CAT, imp = self, "interrupted at {resume_at}, waiting");
                    if let Err(e) = self.obj().wait_preroll() {
                        break Err(e);
                    }
                    from = resume_at;
                }
            }
        };
        self.after_batch(state);
        result
    }

    /// Counts the batch, logs what the engine noticed and posts stats when due.
    fn after_batch(&self, state: &mut State) {
        self.batches.add(1);
        if let Some(errno) = state.sender.take_gso_refusal() {
            gst::warning!(
                CAT,
                imp = self,
                "the kernel refused UDP GSO ({}); sending without it from now on",
                std::io::Error::from_raw_os_error(errno)
            );
        }
        if let Some(errno) = state.sender.take_last_error() {
            if state.logged_errno != Some(errno) {
                state.logged_errno = Some(errno);
                gst::warning!(
                    CAT,
                    imp = self,
                    "send failed: {} (counted in send-errors)",
                    std::io::Error::from_raw_os_error(errno)
                );
            }
        }
        if state.timer.due(Instant::now()) {
            self.post_stats();
        }
    }

    fn render_buffer(
        &self,
        state: &mut State,
        buffer: &gst::BufferRef,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let map = buffer.map_readable().map_err(|_| {
            firehose_core::element::read_error(&*self.obj(), "Cannot map the buffer")
        })?;
        let Some(meta) = buffer.meta::<PacketBatchMeta>() else {
            return self.send(state, &[map.as_slice()][..]);
        };
        let data = map.as_slice();
        let packets = meta.packets();
        if packets.iter().all(|p| p.range().end <= data.len()) {
            return self.send(state, &Batch { data, packets });
        }
        // A malformed meta: send what lies inside the buffer, count the rest as errors.
        let inside: Vec<&[u8]> = packets.iter().filter_map(|p| data.get(p.range())).collect();
        let bad = (packets.len() - inside.len()) * state.sender.destinations();
        gst::warning!(CAT, imp = self, "{bad} datagrams lie outside their buffer");
        self.stats.errors.add(bad as u64);
        self.send(state, inside.as_slice())
    }
}

impl SettingsElement for UdpSink {
    type Settings = Settings;

    fn counters() -> String {
        "packets-sent, bytes-sent, batches, send-errors, gso-sends, gso-fallbacks, \
         pacing-slip-ns"
            .into()
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

// No clock sync: pacing is done by `rate`, not by the clock (see the module docs).
firehose_core::packet_sink! {
    UdpSink = "GstFhUdpSink";
    "Firehose UDP sink", "Sink/Network",
    "Sends datagrams (packet batches, buffers or buffer lists) with sendmmsg and \
     UDP GSO, to one or several clients, paced to a target rate";
}

impl BaseSinkImpl for UdpSink {
    firehose_core::packet_sink_query!();

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = lock(&self.settings).clone();
        let cfg = self.sender_config(&settings)?;
        self.stats.reset();
        self.batches.reset();
        self.interrupt.clear();
        let sender = UdpSender::new(&cfg, self.stats.clone())
            .map_err(|e| gst::error_msg!(gst::ResourceError::OpenWrite, ("{}", e)))?;
        if cfg.send_buffer > 0 {
            let got = sender.send_buffer_size().unwrap_or(0);
            if got < cfg.send_buffer {
                gst::warning!(
                    CAT,
                    imp = self,
                    "SO_SNDBUF is {got} bytes, less than buffer-size {}: raise \
                     net.core.wmem_max or run as root",
                    cfg.send_buffer
                );
            }
        }
        gst::info!(
            CAT,
            imp = self,
            "sending to {:?} from {:?}, gso {}, rate {} bit/s",
            cfg.destinations,
            sender.local_addr().ok(),
            sender.gso_active(),
            cfg.rate_bps
        );
        *lock(&self.state) = Some(State {
            sender,
            timer: settings.stats_interval.timer(),
            logged_errno: None,
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.state) = None;
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        self.render_buffer(state, buffer)
    }

    fn render_list(&self, list: &gst::BufferList) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        if list.iter().any(|b| b.meta::<PacketBatchMeta>().is_some()) {
            // Lists of batches: each batch is already one send.
            for buffer in list.iter() {
                self.render_buffer(state, buffer)?;
            }
            return Ok(gst::FlowSuccess::Ok);
        }
        let maps = list
            .iter()
            .map(|b| b.map_readable())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                gst::element_imp_error!(self, gst::ResourceError::Read, ("Cannot map a buffer"));
                gst::FlowError::Error
            })?;
        self.send(state, maps.as_slice())
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.interrupt.raise();
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.interrupt.clear();
        Ok(())
    }
}
