//! fhxdpsrc on a real veth pair: a sender in a private network namespace, the element
//! on the host end. Needs root (namespaces, BPF, AF_XDP); each test makes and removes
//! its own pair.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use firehose_core::batch::for_each_packet;
use firehose_core::stats::{field, names};
use firehose_spead::heap::{HeapMeta, ItemValue};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use firehose_testkit::netns::VethPair;
use firehose_testkit::run;
use gst::prelude::*;
use gst_check::Harness;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        // fhudpchunksrc handler=spead, as the plugin registers it.
        firehose_chunk::handler::register_handler(
            firehose_spead::chunk::NAME,
            firehose_spead::chunk::factory,
        );
        for (name, t) in [
            ("fhxdpsrc", firehose_xdp::xdpsrc::XdpSrc::static_type()),
            ("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type()),
            (
                "speaddepay",
                firehose_spead::depay::SpeadDepay::static_type(),
            ),
            (
                "fhspeadsrc",
                firehose_spead::speadsrc::SpeadSrc::static_type(),
            ),
            (
                "fhudpchunksrc",
                firehose_net::udpchunksrc::UdpChunkSrc::static_type(),
            ),
        ] {
            gst::Element::register(None, name, gst::Rank::NONE, t).unwrap();
        }
    });
}

/// Whether `ip link show dev ifname` lists an XDP program.
fn xdp_attached(ifname: &str) -> bool {
    let out = Command::new("ip")
        .args(["link", "show", "dev", ifname])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip link show dev {ifname}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains("xdp") || text.contains("prog/xdp")
}

/// Waits (10 s at most) until an XDP program is attached to `ifname`: the element
/// attaches it once it is playing.
fn wait_attached(ifname: &str) {
    run::wait_until(
        Duration::from_secs(10),
        || format!("no XDP program on {ifname}"),
        || xdp_attached(ifname),
    );
}

