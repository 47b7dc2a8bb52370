//! fhdpdksink with the net_af_packet PMD on a veth: batches (payloads via the packet
//! batch meta) and plain buffers go out as Ethernet/IPv4/UDP frames, and a kernel
//! socket in the namespace receives every datagram intact.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;
use firehose_core::stats::field;
use firehose_testkit::{pattern, run};
use gst::prelude::*;

const COUNT: u64 = 6000;
const BATCH: u64 = 64;

#[test]
fn af_packet_sink_delivers_every_datagram_to_a_kernel_socket() {
    let _g = serial();
    init();
    let pair = veth("sk");
    let port = 7152u16;
    let peer_ip = pair.peer_ip;
    let rx = pair
        .in_ns(move || {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            // Past rmem_max as root: all of the test fits, so a reader descheduled on
            // a loaded machine loses nothing.
            let _ = firehose_net::recv::grow_recv_buffer(&s, 16 << 20);
            s.bind(&std::net::SocketAddr::from((peer_ip, port)).into())
                .unwrap();
            UdpSocket::from(s)
        })
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut seen = vec![0u32; COUNT as usize];
        let mut buf = vec![0u8; 2048];
        let mut got = 0;
        while got < COUNT {
            let Ok((n, from)) = rx.recv_from(&mut buf) else {
                break;
            };
            assert_eq!(
                from.port(),
                port,
                "src-port defaults to the destination port"
            );
            let seq = pattern::verify(&buf[..n]).unwrap_or_else(|e| panic!("corrupt: {e:?}"));
            assert_eq!(n, len_of(seq));
            seen[seq as usize] += 1;
            got += 1;
        }
        seen
    });

    // Configured before the harness, which starts a sink as soon as it wraps it.
    let el = gst::ElementFactory::make("fhdpdksink").build().unwrap();
    {
        el.set_property("eal-args", af_packet_eal(&pair));
        el.set_property("dpdk-port", "net_af_packet0");
        el.set_property("host", pair.peer_ip.to_string());
        el.set_property("port", i32::from(port));
        el.set_property("src-ip", pair.host_ip.to_string());
        el.set_property("dst-mac", mac_str(pair.peer_mac));
        el.set_property("rate", 200_000_000u64);
        el.set_property("stats-interval", 0u32);
        // No preroll wait: the harness expects a synchronous state change.
        el.set_property("async", false);
    }
    let mut h = gst_check::Harness::with_element(&el, Some("sink"), None);
    h.set_src_caps_str("application/x-firehose-packets");
    let started = Instant::now();
    let mut seq = 0u64;
    while seq < COUNT {
        if (seq / BATCH) % 4 == 3 {
            // Every fourth batch as plain buffers, one datagram each.
            for _ in 0..BATCH.min(COUNT - seq) {
                let p = run::test_packet(seq, len_of(seq));
                assert_eq!(
                    h.push(gst::Buffer::from_mut_slice(p)),
                    Ok(gst::FlowSuccess::Ok)
                );
                seq += 1;
            }
            continue;
        }
        let n = BATCH.min(COUNT - seq);
        let packets: Vec<Vec<u8>> = (seq..seq + n)
            .map(|s| run::test_packet(s, len_of(s)))
            .collect();
        assert_eq!(h.push(run::batch(&packets)), Ok(gst::FlowSuccess::Ok));
        seq += n;
    }
    let elapsed = started.elapsed();
    let seen = receiver.join().unwrap();
    let st = stats(&h.element().unwrap());
    assert_each_once(&seen, &st);
    assert_eq!(field(&st, "packets-sent"), COUNT, "{st}");
    assert_eq!(field(&st, "drops-tx"), 0, "{st}");
    let bytes: u64 = (0..COUNT).map(|s| len_of(s) as u64).sum();
    assert_eq!(field(&st, "bytes-sent"), bytes);
    // Paced: 200 Mb/s less one burst allowance takes at least this long.
    let min = Duration::from_secs_f64((bytes * 8) as f64 / 200e6 * 0.8);
    assert!(elapsed >= min, "paced: {elapsed:?} < {min:?}");
    stop_and_remove(h, pair);
}
