//! fhudpsrc joined to a multicast group on a named interface (`multicast-iface`): when
//! that interface is deleted or taken down under the running capture, the element posts
//! an error naming it within a few seconds, instead of waiting for ever. Runs on a veth
//! pair with its other end in a namespace the test creates (and removes).

use std::time::Duration;

use firehose_testkit::netns::VethPair;
use firehose_testkit::run;
use gst::prelude::*;

fn init() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
}

/// Runs `fhudpsrc multicast-iface=<host end> ! fakesink`, checks that a quiet but healthy
/// interface is no error, then does `fault` to it (an `ip` command line, `IF` for the
/// interface): the pipeline must end with an error naming the interface and containing
/// `want` within 30 s.
fn fault_ends_the_capture(tag: &str, fault: &[&str], want: &str) {
    init();
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    let pipeline = run::launch(&format!(
        "fhudpsrc address=239.255.42.{} port=0 multicast-iface={} ! fakesink",
        1 + std::process::id() % 200,
        pair.host_if
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    // Nothing arrives, the interface is there and up: the capture goes on.
    let early = pipeline.bus().unwrap().timed_pop_filtered(
        gst::ClockTime::from_mseconds(1500),
        &[gst::MessageType::Error, gst::MessageType::Eos],
    );
    assert!(early.is_none(), "{early:?}");
    let text = run::error_after_fault(&pipeline, fault, &pair.host_if);
    assert!(
        text.contains(want) && text.contains(&pair.host_if),
        "{text}"
    );
    drop(pair);
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn a_multicast_interface_deleted_or_taken_down_under_the_capture_is_an_error_naming_it() {
    for (i, (fault, want)) in run::INTERFACE_FAULTS.iter().enumerate() {
        fault_ends_the_capture(&format!("u{i}"), fault, want);
    }
}
