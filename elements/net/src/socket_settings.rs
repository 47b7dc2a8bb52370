//! The socket properties of the kernel-UDP sources (`fhudpsrc`, `fhudpchunksrc`): where
//! to receive (`address`, `port`, `multicast-iface`, `multicast-source`) and how
//! (`buffer-size`, `coalesce-time` and its deprecated alias `coalesce-us`,
//! `max-packet-size`, `gro`, `reuse`, `busy-poll`), their specs, and
//! opening the socket they describe with its errors and warnings phrased for the user.
//! A property group ([`firehose_core::property_group!`]) that the sources contain.

use firehose_core::property::{AsI32, Convert, OrDefault};
use gst::glib;
use gst::prelude::*;

use crate::recv::{OpenReport, SocketConfig, UdpReceiver};

/// Default `address`: every local IPv4 address.
pub const DEFAULT_ADDRESS: &str = "0.0.0.0";
/// Default `port`.
pub const DEFAULT_PORT: u32 = 5004;
/// Default `buffer-size`: 8 MiB of kernel receive buffer.
pub const DEFAULT_BUFFER_SIZE: u32 = 8 << 20;
/// Default `coalesce-us`: the longest nap, in µs, after a read finds the socket queue
/// empty (see [`Coalescer`]). Why 2 ms: at 10 Gb/s that is about 500 wake-ups a second,
/// a few per cent of the receive cost, where waking per datagram cost a third of it
/// (`firehose bench spead`: speaddepay 0.34–0.35 s/GB with 0, 0.21–0.22 with 1 ms,
/// 0.17–0.19 with 2 ms, 0.17–0.18 with 4 ms, at 8972 B and 10 Gb/s). It adds at most 2 ms
/// before a batch is read.
pub const DEFAULT_COALESCE_US: u32 = 2000;
/// Default `max-packet-size`: a jumbo frame's UDP payload, with room to spare.
pub const DEFAULT_MAX_PACKET_SIZE: u32 = 9216;

/// The socket properties.
#[derive(Clone, Debug)]
pub struct SocketSettings {
    /// `address`: local address or multicast group.
    pub address: String,
    /// `port` (0: any free port; the bound one after start).
    pub port: u32,
    /// `multicast-iface`.
    pub multicast_iface: Option<String>,
    /// `multicast-source`: comma-separated SSM sources.
    pub multicast_source: Option<String>,
    /// `endpoints`: several addresses or groups with ports, instead of `address`.
    pub endpoints: Option<String>,
    /// `buffer-size`: SO_RCVBUF in bytes (0: kernel default).
    pub buffer_size: u32,
    /// `coalesce-time` in ns (`coalesce-us` × 1000): longest nap after an empty read
    /// (0: none).
    pub coalesce_ns: u64,
    /// `max-packet-size`: longest datagram accepted.
    pub max_packet_size: u32,
    /// `gro`: ask for UDP GRO.
    pub gro: bool,
    /// `reuse`: SO_REUSEADDR.
    pub reuse: bool,
    /// `busy-poll`: SO_BUSY_POLL in µs (0: off).
    pub busy_poll_us: u32,
}

impl Default for SocketSettings {
    fn default() -> Self {
        Self {
            address: DEFAULT_ADDRESS.into(),
            port: DEFAULT_PORT,
            multicast_iface: None,
            multicast_source: None,
            endpoints: None,
            buffer_size: DEFAULT_BUFFER_SIZE,
            coalesce_ns: u64::from(DEFAULT_COALESCE_US) * 1000,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            gro: true,
            reuse: false,
            busy_poll_us: 0,
        }
    }
}

/// `coalesce-us`, the deprecated alias of `coalesce-time`: the same nanoseconds read
/// and written in microseconds.
#[derive(Debug)]
pub struct Micros;

impl Convert<u64> for Micros {
    fn set(field: &mut u64, value: &glib::Value, _: &glib::ParamSpec) {
        *field = u64::from(value.get::<u32>().expect("GObject checks the type first")) * 1000;
    }
    fn get(field: &u64, _: &glib::ParamSpec) -> glib::Value {
        ((*field / 1000).min(u64::from(u32::MAX)) as u32).to_value()
    }
}

