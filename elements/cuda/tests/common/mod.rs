//! What the tests that run fhcudaupload's real CUDA code share (the stand-in driver's
//! test and the GPU tests): registering the elements and running a tapped pipeline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use firehose_testkit::run;
use gst::prelude::*;

/// Initialises GStreamer and registers fhcudaupload, fhtestsrc, fhudpsrc and fhdepay
/// (with its `seq` handler).
pub fn register_elements() {
    gst::init().unwrap();
    firehose_cuda::register_elements(None).unwrap();
    if gst::ElementFactory::find("fhdepay").is_none() {
        firehose_depay::register_handlers();
        firehose_depay::depay::register(None).unwrap();
    }
    if gst::ElementFactory::find("fhtestsrc").is_none() {
        firehose_testkit::testsrc::register(None).unwrap();
    }
    if gst::ElementFactory::find("fhudpsrc").is_none() {
        firehose_core::testing::register_elements(&[(
            "fhudpsrc",
            firehose_net::udpsrc::UdpSrc::static_type(),
        )]);
    }
}

/// What a tapped run saw: the input bytes (at `identity name=tap` before the upload),
/// the output buffers (at `fakesink name=sink signal-handoffs=true`) and the stats of
/// the upload (`name=up`).
pub struct Run {
    /// Each input buffer's bytes.
    pub inputs: Vec<Vec<u8>>,
    /// Each output buffer (holding its device memory).
    pub outputs: Vec<gst::Buffer>,
    /// fhcudaupload's stats at EOS.
    pub stats: gst::Structure,
}

/// Runs `launch` to EOS (60 s at most), calling `on_output` at each output buffer; the
/// pipeline is stopped and gone when this returns.
pub fn run_tapped(launch: &str, on_output: impl Fn() + Send + Sync + 'static) -> Run {
    let p = run::launch(launch);
    let inputs: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let outputs: Arc<Mutex<Vec<gst::Buffer>>> = Arc::default();
    let (i2, o2) = (inputs.clone(), outputs.clone());
    p.by_name("tap")
        .unwrap()
        .connect("handoff", false, move |args| {
            let b = args[1].get::<gst::Buffer>().unwrap();
            i2.lock().unwrap().push(b.map_readable().unwrap().to_vec());
            None
        });
    p.by_name("sink")
        .unwrap()
        .connect("handoff", false, move |args| {
            on_output();
            o2.lock()
                .unwrap()
                .push(args[1].get::<gst::Buffer>().unwrap());
            None
        });
    p.set_state(gst::State::Playing).unwrap();
    run::wait_end(&p.bus().unwrap(), Duration::from_secs(60)).unwrap();
    let stats = p.by_name("up").unwrap().property::<gst::Structure>("stats");
    p.set_state(gst::State::Null).unwrap();
    let inputs = std::mem::take(&mut *inputs.lock().unwrap());
    let outputs = std::mem::take(&mut *outputs.lock().unwrap());
    Run {
        inputs,
        outputs,
        stats,
    }
}
