//! fhdpdksrc (net_af_packet PMD on a veth) whose interface goes down or disappears
//! under a running capture: the pipeline ends with an element error naming the port,
//! instead of a capture that polls on with nothing to receive.

mod common;

use std::time::{Duration, Instant};

use common::*;
use firehose_core::stats::field;
use gst::prelude::*;

/// Runs `fhdpdksrc ! fakesink` on a fresh veth pair (`tag`), receives, then does
/// `fault` (an `ip` command line, `{}` for the host interface): an error containing
/// `want` and the port's name must end the pipeline within 5 s.
fn fault_ends_the_capture(tag: &str, fault: &[&str], want: &str) {
    init();
    let pair = veth(tag);
    let port = 7149u16;
    let pipeline = gst::parse::launch(&format!(
        "fhdpdksrc name=src eal-args=\"--no-huge --no-pci --vdev=net_af_packet0,iface={},framecnt=4096\" \
         dpdk-port=net_af_packet0 port={port} address={} stats-interval=0 ! fakesink",
        pair.host_if, pair.host_ip
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let bus = pipeline.bus().unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let sender = send_paced(&pair, (pair.host_ip, port).into(), 200, 2000);
    let src = pipeline.by_name("src").unwrap();
    let t0 = Instant::now();
    while field(&stats(&src), "packets") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "nothing received");
        std::thread::sleep(Duration::from_millis(10));
    }
    sender.join().unwrap();
    let fault: Vec<String> = fault
        .iter()
        .map(|a| a.replace("{}", &pair.host_if))
        .collect();
    let fault: Vec<&str> = fault.iter().map(String::as_str).collect();
    firehose_testkit::netns::ip(&fault).unwrap();
    let msg = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(30),
            &[gst::MessageType::Error, gst::MessageType::Eos],
        )
        .expect("an error within 30 s of the fault, not a capture that goes on");
    pipeline.set_state(gst::State::Null).unwrap();
    match msg.view() {
        gst::MessageView::Error(e) => {
            let text = e.error().to_string();
            assert!(
                text.contains(want) && text.contains("net_af_packet0"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    drop(pair);
}

#[test]
fn an_interface_taken_down_or_deleted_under_the_capture_is_an_error_naming_the_port() {
    let _g = serial();
    fault_ends_the_capture("ld", &["link", "set", "{}", "down"], "went down");
    fault_ends_the_capture("lx", &["link", "del", "{}"], "disappeared");
}
