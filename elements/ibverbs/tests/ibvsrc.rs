//! `fhibvsrc` in a pipeline on a machine without RDMA: start fails with an element error
//! that says "no RDMA device" and why. This runs the real probe (dlopen of libibverbs,
//! `ibv_get_device_list`), not a stand-in.

use firehose_ibverbs::probe;
use gst::prelude::*;

fn init() {
    firehose_core::testing::register_elements(&[(
        "fhibvsrc",
        firehose_ibverbs::ibvsrc::IbvSrc::static_type(),
    )]);
}

/// Runs `desc` to PLAYING and returns the first error message's text and debug string.
fn first_error(desc: &str) -> (String, String) {
    init();
    let pipeline = gst::parse::launch(desc).unwrap();
    let bus = pipeline.bus().unwrap();
    let r = pipeline.set_state(gst::State::Playing);
    assert!(r.is_err(), "start must fail without RDMA, got {r:?}");
    let msg = bus
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .expect("an error message on the bus");
    pipeline.set_state(gst::State::Null).unwrap();
    match msg.view() {
        gst::MessageView::Error(e) => (
            e.error().to_string(),
            e.debug().map(|d| d.to_string()).unwrap_or_default(),
        ),
        _ => unreachable!(),
    }
}

#[test]
fn start_fails_with_no_rdma_device() {
    match probe::probe() {
        Err(why) => {
            let (text, debug) = first_error("fhibvsrc port=7148 ! fakesink");
            eprintln!("fhibvsrc error here: {text}\n  debug: {debug}");
            assert!(text.starts_with("no RDMA device"), "{text}");
            assert_eq!(
                text,
                why.to_string(),
                "the element reports the probe's cause"
            );
            assert!(!debug.is_empty());
        }
        // A machine with an RDMA device (never run so far): an interface that cannot
        // exist must fail at start, after the probe, naming the interface.
        Ok(_) => {
            let (text, _) = first_error("fhibvsrc port=7148 interface=fh-no-such-if0 ! fakesink");
            assert!(text.contains("fh-no-such-if0"), "{text}");
        }
    }
}

/// An IPv6 address and one that is no address are settings errors, found before the
/// probe: each error says what is wrong and what to do.
#[test]
fn bad_addresses_are_refused_before_the_probe() {
    for (address, says) in [
        ("ff02::5", ["IPv4 only", "fhudpsrc"]),
        ("not-an-ip", ["not-an-ip", "IPv4 or IPv6"]),
    ] {
        let (text, _) = first_error(&format!("fhibvsrc address={address} port=7148 ! fakesink"));
        assert!(says.iter().all(|s| text.contains(s)), "{address}: {text}");
    }
}

#[test]
fn properties_and_caps() {
    init();
    let e = gst::ElementFactory::make("fhibvsrc")
        .property("port", 9000i32)
        .property("interface", "eth0")
        .property("device", "mlx5_0")
        .build()
        .unwrap();
    assert_eq!(e.property::<i32>("port"), 9000);
    assert_eq!(
        e.property::<Option<String>>("device").as_deref(),
        Some("mlx5_0")
    );
    let stats = e.property::<gst::Structure>("stats");
    assert_eq!(stats.name(), firehose_core::stats::STRUCTURE_NAME);
    assert_eq!(firehose_core::stats::field(&stats, "packets"), 0);
    let caps = e.static_pad("src").unwrap().query_caps(None);
    assert_eq!(
        caps.structure(0).unwrap().name(),
        firehose_core::caps::PACKETS
    );
}

/// Endpoint lists a flow rule cannot steer, or that clash with other settings, are
/// settings errors before the probe too, naming the endpoint and the fix.
#[test]
fn bad_endpoint_lists_are_refused_before_the_probe() {
    for (props, says) in [
        (
            "endpoints=239.1.1.0+1:7148,[ff15::1]:7148",
            &["[ff15::1]:7148 is IPv6", "fhudpsrc"][..],
        ),
        (
            "endpoints=232.1.1.1:7148@10.0.0.9",
            &["SSM sources", "fhudpsrc"][..],
        ),
        (
            "endpoints=239.1.1.1:7148 address=10.0.0.1",
            &["both address", "endpoints"][..],
        ),
        ("endpoints=239.1.1.1+x", &["ADDRESS[+N][:PORT]"][..]),
    ] {
        let (text, _) = first_error(&format!("fhibvsrc {props} ! fakesink"));
        assert!(says.iter().all(|s| text.contains(s)), "{props}: {text}");
    }
}

/// `stats` has its `endpoints` array even before a start (empty then), so tools can
/// rely on the field.
#[test]
fn stats_always_have_the_endpoints_field() {
    init();
    let e = gst::ElementFactory::make("fhibvsrc").build().unwrap();
    let s = e.property::<gst::Structure>("stats");
    let a = firehose_core::endpoint::read_stats(&s).unwrap_or_else(|| panic!("{s}"));
    assert!(a.is_empty());
}
