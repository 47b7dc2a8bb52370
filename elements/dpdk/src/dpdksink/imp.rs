//! `fhdpdksink` implementation: a `BaseSink` that turns datagrams into frames in mbufs
//! and sends them in bursts.

use std::net::Ipv4Addr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firehose_core::element::ElementStats;
use firehose_core::pace::{Interrupt, Pacer};
use firehose_core::property::OrDefault;
use firehose_core::property::SettingsElement;
use firehose_core::stats::{names, StatsInterval, StatsTimer};
use firehose_core::sync::lock;
use firehose_core::PacketBatchMeta;
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;

use super::frame::{Header, HEADER_LEN};
use crate::dpdk::{Pool, Port, PortConfig, Session};
use crate::props::{EalProps, EalSettings};
use crate::sys;
use firehose_core::frame::build;

firehose_core::debug_category!(CAT, "fhdpdksink", "Firehose DPDK sink");

const DEFAULT_PORT: i32 = 5004;
const DEFAULT_MTU: u32 = 1500;
const DEFAULT_MBUFS: u32 = 4096;
const DEFAULT_TX_DESC: u32 = 1024;
const DEFAULT_TTL: u32 = 64;
/// Frames per `rte_eth_tx_burst`.
const TX_BURST: usize = 32;
/// How long a burst may find the device (or the mbuf pool) full before its frames are
/// dropped and counted: long enough for any device to drain a ring, short enough not
/// to stall a live pipeline.
const STALL_LIMIT: Duration = Duration::from_millis(200);

static EAL: EalProps = EalProps {
    vdev_example: "net_af_packet1,iface=eth1",
    port_example: "net_af_packet1",
};

/// The properties of `fhdpdksink`, then `stats-interval`.
#[derive(Debug, Clone)]
pub struct Settings {
    eal: EalSettings,
    host: Option<String>,
    port: i32,
    dst_mac: Option<String>,
    src_ip: Option<String>,
    src_port: i32,
    src_mac: Option<String>,
    rate: u64,
    mtu: u32,
    mbufs: u32,
    tx_descriptors: u32,
    ttl: u32,
    stats_interval: StatsInterval,
}