/// Whether the program is gone from `ifname` within 10 s of the element closing its
/// link. Not at once: a test running in parallel that spawns a process (`ip`) forks
/// this one, and the child holds a copy of every descriptor, the BPF link's included,
/// until it execs; the kernel detaches the program when the last copy closes.
fn xdp_detached_soon(ifname: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if !xdp_attached(ifname) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stats(el: &gst::Element) -> gst::Structure {
    el.property::<gst::Structure>("stats")
}

/// The next buffer, failing with the element's stats if none comes within 10 s.
fn pull(h: &mut Harness) -> gst::Buffer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(b) = h.try_pull() {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "no batch within 10 s: {}",
            stats(&h.element().unwrap())
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A fresh veth pair (`tag`) whose namespace end knows the host end's MAC: the XDP
/// program takes the frames off the host interface, where no kernel answers ARP.
fn pinned_pair(tag: &str) -> VethPair {
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    pair.pin_host_neighbour().unwrap();
    pair
}

fn xdp_harness(pair: &VethPair, port: u16, props: &[(&str, &str)]) -> Harness {
    init();
    let mut h = Harness::new("fhxdpsrc");
    // The harness's sink asks for packet batches, as a Firehose consumer does.
    h.set_sink_caps(firehose_core::caps::packets_caps());
    let el = h.element().unwrap();
    el.set_property("interface", &pair.host_if);
    el.set_property("port", i32::from(port));
    el.set_property_from_str("hugepages", "off");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    h.play();
    h
}

/// Datagram `seq` of the paced stream: the sequence number, then a pattern of it.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| (seq as usize * 7 + i * 13) as u8)
        .collect();
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

/// Sends `n` datagrams of `len` bytes from the namespace to `host_ip:port`, paced.
fn send_stream(pair: &VethPair, port: u16, n: u32, len: usize) {
    send_paced(pair, port, n, len, 32, None);
}

/// Sends `n` datagrams of `len` bytes, `per_ms` per millisecond (the tests' consumer
/// checks every byte, slowly in a debug build: a faster sender would only fill the
/// UMEM). With `progress` (datagrams the consumer has seen), it also stays at most 64
/// datagrams ahead of the consumer, for a UMEM too small for more: a consumer that a
/// loaded machine stalls then holds the sender back instead of losing datagrams.
fn send_paced(
    pair: &VethPair,
    port: u16,
    n: u32,
    len: usize,
    per_ms: u32,
    progress: Option<Arc<AtomicU32>>,
) {
    let s = run::peer_socket(pair);
    // One deadline for the whole send: a consumer that stopped for good lets the rest
    // go unpaced, and the test's own check reports it.
    let deadline = Instant::now() + Duration::from_secs(30);
    for seq in 0..n {
        if let Some(seen) = &progress {
            while seq > seen.load(Ordering::Relaxed) + 64 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        s.send_to(&payload(seq, len), (pair.host_ip, port)).unwrap();
        if seq % per_ms == per_ms - 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn stream_test(mode: &str, extra: &[(&str, &str)]) {
    const N: u32 = 3000;
    const LEN: usize = 1472;
    let pair = pinned_pair("x");
    let port = 7300;
    let mut props = vec![("mode", mode), ("stats-interval", "0")];
    props.extend_from_slice(extra);
    let mut h = xdp_harness(&pair, port, &props);
    let el = h.element().unwrap();
    assert!(
        xdp_attached(&pair.host_if),
        "program attached while playing"
    );
    send_stream(&pair, port, N, LEN);

    let mut next = 0u32;
    let mut kept = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while next < N {
        assert!(
            Instant::now() < deadline,
            "only {next} of {N}: {}",
            stats(&el)
        );
        let buf = pull(&mut h);
        assert_eq!(buf.n_memory(), 1, "one memory per batch");
        let n = for_each_packet(&buf, |p, bytes| {
            assert_eq!(p.src.to_socket_addr().ip(), pair.peer_ip);
            assert_eq!(bytes.len(), LEN, "datagram {next}");
            assert!(bytes == payload(next, LEN), "datagram {next} differs");
            next += 1;
        })
        .expect("batch meta");
        assert!(n > 0);
        kept.get_or_insert(buf);
    }
    let s = stats(&el);
    assert_eq!(field(&s, names::PACKETS), u64::from(N), "{s}");
    assert_eq!(field(&s, names::BYTES), u64::from(N) * LEN as u64, "{s}");
    assert_eq!(field(&s, names::MALFORMED), 0, "{s}");
    assert_eq!(field(&s, names::FILTERED), 0, "{s}");
    assert_eq!(s.get::<&str>("xdp-mode").unwrap(), mode, "{s}");
    assert_eq!(s.get::<&str>("bind-mode").unwrap(), "copy", "veth: {s}");
    assert!(field(&s, names::POOL_IN_USE) >= 1, "a buffer is held: {s}");

    // Stop while one batch is still held downstream.
    el.set_state(gst::State::Null).unwrap();
    assert!(xdp_detached_soon(&pair.host_if), "program detached at NULL");
    let s = stats(&el);
    assert_eq!(field(&s, "rx-dropped"), 0, "{s}");
    assert_eq!(field(&s, "rx-ring-full"), 0, "{s}");
    assert_eq!(field(&s, "rx-invalid-descs"), 0, "{s}");
    assert_eq!(
        field(&s, "pool-posted"),
        0,
        "frames back from the kernel: {s}"
    );
    let kept = kept.unwrap();
    assert!(field(&s, names::POOL_IN_USE) >= 1);
    // The held batch stays readable after stop: its UMEM lives until it goes.
    for_each_packet(&kept, |p, b| assert_eq!(b.len(), p.len as usize)).unwrap();
    drop(kept);
    drop(h);
    let s = stats(&el);
    assert_eq!(
        field(&s, names::POOL_IN_USE),
        0,
        "every UMEM frame is back: {s}"
    );
    assert_eq!(
        field(&s, names::POOL_SLOTS),
        u64::from(el.property::<u32>("frames"))
    );
}

#[test]
fn generic_mode_delivers_every_byte_and_detaches_at_stop() {
    stream_test("generic", &[]);
}

#[test]
fn native_mode_delivers_every_byte_and_detaches_at_stop() {
    stream_test("native", &[]);
}

/// busy-poll spins on the socket instead of sleeping in poll(); same result.
#[test]
fn busy_poll_mode_delivers_every_byte() {
    stream_test("native", &[("busy-poll", "50"), ("batch-size", "16")]);
}

/// `poll-interval=0`: the thread blocks in poll() and the kernel wakes it per packet
/// (the default naps instead).
#[test]
fn blocking_wait_mode_delivers_every_byte() {
    stream_test("native", &[("poll-interval", "0")]);
}

/// While the program is attached: UDP to another port, ARP and TCP still reach the
/// host's kernel, and the captured port reaches the element, not the kernel.
/// What the jumbo test's probe saw.
#[derive(Default)]
struct Seen {
    next: u32,
    error: Option<String>,
    kept: Option<gst::Buffer>,
}

/// Jumbo frames (MTU 9000, frames longer than a 4096-byte UMEM frame): every datagram
/// arrives whole and byte-exact, joined from the frames the kernel split it into, in
/// a UMEM small enough to wrap many times, while the first batch stays held (so the
/// fill ring's order skips its frames at every wrap). A real pipeline, not a
/// harness: the frames must come back as the buffers go.
fn jumbo_test(mode: &str) {
    jumbo_stream(mode, 9000, 8972, 1000, "frames=512");
}

/// `n` datagrams of `len` bytes over a veth of MTU `mtu` into fhxdpsrc with `props`, each
/// checked byte for byte (see [`jumbo_test`]).
fn jumbo_stream(mode: &str, mtu: u32, len: usize, n: u32, props: &str) {
    init();
    let pair = VethPair::create("j").expect("needs root and iproute2");
    pair.set_mtu(mtu).unwrap();
    pair.pin_host_neighbour().unwrap();
    let port = 7310;
    let pipeline = run::launch(&format!(
        "fhxdpsrc name=src interface={} port={port} mode={mode} hugepages=off {props} \
         stats-interval=0 ! {} ! fakesink name=sink sync=false async=false",
        pair.host_if,
        firehose_core::caps::packets_caps()
    ));
    let el = pipeline.by_name("src").unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let probe_seen = seen.clone();
    let progress = Arc::new(AtomicU32::new(0));
    let probe_progress = progress.clone();
    pipeline
        .by_name("sink")
        .unwrap()
        .static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            let Some(buf) = info.buffer() else {
                return gst::PadProbeReturn::Ok;
            };
            let mut s = probe_seen.lock().unwrap();
            let mut next = s.next;
            let mut error = None;
            let _ = for_each_packet(buf, |_, bytes| {
                if error.is_none() && (bytes.len() != len || bytes != payload(next, len)) {
                    error = Some(format!("datagram {next}: {} bytes, differs", bytes.len()));
                }
                next += 1;
            });
            s.next = next;
            probe_progress.store(next, Ordering::Relaxed);
            s.error = s.error.take().or(error);
            if s.kept.is_none() {
                s.kept = Some(buf.clone());
            }
            gst::PadProbeReturn::Ok
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    wait_attached(&pair.host_if);
    send_paced(&pair, port, n, len, 2, Some(progress));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let next = seen.lock().unwrap().next;
        if next >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {next} of {n}: {}",
            stats(&el)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = stats(&el);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.error, None, "{s}");
    assert_eq!(seen.next, n, "{s}");
    assert_eq!(field(&s, names::PACKETS), u64::from(n), "{s}");
    assert_eq!(
        field(&s, "joined"),
        u64::from(n),
        "each in several frames: {s}"
    );
    assert_eq!(field(&s, "unjoined"), 0, "{s}");
    assert_eq!(field(&s, names::MALFORMED), 0, "{s}");
    assert_eq!(s.get::<&str>("xdp-mode").unwrap(), mode, "{s}");
    assert!(
        field(&s, names::POOL_HIGH_WATER) < 512,
        "frames came back as the buffers went (the UMEM wrapped many times): {s}"
    );
    drop(seen);
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(xdp_detached_soon(&pair.host_if), "program detached at NULL");
    let s = stats(&el);
    assert_eq!(field(&s, "rx-dropped"), 0, "{s}");
}

#[test]
fn jumbo_frames_arrive_whole_in_generic_mode() {
    jumbo_test("generic");
}

#[test]
fn jumbo_frames_arrive_whole_in_native_mode() {
    jumbo_test("native");
}

/// A capture whose frames are all held downstream (nobody pulls) makes the kernel drop:
/// its counters show it while the capture runs, not only once it stops (the stats timer
/// runs only with batches, and none comes while starved).
#[test]
fn kernel_drops_show_while_starved() {
    let pair = pinned_pair("k");
    let port = 7320;
    let h = xdp_harness(
        &pair,
        port,
        &[
            ("mode", "generic"),
            ("frames", "64"),
            ("stats-interval", "0"),
        ],
    );
    let el = h.element().unwrap();
    send_stream(&pair, port, 1000, 1472);
    let deadline = Instant::now() + Duration::from_secs(30);
    let dropped = || {
        let s = stats(&el);
        field(&s, "rx-dropped") + field(&s, "rx-fill-ring-empty-descs")
    };
    while dropped() == 0 {
        assert!(
            Instant::now() < deadline,
            "no kernel drops shown while running: {}",
            stats(&el)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(field(&stats(&el), names::PACKETS) < 1000);
    drop(h);
}

/// Datagrams spanning more frames (23 of 2048 bytes) than the 18 that 4096-byte frames
/// allow, taken in batches of 8: the receive loop must look as far ahead as the frame
/// size needs (it looked 18 ahead, saw no datagram end, and peeked the same descriptors
/// for ever).
#[test]
fn long_datagrams_in_small_frames_arrive_whole() {
    jumbo_stream(
        "generic",
        42000,
        40000,
        200,
        "frames=512 slot-size=2048 batch-size=8",
    );
}

#[test]
fn other_traffic_still_reaches_the_kernel() {
    let pair = VethPair::create("o").expect("needs root and iproute2");
    let (port, other) = (7310u16, 7311u16);
    // Kernel sockets on both ports: only `other` may see anything.
    let kernel_other = UdpSocket::bind((pair.host_ip, other)).unwrap();
    let kernel_captured = UdpSocket::bind((pair.host_ip, port)).unwrap();
    kernel_other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    kernel_captured
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let tcp = TcpListener::bind((pair.host_ip, 0)).unwrap();
    let tcp_addr = tcp.local_addr().unwrap();

    let mut h = xdp_harness(&pair, port, &[("mode", "auto")]);
    assert!(xdp_attached(&pair.host_if));
    let (from, to) = (pair.peer_ip, pair.host_ip);
    // No static neighbour: the first datagram needs ARP, answered by the host kernel.
    let echo = std::thread::spawn(move || {
        let (mut c, _) = tcp.accept().unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).unwrap();
        c.write_all(&b).unwrap();
    });
    pair.in_ns(move || {
        let s = UdpSocket::bind((from, 0)).unwrap();
        s.send_to(b"to the kernel", (to, other)).unwrap();
        s.send_to(b"to fhxdpsrc", (to, port)).unwrap();
        let mut c = TcpStream::connect_timeout(&tcp_addr, Duration::from_secs(5)).unwrap();
        c.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
    })
    .unwrap();
    echo.join().unwrap();

    let mut b = [0u8; 64];
    let (n, src) = kernel_other.recv_from(&mut b).unwrap();
    assert_eq!(&b[..n], b"to the kernel");
    assert_eq!(src.ip(), pair.peer_ip);
    let buf = pull(&mut h);
    let mut got = vec![];
    for_each_packet(&buf, |_, d| got.push(d.to_vec())).unwrap();
    assert_eq!(got, vec![b"to fhxdpsrc".to_vec()]);
    assert!(
        kernel_captured.recv_from(&mut b).is_err(),
        "the captured port must not also reach the kernel"
    );
    let out = Command::new("ip")
        .args(["-n", &pair.ns, "neigh", "show", &pair.host_ip.to_string()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("lladdr"),
        "ARP resolved through the attached program"
    );
}

/// Starts a pipeline with a configured fhxdpsrc; returns the start error's message.
fn start_error(props: &[(&str, &str)]) -> String {
    init();
    let text = run::start_error("fhxdpsrc", &[&[("hugepages", "off")], props].concat());
    eprintln!("{props:?}: {text}");
    text
}

/// `frame-size`, the old name of `slot-size`, still sets it, through the element: the
/// ids the base appends after the subclass's own properties reach the right ones, and
/// `pool-size` counts in frames of the size set.
#[test]
fn frame_size_still_sets_slot_size() {
    init();
    let el = gst::ElementFactory::make("fhxdpsrc").build().unwrap();
    el.set_property("frame-size", 2048u32);
    assert_eq!(el.property::<u32>("slot-size"), 2048);
    el.set_property("frames", 1024u32);
    assert_eq!(el.property::<u64>("pool-size"), 1024 * 2048);
    el.set_property("slot-size", 4096u32);
    assert_eq!(el.property::<u32>("frame-size"), 4096);
}

#[test]
fn start_errors_say_cause_and_fix() {
    // (properties, what the error says)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            &[("interface", "fhnosuch0")],
            &["no network interface named", "ip link"],
        ),
        (&[], &["set interface="]),
        (&[("interface", "lo"), ("port", "0")], &["port=0"]),
        (
            &[("interface", "lo"), ("queue", "7")],
            &["queue 7 is out of range"],
        ),
        (
            &[
                ("interface", "lo"),
                ("hugepages", "require"),
                ("frames", "1048576"),
            ],
            &["/proc/sys/vm/nr_hugepages"],
        ),
        // lo's driver has no native XDP; nothing may stay attached after the failure.
        (
            &[("interface", "lo"), ("mode", "native")],
            &["mode=native", "mode=generic"],
        ),
    ];
    for (props, says) in cases {
        let e = start_error(props);
        assert!(says.iter().all(|s| e.contains(s)), "{props:?}: {e}");
    }
    assert!(!xdp_attached("lo"));

    let pair = VethPair::create("e").expect("needs root and iproute2");
    let e = start_error(&[("interface", &pair.host_if), ("zero-copy", "on")]);
    assert!(
        e.contains("zero-copy=on") && e.contains("zero-copy=auto"),
        "{e}"
    );
    assert!(xdp_detached_soon(&pair.host_if));
    // A second capture on the same queue while one runs.
    let _h = xdp_harness(&pair, 7320, &[("mode", "generic")]);
    let e = start_error(&[("interface", &pair.host_if), ("mode", "generic")]);
    assert!(e.contains("already"), "{e}");
}

/// The heaps of a SPEAD stream as (cnt, [(item id, value bytes)]).
type Heaps = Vec<(u64, Vec<(u64, Vec<u8>)>)>;

const HEAPS: u64 = 20;
const ITEM: usize = 32 << 10;

/// The packets (of up to 1472 bytes) of heap `cnt` holding `items`.
fn heap_packets(cnt: u64, items: &[Item]) -> Vec<Vec<u8>> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1472).unwrap();
    let mut heap = cfg.heap(cnt, items).unwrap();
    let mut buf = vec![0u8; cfg.packet_size()];
    std::iter::from_fn(|| heap.write_next(&mut buf).map(|n| buf[..n].to_vec())).collect()
}

/// The stream: HEAPS heaps of an immediate and an ITEM-byte item, then a stop heap.
fn spead_packets() -> Vec<Vec<u8>> {
    let mut out = vec![];
    for cnt in 1..=HEAPS {
        let data: Vec<u8> = (0..ITEM)
            .map(|i| (cnt as usize * 31 + i * 7) as u8)
            .collect();
        out.extend(heap_packets(
            cnt,
            &[Item::immediate(0x1600, cnt), Item::bytes(0x1000, &data)],
        ));
    }
    out.extend(heap_packets(HEAPS + 1, &[Item::stop()]));
    out
}

/// Sends `packets` from the namespace to `port` on the host end, pausing a millisecond
/// after every 32.
fn send_datagrams(pair: &VethPair, port: u16, packets: Vec<Vec<u8>>) {
    let s = run::peer_socket(pair);
    for (k, p) in packets.iter().enumerate() {
        s.send_to(p, (pair.host_ip, port)).unwrap();
        if k % 32 == 31 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Runs `desc` (a source named `src` ! speaddepay ! fakesink name=sink), sends the
/// SPEAD stream from the namespace to `port`, and collects the heaps up to EOS.
fn heaps_through(pair: &VethPair, desc: &str, port: u16) -> Heaps {
    let desc = format!("{desc} ! speaddepay max-heap-size=1048576 hugepages=off");
    buffers_through(pair, &desc, port, |stats| {
        assert_eq!(field(stats, names::MALFORMED), 0, "{stats}")
    })
    .iter()
    .map(heap_of)
    .collect()
}

/// The heaps of the SPEAD stream sent to `port` on `pair`'s host end through the
/// kernel: `fhudpsrc ! speaddepay`, what the AF_XDP paths must give.
fn udp_heaps(pair: &VethPair, port: u16) -> Heaps {
    let desc = format!(
        "fhudpsrc name=src address={} port={port} hugepages=off",
        pair.host_ip
    );
    let heaps = heaps_through(pair, &desc, port);
    assert_eq!(heaps.len() as u64, HEAPS);
    heaps
}

/// A heap buffer as (cnt, [(item id, value bytes)]).
fn heap_of(buf: &gst::Buffer) -> (u64, Vec<(u64, Vec<u8>)>) {
    let info = buf.meta::<HeapMeta>().expect("heap meta").info().clone();
    assert!(info.complete, "heap {} complete", info.heap_cnt);
    let map = buf.map_readable().unwrap();
    let items = info
        .items
        .iter()
        .map(|it| {
            let v = match &it.value {
                ItemValue::Immediate(v) => v.to_le_bytes().to_vec(),
                ItemValue::Bytes(r) => map[r.clone()].to_vec(),
            };
            (it.id, v)
        })
        .collect();
    (info.heap_cnt, items)
}

/// Runs `desc` (ending in an element that pushes heaps or chunks, with its source named
/// `src`) into a fakesink, sends the SPEAD stream from the namespace to `port`, and
/// returns what reached the sink up to EOS; `check` looks at `src`'s stats at EOS.
fn buffers_through(
    pair: &VethPair,
    desc: &str,
    port: u16,
    check: impl FnOnce(&gst::Structure),
) -> Vec<gst::Buffer> {
    init();
    let pipeline = run::launch(&format!("{desc} ! fakesink name=sink sync=false"));
    let rx = run::handoffs(&pipeline, "sink");
    pipeline.set_state(gst::State::Playing).unwrap();
    send_datagrams(pair, port, spead_packets());
    run::wait_end(&pipeline.bus().unwrap(), Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("before the stop heap's EOS: {e}"));
    let stats = pipeline
        .by_name("src")
        .unwrap()
        .property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    check(&stats);
    rx.try_iter().collect()
}

#[test]
fn spead_over_xdp_reassembles_like_fhudpsrc() {
    let pair = pinned_pair("s");
    let udp = udp_heaps(&pair, 7330);
    let xdp = heaps_through(
        &pair,
        &format!(
            "fhxdpsrc name=src interface={} port=7331 mode=generic hugepages=off",
            pair.host_if
        ),
        7331,
    );
    assert_eq!(
        udp.iter().map(|h| h.0).collect::<Vec<_>>(),
        (1..=HEAPS).collect::<Vec<_>>()
    );
    assert!(udp[0]
        .1
        .iter()
        .any(|(id, v)| *id == 0x1000 && v.len() == ITEM));
    assert!(xdp == udp, "fhxdpsrc heaps differ from fhudpsrc heaps");
    assert!(xdp_detached_soon(&pair.host_if));
}

/// The heap engine composed with AF_XDP in one element (`fhspeadsrc transport=…`):
/// the reassembler takes each batch where the kernel wrote it in the UMEM. The heaps
/// are those of `fhudpsrc ! speaddepay`, every payload copied once (none landed), and
/// the program goes at stop.
#[test]
fn fhspeadsrc_over_af_xdp_reassembles_like_fhudpsrc() {
    let pair = pinned_pair("h");
    let udp = udp_heaps(&pair, 7333);
    let desc = format!(
        "fhspeadsrc name=src max-heap-size=1048576 hugepages=off \
         transport=\"fhxdpsrc interface={} port=7334 mode=generic hugepages=off\"",
        pair.host_if
    );
    let datagrams = spead_packets().len() as u64;
    let composed: Heaps = buffers_through(&pair, &desc, 7334, |s| {
        assert_eq!(field(s, names::MALFORMED), 0, "{s}");
        assert_eq!(field(s, names::DATAGRAMS), datagrams, "{s}");
        assert_eq!(field(s, names::PACKETS_COPIED), datagrams, "{s}");
        assert_eq!(field(s, names::PACKETS_LANDED), 0, "{s}");
        assert_eq!(field(s, names::DROPS_KERNEL), 0, "{s}");
    })
    .iter()
    .map(heap_of)
    .collect();
    assert!(
        composed == udp,
        "fhspeadsrc over AF_XDP differs from fhudpsrc ! speaddepay"
    );
    assert!(xdp_detached_soon(&pair.host_if), "program detached at stop");
}

/// An application's EOS on an engine over AF_XDP (`gst-launch-1.0 -e`, Ctrl-C in
/// `firehose launch`): what the UMEM already holds is read and every heap still open is
/// pushed before EOS, so a stream without a stop heap loses nothing that arrived.
#[test]
fn an_eos_on_fhspeadsrc_over_af_xdp_pushes_every_heap_received() {
    init();
    let pair = pinned_pair("q");
    let pipeline = run::launch(&format!(
        "fhspeadsrc name=src max-heap-size=1048576 hugepages=off \
         transport=\"fhxdpsrc interface={} port=7336 mode=generic hugepages=off\" \
         ! fakesink name=sink sync=false",
        pair.host_if
    ));
    let rx = run::handoffs(&pipeline, "sink");
    pipeline.set_state(gst::State::Playing).unwrap();
    // Every heap but the stop heap: nothing in the stream ends it.
    let mut packets = spead_packets();
    let stop = heap_packets(HEAPS + 1, &[Item::stop()]).len();
    packets.truncate(packets.len() - stop);
    let sent = packets.len() as u64;
    send_datagrams(&pair, 7336, packets);
    let src = pipeline.by_name("src").unwrap();
    // Wait until the element has taken every datagram, then end the stream.
    run::wait_until(
        Duration::from_secs(20),
        || stats(&src).to_string(),
        || field(&stats(&src), names::DATAGRAMS) >= sent,
    );
    run::end_stream(&pipeline, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("EOS after the application's EOS, not {e}"));
    pipeline.set_state(gst::State::Null).unwrap();
    let heaps: Vec<u64> = rx.try_iter().map(|b| heap_of(&b).0).collect();
    assert_eq!(
        heaps,
        (1..=HEAPS).collect::<Vec<_>>(),
        "every heap, in order"
    );
}

/// The chunk engine composed with AF_XDP in one element (`fhudpchunksrc transport=…`):
/// every heap's item lands in its slot, byte-exact.
#[test]
fn fhudpchunksrc_over_af_xdp_places_every_heap() {
    let pair = pinned_pair("c");
    let desc = format!(
        "fhudpchunksrc name=src handler=spead slots-per-chunk=4 slot-size={ITEM} \
         memory=system transport=\"fhxdpsrc interface={} port=7335 mode=generic \
         hugepages=off\"",
        pair.host_if
    );
    let chunks = buffers_through(&pair, &desc, 7335, |s| {
        assert_eq!(field(s, names::MALFORMED), 0, "{s}");
        assert_eq!(field(s, names::PACKETS_LANDED), 0, "{s}");
    });
    // The item of heap `cnt` is (cnt * 31 + i * 7) as bytes: its first byte names it
    // (31 is odd, so cnt * 31 mod 256 differs for every cnt below 256).
    let inverse = (1..=255u8).find(|x| x.wrapping_mul(31) == 1).unwrap();
    let mut placed = std::collections::BTreeSet::new();
    for c in &chunks {
        let info = c
            .meta::<firehose_core::meta::chunk::ChunkMeta>()
            .expect("chunk meta")
            .info()
            .clone();
        let map = c.map_readable().unwrap();
        for i in (0..info.slots).filter(|&i| info.is_present(i)) {
            let slot = &map[info.slot_range(i)];
            let cnt = u64::from(slot[0].wrapping_mul(inverse));
            let want: Vec<u8> = (0..ITEM)
                .map(|k| (cnt as usize * 31 + k * 7) as u8)
                .collect();
            assert!(
                slot == want.as_slice(),
                "slot {i} of chunk {}",
                info.chunk_id
            );
            placed.insert(cnt);
        }
    }
    assert_eq!(placed, (1..=HEAPS).collect(), "every heap in a slot");
    assert!(xdp_detached_soon(&pair.host_if), "program detached at stop");
}

#[test]
fn batches_are_copied_once_into_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    use firehose_core::MemoryKind;
    let pair = pinned_pair("c");
    let port = 7302;
    init();
    let mut h = Harness::new("fhxdpsrc");
    // The harness's sink asks for packet batches, as a Firehose consumer does.
    h.set_sink_caps(firehose_core::caps::packets_caps());
    // The harness's sink pad answers the allocation query as fhshmsink will. The NIC
    // writes into the UMEM, so the source copies each batch once into shared memory.
    h.sinkpad()
        .unwrap()
        .add_probe(gst::PadProbeType::QUERY_DOWNSTREAM, |_, info| {
            if let Some(gst::QueryViewMut::Allocation(q)) = info.query_mut().map(|q| q.view_mut()) {
                firehose_core::alloc::propose(
                    q,
                    std::sync::Arc::new(SharedSegment::new("xdp-test")),
                );
                return gst::PadProbeReturn::Handled;
            }
            gst::PadProbeReturn::Ok
        });
    let el = h.element().unwrap();
    el.set_property("interface", &pair.host_if);
    el.set_property("port", i32::from(port));
    el.set_property_from_str("memory", "system");
    el.set_property_from_str("mode", "generic");
    h.play();
    send_stream(&pair, port, 64, 1000);
    let buf = pull(&mut h);
    assert_eq!(
        firehose_core::gstmem::buffer_memory_kind(&buf),
        Some(MemoryKind::Shared)
    );
    let mut first = None;
    for_each_packet(&buf, |_, d| {
        first.get_or_insert_with(|| d.to_vec());
    })
    .expect("the batch meta is copied with the bytes");
    assert_eq!(first.unwrap(), payload(0, 1000));
    let s = stats(&el);
    assert!(field(&s, names::BYTES_COPIED) >= 1000, "{s}");
    assert_eq!(s.get::<String>("memory-copied-into").unwrap(), "shared");
}

/// Runs `fhxdpsrc ! fakesink` on a fresh veth pair (`tag`), receiving, then does
/// `fault` (an `ip` command line, `IF` for the host interface): the pipeline must end
/// with an error containing `want` and naming the interface within 30 s.
fn fault_ends_the_capture(tag: &str, fault: &[&str], want: &str) {
    init();
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    let port = 7320u16;
    let pipeline = run::launch(&format!(
        "fhxdpsrc name=src interface={} port={port} hugepages=off ! fakesink",
        pair.host_if
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    send_stream(&pair, port, 64, 200);
    let src = pipeline.by_name("src").unwrap();
    run::wait_until(
        Duration::from_secs(10),
        || "nothing received".into(),
        || field(&stats(&src), names::PACKETS) > 0,
    );
    let text = run::error_after_fault(&pipeline, fault, &pair.host_if);
    assert!(
        text.contains(want) && text.contains(&pair.host_if),
        "{text}"
    );
}

#[test]
fn an_interface_deleted_or_taken_down_under_the_capture_is_an_error_naming_it() {
    for (i, (fault, want)) in run::INTERFACE_FAULTS.iter().enumerate() {
        fault_ends_the_capture(&format!("f{i}"), fault, want);
    }
}

/// Every record of a capture file: (link type, frame bytes).
fn capture_frames(path: &std::path::Path) -> Vec<(u16, Vec<u8>)> {
    use firehose_record::read::container::CaptureReader;
    let mut r = CaptureReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.linktype, rec.data.to_vec()));
    }
    out
}

#[test]
fn a_recording_keeps_each_frames_real_addresses_and_headers() {
    const N: u32 = 40;
    const PORT: u16 = 7391;
    init();
    firehose_record::register_elements(None).unwrap();
    let pair = pinned_pair("r");
    let dir = std::env::temp_dir().join(format!("fh-xdp-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ours, theirs) = (dir.join("ours.pcap"), dir.join("sent.pcap"));

    // What left the sender, as tcpdump sees it on the namespace's end.
    let mut tcpdump = pair.command("tcpdump");
    tcpdump
        .args(["-i", &pair.peer_if, "-U", "--immediate-mode", "-w"])
        .arg(&theirs)
        .args(["udp", "port", &PORT.to_string()]);
    let dump = run::Tcpdump::start(tcpdump);

    let pipeline = run::launch(&format!(
        "fhxdpsrc name=src interface={} port={PORT} hugepages=off ! \
         fhrecordsink location={} when-full=block",
        pair.host_if,
        ours.display()
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let src = pipeline.by_name("src").unwrap();
    // The XDP program is attached once the element is playing.
    wait_attached(&pair.host_if);
    send_stream(&pair, PORT, N, 200);
    run::wait_until(
        Duration::from_secs(10),
        || format!("not all received: {}", stats(&src)),
        || field(&stats(&src), names::PACKETS) >= u64::from(N),
    );
    run::end_stream(&pipeline, Duration::from_secs(20)).unwrap();
    pipeline.set_state(gst::State::Null).unwrap();
    // tcpdump writes each packet as it sees it (-U): wait until it wrote them all.
    let deadline = Instant::now() + Duration::from_secs(10);
    while firehose_record::read::container::count_whole_records(&theirs) < N as usize
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    dump.stop();

    let recorded = capture_frames(&ours);
    let sent = capture_frames(&theirs);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(recorded.len(), N as usize);
    assert_eq!(sent.len(), N as usize, "tcpdump saw every datagram leave");
    for (i, ((lt, ours), (_, wire))) in recorded.iter().zip(&sent).enumerate() {
        assert_eq!(*lt, 1, "Ethernet");
        let d = firehose_core::frame::datagram(1, ours).unwrap();
        assert_eq!(
            d.dst,
            std::net::SocketAddr::from((pair.host_ip, PORT)),
            "frame {i}: the real destination"
        );
        assert_eq!(d.src.ip(), std::net::IpAddr::V4(pair.peer_ip));
        assert_eq!(d.payload, payload(i as u32, 200));
        // The frame as it was on the wire: MACs, IP id, TTL, every header byte (the
        // UDP checksum aside, which the sender's tap may see before it is filled in).
        let mask = |f: &[u8]| {
            let mut f = f.to_vec();
            f[40] = 0;
            f[41] = 0;
            f
        };
        assert_eq!(
            &ours[..6],
            &pair.host_mac,
            "frame {i}: real destination MAC"
        );
        assert_eq!(&ours[6..12], &pair.peer_mac, "frame {i}: real source MAC");
        assert_eq!(mask(ours), mask(wire), "frame {i} differs from the wire");
    }
}

/// Each endpoint's (address, packets, bytes) from `stats`.
fn endpoint_stats(s: &gst::Structure) -> Vec<(String, u64, u64)> {
    firehose_core::endpoint::read_stats(s).unwrap_or_else(|| panic!("no endpoints in {s}"))
}

/// Whether `group` is joined on interface `ifname` per /proc/net/igmp (which prints a
/// group as its network-order bytes read as a little-endian word).
fn igmp_joined(ifname: &str, group: std::net::Ipv4Addr) -> bool {
    let want = format!("{:08X}", u32::from_le_bytes(group.octets()));
    let text = std::fs::read_to_string("/proc/net/igmp").unwrap();
    // Per interface: "idx\tname\t:\tcount\tquerier", then one indented line per group.
    let mut on = false;
    text.lines().any(|l| {
        if !l.starts_with('\t') {
            // A long name runs into the colon: "624\tfhl323510h:     3".
            on = l.split_whitespace().nth(1).map(|n| n.trim_end_matches(':')) == Some(ifname);
            false
        } else {
            on && l.split_whitespace().next() == Some(want.as_str())
        }
    })
}

/// An endpoint list of two unicast ports and two multicast groups: every datagram to a
/// listed endpoint arrives with its own destination in the dest meta and is counted to
/// its endpoint; datagrams to an unlisted group on a listed port, and to the host on a
/// port only a group is listed on, are not redirected (the second reaches a kernel
/// socket), so nothing is filtered in software either. The groups are joined while the
/// capture runs.
#[test]
fn an_endpoint_list_delivers_each_destination_and_counts_it() {
    use firehose_core::meta::dest::PacketDestMeta;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    const N: u32 = 60;
    const LEN: usize = 300;
    let pair = pinned_pair("l");
    let (g1, g2, g3) = (
        Ipv4Addr::new(239, 77, 5, 1),
        Ipv4Addr::new(239, 77, 5, 2),
        Ipv4Addr::new(239, 77, 5, 3),
    );
    let host = pair.host_ip;
    let listed: Vec<SocketAddr> = vec![
        (host, 7400).into(),
        (host, 7401).into(),
        (g1, 7400).into(),
        (g2, 7402).into(),
    ];
    // Unlisted: a third group on a listed port; the host on group 2's port.
    let unlisted: Vec<SocketAddr> = vec![(g3, 7400).into(), (host, 7402).into()];
    let kernel = UdpSocket::bind((host, 7402)).unwrap();
    kernel
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let list = listed
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut h = xdp_harness(
        &pair,
        7148,
        &[
            ("endpoints", &list),
            ("stats-interval", "0"),
            ("mode", "auto"),
        ],
    );
    let el = h.element().unwrap();
    assert!(xdp_attached(&pair.host_if));
    assert!(
        igmp_joined(&pair.host_if, g1),
        "group 1 joined on {}: {}",
        pair.host_if,
        std::fs::read_to_string("/proc/net/igmp").unwrap()
    );
    assert!(igmp_joined(&pair.host_if, g2), "group 2 joined");
    assert!(!igmp_joined(&pair.host_if, g3));

    // Datagram k of endpoint i: i, then the paced stream's payload of seq k.
    let s = run::peer_socket(&pair);
    for seq in 0..N {
        for (i, to) in listed.iter().chain(&unlisted).enumerate() {
            let mut p = payload(seq, LEN);
            p[4] = i as u8;
            s.send_to(&p, to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    let total = N as usize * listed.len();
    let mut seen = vec![vec![false; N as usize]; listed.len()];
    let mut got = 0;
    while got < total {
        let buf = pull(&mut h);
        let dests = buf
            .meta::<PacketDestMeta>()
            .expect("a dest meta")
            .dests()
            .to_vec();
        let mut k = 0;
        for_each_packet(&buf, |_, d| {
            let (i, seq) = (
                usize::from(d[4]),
                u32::from_le_bytes(d[..4].try_into().unwrap()),
            );
            assert!(
                i < listed.len(),
                "datagram to unlisted endpoint {i} delivered"
            );
            let mut want = payload(seq, LEN);
            want[4] = i as u8;
            assert_eq!(d, &want[..], "endpoint {i} datagram {seq}");
            assert_eq!(
                dests[k].dst.to_socket_addr(),
                listed[i],
                "endpoint {i} datagram {seq}: its destination"
            );
            assert!(!seen[i][seq as usize], "endpoint {i} datagram {seq} twice");
            seen[i][seq as usize] = true;
            k += 1;
        })
        .unwrap();
        assert_eq!(k, dests.len(), "one dest per datagram");
        got += k;
    }
    let st = stats(&el);
    assert_eq!(field(&st, names::PACKETS), total as u64, "{st}");
    assert_eq!(field(&st, names::FILTERED), 0, "{st}");
    let per: Vec<(String, u64, u64)> = listed
        .iter()
        .map(|a| (a.to_string(), u64::from(N), u64::from(N) * LEN as u64))
        .collect();
    assert_eq!(endpoint_stats(&st), per);
    // The host's datagrams to a port only a group is listed on reached the kernel.
    let mut b = [0u8; 2048];
    for seq in 0..N {
        let (n, from) = kernel.recv_from(&mut b).unwrap();
        assert_eq!(n, LEN);
        assert_eq!(from.ip(), IpAddr::V4(pair.peer_ip));
        assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), seq);
    }
    el.set_state(gst::State::Null).unwrap();
    assert!(!igmp_joined(&pair.host_if, g1), "group 1 left at stop");
    // The counts stay readable after stop.
    assert_eq!(endpoint_stats(&stats(&el)), per);
}

#[test]
fn endpoint_list_start_errors_say_what_to_set() {
    for (props, says) in [
        (
            &[
                ("interface", "lo"),
                ("endpoints", "239.1.1.1:7148"),
                ("extra-ports", "7149"),
            ][..],
            "both endpoints and extra-ports",
        ),
        (
            &[
                ("interface", "lo"),
                ("endpoints", "239.1.1.1:7148"),
                ("address", "10.0.0.1"),
            ][..],
            "both address",
        ),
        (
            &[("interface", "lo"), ("endpoints", "239.1.1.1:7148,nowhere")][..],
            "ADDRESS[+N][:PORT]",
        ),
        (
            &[
                ("interface", "lo"),
                ("endpoints", "10.0.0.1"),
                ("port", "0"),
            ][..],
            "port=0",
        ),
    ] {
        let e = start_error(props);
        assert!(e.contains(says), "{props:?}: {e}");
    }
    assert!(!xdp_attached("lo"));
}
