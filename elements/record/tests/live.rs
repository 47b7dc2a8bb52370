//! A live stream captured by tcpdump on loopback (Ethernet framing on `lo`, Linux
//! cooked v2 on `any`) replays through fhpcapsrc as exactly the datagrams sent.

mod common;

use std::io::Read;
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{payload, replay, require_tool, TempDir};
use firehose_record::read::container::count_whole_records;

/// tcpdump writing `path`, stopped (SIGINT, so it flushes) when dropped.
struct Tcpdump {
    child: Child,
}

impl Tcpdump {
    fn start(iface: &str, port: u16, path: &std::path::Path) -> Self {
        require_tool("tcpdump", "tcpdump");
        let mut child = Command::new("tcpdump")
            .args([
                "-i",
                iface,
                "-Z",
                "root",
                "-U",
                "--immediate-mode",
                "-B",
                "65536",
                "-w",
            ])
            .arg(path)
            .args(["udp", "port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump runs");
        // tcpdump says "listening on" once its capture is open.
        let mut err = child.stderr.take().unwrap();
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 256];
        while !seen.contains("listening on") {
            assert!(Instant::now() < deadline, "tcpdump did not start: {seen}");
            match err.read(&mut buf) {
                Ok(0) => panic!("tcpdump exited: {seen}"),
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) => panic!("reading tcpdump's stderr: {e}"),
            }
        }
        std::thread::spawn(move || {
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
        });
        Self { child }
    }

    fn stop(mut self) {
        self.interrupt();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "tcpdump ended with {status}");
    }

    fn interrupt(&self) {
        // SAFETY: kill() on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}

fn capture_and_replay(iface: &str) {
    let dir = TempDir::new(&format!("live-{iface}"));
    let path = dir.join("live.pcap");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let dump = Tcpdump::start(iface, port, &path);
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

    let (got, el, r) = replay(
        &format!("location={} port={port} pace=max", path.display()),
        Duration::from_secs(30),
    );
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