// All are writable in READY and below: the socket is opened at start.
firehose_core::property_group! {
    SocketSettings as _s {
        address: OrDefault => glib::ParamSpecString::builder("address")
            .nick("Address")
            .blurb("Local address or multicast group to receive on (IPv4 or IPv6)")
            .default_value(Some(DEFAULT_ADDRESS))
            .mutable_ready()
            .build();
        port: AsI32 => glib::ParamSpecInt::builder("port")
            .nick("Port")
            .blurb("UDP port (0 = any free port; the bound port is readable after start)")
            .minimum(0)
            .maximum(65535)
            .default_value(DEFAULT_PORT as i32)
            .mutable_ready()
            .build();
        multicast_iface: OrDefault => glib::ParamSpecString::builder("multicast-iface")
            .nick("Multicast interface")
            .blurb("Network interface on which to join the multicast group")
            .mutable_ready()
            .build();
        multicast_source: OrDefault => glib::ParamSpecString::builder("multicast-source")
            .nick("Multicast sources")
            .blurb("Comma-separated source addresses for source-specific multicast (SSM)")
            .mutable_ready()
            .build();
        endpoints: OrDefault => firehose_core::endpoint::property_spec();
        buffer_size: AsI32 => glib::ParamSpecInt::builder("buffer-size")
            .nick("Buffer size")
            .blurb("Kernel receive buffer (SO_RCVBUF) in bytes (0 = kernel default)")
            .minimum(0)
            .default_value(DEFAULT_BUFFER_SIZE as i32)
            .mutable_ready()
            .build();
        coalesce_ns => glib::ParamSpecUInt64::builder("coalesce-time")
            .nick("Wake-up coalescing")
            .blurb("When a read finds the socket queue empty after data, wait up to this many nanoseconds before reading again, so that one wake-up takes many datagrams (less CPU); cut short so the socket buffer never fills past a quarter. Adds at most this much latency. 0 = read as soon as anything arrives")
            .maximum(100_000_000)
            .default_value(u64::from(DEFAULT_COALESCE_US) * 1000)
            .mutable_ready()
            .build();
        deprecated("coalesce-time") coalesce_ns: Micros => glib::ParamSpecUInt::builder("coalesce-us")
            .nick("Wake-up coalescing (µs)")
            .blurb("Deprecated: use coalesce-time (nanoseconds). The same setting in microseconds")
            .maximum(100_000)
            .default_value(DEFAULT_COALESCE_US)
            .mutable_ready()
            .build();
        max_packet_size => glib::ParamSpecUInt::builder("max-packet-size")
            .nick("Maximum packet size")
            .blurb("Longest datagram payload accepted in bytes; longer ones are dropped and counted as truncated")
            .minimum(1)
            .maximum(65535)
            .default_value(DEFAULT_MAX_PACKET_SIZE)
            .mutable_ready()
            .build();
        gro => glib::ParamSpecBoolean::builder("gro")
            .nick("GRO")
            .blurb("Ask the kernel for UDP GRO (coalesced datagrams, split here by segment size)")
            .default_value(true)
            .mutable_ready()
            .build();
        reuse => glib::ParamSpecBoolean::builder("reuse")
            .nick("Reuse")
            .blurb("Allow other sockets to bind the same port (SO_REUSEADDR); off so a busy port is an error, not silent sharing")
            .default_value(false)
            .mutable_ready()
            .build();
        busy_poll_us => glib::ParamSpecUInt::builder("busy-poll")
            .nick("Busy poll (µs)")
            .blurb("SO_BUSY_POLL: a read that finds the socket empty spins on the NIC queue up to this many microseconds before sleeping (lower latency, a busier CPU; pin the thread with cpu). sysctl net.core.busy_poll extends it to the waits. Above net.core.busy_read needs CAP_NET_ADMIN. 0 = off")
            .maximum(1_000_000)
            .default_value(0)
            .mutable_ready()
            .build();
    }
}

