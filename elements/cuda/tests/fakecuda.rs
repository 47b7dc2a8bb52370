//! fhcudaupload's real CUDA code (src/driver.rs through cudarc's run-time loading)
//! against the stand-in driver of tests/fixture/fakecuda.c: a TEST FIXTURE built here
//! with the C compiler, whose "device" memory is host memory and whose copies and
//! events complete on a worker thread. It proves the driver calls, the pinned
//! proposal, the ordering and the clean-up on machines without a GPU; nothing it
//! measures is a GPU figure.
//!
//! The dynamic loader reads LD_LIBRARY_PATH when a process starts, so the test runs
//! itself again as a child process with the fixture's directory in it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use firehose_core::stats::field;
use firehose_cuda::devmem;
use gst::prelude::*;

mod common;

const CHILD: &str = "FIREHOSE_FAKECUDA_CHILD";

/// Compiles the fixture into its own directory as libcuda.so and libcuda.so.1.
fn build_fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fakecuda");
    std::fs::create_dir_all(&dir).unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixture/fakecuda.c");
    let lib = dir.join("libcuda.so");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Werror", src, "-o",
        ])
        .arg(&lib)
        .status()
        .expect("a C compiler (cc) to build the stand-in driver");
    assert!(status.success(), "the stand-in driver did not compile");
    std::fs::copy(&lib, dir.join("libcuda.so.1")).unwrap();
    dir
}

#[test]
fn the_cuda_code_runs_against_the_stand_in_driver() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let dir = build_fixture();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "the_cuda_code_runs_against_the_stand_in_driver",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LD_LIBRARY_PATH", &dir)
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
}

/// `[registrations live, device blocks live, copies done, operations queued]` of the
/// fixture (loaded already by the element, so dlopen finds it).
fn fixture_stats() -> [i64; 4] {
    // SAFETY: looks up the fixture's own function in the library already loaded, and
    // calls it with room for its four counters.
    unsafe {
        let h = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!h.is_null(), "the stand-in driver is loaded");
        let f = libc::dlsym(h, c"fake_cuda_stats".as_ptr());
        assert!(
            !f.is_null(),
            "the stand-in driver, not a real one, was loaded"
        );
        let f: extern "C" fn(*mut i64) = std::mem::transmute(f);
        let mut out = [0i64; 4];
        f(out.as_mut_ptr());
        libc::dlclose(h);
        out
    }
}

/// Starts `fhtestsrc ! fhcudaupload device=… ! fakesink` and returns its error.
fn start_error(device: i32) -> String {
    let p = gst::parse::launch(&format!(
        "fhtestsrc num-packets=10 ! fhcudaupload device={device} ! fakesink"
    ))
    .unwrap();
    assert!(p.set_state(gst::State::Playing).is_err());
    let msg = p
        .bus()
        .unwrap()
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .expect("an error");
    p.set_state(gst::State::Null).unwrap();
    match msg.view() {
        gst::MessageView::Error(e) => e.error().to_string(),
        _ => unreachable!(),
    }
}

