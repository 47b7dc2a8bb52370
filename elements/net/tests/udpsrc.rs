//! fhudpsrc against real sockets on loopback (and in private network namespaces for
//! multicast). Each test binds port 0, so tests run in parallel without clashing.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::batch::for_each_packet;
use firehose_core::stats::field;
use firehose_core::PacketBatchMeta;
use firehose_testkit::run;
use gst::prelude::*;
use gst_check::Harness;

fn init() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
}

/// A harness around `fhudpsrc` with `props`, playing, and the bound port. Without an
/// `output` in `props` the harness's sink asks for packet batches, as a Firehose
/// consumer does (so `output=auto` chooses them).
fn harness(props: &[(&str, &str)]) -> (Harness, u16) {
    harness_with(props, |_| {})
}

/// [`harness`], `setup` done to the harness before it plays.
fn harness_with(props: &[(&str, &str)], setup: impl FnOnce(&mut Harness)) -> (Harness, u16) {
    init();
    let mut h = Harness::new("fhudpsrc");
    setup(&mut h);
    if !props.iter().any(|(k, _)| *k == "output") {
        h.set_sink_caps(firehose_core::caps::packets_caps());
    }
    let el = h.element().unwrap();
    run::set_properties(&el, &[("address", "127.0.0.1"), ("port", "0")]);
    run::set_properties(&el, props);
    h.play();
    let port = el.property::<i32>("port") as u16;
    assert_ne!(port, 0, "bound port is readable after start");
    (h, port)
}

/// The stats of the harness's element.
fn stats(h: &Harness) -> gst::Structure {
    h.element().unwrap().property::<gst::Structure>("stats")
}

fn sender() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// Pulls batch buffers until `n` datagrams were seen; returns them with their meta.
fn pull_packets(h: &mut Harness, n: usize) -> Vec<(Vec<u8>, firehose_core::PacketInfo)> {
    let mut out = Vec::new();
    while out.len() < n {
        let buf = h.pull().expect("a batch within the harness timeout");
        for_each_packet(&buf, |p, b| out.push((b.to_vec(), *p))).expect("batch meta");
    }
    out
}

/// Nanoseconds since the Unix epoch now.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn receives_batches_with_meta_and_timestamps() {
    let (mut h, port) = harness(&[("timestamps", "true")]);
    let s = sender();
    let before_ns = now_ns();
    let dst: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    for i in 0..200u32 {
        let len = 1 + (i as usize * 37) % 1400;
        let mut p = vec![(i % 251) as u8; len];
        p[0] = (i & 0xff) as u8;
        s.send_to(&p, dst).unwrap();
    }
    let got = pull_packets(&mut h, 200);
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(
        caps.structure(0).unwrap().name(),
        "application/x-firehose-packets"
    );
    let now_ns = now_ns();
    for (i, (bytes, info)) in got.iter().enumerate() {
        let i = i as u32;
        assert_eq!(
            bytes.len(),
            1 + (i as usize * 37) % 1400,
            "datagram {i} length"
        );
        assert_eq!(bytes[0], (i & 0xff) as u8);
        assert!(bytes[1..].iter().all(|&b| b == (i % 251) as u8));
        assert_eq!(info.src.to_socket_addr(), s.local_addr().unwrap());
        assert!((before_ns..=now_ns).contains(&info.rx_time_ns));
    }
    // The kernel stamped each datagram as it arrived, 200 sends apart: not one time for
    // the batch.
    let mut times: Vec<u64> = got.iter().map(|(_, p)| p.rx_time_ns).collect();
    times.dedup();
    assert!(times.len() > 1, "kernel timestamps differ per datagram");
    let st = stats(&h);
    assert_eq!(field(&st, "packets"), 200);
    assert_eq!(field(&st, "drops-pool") + field(&st, "drops-kernel"), 0);
}

