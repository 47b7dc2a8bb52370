//! An application's EOS (`firehose` on Ctrl-C, `gst-launch-1.0 -e`) sent while a source
//! is producing: the EOS reaches the bus, and every packet the source counted in its
//! `packets` stat was pushed downstream. GstBaseSrc's own EOS handling sets the element
//! flushing and throws away the buffer `create` returns at that moment, a batch the
//! source had already counted: our sources take the EOS themselves (see
//! `firehose_core::src::LiveControl::request_eos`).
//!
//! Each case runs several rounds, since the EOS has to land while `create` works; the
//! unpaced test source is busy in `create` most of the time, so there it almost always does.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::PacketBatchMeta;
use firehose_testkit::run::{end_stream, launch, play_to_end};
use gst::prelude::*;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// Counts the packets that reach `sink`'s sink pad: a batch by its meta, any other
/// buffer (one per list entry) as one.
fn count_delivered(sink: &gst::Element) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    let count = |b: &gst::BufferRef| {
        b.meta::<PacketBatchMeta>()
            .map_or(1, |m| m.packets().len() as u64)
    };
    sink.static_pad("sink").unwrap().add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
        move |_, info| {
            let k = match &info.data {
                Some(gst::PadProbeData::Buffer(b)) => count(b),
                Some(gst::PadProbeData::BufferList(l)) => l.iter().map(count).sum(),
                _ => 0,
            };
            n2.fetch_add(k, Ordering::Relaxed);
            gst::PadProbeReturn::Ok
        },
    );
    n
}

/// Runs `desc` (a source named `src` into a sink named `sink`) for `after`, with
/// `traffic` started once it plays (given the source, returning a stopper), sends an
/// EOS, and checks the bus and the counts.
fn eos_mid_stream(
    desc: &str,
    after: Duration,
    traffic: impl Fn(&gst::Element) -> Box<dyn FnOnce()>,
) {
    let p = launch(desc);
    let delivered = count_delivered(&p.by_name("sink").unwrap());
    let src = p.by_name("src").unwrap();
    p.set_state(gst::State::Playing).unwrap();
    let stop = traffic(&src);
    // The EOS must land mid-stream: wait for the first counted packet (start-up takes
    // hundreds of milliseconds on a loaded machine), then for `after` more.
    let counted_now = || {
        src.property::<gst::Structure>("stats")
            .get::<u64>("packets")
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while counted_now() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(after);
    let end = end_stream(&p, Duration::from_secs(10));
    stop();
    let counted = counted_now();
    p.set_state(gst::State::Null).unwrap();
    assert_eq!(end, Ok(()), "{desc}: EOS on the bus");
    assert!(counted > 0, "{desc}: produced something");
    assert_eq!(
        delivered.load(Ordering::Relaxed),
        counted,
        "{desc}: every counted packet reached the sink"
    );
}

/// [`eos_mid_stream`] `rounds` times with each output (`{output}` in `desc`), the EOS
/// `first_ms` after the first counted packet in the first round and `step_ms` later in
/// each next one.
fn eos_rounds(
    rounds: u64,
    desc: &str,
    first_ms: u64,
    step_ms: u64,
    traffic: fn(&gst::Element) -> Box<dyn FnOnce()>,
) {
    for round in 0..rounds {
        for output in ["batch", "list"] {
            eos_mid_stream(
                &desc.replace("{output}", output),
                Duration::from_millis(first_ms + step_ms * round),
                traffic,
            );
        }
    }
}

fn no_traffic(_: &gst::Element) -> Box<dyn FnOnce()> {
    Box::new(|| {})
}

#[test]
fn test_source_at_full_speed() {
    init();
    eos_rounds(
        8,
        "fhtestsrc name=src rate=0 output={output} ! fakesink name=sink",
        20,
        7,
        no_traffic,
    );
}

/// Sends 1400-byte datagrams to the source's port as fast as one thread can.
fn blast(src: &gst::Element) -> Box<dyn FnOnce()> {
    let port = src.property::<i32>("port") as u16;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let t = std::thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = [0u8; 1400];
        while !stop2.load(Ordering::Relaxed) {
            let _ = s.send_to(&p, ("127.0.0.1", port));
        }
    });
    Box::new(move || {
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    })
}

#[test]
fn udp_source_under_full_rate_traffic() {
    init();
    eos_rounds(
        6,
        "fhudpsrc name=src address=127.0.0.1 port=0 output={output} ! fakesink name=sink",
        50,
        13,
        blast,
    );
}

#[test]
fn replay_at_full_speed() {
    init();
    let dir = firehose_tests::temp_dir("eos-replay");
    let path = dir.join("c.pcap");
    // A capture to replay in a loop until the EOS.
    let p = launch(&format!(
        "fhtestsrc num-packets=20000 packet-size=1000 ! fhrecordsink format=pcap location={}",
        path.display()
    ));
    assert_eq!(play_to_end(&p, Duration::from_secs(30)), Ok(()));
    let desc = format!(
        "fhpcapsrc name=src location={} loop=0 output={{output}} ! fakesink name=sink",
        path.display()
    );
    eos_rounds(6, &desc, 30, 11, no_traffic);
    std::fs::remove_dir_all(&dir).unwrap();
}
