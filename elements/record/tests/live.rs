//! A live stream captured by tcpdump on loopback (Ethernet framing on `lo`, Linux
//! cooked v2 on `any`) replays through fhpcapsrc as exactly the datagrams sent.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{payload, replay_file, require_tool, TempDir};
use firehose_record::read::container::count_whole_records;
use firehose_testkit::run;

fn capture_and_replay(iface: &str) {
    let dir = TempDir::new(&format!("live-{iface}"));
    let path = dir.join("live.pcap");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    require_tool("tcpdump", "tcpdump");
    let dump = run::Tcpdump::udp_port(iface, port, &path);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent: Vec<Vec<u8>> = (0..300u64)
        .map(|i| payload(i, 1 + (i as usize * 211) % 8000))
        .collect();
    for p in &sent {
        tx.send_to(p, ("127.0.0.1", port)).unwrap();
        // Paced a little so no capture buffer can overflow.
        std::thread::sleep(Duration::from_micros(200));
    }
    // tcpdump writes each packet as it comes (-U): stop it once the file holds all, not
    // after a fixed while (a loaded machine runs it late; what is still in its ring at
    // the interrupt would be lost).
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_whole_records(&path) < sent.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    dump.stop();

    let (got, el, r) = replay_file(&path, &format!("port={port} pace=max"));
    r.unwrap();
    let payloads: Vec<Vec<u8>> = got.iter().map(|g| g.payload.clone()).collect();
    assert_eq!(payloads.len(), sent.len(), "{iface}: datagram count");
    assert_eq!(payloads, sent, "{iface}: datagrams differ");
    assert!(
        got.iter().all(|g| g.src == tx.local_addr().unwrap()),
        "{iface}: sender"
    );
    assert!(
        got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "{iface}: capture times"
    );
    assert_eq!(common::stat(&el, "malformed"), 0);
}

#[test]
fn tcpdump_on_lo_replays_the_same_datagrams() {
    capture_and_replay("lo");
}

#[test]
fn tcpdump_on_any_linux_cooked_v2_replays_the_same_datagrams() {
    capture_and_replay("any");
}
