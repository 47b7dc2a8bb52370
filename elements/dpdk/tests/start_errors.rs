//! Start-up failures are element errors that say the cause and the fix: a device that
//! cannot be added, an unknown port, EAL arguments that differ from the running EAL's,
//! a bad address. (Bad EAL arguments: `start_errors_eal.rs`, a process of its own.)

mod common;

use common::*;
use gst::prelude::*;

/// Starts `fhdpdksrc` with `props` in a pipeline; returns the error message text (and
/// debug) it posts, or `None` if it started.
fn start_error(props: &[(&str, &str)]) -> Option<String> {
    init();
    let src = gst::ElementFactory::make("fhdpdksrc").build().unwrap();
    for (k, v) in props {
        src.set_property_from_str(k, v);
    }
    let sink = gst::ElementFactory::make("fakesink").build().unwrap();
    let pipeline = gst::Pipeline::new();
    pipeline.add_many([&src, &sink]).unwrap();
    src.link(&sink).unwrap();
    let r = pipeline.set_state(gst::State::Playing);
    let bus = pipeline.bus().unwrap();
    let mut err = None;
    while let Some(msg) = bus.pop() {
        if let gst::MessageView::Error(e) = msg.view() {
            err = Some(format!("{} [{:?}]", e.error(), e.debug()));
            break;
        }
    }
    pipeline.set_state(gst::State::Null).unwrap();
    if err.is_none() {
        assert!(r.is_ok(), "state change failed without an error message");
    }
    err
}

#[test]
fn start_errors_say_cause_and_fix() {
    let _g = serial();
    let pair = veth("er");
    let eal = "--no-huge --no-pci";
    let e = start_error(&[
        (
            "eal-args",
            &format!("{eal} --vdev=net_af_packet0,iface=fhnosuchif0"),
        ),
        ("dpdk-port", "net_af_packet0"),
    ])
    .expect("no such interface");
    assert!(
        e.contains("could not add device 'net_af_packet0,iface=fhnosuchif0'"),
        "{e}"
    );
    assert!(e.contains("iface= names an existing interface"), "{e}");

    let e = start_error(&[("eal-args", eal), ("dpdk-port", "net_nosuch0")]).expect("fails");
    assert!(e.contains("No DPDK port 'net_nosuch0'"), "{e}");
    assert!(e.contains("--vdev="), "says how to add one: {e}");

    let e = start_error(&[("eal-args", "--no-huge -m 128"), ("dpdk-port", "0")])
        .expect("fails: the EAL is up with other arguments");
    assert!(e.contains("already running"), "{e}");

    let e = start_error(&[("eal-args", eal), ("address", "not-an-ip")]).expect("fails");
    assert!(e.contains("address 'not-an-ip'"), "{e}");

    // A good start still works after all of that, with the device named only by
    // --vdev (empty base arguments use the running EAL), and the failed device was
    // not left plugged.
    let ok = start_error(&[
        (
            "eal-args",
            &format!("--vdev=net_af_packet0,iface={},framecnt=4096", pair.host_if),
        ),
        ("dpdk-port", "net_af_packet0"),
    ]);
    assert_eq!(ok, None);
}
