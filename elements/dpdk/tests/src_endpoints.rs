//! fhdpdksrc with an endpoint list, through the net_af_packet PMD on a veth: streams to
//! two unicast ports and a multicast group arrive, each datagram with its own
//! destination in the dest meta, and are counted per endpoint; streams to an unlisted
//! port and an unlisted group are filtered.

mod common;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use firehose_core::meta::dest::PacketDestMeta;
use firehose_core::stats::field;

#[test]
fn an_endpoint_list_delivers_and_counts_each_endpoint() {
    let _g = serial();
    let pair = veth("pl");
    let host = pair.host_ip;
    let group = Ipv4Addr::new(239, 77, 6, 1);
    let listed: Vec<SocketAddr> = vec![
        (host, 7148).into(),
        (host, 7149).into(),
        (group, 7148).into(),
    ];
    let unlisted: Vec<SocketAddr> = vec![
        (host, 7150).into(),
        (Ipv4Addr::new(239, 77, 6, 2), 7148).into(),
    ];
    let list = listed
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut h = pmd_harness(
        &pair,
        "net_af_packet0",
        ",framecnt=4096",
        7148,
        &[("endpoints", &list)],
    );
    const N: u64 = 2000;
    let senders: Vec<_> = listed
        .iter()
        .chain(&unlisted)
        .map(|&dst| send_paced(&pair, dst, N, 5000))
        .collect();
    let mut got: HashMap<SocketAddr, u64> = HashMap::new();
    let total = N * listed.len() as u64;
    let end = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while n < total && Instant::now() < end {
        let Some(buf) = h.try_pull() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        let dests = buf
            .meta::<PacketDestMeta>()
            .expect("a dest meta")
            .dests()
            .to_vec();
        let meta = buf.meta::<firehose_core::PacketBatchMeta>().unwrap();
        assert_eq!(dests.len(), meta.packets().len());
        for d in &dests {
            let a = d.dst.to_socket_addr();
            assert!(listed.contains(&a), "delivered a datagram to unlisted {a}");
            *got.entry(a).or_default() += 1;
        }
        n += dests.len() as u64;
    }
    for s in senders {
        s.join().unwrap();
    }
    let st = stats(&h.element().unwrap());
    for a in &listed {
        assert_eq!(got.get(a).copied(), Some(N), "{a}: {st}");
    }
    assert_eq!(field(&st, "packets"), total, "{st}");
    // The unlisted streams, at least (the kernel's own traffic, ARP, may add some).
    assert!(field(&st, "filtered") >= 2 * N, "{st}");
    let bytes: u64 = (0..N).map(|s| len_of(s) as u64).sum();
    let per = firehose_core::endpoint::read_stats(&st).expect("the endpoints field");
    let want: Vec<(String, u64, u64)> = listed.iter().map(|a| (a.to_string(), N, bytes)).collect();
    assert_eq!(per, want, "{st}");
    stop_and_remove(h, pair);
}
