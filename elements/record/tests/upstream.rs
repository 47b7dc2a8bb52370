//! Recording a live fhudpsrc capture: the destination of synthesized headers is the
//! source's own address and port, and the source's kernel drops land in the pcapng
//! interface statistics.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{isb_counters, launch, read_capture, stat, TempDir};
use firehose_core::stats::names;
use firehose_testkit::run;
use gst::prelude::*;

#[test]
fn pcapng_statistics_carry_the_sources_kernel_drops() {
    let dir = TempDir::new("upstream");
    let path = dir.join("live.pcapng");
    let pipeline = launch(&format!(
        "fhudpsrc name=udp address=127.0.0.1 port=0 buffer-size=65536 gro=false stats-interval=10 ! \
         fhrecordsink name=rec format=pcapng location={} when-full=block",
        path.display()
    ));
    // PAUSED: the socket is bound but nothing reads it, so a burst overflows it.
    pipeline.set_state(gst::State::Paused).unwrap();
    let udp = pipeline.by_name("udp").unwrap();
    let port = run::bound_port(&udp, Duration::from_secs(10));
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..3000u32 {
        let mut p = vec![0u8; 1000];
        p[..4].copy_from_slice(&i.to_be_bytes());
        tx.send_to(&p, ("127.0.0.1", port)).unwrap();
    }
    pipeline.set_state(gst::State::Playing).unwrap();
    // Datagrams received after the overflow report it (SO_RXQ_OVFL), and fhudpsrc
    // refreshes its drops-kernel counter with each stats message (every 10 ms here). A
    // report sent while the burst still drains may be dropped too (its drop reported by
    // the next), so reports go every 5 ms, at least 10, until every datagram sent is
    // accounted for (received or counted dropped): fhudpsrc does not drain its socket
    // on EOS, and a loaded machine drains slowly.
    let accounted = || {
        stat(&udp, names::PACKETS) + stat(&udp, names::DROPS_KERNEL) + stat(&udp, names::DROPS_POOL)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 3000u64;
    while sent < 3010 || (accounted() < sent && Instant::now() < deadline) {
        tx.send_to(&[9u8; 100], ("127.0.0.1", port)).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = run::end_stream(&pipeline, Duration::from_secs(20));
    let (got, kernel_drops) = (stat(&udp, names::PACKETS), stat(&udp, names::DROPS_KERNEL));
    let pool_drops = stat(&udp, names::DROPS_POOL);
    let rec = pipeline.by_name("rec").unwrap();
    let recorded = stat(&rec, names::PACKETS);
    pipeline.set_state(gst::State::Null).unwrap();
    r.unwrap();

    assert!(
        kernel_drops > 0,
        "the burst did not overflow the socket buffer"
    );
    assert_eq!(recorded, got);
    assert_eq!(
        got + kernel_drops + pool_drops,
        sent,
        "every datagram is accounted for"
    );
    assert_eq!(
        isb_counters(&path),
        (sent, kernel_drops + pool_drops, 0, got),
        "(ifrecv, ifdrop, osdrop, usrdeliv)"
    );
    let (read, _) = read_capture(&path);
    assert_eq!(read.len() as u64, got);
    let dst = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(
        read.iter().all(|r| r.dst == dst),
        "destination from fhudpsrc"
    );
    assert!(
        read.iter().all(|r| r.src == tx.local_addr().unwrap()),
        "source from the meta"
    );
}

#[test]
fn a_wildcard_capture_records_each_datagrams_real_destination() {
    let dir = TempDir::new("upstream-dst");
    let path = dir.join("wild.pcap");
    let pipeline = launch(&format!(
        "fhudpsrc name=udp address=0.0.0.0 port=0 ! \
         fhrecordsink name=rec location={} when-full=block",
        path.display()
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let udp = pipeline.by_name("udp").unwrap();
    let port = run::bound_port(&udp, Duration::from_secs(10));
    // Loopback addresses other than 127.0.0.1: a wildcard socket gets them all, and
    // only IP_PKTINFO says which one each datagram was sent to.
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = ["127.0.0.7", "127.0.0.1", "127.0.0.8"];
    for i in 0..30usize {
        tx.send_to(&[i as u8; 50], (to[i % 3], port)).unwrap();
    }
    run::wait_until(
        Duration::from_secs(10),
        || "not all received".into(),
        || stat(&udp, names::PACKETS) >= 30,
    );
    let r = run::end_stream(&pipeline, Duration::from_secs(20));
    pipeline.set_state(gst::State::Null).unwrap();
    r.unwrap();
    let (read, _) = read_capture(&path);
    assert_eq!(read.len(), 30);
    for (i, r) in read.iter().enumerate() {
        let want: std::net::SocketAddr = format!("{}:{port}", to[i % 3]).parse().unwrap();
        assert_eq!(r.dst, want, "datagram {i}");
        assert_eq!(r.payload, vec![i as u8; 50]);
    }
}
