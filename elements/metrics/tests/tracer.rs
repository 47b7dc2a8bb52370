//! The `fhmetrics` tracer serves the counters of a live pipeline it saw being built.

use std::time::{Duration, Instant};

use firehose_metrics::http::get;
use firehose_metrics::tracer::FhMetrics;
use gst::prelude::*;

fn counter(body: &str, family: &str, element: &str) -> Option<u64> {
    body.lines()
        .find(|l| {
            l.starts_with(&format!("{family}{{")) && l.contains(&format!("element=\"{element}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn tracer_serves_a_pipelines_counters() {
    gst::init().unwrap();
    firehose_testkit::testsrc::register(None).unwrap();
    firehose_metrics::tracer::register(None).unwrap();
    // What GST_TRACERS="fhmetrics(port=0)" does at gst_init: make the tracer with its
    // parameters as one string (which the structure-params path turns into properties).
    let tracer: FhMetrics = gst::glib::Object::builder()
        .property("params", "port=0")
        .build();
    assert_eq!(tracer.property::<i32>("port"), 0);
    // No port opened until an element exists (gst-inspect-1.0 makes tracers too).
    assert!(tracer.server_addr().is_none());

    let pipeline = gst::parse::launch(
        "fhtestsrc name=src num-packets=6400 batch-size=64 ! fakesink name=sink",
    )
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    pipeline.set_property("name", "capture");
    let addr = tracer.server_addr().expect("the tracer listens");
    assert!(addr.ip().is_loopback(), "localhost by default: {addr}");
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let msg = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(10),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("end of stream");
    assert!(matches!(msg.view(), gst::MessageView::Eos(_)), "{msg:?}");

    let (head, body) = get(addr, "/metrics", "application/openmetrics-text").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        counter(&body, "firehose_packets_total", "src"),
        Some(6400),
        "{body}"
    );
    assert_eq!(
        counter(&body, "firehose_batches_total", "src"),
        Some(100),
        "{body}"
    );
    assert!(body.contains("pipeline=\"capture\""), "{body}");
    assert!(body.contains("factory=\"fhtestsrc\""), "{body}");
    assert!(body.contains("# TYPE firehose_pool_in_use gauge"), "{body}");
    // The pool's memory (a text field) is a label of the info sample.
    let info = body
        .lines()
        .find(|l| {
            l.starts_with(
                "firehose_element_info{pipeline=\"capture\",element=\"src\",factory=\"fhtestsrc\",",
            )
        })
        .unwrap_or_else(|| panic!("no info sample for src: {body}"));
    assert!(
        info.contains(",memory=\"system\"") || info.contains(",memory=\"hugepages\""),
        "{info}"
    );
    // The stock fakesink has a `stats` structure too, but not ours: not exported.
    assert!(!body.contains("element=\"sink\""), "{body}");
    assert!(body.ends_with("# EOF\n"));

    pipeline.set_state(gst::State::Null).unwrap();
    // The EOS message holds a reference to the pipeline, and so to its elements.
    drop((msg, bus, pipeline));
    // Gone elements disappear from the exposition (polled: their last references may go
    // on another thread a little later on a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (_, body) = get(addr, "/metrics", "application/openmetrics-text").unwrap();
        if body == "# EOF\n" || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(body, "# EOF\n");
}
