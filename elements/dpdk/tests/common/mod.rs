//! Shared helpers of the DPDK tests. Every test file is its own process, because the
//! DPDK EAL starts once per process; inside a file, tests that start the EAL run one
//! at a time behind [`serial`].

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use firehose_testkit::netns::VethPair;
use firehose_testkit::{pattern, run};
use gst::prelude::*;

/// Initialises GStreamer and registers the DPDK elements statically.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        firehose_dpdk::register_static().unwrap();
    });
}

/// One test at a time in a process: they share the EAL and its devices.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A veth pair whose peer (in the namespace) knows the host end's MAC statically: a
/// PMD that takes frames off the host interface leaves no kernel there to answer ARP.
pub fn veth(tag: &str) -> VethPair {
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    pair.pin_host_neighbour().unwrap();
    pair
}

/// EAL arguments that add `pair`'s host end as the DPDK port `net_af_packet0` (the
/// net_af_packet PMD), without hugepages or PCI devices.
pub fn af_packet_eal(pair: &VethPair) -> String {
    format!(
        "--no-huge --no-pci --vdev=net_af_packet0,iface={},framecnt=4096",
        pair.host_if
    )
}

/// The MAC address as `aa:bb:…`.
pub fn mac_str(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Payload length of test packet `seq`: from 16 to 1472 bytes, varied.
pub fn len_of(seq: u64) -> usize {
    16 + (seq as usize * 331) % (1472 - 16 + 1)
}

/// A sender's schedule of `pps` sends a second that, after a stall (a loaded machine),
/// goes on from the moment it resumes rather than catching up in a burst, which the
/// receivers' rings in these tests are not sized for. Not `firehose_core::pace::Pacer`
/// (with a lag limit it would schedule the same): that one spins the last 50 µs of every
/// wait, and at these tests' 25 µs gaps its spinning would take the core the polling
/// DPDK receiver needs on a 2-core machine.
struct Pace {
    gap: Duration,
    due: Instant,
}

impl Pace {
    fn new(pps: u64) -> Self {
        Self {
            gap: Duration::from_nanos(1_000_000_000 / pps),
            due: Instant::now(),
        }
    }

    /// Waits until the next send is due.
    fn wait(&mut self) {
        let now = Instant::now();
        match self.due.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            None if now - self.due > Duration::from_millis(2) => self.due = now,
            None => {}
        }
        self.due += self.gap;
    }
}

/// Sends test packets `0..count` from inside the namespace to `dst`, from a socket bound
/// to the peer's address, at about `pps` packets per second (runs on its own thread).
pub fn send_paced(
    pair: &VethPair,
    dst: SocketAddr,
    count: u64,
    pps: u64,
) -> std::thread::JoinHandle<()> {
    let packets = (0..count).map(|seq| run::test_packet(seq, len_of(seq)));
    send_from_ns(pair, dst, packets, pps)
}

/// Sends `packets` in order from inside the namespace to `dst` at about `pps` packets
/// per second (runs on its own thread).
pub fn send_packets(
    pair: &VethPair,
    dst: SocketAddr,
    packets: Vec<Vec<u8>>,
    pps: u64,
) -> std::thread::JoinHandle<()> {
    send_from_ns(pair, dst, packets.into_iter(), pps)
}

/// Sends each of `packets` to `dst` from a socket made inside the namespace (it stays
/// there), paced at `pps`, on a thread of its own.
fn send_from_ns(
    pair: &VethPair,
    dst: SocketAddr,
    packets: impl Iterator<Item = Vec<u8>> + Send + 'static,
    pps: u64,
) -> std::thread::JoinHandle<()> {
    let sock = run::peer_socket(pair);
    std::thread::spawn(move || {
        let mut pace = Pace::new(pps);
        for p in packets {
            pace.wait();
            sock.send_to(&p, dst).unwrap();
        }
    })
}

/// A harness around `fhdpdksrc` with `props`, playing.
pub fn src_harness(props: &[(&str, &str)]) -> gst_check::Harness {
    init();
    let mut h = gst_check::Harness::new("fhdpdksrc");
    // The harness's sink asks for packet batches, as a Firehose consumer does.
    h.set_sink_caps(firehose_core::caps::packets_caps());
    let el = h.element().unwrap();
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    h.play();
    h
}

/// A harness around `fhdpdksrc` capturing `port` on `pair`'s host end through the
/// `pmd` device (`net_af_packet0`, `net_af_xdp0`; `vdev_args` follow its `iface=`),
/// with `props` besides, playing.
pub fn pmd_harness(
    pair: &VethPair,
    pmd: &str,
    vdev_args: &str,
    port: u16,
    props: &[(&str, &str)],
) -> gst_check::Harness {
    let eal = format!(
        "--no-huge --no-pci --vdev={pmd},iface={}{vdev_args}",
        pair.host_if
    );
    let port = port.to_string();
    let mut all = vec![
        ("eal-args", eal.as_str()),
        ("dpdk-port", pmd),
        ("port", &port),
        ("stats-interval", "0"),
    ];
    all.extend_from_slice(props);
    src_harness(&all)
}

