//! fhdpdksrc with the net_af_xdp PMD on a veth: the XDP program takes the frames off the
//! host interface, so the sender's namespace has a static neighbour entry for it (no
//! kernel answers ARP there any more). Every packet arrives intact, and the element can
//! start twice in one process.

mod common;

use std::time::Duration;

use common::*;
use firehose_core::stats::field;
use gst::prelude::*;

fn run_once(tag: &str) {
    let pair = veth(tag);
    let (ns, host_if) = (pair.ns.clone(), pair.host_if.clone());
    let port = 7149u16;
    let eal = format!(
        "--no-huge --no-pci --vdev=net_af_xdp0,iface={}",
        pair.host_if
    );
    let mut h = src_harness(&[
        ("eal-args", &eal),
        ("dpdk-port", "net_af_xdp0"),
        ("port", &port.to_string()),
        ("stats-interval", "0"),
    ]);
    let count = 20_000u64;
    let sender = send_paced(&pair, (pair.host_ip, port).into(), count, 40_000);
    let seen = pull_test_packets(&mut h, count, Duration::from_secs(30));
    sender.join().unwrap();
    let el = h.element().unwrap();
    let st = stats(&el);
    let missing = seen.iter().filter(|&&n| n == 0).count();
    assert_eq!(missing, 0, "missing packets; stats {st}");
    assert!(seen.iter().all(|&n| n == 1), "duplicates; stats {st}");
    assert_eq!(field(&st, "packets"), count, "{st}");
    assert_eq!(field(&st, "malformed"), 0, "{st}");
    el.set_state(gst::State::Null).unwrap();
    drop(h);
    drop(pair);
    assert!(!leftovers(&ns, &host_if), "namespace or veth left behind");
}

#[test]
fn af_xdp_receives_every_packet_intact_twice() {
    let _g = serial();
    run_once("xa");
    run_once("xb");
}
