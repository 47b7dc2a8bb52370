//! fhdpdksrc with the net_af_xdp PMD on a veth: the XDP program takes the frames off the
//! host interface, so the sender's namespace has a static neighbour entry for it (no
//! kernel answers ARP there any more). Every packet arrives intact, and the element can
//! start twice in one process.

mod common;

use std::time::Duration;

use common::*;
use firehose_core::stats::field;

fn run_once(tag: &str) {
    let pair = veth(tag);
    let port = 7149u16;
    let mut h = pmd_harness(&pair, "net_af_xdp0", "", port, &[]);
    let count = 20_000u64;
    let sender = send_paced(&pair, (pair.host_ip, port).into(), count, 40_000);
    let seen = pull_test_packets(&mut h, count, Duration::from_secs(30));
    sender.join().unwrap();
    let st = stats(&h.element().unwrap());
    assert_each_once(&seen, &st);
    assert_eq!(field(&st, "packets"), count, "{st}");
    assert_eq!(field(&st, "malformed"), 0, "{st}");
    stop_and_remove(h, pair);
}

#[test]
fn af_xdp_receives_every_packet_intact_twice() {
    let _g = serial();
    run_once("xa");
    run_once("xb");
}