/// By default no kernel timestamps: every datagram of a batch carries the time the batch
/// was read, one clock read per batch.
#[test]
fn default_stamps_each_batch_with_its_read_time() {
    let (mut h, port) = harness(&[]);
    assert!(!h.element().unwrap().property::<bool>("timestamps"));
    let s = sender();
    let before_ns = now_ns();
    for i in 0..100u8 {
        s.send_to(&[i; 64], ("127.0.0.1", port)).unwrap();
    }
    let mut seen = 0;
    while seen < 100 {
        let buf = h.pull().expect("a batch within the harness timeout");
        let mut times = Vec::new();
        for_each_packet(&buf, |p, _| times.push(p.rx_time_ns)).expect("batch meta");
        let now_ns = now_ns();
        assert!(!times.is_empty());
        assert!(
            times.iter().all(|&t| t == times[0]),
            "one time per batch: {times:?}"
        );
        assert!((before_ns..=now_ns).contains(&times[0]), "{times:?}");
        seen += times.len();
    }
    assert_eq!(seen, 100);
}

#[test]
fn buffers_are_pool_memory_with_pts() {
    let (mut h, port) = harness(&[("hugepages", "off")]);
    sender().send_to(b"hello", ("127.0.0.1", port)).unwrap();
    let buf = h.pull().unwrap();
    assert_eq!(
        firehose_core::gstmem::buffer_memory_kind(&buf),
        Some(firehose_core::MemoryKind::System)
    );
    assert!(buf.pts().is_some());
    assert_eq!(buf.meta::<PacketBatchMeta>().unwrap().packets().len(), 1);
}

#[test]
fn the_pool_is_cut_from_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    use firehose_core::MemoryKind;
    let (mut h, port) = harness_with(&[("pool-size", "4194304")], |h| {
        // The harness's sink pad answers the allocation query as fhshmsink will: with a
        // provider of shared segments.
        let provider = Arc::new(SharedSegment::new("fhudpsrc-test"));
        firehose_core::alloc::propose_on(&h.sinkpad().unwrap(), provider);
    });
    let tx = sender();
    for i in 0..3u8 {
        tx.send_to(&[i; 100], ("127.0.0.1", port)).unwrap();
        let buf = h.pull().unwrap();
        assert_eq!(
            firehose_core::gstmem::buffer_memory_kind(&buf),
            Some(MemoryKind::Shared)
        );
        assert_eq!(buf.map_readable().unwrap()[..100], [i; 100]);
    }
    let s = stats(&h);
    assert_eq!(s.get::<String>("memory").unwrap(), "shared");
    assert_eq!(field(&s, "packets"), 3);
}

/// Sends `total` bytes as one GSO send of `seg`-byte segments (the kernel splits it on
/// the wire; a GRO receiver may get it back coalesced).
fn send_gso(s: &UdpSocket, dst: SocketAddr, payload: &[u8], seg: u16) {
    let v = i32::from(seg);
    // SAFETY: valid int option on our own socket.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&v as *const i32).cast(),
            4,
        )
    };
    assert_eq!(r, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
    s.send_to(payload, dst).unwrap();
}

fn gro_split(gro: &str) {
    let (mut h, port) = harness(&[("gro", gro)]);
    let s = sender();
    let payload: Vec<u8> = (0..10_500u32).map(|i| (i / 1000) as u8).collect();
    send_gso(
        &s,
        format!("127.0.0.1:{port}").parse().unwrap(),
        &payload,
        1000,
    );
    let got = pull_packets(&mut h, 11);
    assert_eq!(got.len(), 11);
    for (k, (bytes, _)) in got.iter().enumerate() {
        let want = if k < 10 { 1000 } else { 500 };
        assert_eq!(bytes.len(), want, "segment {k}");
        assert!(bytes.iter().all(|&b| b == k as u8), "segment {k} content");
    }
}

#[test]
fn gro_coalesced_datagrams_are_split_by_segment_size() {
    gro_split("true");
}