/// Checks that each test packet arrived exactly once (`seen` from
/// [`pull_test_packets`]), naming the first missing ones.
pub fn assert_each_once(seen: &[u32], st: &gst::Structure) {
    let missing: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == 0).collect();
    assert!(
        missing.is_empty(),
        "{} missing, first {:?}; stats {st}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let dups = seen.iter().filter(|&&n| n > 1).count();
    assert_eq!(dups, 0, "duplicates; stats {st}");
}

/// Stops the harness's element, removes `pair`, and checks that nothing of it is left.
pub fn stop_and_remove(h: gst_check::Harness, pair: VethPair) {
    let (ns, host_if) = (pair.ns.clone(), pair.host_if.clone());
    h.element().unwrap().set_state(gst::State::Null).unwrap();
    drop(h);
    drop(pair);
    assert!(!leftovers(&ns, &host_if), "namespace or veth left behind");
}

/// Pulls batches until `count` test packets have arrived (or `timeout` passes); checks
/// every byte of each, that each batch is one memory, and returns how often each
/// sequence number was seen.
pub fn pull_test_packets(h: &mut gst_check::Harness, count: u64, timeout: Duration) -> Vec<u32> {
    pull_test_packets_to(h, count, timeout, None)
}

/// [`pull_test_packets`], also checking that every datagram's own frame headers are in
/// its batch (a recorder writes them as they were) and, if `dst` is set, that each was
/// sent there.
pub fn pull_test_packets_to(
    h: &mut gst_check::Harness,
    count: u64,
    timeout: Duration,
    dst: Option<std::net::SocketAddr>,
) -> Vec<u32> {
    use firehose_core::meta::dest::{frame_headers, PacketDestMeta};
    let mut seen = vec![0u32; count as usize];
    let mut got = 0u64;
    let end = Instant::now() + timeout;
    while got < count && Instant::now() < end {
        let Some(buf) = h.try_pull() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        assert_eq!(
            buf.n_memory(),
            1,
            "a batch is one memory (no merge copy downstream)"
        );
        let dests = buf
            .meta::<PacketDestMeta>()
            .expect("a destination meta")
            .dests()
            .to_vec();
        {
            let map = buf.map_readable().unwrap();
            let meta = buf.meta::<firehose_core::PacketBatchMeta>().unwrap();
            assert_eq!(dests.len(), meta.packets().len());
            for (p, d) in meta.packets().iter().zip(&dests) {
                let h = frame_headers(&map, p.offset as usize, p.len as usize, d.header_len)
                    .expect("the frame's headers lie before its payload");
                let mut frame = h.to_vec();
                frame.extend_from_slice(&map[p.range()]);
                let parsed = firehose_core::frame::datagram(1, &frame).unwrap();
                assert_eq!(parsed.dst, d.dst.to_socket_addr());
                if let Some(want) = dst {
                    assert_eq!(parsed.dst, want, "sent to");
                }
            }
        }
        firehose_core::batch::for_each_packet(&buf, |p, bytes| {
            let seq = pattern::verify(bytes).unwrap_or_else(|e| panic!("corrupt packet: {e:?}"));
            assert_eq!(bytes.len(), len_of(seq), "length of packet {seq}");
            assert_ne!(p.rx_time_ns, 0);
            seen[seq as usize] += 1;
            got += 1;
        })
        .expect("batch meta");
    }
    seen
}

/// Starts `fhdpdksrc` with `props` in a pipeline; returns the error message text (and
/// debug) it posts, or `None` if it started.
pub fn start_error(props: &[(&str, &str)]) -> Option<String> {
    init();
    let pipeline = run::launch("fhdpdksrc name=src ! fakesink");
    run::set_properties(&pipeline.by_name("src").unwrap(), props);
    let r = pipeline.set_state(gst::State::Playing);
    let err = pipeline
        .bus()
        .unwrap()
        .pop_filtered(&[gst::MessageType::Error])
        .and_then(|m| run::error_text(&m));
    pipeline.set_state(gst::State::Null).unwrap();
    if err.is_none() {
        assert!(r.is_ok(), "state change failed without an error message");
    }
    err
}

/// The element's stats structure.
pub fn stats(el: &gst::Element) -> gst::Structure {
    el.property::<gst::Structure>("stats")
}

/// Whether any namespace or interface made by this process is left.
pub fn leftovers(pair_ns: &str, host_if: &str) -> bool {
    std::path::Path::new(&format!("/var/run/netns/{pair_ns}")).exists()
        || std::path::Path::new(&format!("/sys/class/net/{host_if}")).exists()
}
