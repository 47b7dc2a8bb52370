//! `fhtestsrc`: batch contents and meta, EOS after `num-packets`, pacing, prompt stops.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{init, stat};
use firehose_core::stats::names;
use firehose_core::{caps, gstmem, PacketBatchMeta};
use firehose_testkit::{pattern, run};
use gst::prelude::*;
use gst_check::Harness;

/// A playing harness around an `fhtestsrc` with `props` (as in `gst-launch-1.0`:
/// `packet-size=100 batch-size=7`).
fn source(props: &str) -> Harness {
    // The harness's sink asks for packet batches, as a Firehose consumer does, unless
    // the test chose the output.
    let batches = !props.contains("output=");
    play(&source_element(props), batches)
}

/// An `fhtestsrc` with `props`, not yet in a harness.
fn source_element(props: &str) -> gst::Element {
    init();
    gst::parse::launch(&format!("fhtestsrc {props}"))
        .unwrap()
        .downcast::<gst::Element>()
        .unwrap()
}

/// A playing harness around `src`, whose sink asks for packet batches if `batches`.
fn play(src: &gst::Element, batches: bool) -> Harness {
    play_with(src, batches, |_| {})
}

/// [`play`], `setup` done to the harness before it plays.
fn play_with(src: &gst::Element, batches: bool, setup: impl FnOnce(&mut Harness)) -> Harness {
    let mut h = Harness::with_element(src, None, Some("src"));
    setup(&mut h);
    if batches {
        h.set_sink_caps(caps::packets_caps());
    }
    h.play();
    h
}

/// Stops `src` (PLAYING → NULL) while it waits in `what`, which must interrupt the wait
/// rather than sit it out.
fn stops_promptly(src: gst::Element, what: &str) {
    let t = Instant::now();
    run::within(
        Duration::from_secs(60),
        &format!("PLAYING -> NULL {what}"),
        move || {
            src.set_state(gst::State::Null).unwrap();
        },
    );
    assert!(
        // Interrupted, not waited out: the wait would last minutes (or for ever); the
        // bound leaves a loaded machine plenty.
        t.elapsed() < Duration::from_secs(30),
        "stop {what} took {:?}",
        t.elapsed()
    );
}

#[test]
fn a_stock_consumer_gets_one_buffer_per_packet() {
    let src = source_element("packet-size=100 batch-size=7 num-packets=20");
    // The harness's sink answers ANY, as filesink and appsink do.
    let mut h = play(&src, false);
    let mut seq = 0u64;
    while let Some(buf) = h.pull_until_eos().unwrap() {
        assert!(buf.meta::<PacketBatchMeta>().is_none());
        assert_eq!(buf.size(), 100);
        assert_eq!(pattern::verify(&buf.map_readable().unwrap()), Ok(seq));
        seq += 1;
    }
    assert_eq!(seq, 20);
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(
        caps.structure(0).unwrap().name(),
        "application/octet-stream"
    );
}

#[test]
fn batches_hold_verifiable_packets_listed_by_the_meta() {
    let mut h = source("packet-size=100 batch-size=7 first-seq=1000");
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut last_pts = None;
    for b in 0..5u64 {
        let buf = h.pull().unwrap();
        assert_eq!(buf.size(), 700);
        assert!(
            gstmem::buffer_memory_kind(&buf).is_some(),
            "the batch must be a pool slot, not a copy"
        );
        assert_eq!(buf.offset(), 7 * b);
        assert_eq!(buf.offset_end(), 7 * b + 7);
        let pts = buf.pts().expect("batches are timestamped");
        assert!(last_pts.is_none_or(|l| pts >= l), "PTS must not go back");
        last_pts = Some(pts);

        let meta = buf.meta::<PacketBatchMeta>().expect("batch meta");
        assert_eq!(meta.packets().len(), 7);
        let map = buf.map_readable().unwrap();
        for (i, p) in meta.packets().iter().enumerate() {
            assert_eq!((p.offset, p.len), (100 * i as u32, 100));
            assert!(
                p.rx_time_ns >= now_ns - 1_000_000_000,
                "send time is wall-clock time"
            );
            assert_eq!(p.src, Default::default());
            assert_eq!(
                pattern::verify(&map[p.range()]),
                Ok(1000 + 7 * b + i as u64)
            );
        }
    }

    // The caps on the wire are the packet-batch caps.
    let mut saw_caps = false;
    while let Some(ev) = h.try_pull_event() {
        if let gst::EventView::Caps(c) = ev.view() {
            assert_eq!(c.caps().structure(0).unwrap().name(), caps::PACKETS);
            saw_caps = true;
        }
    }
    assert!(saw_caps);
}

#[test]
fn num_packets_ends_in_eos_with_the_exact_count() {
    let mut h = source("packet-size=64 batch-size=64 num-packets=1000 first-seq=5");
    let mut next = 5u64;
    let mut sizes = Vec::new();
    while let Some(buf) = h.pull_until_eos().unwrap() {
        let meta = buf.meta::<PacketBatchMeta>().unwrap();
        firehose_core::batch::for_each_packet(&buf, |_, bytes| {
            assert_eq!(pattern::verify(bytes), Ok(next));
            next += 1;
        });
        sizes.push(meta.packets().len());
    }
    assert_eq!(next - 5, 1000, "exactly num-packets packets");
    assert_eq!(sizes.len(), 16);
    assert!(sizes[..15].iter().all(|&n| n == 64));
    assert_eq!(sizes[15], 1000 - 15 * 64, "the last batch is short");

    let src = h.element().unwrap();
    assert_eq!(stat(&src, names::PACKETS), 1000);
    assert_eq!(stat(&src, names::BYTES), 64_000);
    assert_eq!(stat(&src, names::BATCHES), 16);
}

