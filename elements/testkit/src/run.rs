//! For tests that run pipelines: launching one, waiting for its end or its error on the
//! bus, polling an element until something holds, collecting what reaches a sink,
//! making the packet batches to push, and tcpdump as a second witness of what was on the
//! wire.
//!
//! Every wait has a deadline and fails the test with what it was waiting for, instead
//! of hanging CI. Errors read as `"<error> (<debug>)"` wherever they are returned.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use firehose_core::{PacketBatchMeta, PacketInfo};
use gst::prelude::*;

/// Parses a `gst-launch` description into a pipeline (GStreamer initialised and the
/// elements registered by the caller). Panics if it does not parse.
pub fn launch(desc: &str) -> gst::Pipeline {
    gst::parse::launch(desc)
        .unwrap_or_else(|e| panic!("{desc}: {e}"))
        .downcast::<gst::Pipeline>()
        .expect("a pipeline")
}

/// Sets each `(name, value)` of `props` on `el`, from its string form.
pub fn set_properties(el: &gst::Element, props: &[(&str, &str)]) {
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
}

/// Makes a `factory` source with `props` (see [`set_properties`]) and returns the text
/// of the error with which it refuses to start ([`crate::starterror::source_start_error`]).
pub fn start_error(factory: &str, props: &[(&str, &str)]) -> String {
    let src = gst::ElementFactory::make(factory)
        .build()
        .unwrap_or_else(|e| panic!("{factory}: {e}"));
    set_properties(&src, props);
    crate::starterror::source_start_error(&src)
}

/// Plays `pipeline`, which must refuse to start, and returns the text of the error it
/// posts (within 5 s); it is left in NULL.
pub fn refused_start(pipeline: &gst::Pipeline) -> String {
    let started = pipeline.set_state(gst::State::Playing);
    let error = pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .and_then(|m| error_text(&m));
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(started.is_err(), "{} must fail to start", pipeline.name());
    error.expect("an error message")
}

/// An error message's text and debug string, as `"<error> (<debug>)"`; `None` for any
/// other message.
pub fn error_text(msg: &gst::Message) -> Option<String> {
    match msg.view() {
        gst::MessageView::Error(e) => Some(format!("{} ({:?})", e.error(), e.debug())),
        _ => None,
    }
}

/// Waits for EOS (Ok) or an error (Err with its text) on `bus`, handing every other
/// message to `other` on the way. Panics after `timeout`.
pub fn wait_end_with(
    bus: &gst::Bus,
    timeout: Duration,
    mut other: impl FnMut(&gst::Message),
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "pipeline did not finish within {timeout:?}"
        );
        let Some(msg) = bus.timed_pop(gst::ClockTime::from_nseconds(left.as_nanos() as u64)) else {
            continue;
        };
        match msg.view() {
            gst::MessageView::Eos(_) => return Ok(()),
            gst::MessageView::Error(_) => return Err(error_text(&msg).unwrap()),
            _ => other(&msg),
        }
    }
}

/// Waits for EOS (Ok) or an error (Err with its text) on `bus`. Panics after `timeout`.
pub fn wait_end(bus: &gst::Bus, timeout: Duration) -> Result<(), String> {
    wait_end_with(bus, timeout, |_| {})
}

/// Plays `pipeline` until EOS or an error (also one that stops it from starting), then
/// sets it to NULL.
pub fn play_to_end(pipeline: &gst::Pipeline, timeout: Duration) -> Result<(), String> {
    let bus = pipeline.bus().unwrap();
    let result = match pipeline.set_state(gst::State::Playing) {
        Err(_) => Err(bus
            .timed_pop_filtered(gst::ClockTime::from_seconds(1), &[gst::MessageType::Error])
            .and_then(|m| error_text(&m))
            .unwrap_or_else(|| "could not start".into())),
        Ok(_) => wait_end(&bus, timeout),
    };
    pipeline.set_state(gst::State::Null).unwrap();
    result
}

/// Sends EOS into a playing `pipeline` (as `gst-launch-1.0 -e` does on Ctrl-C) and
/// waits for it to reach the bus; the pipeline stays in its state.
pub fn end_stream(pipeline: &gst::Pipeline, timeout: Duration) -> Result<(), String> {
    assert!(
        pipeline.send_event(gst::event::Eos::new()),
        "the pipeline refused the EOS"
    );
    wait_end(&pipeline.bus().unwrap(), timeout)
}

/// Does `fault` (an `ip` command line, run by [`crate::netns::ip`], in which `IF` stands
/// for `iface`) to the interface of a capture that `pipeline` runs, and returns the text
/// of the error that must end it within 30 s; the pipeline is then set to NULL. An EOS,
/// or nothing, fails the test: the capture must neither end quietly nor go on with
/// nothing to receive.
pub fn error_after_fault(pipeline: &gst::Pipeline, fault: &[&str], iface: &str) -> String {
    let fault: Vec<&str> = fault
        .iter()
        .map(|a| if *a == "IF" { iface } else { a })
        .collect();
    crate::netns::ip(&fault).unwrap();
    let end = wait_end(&pipeline.bus().unwrap(), Duration::from_secs(30));
    pipeline.set_state(gst::State::Null).unwrap();
    end.expect_err("the fault ended the capture without an error")
}

/// A UDP socket bound to `pair`'s peer address inside its namespace (where it stays,
/// whichever thread sends from it): the second host a test sends from.
pub fn peer_socket(pair: &crate::netns::VethPair) -> std::net::UdpSocket {
    let from = pair.peer_ip;
    pair.in_ns(move || std::net::UdpSocket::bind((from, 0)))
        .expect("joining the namespace")
        .expect("binding in the namespace")
}

