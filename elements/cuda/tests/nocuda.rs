//! The element on a machine without the CUDA driver, for real (no test backend): the
//! plugin's element registers and can be made, and starting it fails with an element
//! error that names `libcuda.so.1` and `nvidia-smi`, never a panic.
//!
//! On a machine that has the driver the start goes further; there the test checks only
//! that any failure still says how to check (`nvidia-smi`).

use std::time::Duration;

use firehose_testkit::run;

#[test]
fn without_the_driver_starting_fails_with_an_error_naming_libcuda() {
    gst::init().unwrap();
    firehose_cuda::register_elements(None).unwrap();
    firehose_testkit::testsrc::register(None).unwrap();
    let p = run::launch("fhtestsrc num-packets=10 ! fhcudaupload ! fakesink");
    if firehose_cuda::driver::library_present() {
        if let Err(e) = run::play_to_end(&p, Duration::from_secs(5)) {
            assert!(e.contains("nvidia-smi"), "{e}");
        }
        return;
    }
    // Without CUDA the pipeline must not start.
    let e = run::refused_start(&p);
    assert!(e.contains("libcuda.so.1"), "{e}");
    assert!(e.contains("nvidia-smi"), "{e}");
}
