//! Endpoint lists on the kernel UDP sources, on a veth pair whose far end lives in a
//! network namespace of the test's own (a second host): eight multicast groups on one
//! port and a ninth on another, into one `fhudpsrc`, every datagram checked with its
//! destination; unicast to the wildcard-bound port, not listed, counted as filtered.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use firehose_core::batch::for_each_packet;
use firehose_core::meta::dest::PacketDestMeta;
use firehose_testkit::netns::VethPair;
use firehose_testkit::run;
use gst::prelude::*;
use gst_check::Harness;

const GROUPS: u8 = 8;
const PER_ENDPOINT: u32 = 40;

fn group(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(239, 20, 0, i)
}

/// A free UDP port on the host (bound and released: the kernel does not hand the same
/// one out again at once).
fn free_port() -> u16 {
    UdpSocket::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The peer's socket, multicast sent out of its veth end.
fn sender(pair: &VethPair) -> UdpSocket {
    let s = run::peer_socket(pair);
    s.set_multicast_ttl_v4(1).unwrap();
    s
}

#[test]
fn eight_groups_and_another_port_arrive_as_one_stream_with_their_destinations() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
    let pair = VethPair::create("ep").expect("creating a veth pair needs root");
    let (p1, p2) = (free_port(), free_port());
    // The peer routes multicast out of its veth end.
    let route = [
        "-n",
        &pair.ns,
        "route",
        "add",
        "224.0.0.0/4",
        "dev",
        &pair.peer_if,
    ];
    firehose_testkit::netns::ip(&route).unwrap();
    let list = format!("{}+{}:{p1}, 239.21.0.1:{p2}", group(0), GROUPS - 1);
    let mut h = Harness::new("fhudpsrc");
    h.set_sink_caps(firehose_core::caps::packets_caps());
    let el = h.element().unwrap();
    run::set_properties(
        &el,
        &[
            ("endpoints", &list),
            ("multicast-iface", &pair.host_if),
            ("port", &p1.to_string()),
        ],
    );
    h.play();
    // The joins are made at start; IGMP needs no answer on a point-to-point link.
    let tx = sender(&pair);
    let mut targets: Vec<SocketAddr> = (0..GROUPS)
        .map(|i| SocketAddr::new(IpAddr::V4(group(i)), p1))
        .collect();
    targets.push(SocketAddr::new("239.21.0.1".parse().unwrap(), p2));
    // Not listed: unicast to the host on the eight groups' port (the socket is bound to
    // the wildcard there) and a group nobody joined.
    let stray = [
        SocketAddr::new(IpAddr::V4(pair.host_ip), p1),
        SocketAddr::new("239.20.0.200".parse().unwrap(), p1),
    ];
    for seq in 0..PER_ENDPOINT {
        for (k, to) in targets.iter().enumerate() {
            let mut payload = vec![k as u8; 64 + k];
            payload[1..5].copy_from_slice(&seq.to_be_bytes());
            tx.send_to(&payload, to).unwrap();
        }
        if seq % 10 == 0 {
            for to in &stray {
                tx.send_to(b"stray", to).unwrap();
            }
        }
        // A plain sender: paced so that no socket buffer is the test's subject.
        std::thread::sleep(Duration::from_micros(200));
    }

    let want = targets.len() * PER_ENDPOINT as usize;
    let mut seen = vec![vec![false; PER_ENDPOINT as usize]; targets.len()];
    let mut got = 0;
    while got < want {
        let buf = h.pull().expect("a batch within the harness timeout");
        let dests = buf
            .meta::<PacketDestMeta>()
            .expect("every batch says where its datagrams went")
            .dests()
            .to_vec();
        let mut i = 0;
        for_each_packet(&buf, |p, bytes| {
            let k = usize::from(bytes[0]);
            assert!(
                k < targets.len(),
                "a stray datagram was delivered: {bytes:?}"
            );
            assert_eq!(bytes.len(), 64 + k, "endpoint {k}'s length");
            let seq = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
            assert!(!seen[k][seq], "endpoint {k} seq {seq} twice");
            seen[k][seq] = true;
            assert_eq!(
                dests[i].dst.to_socket_addr(),
                targets[k],
                "destination of {k}/{seq}"
            );
            assert_eq!(p.src.to_socket_addr().ip(), IpAddr::V4(pair.peer_ip));
            i += 1;
        })
        .expect("batch meta");
        assert_eq!(i, dests.len(), "one destination per datagram");
        got += i;
    }
    assert!(seen.iter().flatten().all(|s| *s));

    // The unicast strays reach the wildcard-bound socket and are counted; the unjoined
    // group never reaches it. Give the last of them time to be read.
    let strays = u64::from(PER_ENDPOINT.div_ceil(10));
    let stats = run::poll(
        Duration::from_secs(5),
        || "the unicast strays counted as filtered".into(),
        || {
            let s = el.property::<gst::Structure>("stats");
            (s.get::<u64>("filtered").unwrap() >= strays).then_some(s)
        },
    );
    assert_eq!(stats.get::<u64>("filtered").unwrap(), strays);
    assert_eq!(stats.get::<u64>("packets").unwrap(), want as u64);
    let per = firehose_core::endpoint::read_stats(&stats).expect("the endpoints field");
    let want: Vec<(String, u64, u64)> = targets
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let n = u64::from(PER_ENDPOINT);
            (t.to_string(), n, n * (64 + k as u64))
        })
        .collect();
    assert_eq!(per, want, "{stats}");
    drop(h);
}

#[test]
fn bad_endpoint_lists_fail_at_start_naming_the_fix() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
    for (props, says) in [
        (
            &[("endpoints", "239.1.1.1:5,239.1.1.1:5")][..],
            "listed twice",
        ),
        (
            &[("endpoints", "239.1.1.1"), ("address", "10.0.0.1")][..],
            "both address",
        ),
        (&[("endpoints", "nowhere:5")][..], "IPv4"),
        (
            &[("endpoints", "10.0.0.1@10.0.0.2")][..],
            "not a multicast group",
        ),
    ] {
        let e = run::start_error("fhudpsrc", props);
        assert!(e.contains(says), "{props:?}: {e}");
    }
}
