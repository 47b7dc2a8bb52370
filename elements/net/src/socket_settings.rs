//! The socket properties of the kernel-UDP sources (`fhudpsrc`, `fhudpchunksrc`): where
//! to receive (`address`, `port`, `multicast-iface`, `multicast-source`) and how
//! (`buffer-size`, `coalesce-time` and its deprecated alias `coalesce-us`,
//! `max-packet-size`, `gro`, `reuse`), their specs, and
//! opening the socket they describe with its errors and warnings phrased for the user.

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
}

impl Default for SocketSettings {
    fn default() -> Self {
        Self {
            address: DEFAULT_ADDRESS.into(),
            port: DEFAULT_PORT,
            multicast_iface: None,
            multicast_source: None,
            buffer_size: DEFAULT_BUFFER_SIZE,
            coalesce_ns: u64::from(DEFAULT_COALESCE_US) * 1000,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            gro: true,
            reuse: false,
        }
    }
}

impl SocketSettings {
    /// The specs of these properties, in the order above; an element puts its own among
    /// them with [`insert_after`]. All are writable in READY and below.
    pub fn properties() -> Vec<glib::ParamSpec> {
        vec![
            glib::ParamSpecString::builder("address")
                .nick("Address")
                .blurb("Local address or multicast group to receive on (IPv4 or IPv6)")
                .default_value(Some(DEFAULT_ADDRESS))
                .mutable_ready()
                .build(),
            glib::ParamSpecInt::builder("port")
                .nick("Port")
                .blurb("UDP port (0 = any free port; the bound port is readable after start)")
                .minimum(0)
                .maximum(65535)
                .default_value(DEFAULT_PORT as i32)
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("multicast-iface")
                .nick("Multicast interface")
                .blurb("Network interface on which to join the multicast group")
                .mutable_ready()
                .build(),
            glib::ParamSpecString::builder("multicast-source")
                .nick("Multicast sources")
                .blurb("Comma-separated source addresses for source-specific multicast (SSM)")
                .mutable_ready()
                .build(),
            glib::ParamSpecInt::builder("buffer-size")
                .nick("Buffer size")
                .blurb("Kernel receive buffer (SO_RCVBUF) in bytes (0 = kernel default)")
                .minimum(0)
                .default_value(DEFAULT_BUFFER_SIZE as i32)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("coalesce-time")
                .nick("Wake-up coalescing")
                .blurb("When a read finds the socket queue empty after data, wait up to this many nanoseconds before reading again, so that one wake-up takes many datagrams (less CPU); cut short so the socket buffer never fills past a quarter. Adds at most this much latency. 0 = read as soon as anything arrives")
                .maximum(100_000_000)
                .default_value(u64::from(DEFAULT_COALESCE_US) * 1000)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("coalesce-us")
                .nick("Wake-up coalescing (µs)")
                .blurb("Deprecated: use coalesce-time (nanoseconds). The same setting in microseconds")
                .maximum(100_000)
                .default_value(DEFAULT_COALESCE_US)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-packet-size")
                .nick("Maximum packet size")
                .blurb("Longest datagram payload accepted in bytes; longer ones are dropped and counted as truncated")
                .minimum(1)
                .maximum(65535)
                .default_value(DEFAULT_MAX_PACKET_SIZE)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("gro")
                .nick("GRO")
                .blurb("Ask the kernel for UDP GRO (coalesced datagrams, split here by segment size)")
                .default_value(true)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("reuse")
                .nick("Reuse")
                .blurb("Allow other sockets to bind the same port (SO_REUSEADDR); off so a busy port is an error, not silent sharing")
                .default_value(false)
                .mutable_ready()
                .build(),
        ]
    }

    /// Sets property `pspec` when it is one of these; false when it is not (the
    /// element's own).
    pub fn set(&mut self, value: &glib::Value, pspec: &glib::ParamSpec) -> bool {
        // An empty string means unset, as leaving the property alone does.
        let opt = |v: Option<String>| v.filter(|x| !x.is_empty());
        match pspec.name() {
            "address" => {
                self.address = value
                    .get::<Option<String>>()
                    .unwrap()
                    .unwrap_or_else(|| DEFAULT_ADDRESS.into())
            }
            "port" => self.port = value.get::<i32>().unwrap() as u32,
            "multicast-iface" => self.multicast_iface = opt(value.get().unwrap()),
            "multicast-source" => self.multicast_source = opt(value.get().unwrap()),
            "buffer-size" => self.buffer_size = value.get::<i32>().unwrap() as u32,
            "coalesce-time" => self.coalesce_ns = value.get().unwrap(),
            "coalesce-us" => self.coalesce_ns = u64::from(value.get::<u32>().unwrap()) * 1000,
            "max-packet-size" => self.max_packet_size = value.get().unwrap(),
            "gro" => self.gro = value.get().unwrap(),
            "reuse" => self.reuse = value.get().unwrap(),
            _ => return false,
        }
        true
    }