fn child() {
    common::register_elements();
    assert!(firehose_cuda::driver::library_present());
    udp_receives_into_pinned_memory();
    chunks_are_placed_into_pinned_memory();

    // SAFETY (set_var): this child runs one test on one thread, before any pipeline.
    std::env::set_var("FAKE_CUDA_VERSION", "11080");
    let e = start_error(0);
    assert!(
        e.contains("older than the 12.0") && e.contains("nvidia-smi"),
        "{e}"
    );
    std::env::remove_var("FAKE_CUDA_VERSION");
    std::env::set_var("FAKE_CUDA_DEVICES", "0");
    let e = start_error(0);
    assert!(e.contains("no CUDA device"), "{e}");
    std::env::remove_var("FAKE_CUDA_DEVICES");
    let e = start_error(3);
    assert!(e.contains("device 3 does not exist"), "{e}");
    pinning_refused();

    // The stream, through the real driver calls: what went in is what the "device"
    // holds, in order.
    let registered = Arc::new(Mutex::new(0i64));
    let r2 = registered.clone();
    let run = common::run_tapped(
        "fhtestsrc num-packets=3000 packet-size=1400 ! identity name=tap signal-handoffs=true \
         ! fhcudaupload name=up max-in-flight=3 ! fakesink name=sink sync=false signal-handoffs=true",
        move || {
            let mut r = r2.lock().unwrap();
            *r = (*r).max(fixture_stats()[0]);
        },
    );
    assert!(!run.inputs.is_empty());
    assert_eq!(run.outputs.len(), run.inputs.len());
    for (i, (out, want)) in run.outputs.iter().zip(run.inputs.iter()).enumerate() {
        let view = devmem::buffer_device_memory(out).expect("device memory");
        assert_eq!(view.size, want.len());
        // SAFETY: the stand-in driver's device memory is host memory, alive while
        // `out` holds it.
        let got = unsafe { std::slice::from_raw_parts(view.ptr as *const u8, view.size) };
        assert!(got == &want[..], "buffer {i} differs on the device");
    }
    let stats = &run.stats;
    assert_eq!(field(stats, "transfers"), run.inputs.len() as u64);
    assert_eq!(
        field(stats, "bounce-copies"),
        0,
        "fhtestsrc copied into the pinned memory proposed to it: no bounce"
    );
    assert!(
        *registered.lock().unwrap() > 0,
        "pinned memory was registered"
    );
    assert!(field(stats, "in-flight-high-water") <= 3);

    // The pipeline is gone; the outputs were the last holders of device memory.
    drop(run);
    let [registered, allocated, _, pending] = fixture_stats();
    assert_eq!(pending, 0, "nothing left queued");
    assert_eq!(allocated, 0, "every device block freed");
    assert_eq!(registered, 0, "every pinned region unregistered");
}