impl SocketSettings {
    /// The sockets to open; `timestamps` asks for kernel receive times. The error is a
    /// bad address, source or endpoint list, phrased for the user.
    pub fn config(&self, timestamps: bool) -> Result<SocketConfig, String> {
        let sources = self
            .multicast_source
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| {
                x.trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .map_err(|_| {
                        format!("invalid multicast source '{x}': expected an IPv4 or IPv6 address")
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let endpoints = firehose_core::endpoint::from_properties(
            self.endpoints.as_deref(),
            Some(&self.address),
            Some(DEFAULT_ADDRESS),
            u16::try_from(self.port).unwrap_or(0),
            &sources,
        )?;
        Ok(SocketConfig {
            endpoints,
            multicast_iface: self.multicast_iface.clone(),
            buffer_size: self.buffer_size as usize,
            reuse: self.reuse,
            gro: self.gro,
            timestamps,
            busy_poll_us: self.busy_poll_us,
        })
    }

    /// Opens the socket for `element` ([`UdpReceiver::open`] with `batch` and
    /// `batch_bytes`), with wake-up coalescing set. The error is the element error to
    /// post (what went wrong and how to fix it: a port in use, an unknown interface, …);
    /// a capped receive buffer is an element warning, a refused GRO a log line in `cat`.
    pub fn open(
        &self,
        element: &gst::Element,
        cat: gst::DebugCategory,
        timestamps: bool,
        batch: usize,
        batch_bytes: usize,
    ) -> Result<(UdpReceiver, OpenReport), gst::ErrorMessage> {
        let bad = |e: String| gst::error_msg!(gst::ResourceError::Settings, ("{}", e));
        let (mut rx, report) = UdpReceiver::open(
            &self.config(timestamps).map_err(bad)?,
            self.max_packet_size as usize,
            batch,
            batch_bytes,
        )
        .map_err(|e| gst::error_msg!(gst::ResourceError::OpenRead, ("{}", e)))?;
        rx.set_coalesce(self.coalesce_ns());
        if let Some(w) = &report.buffer_warning {
            gst::element_warning!(element, gst::ResourceError::Settings, ("{}", w));
        }
        if self.gro && !report.gro {
            gst::warning!(
                cat,
                obj = element,
                "the kernel refused UDP_GRO; receiving one datagram per message"
            );
        }
        Ok((rx, report))
    }

    /// `coalesce-time` (nanoseconds).
    fn coalesce_ns(&self) -> u64 {
        self.coalesce_ns
    }

    /// Records the port the socket was bound to (`port=0` asks for any free one), so that
    /// the property reads it; true when it changed (notify `port`).
    pub fn set_bound_port(&mut self, report: &OpenReport) -> bool {
        let Some(bound) = report.local.map(|a| u32::from(a.port())) else {
            return false;
        };
        let changed = self.port != bound;
        self.port = bound;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::property::PropertyGroup;

    #[test]
    fn every_property_round_trips_and_others_are_left_alone() {
        gst::init().unwrap();
        let mut s = SocketSettings::default();
        let props = s.spec_vec();
        let values = [
            "127.0.0.1".to_value(),
            0i32.to_value(),
            Some("lo").to_value(),
            Some("10.0.0.1, 10.0.0.2").to_value(),
            Some("232.1.1.1+1:9").to_value(),
            1024i32.to_value(),
            7000u64.to_value(),
            7u32.to_value(),
            1500u32.to_value(),
            false.to_value(),
            true.to_value(),
            25u32.to_value(),
        ];
        assert_eq!(props.len(), values.len());
        assert_eq!(s.count(), values.len());
        for (i, (p, v)) in props.iter().zip(&values).enumerate() {
            assert!(s.set(i, v, p), "{} is a socket property", p.name());
        }
        // coalesce-us (7 µs) came after coalesce-time and wins.
        assert_eq!(s.coalesce_ns, 7000);
        for (i, (p, v)) in props.iter().zip(&values).enumerate() {
            let got = s.get(i, p).unwrap();
            assert_eq!(got.serialize().ok(), v.serialize().ok(), "{}", p.name());
        }
        assert!(!s.set(values.len(), &1u32.to_value(), &props[0]));
        assert!(s.get(values.len(), &props[0]).is_none());

        // Both address and endpoints set: refused, naming both.
        assert!(s.config(false).unwrap_err().contains("both address"));
        s.address = DEFAULT_ADDRESS.into();
        let cfg = s.config(false).unwrap();
        let sources: Vec<std::net::IpAddr> =
            vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        assert_eq!(cfg.endpoints.len(), 2);
        assert_eq!(
            cfg.endpoints[1].to_string(),
            "232.1.1.2:9@10.0.0.1;10.0.0.2"
        );
        assert!(cfg.endpoints.iter().all(|e| e.sources == sources));
        s.endpoints = None;
        s.address = "127.0.0.1".into();
        s.multicast_source = None;
        let cfg = s.config(false).unwrap();
        assert_eq!(
            cfg.endpoints[0].socket_addr(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(cfg.multicast_iface.as_deref(), Some("lo"));
        assert_eq!((cfg.buffer_size, cfg.gro, cfg.reuse), (1024, false, true));
        assert_eq!(cfg.busy_poll_us, 25);
        assert!(!cfg.timestamps);
    }

    #[test]
    fn coalesce_us_is_an_alias_of_coalesce_time() {
        gst::init().unwrap();
        let mut s = SocketSettings::default();
        let get = |s: &SocketSettings, n| s.get_named(n).unwrap();
        assert_eq!(get(&s, "coalesce-time").get::<u64>().unwrap(), 2_000_000);
        assert!(s.set_named("coalesce-us", &500u32.to_value()));
        assert_eq!(s.coalesce_ns(), 500_000);
        assert_eq!(get(&s, "coalesce-time").get::<u64>().unwrap(), 500_000);
        assert!(s.set_named("coalesce-time", &30_000u64.to_value()));
        assert_eq!(get(&s, "coalesce-us").get::<u32>().unwrap(), 30);
    }

    #[test]
    fn empty_strings_unset_and_no_address_is_the_default() {
        gst::init().unwrap();
        let mut s = SocketSettings {
            address: "10.1.1.1".into(),
            multicast_iface: Some("eth0".into()),
            ..Default::default()
        };
        s.set_named("multicast-iface", &"".to_value());
        s.set_named("address", &None::<String>.to_value());
        assert_eq!(s.multicast_iface, None);
        assert_eq!(s.address, DEFAULT_ADDRESS);
    }

    #[test]
    fn the_bound_port_replaces_port_zero() {
        let mut s = SocketSettings {
            port: 0,
            ..Default::default()
        };
        let report = OpenReport {
            local: Some("127.0.0.1:40000".parse().unwrap()),
            ..Default::default()
        };
        assert!(s.set_bound_port(&report));
        assert_eq!(s.port, 40000);
        assert!(!s.set_bound_port(&report), "unchanged");
        assert!(!s.set_bound_port(&OpenReport::default()));
        assert_eq!(s.port, 40000);
    }
}