firehose_core::property_group! {
    Settings as _s {
        group eal;
        host: OrDefault => glib::ParamSpecString::builder("host")
            .nick("Host")
            .blurb("Destination IPv4 address (required)")
            .mutable_ready()
            .build();
        port => glib::ParamSpecInt::builder("port")
            .nick("Port")
            .blurb("Destination UDP port")
            .minimum(0)
            .maximum(65535)
            .default_value(DEFAULT_PORT)
            .mutable_ready()
            .build();
        dst_mac: OrDefault => glib::ParamSpecString::builder("dst-mac")
            .nick("Destination MAC")
            .blurb(
                "MAC address of host or of the next hop (required for unicast: DPDK \
                 does no ARP; multicast groups get their 01:00:5e MAC)",
            )
            .mutable_ready()
            .build();
        src_ip: OrDefault => glib::ParamSpecString::builder("src-ip")
            .nick("Source IP")
            .blurb("Source IPv4 address (required)")
            .mutable_ready()
            .build();
        src_port => glib::ParamSpecInt::builder("src-port")
            .nick("Source port")
            .blurb("Source UDP port (0 = the destination port)")
            .minimum(0)
            .maximum(65535)
            .default_value(0)
            .mutable_ready()
            .build();
        src_mac: OrDefault => glib::ParamSpecString::builder("src-mac")
            .nick("Source MAC")
            .blurb("Source MAC address (unset = the port's own)")
            .mutable_ready()
            .build();
        rate => glib::ParamSpecUInt64::builder("rate")
            .nick("Rate")
            .blurb("Target rate in bits/s of UDP payload (0 = as fast as possible)")
            .mutable_ready()
            .build();
        mtu => glib::ParamSpecUInt::builder("mtu")
            .nick("MTU")
            .blurb("Largest IP packet; a datagram needing more is an error")
            .minimum(68)
            .maximum(9000)
            .default_value(DEFAULT_MTU)
            .mutable_ready()
            .build();
        mbufs => glib::ParamSpecUInt::builder("mbufs")
            .nick("Mbufs")
            .blurb("Mbufs in the transmit pool")
            .minimum(512)
            .default_value(DEFAULT_MBUFS)
            .mutable_ready()
            .build();
        tx_descriptors => glib::ParamSpecUInt::builder("tx-descriptors")
            .nick("Transmit descriptors")
            .blurb("Transmit ring size (adjusted to the device's limits)")
            .minimum(32)
            .maximum(32768)
            .default_value(DEFAULT_TX_DESC)
            .mutable_ready()
            .build();
        ttl => glib::ParamSpecUInt::builder("ttl")
            .nick("TTL")
            .blurb("IP time to live")
            .minimum(1)
            .maximum(255)
            .default_value(DEFAULT_TTL)
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            eal: EalSettings::new(&EAL),
            host: None,
            port: DEFAULT_PORT,
            dst_mac: None,
            src_ip: None,
            src_port: 0,
            src_mac: None,
            rate: 0,
            mtu: DEFAULT_MTU,
            mbufs: DEFAULT_MBUFS,
            tx_descriptors: DEFAULT_TX_DESC,
            ttl: DEFAULT_TTL,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::counters! {
    /// What `stats` reads, from any thread.
    struct Counters {
        packets: names::PACKETS_SENT,
        bytes: names::BYTES_SENT,
        batches: names::BATCHES,
        drops_tx: names::DROPS_TX,
        errors: names::SEND_ERRORS,
    }
}

struct State {
    /// Declared first: closed before the pool and the devices go.
    port: Port,
    pool: Arc<Pool>,
    _session: Session,
    header: Header,
    max_payload: usize,
    pacer: Pacer,
    ip_id: u16,
    /// The current batch's datagram ranges, reused.
    ranges: Vec<Range<usize>>,
    /// One burst of mbufs, reused.
    mbufs: [*mut sys::rte_mbuf; TX_BURST],
    timer: StatsTimer,
}

// SAFETY: the raw mbuf pointers in the scratch array are only used by the thread that
// holds the state lock, and never kept across calls.
unsafe impl Send for State {}

/// The `fhdpdksink` element.
#[derive(Default)]
pub struct DpdkSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    counters: Counters,
    interrupt: Interrupt,
}

fn settings_error(msg: String) -> gst::ErrorMessage {
    gst::error_msg!(gst::ResourceError::Settings, ("{}", msg))
}

impl ElementStats for DpdkSink {
    fn stats(&self) -> gst::Structure {
        self.counters.structure()
    }
}

impl DpdkSink {
    /// Sends the datagrams `st.ranges` of `data`, a burst at a time.
    fn send(&self, st: &mut State, data: &[u8]) -> Result<gst::FlowSuccess, gst::FlowError> {
        if let Some((i, r)) = st
            .ranges
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() > st.max_payload)
        {
            gst::element_imp_error!(
                self,
                gst::ResourceError::Write,
                (
                    "Datagram {} of the buffer has {} bytes, more than mtu allows ({} bytes of \
                     UDP payload): raise mtu (and the interface's MTU), or make the datagrams \
                     smaller upstream (e.g. a payloader's packet size)",
                    i,
                    r.len(),
                    st.max_payload
                )
            );
            return Err(gst::FlowError::Error);
        }
        let id = st.port.id();
        let mut at = 0;
        while at < st.ranges.len() {
            let n = (st.ranges.len() - at).min(TX_BURST);
            let bytes: u64 = st.ranges[at..at + n].iter().map(|r| r.len() as u64).sum();
            while !st.pacer.wait(bytes, &self.interrupt) {
                // A state change or flush interrupted the pacing: wait in preroll, then
                // carry on with this burst unless flushing.
                gst::debug!(CAT, imp = self, "pacing interrupted, waiting for preroll");
                self.obj().wait_preroll()?;
            }
            if !self.alloc(st, n) {
                self.counters.drops_tx.add(n as u64);
                st.pacer.record(bytes);
                at += n;
                continue;
            }
            for k in 0..n {
                let r = st.ranges[at + k].clone();
                let len = HEADER_LEN + r.len();
                // SAFETY: a freshly allocated mbuf, owned here; its data room holds
                // headroom + HEADER_LEN + max_payload bytes (checked above and at start).
                let frame = unsafe {
                    let m = &mut *st.mbufs[k];
                    m.data_len = len as u16;
                    m.pkt_len = len as u32;
                    std::slice::from_raw_parts_mut(
                        (m.buf_addr as *mut u8).add(usize::from(m.data_off)),
                        len,
                    )
                };
                st.header.write(frame, r.len(), st.ip_id);
                st.ip_id = st.ip_id.wrapping_add(1);
                frame[HEADER_LEN..].copy_from_slice(&data[r]);
            }
            let sent = self.transmit(id, &mut st.mbufs[..n]);
            self.counters.packets.add(sent as u64);
            self.counters.bytes.add(
                st.ranges[at..at + sent]
                    .iter()
                    .map(|r| r.len() as u64)
                    .sum(),
            );
            self.counters.drops_tx.add((n - sent) as u64);
            st.pacer.record(bytes);
            at += n;
        }
        self.counters.batches.add(1);
        self.post_stats_if(st.timer.due(Instant::now()));
        Ok(gst::FlowSuccess::Ok)
    }

    /// Fills `st.mbufs[..n]` from the pool, waiting up to [`STALL_LIMIT`] for the device
    /// to give mbufs back. False: none allocated.
    fn alloc(&self, st: &mut State, n: usize) -> bool {
        let start = Instant::now();
        loop {
            // SAFETY: a live pool; the array has room for n <= TX_BURST pointers.
            let r = unsafe {
                sys::rte_pktmbuf_alloc_bulk(st.pool.raw(), st.mbufs.as_mut_ptr(), n as u32)
            };
            if r == 0 {
                return true;
            }
            if start.elapsed() > STALL_LIMIT || self.interrupt.is_raised() {
                gst::warning!(CAT, imp = self, "mbuf pool empty: dropping {n} datagrams");
                return false;
            }
            std::thread::sleep(Duration::from_micros(10));
        }
    }

    /// Sends `mbufs`, retrying while the device accepts none, for up to [`STALL_LIMIT`]
    /// without progress; frees what it could not send. Returns how many were sent.
    fn transmit(&self, port: u16, mbufs: &mut [*mut sys::rte_mbuf]) -> usize {
        let n = mbufs.len();
        let mut sent = 0;
        let mut last_progress = Instant::now();
        while sent < n {
            // SAFETY: a started port; the mbufs from `sent` on are owned here and
            // become the driver's once accepted.
            let k = usize::from(unsafe {
                sys::rte_eth_tx_burst(port, 0, mbufs[sent..].as_mut_ptr(), (n - sent) as u16)
            });
            sent += k;
            if k > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > STALL_LIMIT || self.interrupt.is_raised() {
                break;
            } else {
                std::thread::yield_now();
            }
        }
        if sent < n {
            // SAFETY: the unsent mbufs are still owned here.
            unsafe { sys::rte_pktmbuf_free_bulk(mbufs[sent..].as_mut_ptr(), (n - sent) as u32) };
        }
        sent
    }

    fn open(&self, s: &Settings) -> Result<State, gst::ErrorMessage> {
        let ipv4 = |what: &str, v: Option<&str>| -> Result<Ipv4Addr, gst::ErrorMessage> {
            let v = v.ok_or_else(|| {
                settings_error(format!(
                    "{what} is not set: DPDK has no routing table, so give the IPv4 address \
                     explicitly"
                ))
            })?;
            v.parse()
                .map_err(|_| settings_error(format!("{what} '{v}' is not an IPv4 address")))
        };
        let dst_ip = ipv4("host", s.host.as_deref())?;
        let src_ip = ipv4("src-ip", s.src_ip.as_deref())?;
        let dst_mac = match s.dst_mac.as_deref() {
            Some(m) => build::parse_mac(m).ok_or_else(|| {
                settings_error(format!(
                    "dst-mac '{m}' is not a MAC address (aa:bb:cc:dd:ee:ff)"
                ))
            })?,
            None if dst_ip.is_multicast() => build::multicast_mac(dst_ip),
            None => {
                return Err(settings_error(format!(
                    "dst-mac is not set: DPDK does no ARP, so give the MAC address of {dst_ip} \
                     (or of the next-hop router), e.g. from `ip neigh` on a machine that \
                     reaches it"
                )))
            }
        };
        let src_mac = match s.src_mac.as_deref() {
            Some(m) => Some(build::parse_mac(m).ok_or_else(|| {
                settings_error(format!(
                    "src-mac '{m}' is not a MAC address (aa:bb:cc:dd:ee:ff)"
                ))
            })?),
            None => None,
        };
        if !(68..=9000).contains(&s.mtu) {
            return Err(settings_error(format!("mtu {} is outside 68..9000", s.mtu)));
        }
        let session = Session::open(&s.eal.eal_args).map_err(|e| e.to_gst())?;
        let mut port = Port::claim(&s.eal.dpdk_port).map_err(|e| e.to_gst())?;
        // Headroom, Ethernet header and an MTU-sized IP packet, at least DPDK's default
        // (receive queues, set up too since some PMDs pair them with transmit queues,
        // need room for full frames).
        let data_room = (sys::RTE_PKTMBUF_HEADROOM + 14 + s.mtu)
            .next_multiple_of(64)
            .max(2048 + sys::RTE_PKTMBUF_HEADROOM) as u16;
        let pool =
            Pool::new("tx", s.mbufs, 0, data_room, port.is_virtual()).map_err(|e| e.to_gst())?;
        let cfg = PortConfig {
            queue: 0,
            rx_desc: 256,
            tx_desc: s.tx_descriptors as u16,
            promiscuous: false,
        };
        port.start(&cfg, &pool).map_err(|e| e.to_gst())?;
        let header = Header {
            dst_mac,
            src_mac: src_mac.unwrap_or(port.mac()),
            src_ip,
            dst_ip,
            src_port: if s.src_port == 0 {
                s.port as u16
            } else {
                s.src_port as u16
            },
            dst_port: s.port as u16,
            ttl: s.ttl as u8,
        };
        let max_payload = s.mtu as usize - 28;
        gst::info!(
            CAT,
            imp = self,
            "sending on {:?} to {dst_ip}:{} ({:02x?}), rate {} bit/s",
            port,
            s.port,
            dst_mac,
            s.rate
        );
        Ok(State {
            port,
            pool,
            _session: session,
            header,
            max_payload,
            pacer: Pacer::new(s.rate).with_burst((TX_BURST * max_payload) as u64),
            ip_id: 0,
            ranges: Vec::with_capacity(256),
            mbufs: [std::ptr::null_mut(); TX_BURST],
            timer: s.stats_interval.timer(),
        })
    }
}