#[test]
fn segments_arrive_identically_without_gro() {
    gro_split("false");
}

#[test]
fn oversize_datagrams_are_counted_as_truncated() {
    for gro in ["true", "false"] {
        let (mut h, port) = harness(&[("max-packet-size", "1000"), ("gro", gro)]);
        let s = sender();
        s.send_to(&[1u8; 1500], ("127.0.0.1", port)).unwrap();
        s.send_to(&[2u8; 1000], ("127.0.0.1", port)).unwrap();
        let got = pull_packets(&mut h, 1);
        assert_eq!(got[0].0, vec![2u8; 1000], "gro={gro}");
        let st = stats(&h);
        assert_eq!(field(&st, "truncated"), 1, "gro={gro}");
        assert_eq!(field(&st, "packets"), 1, "gro={gro}");
    }
}

#[test]
fn zero_length_datagrams_are_counted_not_delivered() {
    let (mut h, port) = harness(&[]);
    let s = sender();
    s.send_to(&[], ("127.0.0.1", port)).unwrap();
    s.send_to(b"after", ("127.0.0.1", port)).unwrap();
    let got = pull_packets(&mut h, 1);
    assert_eq!(got[0].0, b"after");
    let st = stats(&h);
    assert_eq!(field(&st, "empty"), 1);
}

#[test]
fn output_list_gives_one_buffer_per_datagram_with_caps() {
    let (mut h, port) = harness(&[
        ("output", "list"),
        ("caps", "application/x-rtp,media=video"),
    ]);
    let s = sender();
    for i in 0..5u8 {
        s.send_to(&[i; 100], ("127.0.0.1", port)).unwrap();
    }
    for i in 0..5u8 {
        let buf = h.pull().unwrap();
        assert_eq!(buf.map_readable().unwrap().as_slice(), &[i; 100]);
    }
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(caps.structure(0).unwrap().name(), "application/x-rtp");
}

/// Runs `fhudpsrc port=0` with `props` in a pipeline to READY→PAUSED and returns the
/// error text.
fn start_error(props: &[(&str, &str)]) -> String {
    init();
    run::start_error("fhudpsrc", &[&[("port", "0")], props].concat())
}

#[test]
fn port_in_use_is_an_error_naming_the_port() {
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let e = start_error(&[("address", "127.0.0.1"), ("port", &port)]);
    assert!(e.contains("in use") && e.contains(&port), "{e}");
}

#[test]
fn invalid_addresses_and_unknown_interfaces_are_errors() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("address", "239.1.1.300")], "invalid address"),
        (
            &[("address", "127.0.0.1"), ("multicast-source", "10.0.0.1")],
            "not a multicast group",
        ),
        (
            &[("address", "232.1.1.1"), ("multicast-source", "bogus")],
            "invalid multicast source",
        ),
        (
            &[("address", "239.1.2.3"), ("multicast-iface", "nosuchif0")],
            "unknown network interface 'nosuchif0'",
        ),
    ];
    for (props, says) in cases {
        let e = start_error(props);
        assert!(e.contains(says), "{props:?}: {e}");
    }
}

