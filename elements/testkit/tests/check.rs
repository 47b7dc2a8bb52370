//! `fhcheck`: loss, duplicates, reordering and corruption in hand-made input, and the
//! full `fhtestsrc ! fhcheck` pipeline.

mod common;

use std::time::Duration;

use common::{batch, init, packet, stat};
use firehose_core::stats::{self, names};
use firehose_core::{PacketBatchMeta, PacketInfo};
use firehose_testkit::run;
use gst::prelude::*;
use gst_check::Harness;

const SIZE: usize = 200;

fn checker(props: &[(&str, &dyn ToValue)]) -> Harness {
    init();
    // Properties are read at start, and a harness starts a sink as soon as it is made.
    let sink = gst::ElementFactory::make("fhcheck").build().unwrap();
    for (name, value) in props {
        sink.set_property_from_value(name, &value.to_value());
    }
    let mut h = Harness::with_element(&sink, Some("sink"), None);
    h.set_src_caps_str(firehose_core::caps::PACKETS);
    h.play();
    h
}

/// Pushes `batches` (each a list of sequence numbers), then EOS; returns the counters.
fn run(h: &mut Harness, batches: &[&[u64]]) -> [u64; 7] {
    for seqs in batches {
        h.push(batch(seqs, SIZE)).unwrap();
    }
    finish(h)
}

fn finish(h: &mut Harness) -> [u64; 7] {
    assert!(h.push_event(gst::event::Eos::new()));
    counters(&h.element().unwrap())
}

/// packets, bytes, lost, duplicated, reordered, corrupted, late.
fn counters(e: &gst::Element) -> [u64; 7] {
    [
        names::PACKETS,
        names::BYTES,
        names::LOST,
        names::DUPLICATED,
        names::REORDERED,
        names::CORRUPTED,
        "late",
    ]
    .map(|n| stat(e, n))
}

#[test]
fn a_clean_stream_is_clean() {
    let mut h = checker(&[("expected-packets", &12u64)]);
    let c = run(&mut h, &[&[0, 1, 2, 3], &[4, 5, 6, 7], &[8, 9, 10, 11]]);
    assert_eq!(c, [12, 12 * SIZE as u64, 0, 0, 0, 0, 0]);
}

#[test]
fn loss_inside_and_at_the_end_is_counted() {
    let mut h = checker(&[("expected-packets", &20u64)]);
    let c = run(&mut h, &[&[0, 1, 2], &[6, 7], &[8, 9, 10]]);
    // 3, 4, 5 skipped; 11..=19 never came.
    assert_eq!(c, [8, 8 * SIZE as u64, 3 + 9, 0, 0, 0, 0]);
}

#[test]
fn without_expected_packets_the_tail_is_unknown() {
    let mut h = checker(&[]);
    let c = run(&mut h, &[&[0, 1, 2], &[4]]);
    assert_eq!(c[2], 1, "only the gap is known to be lost");
}

#[test]
fn duplicates_are_counted_and_not_double_counted_as_packets() {
    let mut h = checker(&[("expected-packets", &6u64)]);
    let c = run(&mut h, &[&[0, 1, 2], &[2, 3, 3], &[0, 4, 5]]);
    assert_eq!(c, [6, 6 * SIZE as u64, 0, 3, 0, 0, 0]);
}

#[test]
fn reordering_is_counted_and_gives_back_the_loss() {
    let mut h = checker(&[("expected-packets", &8u64)]);
    let c = run(&mut h, &[&[0, 1, 3, 2], &[4, 7], &[5, 6]]);
    assert_eq!(c, [8, 8 * SIZE as u64, 0, 0, 3, 0, 0]);
}

#[test]
fn a_single_corrupted_byte_is_detected() {
    let mut h = checker(&[("expected-packets", &8u64)]);
    h.push(batch(&[0, 1, 2, 3], SIZE)).unwrap();
    let mut bad = batch(&[4, 5, 6, 7], SIZE);
    {
        let mut map = bad.make_mut().map_writable().unwrap();
        map[SIZE + 123] ^= 0x40; // inside packet 5's payload
    }
    h.push(bad).unwrap();
    let c = finish(&mut h);
    // Packet 5 never arrived intact, so it is also lost.
    assert_eq!(c, [7, 7 * SIZE as u64, 1, 0, 0, 1, 0]);
}

#[test]
fn first_seq_and_late_packets() {
    let mut h = checker(&[("first-seq", &100u64), ("expected-packets", &3u64)]);
    let c = run(&mut h, &[&[99, 100, 101], &[102, 50]]);
    assert_eq!(c, [3, 3 * SIZE as u64, 0, 0, 0, 0, 2]);
}

#[test]
fn plain_buffers_are_one_packet_each() {
    let mut h = checker(&[("expected-packets", &4u64)]);
    for seq in [0, 1, 3] {
        h.push(packet(seq, 77)).unwrap();
    }
    h.push(gst::Buffer::from_slice(b"not a test packet at all"))
        .unwrap();
    let c = finish(&mut h);
    assert_eq!(c, [3, 3 * 77, 1, 0, 0, 1, 0]);
}

