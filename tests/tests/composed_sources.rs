//! The engine sources (`fhspeadsrc`, `fhudpchunksrc`) with a `transport`: what a user
//! gets when the transport cannot feed them. Each case must fail at start with an element
//! error that names the cause and the fix, never a hang or a silent kernel-UDP fallback.
//! (The transports that can, AF_XDP and DPDK, are tested on veth pairs in
//! `elements/xdp/tests/xdpsrc.rs` and `elements/dpdk/tests/spead_identity.rs`.)

use gst::prelude::*;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// The error `element transport=<desc>` posts when it starts.
fn start_error(element: &str, desc: &str) -> String {
    init();
    // Named after the case, which the failure message names.
    let pipeline = gst::Pipeline::builder()
        .name(format!("{element} transport={desc:?}"))
        .build();
    let src = gst::ElementFactory::make(element)
        .property("transport", desc)
        .build()
        .unwrap();
    if element == "fhudpchunksrc" {
        src.set_property_from_str("handler", "spead");
    }
    let sink = gst::ElementFactory::make("fakesink").build().unwrap();
    pipeline.add_many([&src, &sink]).unwrap();
    src.link(&sink).unwrap();
    firehose_testkit::run::refused_start(&pipeline)
}

#[test]
fn an_rdma_transport_without_rdma_hardware_says_what_is_missing() {
    // No machine here has an RDMA NIC or an InfiniBand kernel: the probe must say so.
    let e = start_error("fhspeadsrc", "fhibvsrc address=239.1.2.3 port=7148");
    assert!(e.contains("RDMA") || e.contains("ibverbs"), "{e}");
}

#[test]
fn a_transport_that_cannot_feed_in_place_names_one_that_can() {
    for element in ["fhspeadsrc", "fhudpchunksrc"] {
        let e = start_error(element, "fhtestsrc");
        assert!(
            e.contains("cannot feed an engine in place"),
            "{element}: {e}"
        );
        assert!(e.contains("fhxdpsrc"), "{element}: {e}");
    }
}

#[test]
fn a_transport_that_is_not_an_element_says_how_to_write_one() {
    let e = start_error("fhspeadsrc", "fhxdpsrc interface=");
    // An empty interface parses; the transport's own start error names the property.
    assert!(e.contains("interface"), "{e}");
    let e = start_error("fhspeadsrc", "no-such-element");
    assert!(e.contains("is not an element with properties"), "{e}");
    let e = start_error("fhudpchunksrc", "fakesrc");
    assert!(e.contains("not a Firehose packet source"), "{e}");
}
