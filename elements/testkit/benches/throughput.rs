//! Throughput of the test kit: the packet pattern alone (`pattern::fill` and
//! `pattern::verify`) and the pipeline `fhtestsrc ! queue ! fhcheck`. Prints the median
//! of several runs that follow a warm-up run, and checks that the measured work was
//! correct.
//!
//! Run with `cargo bench -p firehose-testkit --bench throughput`. Without `--bench`
//! (e.g. `cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::time::{Duration, Instant};

use firehose_core::stats;
use firehose_testkit::pattern;
use gst::prelude::*;

/// Timed runs per measurement; the median is reported, so one descheduled run does not
/// skew it.
const RUNS: usize = 7;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    pattern_speed(full);
    pipeline_speed(full);
}

/// The median of the times `f` reports over `runs` runs, after one warm-up run.
fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}

/// How long `f` takes.
fn time(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn pattern_speed(full: bool) {
    const PACKET: usize = 8192;
    const PACKETS: usize = 128; // 1 MiB: stays in cache, measures the code, not DRAM
    let rounds = if full { 2000 } else { 2 };
    let runs = if full { RUNS } else { 1 };
    let mut buf = vec![0u8; PACKET * PACKETS];
    let bytes = (PACKET * PACKETS * rounds) as f64;

    let fill = median_of(runs, || {
        time(|| {
            for r in 0..rounds {
                for (i, p) in buf.chunks_exact_mut(PACKET).enumerate() {
                    pattern::fill(std::hint::black_box((r * PACKETS + i) as u64), p);
                }
            }
        })
    });
    let verify = median_of(runs, || {
        time(|| {
            for _ in 0..rounds {
                for p in buf.chunks_exact(PACKET) {
                    let seq = pattern::verify(std::hint::black_box(p));
                    assert!(seq.is_ok(), "the pattern must verify");
                }
            }
        })
    });
    println!(
        "pattern, {PACKET}-byte packets, median of {runs}: fill {:.2} GB/s, verify {:.2} GB/s",
        bytes / fill.as_secs_f64() / 1e9,
        bytes / verify.as_secs_f64() / 1e9,
    );
}

fn pipeline_speed(full: bool) {
    const SIZE: u64 = 1472;
    gst::init().unwrap();
    firehose_testkit::testsrc::register(None).unwrap();
    firehose_testkit::check::register(None).unwrap();
    let n: u64 = if full { 2_000_000 } else { 10_000 };
    let runs = if full { RUNS } else { 1 };
    let took = median_of(runs, || {
        let pipeline = gst::parse::launch(&format!(
            "fhtestsrc num-packets={n} packet-size={SIZE} ! queue \
             ! fhcheck name=check expected-packets={n}"
        ))
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        let t = Instant::now();
        pipeline.set_state(gst::State::Playing).unwrap();
        let msg = pipeline
            .bus()
            .unwrap()
            .timed_pop_filtered(
                gst::ClockTime::from_seconds(120),
                &[gst::MessageType::Eos, gst::MessageType::Error],
            )
            .expect("EOS within 2 minutes");
        let took = t.elapsed();
        assert!(
            matches!(msg.view(), gst::MessageView::Eos(_)),
            "pipeline error: {msg:?}"
        );
        let check = pipeline.by_name("check").unwrap();
        let s = check.property::<gst::Structure>("stats");
        pipeline.set_state(gst::State::Null).unwrap();
        assert_eq!(stats::field(&s, stats::names::PACKETS), n, "{s}");
        assert_eq!(stats::field(&s, stats::names::CORRUPTED), 0, "{s}");
        took
    });
    let secs = took.as_secs_f64();
    println!(
        "fhtestsrc ! queue ! fhcheck, {n} packets of {SIZE} bytes, median of {runs}: \
         {:.2} Mpackets/s, {:.2} GB/s",
        n as f64 / secs / 1e6,
        (n * SIZE) as f64 / secs / 1e9,
    );
}