    /// The value of property `pspec` when it is one of these.
    pub fn get(&self, pspec: &glib::ParamSpec) -> Option<glib::Value> {
        Some(match pspec.name() {
            "address" => self.address.to_value(),
            "port" => (self.port as i32).to_value(),
            "multicast-iface" => self.multicast_iface.to_value(),
            "multicast-source" => self.multicast_source.to_value(),
            "buffer-size" => (self.buffer_size as i32).to_value(),
            "coalesce-time" => self.coalesce_ns.to_value(),
            "coalesce-us" => ((self.coalesce_ns / 1000).min(u64::from(u32::MAX)) as u32).to_value(),
            "max-packet-size" => self.max_packet_size.to_value(),
            "gro" => self.gro.to_value(),
            "reuse" => self.reuse.to_value(),
            _ => return None,
        })
    }

    /// The socket to open; `timestamps` asks for kernel receive times.
    pub fn config(&self, timestamps: bool) -> SocketConfig {
        SocketConfig {
            address: self.address.clone(),
            port: u16::try_from(self.port).unwrap_or(0),
            multicast_iface: self.multicast_iface.clone(),
            multicast_sources: self
                .multicast_source
                .as_deref()
                .unwrap_or("")
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            buffer_size: self.buffer_size as usize,
            reuse: self.reuse,
            gro: self.gro,
            timestamps,
        }
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
        let (mut rx, report) = UdpReceiver::open(
            &self.config(timestamps),
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

/// Puts `more` into `props` right after the property named `after` (at the end when
/// there is none), so an element's own properties sit beside the shared ones they go
/// with (`batch-size` after `buffer-size`).
pub fn insert_after(
    props: &mut Vec<glib::ParamSpec>,
    after: &str,
    more: impl IntoIterator<Item = glib::ParamSpec>,
) {
    let at = props
        .iter()
        .position(|p| p.name() == after)
        .map_or(props.len(), |i| i + 1);
    props.splice(at..at, more);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_property_round_trips_and_others_are_left_alone() {
        gst::init().unwrap();
        let props = SocketSettings::properties();
        let values = [
            "127.0.0.1".to_value(),
            0i32.to_value(),
            Some("lo").to_value(),
            Some("10.0.0.1, 10.0.0.2").to_value(),
            1024i32.to_value(),
            7000u64.to_value(),
            7u32.to_value(),
            1500u32.to_value(),
            false.to_value(),
            true.to_value(),
        ];
        assert_eq!(props.len(), values.len());
        let mut s = SocketSettings::default();
        for (p, v) in props.iter().zip(&values) {
            assert!(s.set(v, p), "{} is a socket property", p.name());
        }
        for (p, v) in props.iter().zip(&values) {
            let got = s.get(p).unwrap();
            assert_eq!(got.serialize().ok(), v.serialize().ok(), "{}", p.name());
        }
        let other = glib::ParamSpecUInt::builder("batch-size").build();
        assert!(!s.set(&1u32.to_value(), &other));
        assert!(s.get(&other).is_none());

        let cfg = s.config(false);
        assert_eq!(cfg.address, "127.0.0.1");
        assert_eq!(cfg.multicast_sources, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(cfg.multicast_iface.as_deref(), Some("lo"));
        assert_eq!((cfg.buffer_size, cfg.gro, cfg.reuse), (1024, false, true));
        assert!(!cfg.timestamps);
    }

    #[test]
    fn coalesce_us_is_an_alias_of_coalesce_time() {
        gst::init().unwrap();
        let props = SocketSettings::properties();
        let spec = |name| props.iter().find(|p| p.name() == name).unwrap();
        let mut s = SocketSettings::default();
        assert_eq!(
            s.get(spec("coalesce-time")).unwrap().get::<u64>().unwrap(),
            2_000_000
        );
        s.set(&500u32.to_value(), spec("coalesce-us"));
        assert_eq!(s.coalesce_ns(), 500_000);
        assert_eq!(
            s.get(spec("coalesce-time")).unwrap().get::<u64>().unwrap(),
            500_000
        );
        s.set(&30_000u64.to_value(), spec("coalesce-time"));
        assert_eq!(
            s.get(spec("coalesce-us")).unwrap().get::<u32>().unwrap(),
            30
        );
    }

    #[test]
    fn empty_strings_unset_and_no_address_is_the_default() {
        gst::init().unwrap();
        let props = SocketSettings::properties();
        let spec = |name| props.iter().find(|p| p.name() == name).unwrap();
        let mut s = SocketSettings::default();
        s.set(&"".to_value(), spec("multicast-iface"));
        s.set(&None::<String>.to_value(), spec("address"));
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

    #[test]
    fn own_properties_go_after_the_named_one() {
        gst::init().unwrap();
        let mut props = SocketSettings::properties();
        let own = |n: &str| glib::ParamSpecUInt::builder(n).build();
        insert_after(
            &mut props,
            "buffer-size",
            [own("batch-size"), own("batch-bytes")],
        );
        insert_after(&mut props, "no-such", [own("last")]);
        let names: Vec<_> = props.iter().map(|p| p.name().to_string()).collect();
        let at = names.iter().position(|n| n == "buffer-size").unwrap();
        assert_eq!(
            names[at + 1..at + 4],
            ["batch-size", "batch-bytes", "coalesce-time"]
        );
        assert_eq!(names.last().unwrap(), "last");
    }
}