#[test]
fn hugepages_require_fails_with_the_fix_and_succeeds_when_reserved() {
    use firehose_core::memory::{hugepage_size, hugepages_free, hugepages_total};
    // More than the machine has free, whatever is reserved here.
    let bytes = ((hugepages_free() + 8) * hugepage_size()).to_string();
    let e = start_error(&[
        ("address", "127.0.0.1"),
        ("hugepages", "require"),
        ("pool-size", &bytes),
    ]);
    assert!(e.contains("/proc/sys/vm/nr_hugepages"), "{e}");

    // Reserve 8 more (as root), require them, and check the buffers say so.
    const NR: &str = "/proc/sys/vm/nr_hugepages";
    let before = hugepages_total();
    std::fs::write(NR, (before + 8).to_string()).expect("writing nr_hugepages needs root");
    let result = std::panic::catch_unwind(|| {
        let pool = (4 * hugepage_size()).to_string();
        let (mut h, port) = harness(&[("hugepages", "require"), ("pool-size", &pool)]);
        sender().send_to(b"huge", ("127.0.0.1", port)).unwrap();
        let buf = h.pull().unwrap();
        assert_eq!(
            firehose_core::gstmem::buffer_memory_kind(&buf),
            Some(firehose_core::MemoryKind::Hugepage)
        );
        let st = stats(&h);
        assert_eq!(st.get::<String>("memory").unwrap(), "hugepage");
    });
    std::fs::write(NR, before.to_string()).unwrap();
    result.unwrap();
}

#[test]
fn pool_exhaustion_drops_and_counts_then_recovers() {
    // Two slots of one datagram each: the harness keeps what it receives, so the pool
    // runs dry after two batches.
    let (mut h, port) = harness(&[
        ("batch-size", "1"),
        ("pool-size", "1"),
        ("gro", "false"),
        ("max-packet-size", "2000"),
    ]);
    let s = sender();
    let mut held = Vec::new();
    for _ in 0..2 {
        s.send_to(&[7u8; 100], ("127.0.0.1", port)).unwrap();
        held.push(h.pull().unwrap());
    }
    let t0 = Instant::now();
    while field(&stats(&h), "drops-pool") < 5 {
        s.send_to(&[8u8; 100], ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "drops-pool never counted"
        );
    }
    let st = stats(&h);
    assert_eq!(field(&st, "pool-in-use"), 2);
    assert!(field(&st, "pool-exhausted") > 0);
    drop(held);
    s.send_to(&[9u8; 100], ("127.0.0.1", port)).unwrap();
    let t0 = Instant::now();
    loop {
        let buf = h.pull().unwrap();
        if buf.map_readable().unwrap().as_slice() == [9u8; 100] {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}

/// Sends as fast as it can to `port` until `stop`.
fn blast(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let s = sender();
        let mut n = 0;
        let p = [0u8; 1400];
        while !stop.load(Ordering::Relaxed) {
            let _ = s.send_to(&p, ("127.0.0.1", port));
            n += 1;
        }
        n
    })
}

#[test]
fn state_changes_under_full_rate_traffic_never_hang_and_return_every_slot() {
    init();
    run::within(Duration::from_secs(60), "state cycling", || {
        for desc in [
            "fhudpsrc name=src address=127.0.0.1 port=0 ! fakesink",
            "fhudpsrc name=src address=127.0.0.1 port=0 ! queue ! fakesink sync=true",
            "fhudpsrc name=src address=127.0.0.1 port=0 output=list ! fakesink",
            "fhudpsrc name=src address=127.0.0.1 port=0 when-full=block pool-size=1 ! queue max-size-buffers=1 ! fakesink sync=true",
        ] {
            let p = gst::parse::launch(desc).unwrap().downcast::<gst::Pipeline>().unwrap();
            let src = p.by_name("src").unwrap();
            p.set_state(gst::State::Playing).unwrap();
            let port = src.property::<i32>("port") as u16;
            let stop = Arc::new(AtomicBool::new(false));
            let tx = blast(port, stop.clone());
            for round in 0..5 {
                std::thread::sleep(Duration::from_millis(100));
                p.set_state(gst::State::Paused).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                p.set_state(gst::State::Playing).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                if round % 2 == 1 {
                    p.set_state(gst::State::Ready).unwrap();
                    p.set_state(gst::State::Playing).unwrap();
                }
            }
            let before = field(&src.property::<gst::Structure>("stats"), "packets");
            p.set_state(gst::State::Null).unwrap();
            stop.store(true, Ordering::Relaxed);
            tx.join().unwrap();
            let st = src.property::<gst::Structure>("stats");
            assert_eq!(field(&st, "pool-in-use"), 0, "{desc}: every slot back after NULL");
            assert!(before > 0 || desc.contains("block"), "{desc}: received something");
        }
    });
}

