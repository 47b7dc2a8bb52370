//! fhudpsrc joined to a multicast group on a named interface (`multicast-iface`): when
//! that interface is deleted or taken down under the running capture, the element posts
//! an error naming it within a few seconds, instead of waiting for ever. Runs on a veth
//! pair with its other end in a namespace the test creates (and removes).

use std::time::Duration;

use firehose_testkit::netns::{ip, VethPair};
use gst::prelude::*;

fn init() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
}

/// Runs `fhudpsrc multicast-iface=<host end> ! fakesink`, checks that a quiet but healthy
/// interface is no error, then does `fault` to it: the pipeline must end with an error
/// naming the interface and containing `want` within 5 s.
fn fault_ends_the_capture(tag: &str, fault: &[&str], want: &str) {
    init();
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    let pipeline = gst::parse::launch(&format!(
        "fhudpsrc address=239.255.42.{} port=0 multicast-iface={} ! fakesink",
        1 + std::process::id() % 200,
        pair.host_if
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let bus = pipeline.bus().unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let errors = [gst::MessageType::Error, gst::MessageType::Eos];
    // Nothing arrives, the interface is there and up: the capture goes on.
    let early = bus.timed_pop_filtered(gst::ClockTime::from_mseconds(1500), &errors);
    assert!(early.is_none(), "{early:?}");
    let args: Vec<&str> = fault
        .iter()
        .map(|a| if *a == "IF" { pair.host_if.as_str() } else { a })
        .collect();
    ip(&args).unwrap();
    let msg = bus
        .timed_pop_filtered(gst::ClockTime::from_seconds(30), &errors)
        .expect("an error within 30 s of the fault, not a capture that waits for ever");
    pipeline.set_state(gst::State::Null).unwrap();
    match msg.view() {
        gst::MessageView::Error(e) => {
            let text = e.error().to_string();
            assert!(
                text.contains(want) && text.contains(&pair.host_if),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    drop(pair);
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn a_multicast_interface_deleted_under_the_capture_is_an_error_naming_it() {
    fault_ends_the_capture("ud", &["link", "del", "IF"], "disappeared");
}

#[test]
fn a_multicast_interface_taken_down_under_the_capture_is_an_error_naming_it() {
    fault_ends_the_capture("uw", &["link", "set", "IF", "down"], "went down");
}