/// The faults that a capture bound to an interface must notice, each an `ip` command
/// line for [`error_after_fault`] and what the error it causes says.
pub const INTERFACE_FAULTS: [(&[&str], &str); 2] = [
    (&["link", "del", "IF"], "disappeared"),
    (&["link", "set", "IF", "down"], "went down"),
];

/// Runs `f` on a thread of its own and returns its result; aborts the test process if
/// it has not finished within `limit`. A hang cannot be unwound from (dropping the
/// element would hang in turn), so it ends the run loudly instead of stalling CI.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => {
            // Straight to stderr: the test harness would swallow a captured eprintln!.
            let _ = writeln!(
                std::io::stderr(),
                "HANG: {what} did not finish within {limit:?}"
            );
            std::process::abort();
        }
    }
}

/// Calls `ready` every few milliseconds until it gives a value, and returns that. Fails
/// the test with `what()` if none comes within `timeout`.
pub fn poll<T>(
    timeout: Duration,
    what: impl Fn() -> String,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "after {timeout:?}: {}", what());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `cond` holds; fails the test with `what()` if it does not within
/// `timeout`.
pub fn wait_until(timeout: Duration, what: impl Fn() -> String, mut cond: impl FnMut() -> bool) {
    poll(timeout, what, || cond().then_some(()))
}

/// The port a source bound (its `port` property once it is not 0: a source asked for
/// port 0 binds in READY→PAUSED). Fails the test if it does not bind within `timeout`.
pub fn bound_port(src: &gst::Element, timeout: Duration) -> u16 {
    poll(
        timeout,
        || format!("{} did not bind", src.name()),
        || {
            let p = src.property::<i32>("port");
            (p > 0).then_some(p as u16)
        },
    )
}

/// Every buffer the `fakesink` named `sink` in `pipeline` takes, in order: turns on its
/// `signal-handoffs` and sends each buffer of its handoffs to the receiver returned.
pub fn handoffs(pipeline: &gst::Pipeline, sink: &str) -> mpsc::Receiver<gst::Buffer> {
    let sink = pipeline
        .by_name(sink)
        .unwrap_or_else(|| panic!("no element {sink}"));
    sink.set_property("signal-handoffs", true);
    let (tx, rx) = mpsc::channel();
    sink.connect("handoff", false, move |args| {
        let _ = tx.send(args[1].get::<gst::Buffer>().unwrap());
        None
    });
    rx
}

/// Test packet `seq` ([`crate::pattern`]) of `len` bytes.
pub fn test_packet(seq: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    crate::pattern::fill(seq, &mut p);
    p
}

/// A batch buffer holding `datagrams` back to back, each described by its entry of the
/// [`PacketBatchMeta`]: its offset and length, and what `fill` sets in the entry of
/// datagram `i` (a sender, a receive time).
pub fn batch_with(
    datagrams: &[Vec<u8>],
    mut fill: impl FnMut(usize, &mut PacketInfo),
) -> gst::Buffer {
    let mut data = Vec::new();
    let mut infos = Vec::new();
    for (i, d) in datagrams.iter().enumerate() {
        let mut info = PacketInfo {
            offset: data.len() as u32,
            len: d.len() as u32,
            ..Default::default()
        };
        fill(i, &mut info);
        infos.push(info);
        data.extend_from_slice(d);
    }
    let mut buf = gst::Buffer::from_mut_slice(data);
    PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
    buf
}

/// [`batch_with`], each entry only its offset and length.
pub fn batch(datagrams: &[Vec<u8>]) -> gst::Buffer {
    batch_with(datagrams, |_, _| {})
}

/// A tcpdump capture, interrupted (SIGINT, so that it flushes) when stopped or dropped.
pub struct Tcpdump {
    child: Child,
    /// Everything tcpdump says on stderr, read to its end on a thread of its own (a full
    /// pipe would stall tcpdump).
    said: Option<std::thread::JoinHandle<String>>,
}

impl Tcpdump {
    /// Runs `tcpdump` (a command with all its arguments: `Command::new("tcpdump")`, or
    /// one that runs it in a namespace) and waits until it says that its capture is
    /// open. Fails the test, with the install command, if it cannot run.
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump is installed (apt-get install -y tcpdump)");
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
        let said = std::thread::spawn(move || {
            let _ = err.read_to_string(&mut seen);
            seen
        });
        Self {
            child,
            said: Some(said),
        }
    }

    /// tcpdump on `iface` writing every UDP datagram to or from `port` to `path` as it
    /// sees it (`-U --immediate-mode`), as root, with a 64 MiB capture buffer.
    pub fn udp_port(iface: &str, port: u16, path: &std::path::Path) -> Self {
        let mut cmd = Command::new("tcpdump");
        cmd.args(["-i", iface, "-Z", "root", "-U", "--immediate-mode"])
            .args(["-B", "65536", "-w"])
            .arg(path)
            .args(["udp", "port", &port.to_string()]);
        Self::start(cmd)
    }

    /// Interrupts tcpdump and waits for it; fails the test unless it exits 0. Returns
    /// everything it said on stderr (its counts of packets captured and dropped).
    pub fn stop(mut self) -> String {
        self.interrupt();
        let status = self.child.wait().unwrap();
        let said = self.said.take().unwrap().join().unwrap();
        assert!(status.success(), "tcpdump ended with {status}: {said}");
        said
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