#[test]
fn rate_is_met_over_a_second() {
    // 8 Mbit/s of 1000-byte packets in batches of 10: 100 batches a second, so the
    // 1000 packets take 0.99 s (the first batch leaves at once). Timed where the source
    // pushes, not where the test pulls (the harness queues): start-up is left out, and
    // a stall mid-stream is caught up by the pacer, so only one at the very end counts.
    let src = source_element("packet-size=1000 batch-size=10 rate=8000000 num-packets=1000");
    let pushed = Arc::new(Mutex::new(Vec::with_capacity(100)));
    let probe_pushed = pushed.clone();
    src.static_pad("src")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            probe_pushed.lock().unwrap().push(Instant::now());
            gst::PadProbeReturn::Ok
        });
    let mut h = play(&src, true);
    let mut last = None;
    let mut n = 0;
    while let Some(buf) = h.pull_until_eos().unwrap() {
        n += 1;
        last = Some(buf);
    }
    assert_eq!(n, 100);
    let pushed = pushed.lock().unwrap();
    assert_eq!(pushed.len(), 100);
    let (end, half) = (
        (pushed[99] - pushed[0]).as_secs_f64(),
        (pushed[49] - pushed[0]).as_secs_f64(),
    );
    // Never faster than the rate; slower only by a stall at the end (and 1.3× fails).
    assert!(
        (0.94..1.28).contains(&end),
        "1000 packets took {end:.3} s, want 0.99 s"
    );
    assert!(
        (0.46..0.63).contains(&half),
        "the 50th batch came at {half:.3} s, want 0.49 s"
    );
    // Timestamps are the nominal schedule: batch k at k * 10 ms, lasting 10 ms.
    let last = last.unwrap();
    assert_eq!(last.pts(), Some(gst::ClockTime::from_mseconds(990)));
    assert_eq!(last.duration(), Some(gst::ClockTime::from_mseconds(10)));
}

#[test]
fn unlock_interrupts_a_long_pacing_sleep() {
    // At 1 kbit/s the second 64 KiB batch is due after ~8 minutes.
    let mut h = source("packet-size=65507 batch-size=1 rate=1000");
    h.pull().unwrap();
    std::thread::sleep(Duration::from_millis(100)); // let it fall asleep
    stops_promptly(h.element().unwrap(), "while pacing");
}

#[test]
fn unlock_interrupts_a_wait_for_a_pool_slot() {
    // Nobody pulls, so the harness holds every batch and the pool runs dry.
    let h = source("packet-size=1000 batch-size=4");
    let src = h.element().unwrap();
    run::wait_until(
        Duration::from_secs(10),
        || "the pool never ran dry".into(),
        || stat(&src, names::POOL_EXHAUSTED) > 0,
    );
    let slots = stat(&src, names::POOL_SLOTS);
    assert_eq!(
        stat(&src, names::POOL_IN_USE),
        slots,
        "waiting, not dropping"
    );
    assert_eq!(stat(&src, names::BATCHES), slots);
    stops_promptly(src, "on an empty pool");
    drop(h);
}

#[test]
fn playing_to_null_at_full_speed_never_hangs() {
    init();
    for i in 0..20u64 {
        let pipeline = run::launch(
            "fhtestsrc packet-size=1472 batch-size=64 ! queue max-size-buffers=4 ! fhcheck",
        );
        pipeline.set_state(gst::State::Playing).unwrap();
        std::thread::sleep(Duration::from_millis(5 + 7 * (i % 5)));
        run::within(
            Duration::from_secs(60),
            "PLAYING -> NULL at full speed",
            move || {
                pipeline.set_state(gst::State::Null).unwrap();
            },
        );
    }
}

#[test]
fn oversized_batches_fail_at_start_with_a_fix() {
    init();
    let text = run::refused_start(&run::launch(
        "fhtestsrc packet-size=65507 batch-size=65536 ! fakesink",
    ));
    assert!(text.contains("batch-size"), "{text}");
}

/// Downstream proposes shared segments (as `fhshmsink` does): the pool is cut from them
/// and the packets are generated in place; with `fill-payload=false` only each packet's
/// header is written, the payload left as the slot held it (fresh memory: zeros).
#[test]
fn batches_are_generated_in_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    use firehose_core::MemoryKind;
    let src = source_element("packet-size=64 batch-size=4 num-packets=8 fill-payload=false");
    let mut h = play_with(&src, true, |h| {
        let provider = std::sync::Arc::new(SharedSegment::new("fhtestsrc-test"));
        firehose_core::alloc::propose_on(&h.sinkpad().unwrap(), provider);
    });
    let mut seq = 0u64;
    while let Some(buf) = h.pull_until_eos().unwrap() {
        assert_eq!(gstmem::buffer_memory_kind(&buf), Some(MemoryKind::Shared));
        let map = buf.map_readable().unwrap();
        for pkt in map.chunks_exact(64) {
            assert_eq!(pkt[..4], pattern::MAGIC);
            assert_eq!(pkt[4..8], 64u32.to_be_bytes());
            assert_eq!(pkt[8..16], seq.to_be_bytes());
            assert!(pkt[16..].iter().all(|&b| b == 0), "payload left alone");
            seq += 1;
        }
    }
    assert_eq!(seq, 8);
    let s = src.property::<gst::Structure>("stats");
    assert_eq!(s.get::<String>("memory").unwrap(), "shared", "{s}");
}
