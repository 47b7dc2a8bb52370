//! fhdpdksrc with the net_af_packet PMD on a veth: a paced stream sent with kernel
//! sockets from a namespace arrives complete and intact, twice in one process (the
//! element goes NULL → PLAYING → NULL twice, re-plugging its device).

mod common;

use std::time::Duration;

use common::*;
use firehose_core::stats::field;
use gst::prelude::*;

fn run_once(tag: &str) {
    let pair = veth(tag);
    let (ns, host_if) = (pair.ns.clone(), pair.host_if.clone());
    let port = 7148u16;
    let eal = format!(
        "--no-huge --no-pci --vdev=net_af_packet0,iface={},framecnt=4096",
        pair.host_if
    );
    let mut h = src_harness(&[
        ("eal-args", &eal),
        ("dpdk-port", "net_af_packet0"),
        ("port", &port.to_string()),
        ("address", &pair.host_ip.to_string()),
        ("stats-interval", "0"),
    ]);
    let count = 20_000u64;
    let sender = send_paced(&pair, (pair.host_ip, port).into(), count, 40_000);
    // A second stream to another port must be filtered, not delivered.
    let other = send_paced(&pair, (pair.host_ip, port + 1).into(), 100, 1000);
    let seen = pull_test_packets_to(
        &mut h,
        count,
        Duration::from_secs(30),
        Some((pair.host_ip, port).into()),
    );
    sender.join().unwrap();
    other.join().unwrap();
    let missing: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == 0).collect();
    let dups = seen.iter().filter(|&&n| n > 1).count();
    let el = h.element().unwrap();
    let st = stats(&el);
    assert!(
        missing.is_empty(),
        "{} missing, first {:?}; stats {st}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(dups, 0, "duplicates; stats {st}");
    assert_eq!(field(&st, "packets"), count, "{st}");
    assert!(
        field(&st, "filtered") >= 100,
        "the other port's stream is filtered: {st}"
    );
    assert_eq!(field(&st, "malformed"), 0, "{st}");
    assert_eq!(field(&st, "drops-nic"), 0, "{st}");
    assert!(field(&st, "batches") > 0 && field(&st, "batches") <= count);
    el.set_state(gst::State::Null).unwrap();
    drop(h);
    drop(pair);
    assert!(!leftovers(&ns, &host_if), "namespace or veth left behind");
}

#[test]
fn af_packet_receives_every_packet_intact_twice() {
    let _g = serial();
    run_once("pa");
    // Same process, same device name: the EAL stays up, the device is plugged again.
    run_once("pb");
}