impl SettingsElement for DpdkSink {
    type Settings = Settings;
    fn counters() -> String {
        "packets-sent, bytes-sent, batches, drops-tx (not accepted by the device or no mbuf \
         within 200 ms), send-errors (meta entries outside their buffer)"
            .into()
    }
    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

// No clock sync: pacing is done by `rate`, not by the clock, as in fhudpsink.
firehose_core::packet_sink! {
    DpdkSink = "GstFhDpdkSink";
    "Firehose DPDK sink", "Sink/Network",
    "Sends datagrams (packet batches or buffers) as Ethernet/IPv4/UDP frames \
     through a DPDK port (kernel bypass), paced to a target rate";
}

impl BaseSinkImpl for DpdkSink {
    firehose_core::packet_sink_query!();

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        self.counters.reset();
        self.interrupt.clear();
        let state = self.open(&s)?;
        *lock(&self.state) = Some(state);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Port stop + close, then the pool and the hot-plugged devices.
        drop(lock(&self.state).take());
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let st = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let map = buffer.map_readable().map_err(|_| {
            firehose_core::element::read_error(&*self.obj(), "Cannot map the buffer")
        })?;
        let data = map.as_slice();
        st.ranges.clear();
        match buffer.meta::<PacketBatchMeta>() {
            Some(meta) => {
                let mut outside = 0u64;
                for p in meta.packets() {
                    if p.range().end <= data.len() {
                        st.ranges.push(p.range());
                    } else {
                        outside += 1;
                    }
                }
                if outside > 0 {
                    gst::warning!(
                        CAT,
                        imp = self,
                        "{outside} datagrams lie outside their buffer"
                    );
                    self.counters.errors.add(outside);
                }
            }
            None => st.ranges.push(0..data.len()),
        }
        self.send(st, data)
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

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::property::PropertyGroup;

    #[test]
    fn the_settings_round_trip_and_blank_is_unset() {
        gst::init().unwrap();
        let mut s = Settings::default();
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!(
            (s.port, s.ttl, s.mtu),
            (DEFAULT_PORT + 1, DEFAULT_TTL + 1, DEFAULT_MTU + 1)
        );
        assert_eq!(s.host.as_deref(), Some("value-test"));
        assert!(s.set_named("dst-mac", &"  ".to_value()));
        assert_eq!(s.dst_mac, None);
    }
}