/// `fhudpsrc ! fhcudaupload`: the source takes the pinned memory fhcudaupload proposes,
/// the kernel receives into it, and the upload copies each batch straight from there
/// (no bounce). Every datagram sent is found on the "device" where the batch meta says.
fn udp_receives_into_pinned_memory() {
    let p = gst::parse::launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 ! fhcudaupload name=up \
         ! fakesink name=sink sync=false signal-handoffs=true",
    )
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let outputs: Arc<Mutex<Vec<gst::Buffer>>> = Arc::default();
    let o2 = outputs.clone();
    p.by_name("sink")
        .unwrap()
        .connect("handoff", false, move |args| {
            o2.lock()
                .unwrap()
                .push(args[1].get::<gst::Buffer>().unwrap());
            None
        });
    p.set_state(gst::State::Playing).unwrap();
    // Live: the sink completes its state change on the first buffer, so wait for the
    // bound port instead.
    let src = p.by_name("src").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut port = 0;
    while port == 0 && std::time::Instant::now() < deadline {
        port = src.property::<i32>("port");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_ne!(port, 0, "fhudpsrc bound a port");
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent: Vec<Vec<u8>> = (0..300u32)
        .map(|i| (0..(200 + i % 700)).map(|k| (i * 13 + k) as u8).collect())
        .collect();
    for (i, d) in sent.iter().enumerate() {
        tx.send_to(d, ("127.0.0.1", port as u16)).unwrap();
        if i % 32 == 31 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let count = |outs: &[gst::Buffer]| {
        outs.iter()
            .map(|b| {
                b.meta::<firehose_core::PacketBatchMeta>()
                    .map_or(0, |m| m.packets().len())
            })
            .sum::<usize>()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count(&outputs.lock().unwrap()) < sent.len() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stats = p.by_name("up").unwrap().property::<gst::Structure>("stats");
    p.set_state(gst::State::Null).unwrap();
    let outputs = std::mem::take(&mut *outputs.lock().unwrap());
    assert_eq!(
        count(&outputs),
        sent.len(),
        "every datagram uploaded (loopback, slow send)"
    );
    let mut got = Vec::new();
    for out in &outputs {
        let view = devmem::buffer_device_memory(out).expect("device memory");
        // SAFETY: the stand-in driver's device memory is host memory, alive while `out`
        // holds it.
        let dev = unsafe { std::slice::from_raw_parts(view.ptr as *const u8, view.size) };
        for pk in out
            .meta::<firehose_core::PacketBatchMeta>()
            .unwrap()
            .packets()
        {
            got.push(dev[pk.range()].to_vec());
        }
    }
    assert!(
        got == sent,
        "the datagrams on the device are those sent, in order"
    );
    assert_eq!(
        field(&stats, "bounce-copies"),
        0,
        "fhudpsrc received into the proposed pinned memory: no bounce copy"
    );
}

/// The driver refuses to pin (as under a low RLIMIT_MEMLOCK): the source cannot make its
/// pool of the proposed memory and says why; with `pinned-fallback=true` the stream runs
/// on unpinned memory, counted.
fn pinning_refused() {
    // SAFETY (set_var): one test on one thread, between pipelines.
    std::env::set_var("FAKE_CUDA_REFUSE_PIN", "1");
    let p = gst::parse::launch("fhtestsrc num-packets=100 ! fhcudaupload ! fakesink").unwrap();
    let _ = p.set_state(gst::State::Playing);
    let msg = p
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(5),
            &[gst::MessageType::Error, gst::MessageType::Eos],
        )
        .expect("an error");
    p.set_state(gst::State::Null).unwrap();
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("the stream must not run on memory that could not be pinned: {msg:?}")
    };
    let e = e.error().to_string();
    assert!(
        e.contains("cuMemHostRegister") && e.contains("RLIMIT_MEMLOCK"),
        "{e}"
    );

    let run = common::run_tapped(
        "fhtestsrc num-packets=500 ! identity name=tap signal-handoffs=true \
         ! fhcudaupload name=up pinned-fallback=true ! fakesink name=sink signal-handoffs=true",
        || {},
    );
    std::env::remove_var("FAKE_CUDA_REFUSE_PIN");
    assert_eq!(run.outputs.len(), run.inputs.len());
    assert!(field(&run.stats, "pinned-fallbacks") >= 1, "{}", run.stats);
    assert_eq!(
        field(&run.stats, "bounce-copies"),
        run.inputs.len() as u64,
        "unpinned input goes through the bounce pool"
    );
}

/// `fhdepay` in chunk mode cuts its chunk pool from the pinned memory fhcudaupload
/// proposes: the payloads are placed straight into memory the device reads, and each
/// chunk is uploaded without a bounce, its chunk meta intact.
fn chunks_are_placed_into_pinned_memory() {
    let run = common::run_tapped(
        "fhtestsrc rate=0 packet-size=1024 num-packets=8192 \
         ! fhdepay handler=seq handler-config=\"seq,offset=8,width=8,payload-offset=16\" \
           slots-per-chunk=1024 slot-size=1008 \
         ! identity name=tap signal-handoffs=true ! fhcudaupload name=up \
         ! fakesink name=sink sync=false signal-handoffs=true",
        || {},
    );
    assert_eq!(run.inputs.len(), 8, "8 chunks of 1024 packets");
    assert_eq!(run.outputs.len(), run.inputs.len());
    for (out, want) in run.outputs.iter().zip(&run.inputs) {
        let view = devmem::buffer_device_memory(out).expect("device memory");
        // SAFETY: the stand-in driver's device memory is host memory, alive while `out`
        // holds it.
        let got = unsafe { std::slice::from_raw_parts(view.ptr as *const u8, view.size) };
        assert!(got == &want[..], "a chunk differs on the device");
        assert!(
            out.meta::<firehose_core::meta::chunk::ChunkMeta>()
                .is_some(),
            "the chunk meta travels"
        );
    }
    assert_eq!(
        field(&run.stats, "bounce-copies"),
        0,
        "fhdepay placed the chunks in the proposed pinned memory: no bounce copy"
    );
}
