//! fhdpdksrc with the net_af_packet PMD on a veth: a paced stream sent with kernel
//! sockets from a namespace arrives complete and intact, twice in one process (the
//! element goes NULL → PLAYING → NULL twice, re-plugging its device).

mod common;

use std::time::Duration;

use common::*;
use firehose_core::stats::field;

fn run_once(tag: &str) {
    let pair = veth(tag);
    let port = 7148u16;
    let mut h = pmd_harness(
        &pair,
        "net_af_packet0",
        ",framecnt=4096",
        port,
        &[("address", &pair.host_ip.to_string())],
    );
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
    let st = stats(&h.element().unwrap());
    assert_each_once(&seen, &st);
    assert_eq!(field(&st, "packets"), count, "{st}");
    assert!(
        field(&st, "filtered") >= 100,
        "the other port's stream is filtered: {st}"
    );
    assert_eq!(field(&st, "malformed"), 0, "{st}");
    assert_eq!(field(&st, "drops-nic"), 0, "{st}");
    assert!(field(&st, "batches") > 0 && field(&st, "batches") <= count);
    stop_and_remove(h, pair);
}

#[test]
fn af_packet_receives_every_packet_intact_twice() {
    let _g = serial();
    run_once("pa");
    // Same process, same device name: the EAL stays up, the device is plugged again.
    run_once("pb");
}
