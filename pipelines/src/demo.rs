//! `firehose demo`: a self-check on loopback. A receiver (`fhudpsrc ! fhcheck`) is started
//! on a free port, a paced sender (`fhtestsrc ! fhudpsink`) sends a known number of
//! verifiable packets to it, and the run passes only when every packet arrived once and
//! intact with no drop anywhere.

use std::time::{Duration, Instant};

use firehose_core::stats::names;

use crate::launch::{EXIT_ERROR, EXIT_OK};
use crate::session::{int_property, BusEvent, Session};
use crate::signals;
use crate::statsline::{counter, format_gbps, throughput};

/// Payload size of the demo packets: a full standard-MTU UDP payload.
const PACKET_SIZE: u64 = 1472;
/// Time after the sender's EOS for packets still in flight to arrive.
const DRAIN: Duration = Duration::from_millis(300);

/// Options of `firehose demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How long the sender sends.
    pub seconds: f64,
    /// Offered rate in bits/s (payload).
    pub rate: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            seconds: 3.0,
            rate: 200_000_000,
        }
    }
}

/// Runs the demo; returns the exit status (0 only when nothing was lost).
pub fn run(opts: &DemoOptions) -> i32 {
    match run_inner(opts) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("firehose demo: FAILED to run");
            EXIT_ERROR
        }
    }
}

fn run_inner(opts: &DemoOptions) -> Result<i32, String> {
    let packets = ((opts.rate as f64 * opts.seconds) / (PACKET_SIZE * 8) as f64)
        .round()
        .max(1.0) as u64;
    let _ = signals::install();

    let mut receiver = Session::from_description(&format!(
        "fhudpsrc name=fhudpsrc address=127.0.0.1 port=0 ! fhcheck name=fhcheck expected-packets={packets}"
    ))
    .map_err(|e| format!("firehose demo: cannot build the receiver: {e}"))?;
    receiver.start()?;
    let src = receiver
        .element("fhudpsrc")
        .expect("named in the description");
    // The socket is bound in the source's start(), which has run once set_state
    // returns; poll briefly anyway in case the element binds asynchronously.
    let deadline = Instant::now() + Duration::from_secs(2);
    let port = loop {
        match int_property(&src, "port") {
            Some(p) if p > 0 => break p,
            _ if Instant::now() >= deadline => {
                return Err("firehose demo: fhudpsrc did not report its bound port \
                            (its `port` property stayed 0)"
                    .into())
            }
            _ => {
                if let Some(BusEvent::Error(e)) = receiver.poll(Duration::from_millis(20)) {
                    return Err(e);
                }
            }
        }
    };
    println!(
        "firehose demo: sending {packets} packets of {PACKET_SIZE} bytes at {} to 127.0.0.1:{port}",
        format_gbps(opts.rate as f64)
    );

    let mut sender = Session::from_description(&format!(
        "fhtestsrc name=fhtestsrc rate={} num-packets={packets} packet-size={PACKET_SIZE} \
         ! fhudpsink name=fhudpsink host=127.0.0.1 port={port}",
        opts.rate
    ))
    .map_err(|e| format!("firehose demo: cannot build the sender: {e}"))?;
    sender.start()?;

    // Generous: a loaded machine may pace slower than asked.
    let send_deadline = Instant::now() + Duration::from_secs_f64(opts.seconds * 3.0 + 10.0);
    let mut next_line = Instant::now() + Duration::from_secs(1);
    loop {
        match sender.poll(Duration::from_millis(50)) {
            Some(BusEvent::Eos) => break,
            Some(BusEvent::Error(e)) => return Err(e),
            None => {}
        }
        if let Some(BusEvent::Error(e)) = receiver.poll(Duration::ZERO) {
            return Err(e);
        }
        let now = Instant::now();
        if signals::count() > 0 {
            return Err("firehose demo: interrupted".into());
        }
        if now >= send_deadline {
            return Err(format!(
                "firehose demo: the sender did not finish {packets} packets within {:.0} s",
                opts.seconds * 3.0 + 10.0
            ));
        }
        if now >= next_line {
            next_line += Duration::from_secs(1);
            sender.poll_silent(now);
            receiver.poll_silent(now);
            let send = sender.board.line(now).unwrap_or_default();
            let recv = receiver.board.body().unwrap_or_default();
            eprintln!("{send} || {recv}");
        }
    }
    let send_time = sender.elapsed();
    sender.refresh_stats();
    sender.stop();

    // Let the last packets land, then drain the receiver with EOS so fhcheck reports
    // its final figures (including packets still missing at the end).
    if let Some(BusEvent::Error(e)) = receiver.wait_end(DRAIN) {
        return Err(e);
    }
    receiver.send_eos();
    match receiver.wait_end(Duration::from_secs(5)) {
        Some(BusEvent::Eos) => {}
        Some(BusEvent::Error(e)) => return Err(e),
        None => eprintln!("firehose demo: warning: receiver did not reach EOS within 5 s"),
    }
    receiver.refresh_stats();
    receiver.stop();

    let sink = sender
        .board
        .get("fhudpsink")
        .map(|s| s.to_owned())
        .unwrap_or_else(|| gst::Structure::new_empty("none"));
    let check = receiver
        .board
        .get("fhcheck")
        .map(|s| s.to_owned())
        .ok_or("firehose demo: fhcheck reported no statistics")?;
    let srcst = receiver
        .board
        .get("fhudpsrc")
        .map(|s| s.to_owned())
        .ok_or("firehose demo: fhudpsrc reported no statistics")?;

    let (sent_bytes, sent) = throughput(&sink);
    let (recv_bytes, received) = throughput(&check);
    let secs = send_time.as_secs_f64().max(1e-9);
    println!(
        "  sent      {sent} packets in {secs:.2} s: {} (asked {})",
        format_gbps(sent_bytes as f64 * 8.0 / secs),
        format_gbps(opts.rate as f64)
    );
    println!(
        "  received  {received} packets: {}",
        format_gbps(recv_bytes as f64 * 8.0 / secs)
    );
    let checks = [
        ("fhcheck lost", counter(&check, names::LOST)),
        ("fhcheck duplicated", counter(&check, names::DUPLICATED)),
        ("fhcheck corrupted", counter(&check, names::CORRUPTED)),
        (
            "fhudpsrc drops-kernel",
            counter(&srcst, names::DROPS_KERNEL),
        ),
        ("fhudpsrc drops-pool", counter(&srcst, names::DROPS_POOL)),
        ("fhudpsrc truncated", counter(&srcst, names::TRUNCATED)),
        ("fhudpsink send-errors", counter(&sink, names::SEND_ERRORS)),
    ];
    let details: Vec<String> = checks.iter().map(|(n, v)| format!("{n}={v}")).collect();
    println!("  {}", details.join(" "));
    println!(
        "  reordered {} (allowed: reordering loses nothing)",
        counter(&check, names::REORDERED)
    );

    let mut failures: Vec<String> = checks
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| format!("{v} {n}"))
        .collect();
    if received < packets {
        failures.push(format!(
            "{} of {packets} packets never reached fhcheck",
            packets - received
        ));
    }
    if failures.is_empty() {
        println!("firehose demo: PASS: all {packets} packets arrived once and intact");
        Ok(EXIT_OK)
    } else {
        println!("firehose demo: FAIL: {}", failures.join(", "));
        Ok(EXIT_ERROR)
    }
}
