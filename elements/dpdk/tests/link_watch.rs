//! fhdpdksrc (net_af_packet PMD on a veth) whose interface goes down or disappears
//! under a running capture: the pipeline ends with an element error naming the port,
//! instead of a capture that polls on with nothing to receive.

mod common;

use std::time::Duration;

use common::*;
use firehose_core::stats::field;
use firehose_testkit::run;
use gst::prelude::*;

/// Runs `fhdpdksrc ! fakesink` on a fresh veth pair (`tag`), receives, then does
/// `fault` (an `ip` command line, `IF` for the host interface): an error containing
/// `want` and the port's name must end the pipeline within 30 s.
fn fault_ends_the_capture(tag: &str, fault: &[&str], want: &str) {
    init();
    let pair = veth(tag);
    let port = 7149u16;
    let pipeline = run::launch(&format!(
        "fhdpdksrc name=src eal-args=\"{}\" dpdk-port=net_af_packet0 port={port} address={} \
         stats-interval=0 ! fakesink",
        af_packet_eal(&pair),
        pair.host_ip
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let sender = send_paced(&pair, (pair.host_ip, port).into(), 200, 2000);
    let src = pipeline.by_name("src").unwrap();
    run::wait_until(
        Duration::from_secs(10),
        || "nothing received".into(),
        || field(&stats(&src), "packets") > 0,
    );
    sender.join().unwrap();
    let text = run::error_after_fault(&pipeline, fault, &pair.host_if);
    assert!(
        text.contains(want) && text.contains("net_af_packet0"),
        "{text}"
    );
    drop(pair);
}

#[test]
fn an_interface_taken_down_or_deleted_under_the_capture_is_an_error_naming_the_port() {
    let _g = serial();
    for (i, (fault, want)) in run::INTERFACE_FAULTS.iter().enumerate() {
        fault_ends_the_capture(&format!("l{i}"), fault, want);
    }
}