#[test]
fn eos_during_full_rate_traffic_reaches_the_bus() {
    init();
    run::within(Duration::from_secs(30), "EOS", || {
        let p = gst::parse::launch("fhudpsrc name=src address=127.0.0.1 port=0 ! fakesink")
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap();
        p.set_state(gst::State::Playing).unwrap();
        let port = p.by_name("src").unwrap().property::<i32>("port") as u16;
        let stop = Arc::new(AtomicBool::new(false));
        let tx = blast(port, stop.clone());
        std::thread::sleep(Duration::from_millis(300));
        p.send_event(gst::event::Eos::new());
        let msg = p.bus().unwrap().timed_pop_filtered(
            gst::ClockTime::from_seconds(10),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        );
        assert!(matches!(
            msg.map(|m| m.type_()),
            Some(gst::MessageType::Eos)
        ));
        p.set_state(gst::State::Null).unwrap();
        stop.store(true, Ordering::Relaxed);
        tx.join().unwrap();
    });
}

#[test]
fn ipv6_loopback() {
    let (mut h, port) = harness(&[("address", "::1")]);
    let s = UdpSocket::bind("[::1]:0").unwrap();
    s.send_to(b"six", ("::1", port)).unwrap();
    let got = pull_packets(&mut h, 1);
    assert_eq!(got[0].0, b"six");
    assert_eq!(got[0].1.src.to_socket_addr(), s.local_addr().unwrap());
}

/// Moves the calling thread into a fresh network namespace with a multicast-capable
/// loopback. The namespace goes away with the thread: nothing to clean up.
fn private_netns_with_multicast_lo() {
    // SAFETY: unshare affects only this thread's namespaces.
    let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        r,
        0,
        "unshare(CLONE_NEWNET) needs root: {}",
        std::io::Error::last_os_error()
    );
    for args in [
        &["link", "set", "lo", "up", "multicast", "on"][..],
        &["route", "add", "224.0.0.0/4", "dev", "lo"][..],
    ] {
        let st = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    }
}

fn multicast_sender(bind: &str) -> UdpSocket {
    let s = UdpSocket::bind(bind).unwrap();
    s.set_multicast_loop_v4(true).unwrap();
    let sock = socket2::SockRef::from(&s);
    sock.set_multicast_if_v4(&"127.0.0.1".parse().unwrap())
        .unwrap();
    s
}

#[test]
fn multicast_asm_and_ssm_in_a_private_namespace() {
    init();
    std::thread::spawn(|| {
        private_netns_with_multicast_lo();
        // Any-source multicast.
        let (mut h, port) = harness(&[("address", "239.255.7.7"), ("multicast-iface", "lo")]);
        multicast_sender("127.0.0.1:0")
            .send_to(b"asm", ("239.255.7.7", port))
            .unwrap();
        assert_eq!(pull_packets(&mut h, 1)[0].0, b"asm");
        drop(h);

        // Source-specific: only 127.0.0.1 is wanted; 127.0.0.2 is filtered by the kernel.
        let (mut h, port) = harness(&[
            ("address", "232.1.1.1"),
            ("multicast-iface", "lo"),
            ("multicast-source", "127.0.0.1"),
        ]);
        multicast_sender("127.0.0.2:0")
            .send_to(b"unwanted", ("232.1.1.1", port))
            .unwrap();
        multicast_sender("127.0.0.1:0")
            .send_to(b"wanted", ("232.1.1.1", port))
            .unwrap();
        let got = pull_packets(&mut h, 1);
        assert_eq!(got[0].0, b"wanted");
        assert_eq!(field(&stats(&h), "packets"), 1);
    })
    .join()
    .unwrap();
}
