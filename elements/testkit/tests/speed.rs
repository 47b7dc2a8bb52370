//! Throughput of the test-packet pattern and of `fhtestsrc ! fhcheck`. Ignored by
//! default (timings on a shared CI machine are noise); run with
//! `cargo test -p firehose-testkit --test speed -- --ignored --nocapture --test-threads 1`.

mod common;

use std::time::Instant;

use firehose_testkit::pattern;

#[test]
#[ignore = "timing measurement, run by hand"]
fn fill_and_verify_run_at_gigabytes_per_second() {
    const PACKET: usize = 8192;
    const PACKETS: usize = 128; // 1 MiB: stays in cache, measures the code, not DRAM
    const ROUNDS: usize = 2000;
    let mut buf = vec![0u8; PACKET * PACKETS];
    let total = (PACKET * PACKETS * ROUNDS) as f64;

    let t = Instant::now();
    for r in 0..ROUNDS {
        for (i, p) in buf.chunks_exact_mut(PACKET).enumerate() {
            pattern::fill((r * PACKETS + i) as u64, p);
        }
    }
    let fill = total / t.elapsed().as_secs_f64() / 1e9;

    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..ROUNDS {
        for p in buf.chunks_exact(PACKET) {
            sum = sum.wrapping_add(pattern::verify(std::hint::black_box(p)).unwrap());
        }
    }
    let verify = total / t.elapsed().as_secs_f64() / 1e9;
    println!("fill {fill:.1} GB/s, verify {verify:.1} GB/s ({sum})");
    assert!(
        fill > 1.0 && verify > 1.0,
        "fill {fill:.1} GB/s, verify {verify:.1} GB/s"
    );
}

#[test]
#[ignore = "timing measurement, run by hand"]
fn testsrc_into_check_runs_at_gigabytes_per_second() {
    common::init();
    let n = 2_000_000u64;
    let pipeline = gst::parse::launch(&format!(
        "fhtestsrc num-packets={n} ! queue ! fhcheck name=check expected-packets={n}"
    ))
    .unwrap();
    let t = Instant::now();
    use gst::prelude::*;
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    bus.timed_pop_filtered(gst::ClockTime::from_seconds(60), &[gst::MessageType::Eos])
        .expect("EOS");
    let secs = t.elapsed().as_secs_f64();
    pipeline.set_state(gst::State::Null).unwrap();
    let gbps = (n * 1472) as f64 / secs / 1e9;
    println!(
        "{n} packets of 1472 bytes in {secs:.2} s: {:.2} Mpps, {gbps:.2} GB/s",
        n as f64 / secs / 1e6
    );
    assert!(gbps > 0.5, "{gbps:.2} GB/s");
}
