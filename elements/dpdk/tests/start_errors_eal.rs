//! A bad `eal-args` is an element error that says the cause and the fix, leaves no
//! runtime directory behind, and since a failed EAL cannot start again in the same
//! process, later starts say so.

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
fn bad_eal_args_fail_clearly_and_for_good() {
    let _g = serial();
    // Options that parse, then fail inside the EAL after it made its runtime
    // directory (the main lcore is not among the lcores).
    let bad = "--no-huge --lcores=0@(0) --main-lcore=5";
    let e = start_error(&[("eal-args", bad)]).expect("fails");
    assert!(e.contains("DPDK EAL initialisation failed"), "{e}");
    assert!(e.contains("--main-lcore=5"), "shows the arguments: {e}");
    assert!(e.contains("EAL parameters"), "says what to check: {e}");
    let dir =
        std::path::Path::new("/var/run/dpdk").join(format!("firehose-{}", std::process::id()));
    assert!(
        !dir.exists(),
        "the failed start left {} behind",
        dir.display()
    );

    let e = start_error(&[("eal-args", "--no-huge --no-pci")]).expect("fails");
    assert!(e.contains("restart the process"), "{e}");
    assert!(
        e.contains("--main-lcore=5"),
        "repeats the first failure: {e}"
    );
}