#[test]
fn buffer_lists_are_checked_whole() {
    let mut h = checker(&[("expected-packets", &10u64)]);
    let mut list = gst::BufferList::new();
    {
        let l = list.get_mut().unwrap();
        l.add(batch(&[0, 1, 2], SIZE));
        l.add(packet(3, SIZE));
        l.add(batch(&[5, 4], SIZE));
        l.add(packet(5, SIZE));
    }
    let pad = h.srcpad().unwrap();
    assert_eq!(pad.push_list(list), Ok(gst::FlowSuccess::Ok));
    let c = finish(&mut h);
    // 6..=9 missing at EOS.
    assert_eq!(c, [6, 6 * SIZE as u64, 4, 1, 1, 0, 0]);
}

#[test]
fn meta_entries_outside_the_buffer_count_as_corrupted() {
    let mut h = checker(&[]);
    let mut buf = packet(0, SIZE);
    PacketBatchMeta::add(
        buf.get_mut().unwrap(),
        vec![
            PacketInfo {
                offset: 0,
                len: SIZE as u32,
                ..Default::default()
            },
            PacketInfo {
                offset: SIZE as u32 - 10,
                len: 20,
                ..Default::default()
            },
        ],
    );
    h.push(buf).unwrap();
    let c = finish(&mut h);
    assert_eq!((c[0], c[5]), (1, 1));
}

#[test]
fn sync_is_off_by_default() {
    init();
    let sink = gst::ElementFactory::make("fhcheck").build().unwrap();
    assert!(!sink.property::<bool>("sync"));
}

/// Runs `fhtestsrc num-packets=sent ! queue ! fhcheck expected-packets=expected` to
/// EOS; returns the fhcheck stats messages that came before EOS, and fhcheck.
fn pipeline_run(
    sent: u64,
    expected: u64,
    check_interval: u32,
) -> (Vec<gst::Structure>, gst::Element) {
    init();
    let pipeline = run::launch(&format!(
        "fhtestsrc num-packets={sent} packet-size=512 batch-size=32 \
         ! queue ! fhcheck name=check expected-packets={expected} stats-interval={check_interval}"
    ));
    let check = pipeline.by_name("check").unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut from_check = Vec::new();
    run::wait_end_with(&pipeline.bus().unwrap(), Duration::from_secs(60), |msg| {
        if stats::is_stats_message(msg) && msg.src() == Some(check.upcast_ref()) {
            from_check.push(msg.structure().unwrap().to_owned());
        }
    })
    .unwrap();
    pipeline.set_state(gst::State::Null).unwrap();
    (from_check, check)
}

#[test]
fn testsrc_into_check_loses_nothing_and_reports_before_eos() {
    let n = 200_000;
    // No periodic messages: the one message must be the final one, posted before EOS.
    let (messages, check) = pipeline_run(n, n, 0);
    assert_eq!(
        messages.len(),
        1,
        "exactly one (final) stats message before EOS"
    );
    for s in [
        messages[0].as_ref(),
        check.property::<gst::Structure>("stats").as_ref(),
    ] {
        assert_eq!(stats::field(s, names::PACKETS), n);
        assert_eq!(stats::field(s, names::BYTES), n * 512);
        assert_eq!(stats::field(s, names::LOST), 0);
        assert_eq!(stats::field(s, names::CORRUPTED), 0);
        assert_eq!(stats::field(s, names::DUPLICATED), 0);
        assert_eq!(stats::field(s, names::REORDERED), 0);
    }
}

#[test]
fn a_short_source_is_reported_as_loss_before_eos() {
    let (messages, _) = pipeline_run(100, 150, 0);
    let last = messages.last().expect("a final stats message before EOS");
    assert_eq!(stats::field(last, names::PACKETS), 100);
    assert_eq!(stats::field(last, names::LOST), 50);
}

#[test]
fn stats_are_posted_every_interval() {
    init();
    // 0.4 s of packets at 8 Mbit/s; both elements report every 50 ms.
    let pipeline = run::launch(
        "fhtestsrc name=src num-packets=400 packet-size=1000 batch-size=10 rate=8000000 \
         stats-interval=50 ! fhcheck name=check stats-interval=50",
    );
    let (src, check) = (
        pipeline.by_name("src").unwrap(),
        pipeline.by_name("check").unwrap(),
    );
    let (mut from_src, mut from_check) = (0, 0);
    pipeline.set_state(gst::State::Playing).unwrap();
    run::wait_end_with(&pipeline.bus().unwrap(), Duration::from_secs(30), |msg| {
        if stats::is_stats_message(msg) {
            if msg.src() == Some(src.upcast_ref()) {
                from_src += 1;
            } else if msg.src() == Some(check.upcast_ref()) {
                from_check += 1;
            }
        }
    })
    .unwrap();
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(
        (4..=12).contains(&from_src),
        "{from_src} messages from fhtestsrc"
    );
    assert!(
        (4..=12).contains(&from_check),
        "{from_check} messages from fhcheck"
    );
}
