//! Caps across the plugin: no src pad of any Firehose element says ANY, Firehose
//! consumers get packet batches from a packet source (`output=auto`), through `queue`
//! too, and stock sources still feed Firehose consumers. Loopback only, port 0.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use gst::prelude::*;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// Every element factory of the `firehose` plugin.
fn factories() -> Vec<gst::ElementFactory> {
    let v: Vec<gst::ElementFactory> = gst::Registry::get()
        .features_by_plugin("firehose")
        .into_iter()
        .filter_map(|f| f.downcast::<gst::ElementFactory>().ok())
        .collect();
    assert!(v.len() > 10, "the firehose plugin's elements: {}", v.len());
    v
}

/// Elements whose src caps are another process's, exempt from the ANY check.
const RELAYS: &[&str] = &["fhshmsrc"];

#[test]
fn no_src_pad_of_any_element_advertises_any() {
    init();
    let mut checked = 0;
    for f in factories() {
        let name = f.name();
        // A relay of another process's caps: fhshmsrc produces whatever the fhshmsink at
        // the other end took in (video, RTP, ...), which it learns only once connected;
        // like GStreamer's own shmsrc and unixfdsrc it cannot name them before.
        if RELAYS.contains(&name.as_str()) {
            continue;
        }
        for t in f.static_pad_templates() {
            if t.direction() == gst::PadDirection::Src {
                assert!(
                    !t.caps().is_any(),
                    "{name}: src template {} is ANY",
                    t.name_template()
                );
                checked += 1;
            }
        }
        // What an instance answers, unlinked and in NULL, names formats too.
        let el = f.create().build().unwrap();
        for pad in el.src_pads() {
            let caps = pad.query_caps(None);
            assert!(!caps.is_any(), "{name}: {} answers ANY", pad.name());
        }
    }
    assert!(checked >= 10, "{checked} src templates");
}

/// Plays `desc` (a source `fhudpsrc name=src`), sends `n` datagrams to it, waits until
/// it counted them, and returns the pipeline, still playing.
fn play_and_send(desc: &str, n: usize) -> gst::Pipeline {
    let p = firehose_testkit::run::launch(desc);
    p.set_state(gst::State::Playing).unwrap();
    let src = p.by_name("src").unwrap();
    let port = src.property::<i32>("port") as u16;
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..n {
        tx.send_to(&[i as u8; 64], ("127.0.0.1", port)).unwrap();
    }
    let packets = || {
        src.property::<gst::Structure>("stats")
            .get::<u64>("packets")
            .unwrap()
    };
    while packets() < n as u64 {
        assert!(Instant::now() < deadline, "{desc}: {} of {n}", packets());
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

/// The caps on the sink pad of the element named `name`, once they are set.
fn caps_at(p: &gst::Pipeline, name: &str) -> String {
    let pad = p.by_name(name).unwrap().static_pad("sink").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = pad.current_caps() {
            return c.structure(0).unwrap().name().to_string();
        }
        assert!(Instant::now() < deadline, "no caps reached {name}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn firehose_consumers_get_batches_from_fhudpsrc_at_its_default() {
    init();
    let dir = firehose_tests::temp_dir("negotiation");
    for (desc, consumer) in [
        ("speaddepay name=c ! fakesink", "c"),
        ("queue ! speaddepay name=c ! fakesink", "c"),
        ("capsfilter ! identity ! speaddepay name=c ! fakesink", "c"),
        (
            "fhdepay name=c handler=seq handler-config=\"seq,offset=0,width=4,payload-offset=8\" \
             heap-size=64 heaps-per-chunk=4 ! fakesink",
            "c",
        ),
        (
            &format!("fhrecordsink name=c location={}/a.pcap", dir.display()),
            "c",
        ),
        // To the discard port on loopback.
        ("fhudpsink name=c host=127.0.0.1 port=9", "c"),
        (
            &format!(
                "tee name=t ! queue ! fhrecordsink name=c location={}/b.pcap \
                 t. ! queue ! fakesink",
                dir.display()
            ),
            "c",
        ),
    ] {
        let desc = format!("fhudpsrc name=src address=127.0.0.1 port=0 ! {desc}");
        let p = play_and_send(&desc, 3);
        assert_eq!(
            caps_at(&p, consumer),
            firehose_core::caps::PACKETS,
            "{desc}"
        );
        p.set_state(gst::State::Null).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stock_udpsrc_still_feeds_the_recorder() {
    init();
    let dir = firehose_tests::temp_dir("negotiation-udpsrc");
    // Without caps (no caps event) and with caps the recorder does not name.
    for (i, caps) in ["", "caps=application/x-rtp"].into_iter().enumerate() {
        let path = dir.join(format!("stock{i}.pcap"));
        let p = firehose_testkit::run::launch(&format!(
            "udpsrc name=src address=127.0.0.1 port=0 {caps} ! fhrecordsink name=rec location={}",
            path.display()
        ));
        if p.set_state(gst::State::Playing).is_err() {
            let m = p.bus().unwrap().pop_filtered(&[gst::MessageType::Error]);
            panic!("{caps}: {m:?}");
        }
        let src = p.by_name("src").unwrap();
        let port = src.property::<i32>("port") as u16;
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..5u8 {
            tx.send_to(&[i; 100], ("127.0.0.1", port)).unwrap();
        }
        let rec = p.by_name("rec").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let packets = || {
            rec.property::<gst::Structure>("stats")
                .get::<u64>("packets")
                .unwrap()
        };
        while packets() < 5 {
            if let Some(m) = p.bus().unwrap().pop_filtered(&[gst::MessageType::Error]) {
                panic!("{caps}: {m:?}");
            }
            assert!(
                Instant::now() < deadline,
                "{caps}: {} of 5 recorded",
                packets()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        p.set_state(gst::State::Null).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
