//! The element on a machine without the CUDA driver, for real (no test backend): the
//! plugin's element registers and can be made, and starting it fails with an element
//! error that names `libcuda.so.1` and `nvidia-smi`, never a panic.
//!
//! On a machine that has the driver the start goes further; there the test checks only
//! that any failure still says how to check (`nvidia-smi`).

use gst::prelude::*;

#[test]
fn without_the_driver_starting_fails_with_an_error_naming_libcuda() {
    gst::init().unwrap();
    firehose_cuda::register_elements(None).unwrap();
    firehose_testkit::testsrc::register(None).unwrap();
    let p = gst::parse::launch("fhtestsrc num-packets=10 ! fhcudaupload ! fakesink")
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let started = p.set_state(gst::State::Playing);
    let bus = p.bus().unwrap();
    let msg = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(5),
        &[gst::MessageType::Error, gst::MessageType::Eos],
    );
    p.set_state(gst::State::Null).unwrap();
    let error = msg.and_then(|m| match m.view() {
        gst::MessageView::Error(e) => Some(e.error().to_string()),
        _ => None,
    });
    if firehose_cuda::driver::library_present() {
        if let Some(e) = error {
            assert!(e.contains("nvidia-smi"), "{e}");
        }
        return;
    }
    assert!(started.is_err(), "the pipeline must not start without CUDA");
    let e = error.expect("an error message");
    assert!(e.contains("libcuda.so.1"), "{e}");
    assert!(e.contains("nvidia-smi"), "{e}");
}
