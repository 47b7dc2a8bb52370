//! fhcudaupload's real CUDA code (src/driver.rs through cudarc's run-time loading)
//! against the stand-in driver of tests/fixture/fakecuda.c: a TEST FIXTURE built here
//! with the C compiler, whose "device" memory is host memory and whose copies and
//! events complete on a worker thread. It proves the driver calls, the pinned
//! proposal, the ordering and the clean-up on machines without a GPU; nothing it
//! measures is a GPU figure.
//!
//! The dynamic loader reads LD_LIBRARY_PATH when a process starts, so each test runs
//! itself again as a child process with the fixture's directory in it.
//!
//! The first test runs with GStreamer's CUDA library (libgstcuda-1.0) made absent, so
//! output is this crate's own memory (the fallback). The second runs with it: output
//! in `GstCudaMemory`, taken by the stock `cudadownload` of Debian 12's nvcodec plugin,
//! which the fixture's stand-in NVDEC library (tests/fixture/fakecuvid.c) lets
//! register, into `fhcheck`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use firehose_core::stats::field;
use firehose_cuda::devmem;
use firehose_testkit::run;
use gst::prelude::*;

mod common;

const CHILD: &str = "FIREHOSE_FAKECUDA_CHILD";

fn compile(src: &str, out: &Path, soname: &str) {
    let src = format!("{}/tests/fixture/{src}", env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Werror"])
        .arg(&src)
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(out)
        .status()
        .expect("a C compiler (cc) to build the stand-in driver");
    assert!(status.success(), "{src} did not compile");
}

/// Compiles the fixture into its own directory (once per process): the stand-in
/// driver as libcuda.so with soname libcuda.so.1, libcuda.so.1 a link to it (so cudarc,
/// which opens either name, and libgstcuda, which opens libcuda.so.1, share one
/// library), and the stand-in NVDEC library as libnvcuvid.so.1.
fn build_fixture() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fakecuda");
        std::fs::create_dir_all(&dir).unwrap();
        compile("fakecuda.c", &dir.join("libcuda.so"), "libcuda.so.1");
        compile(
            "fakecuvid.c",
            &dir.join("libnvcuvid.so.1"),
            "libnvcuvid.so.1",
        );
        let link = dir.join("libcuda.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so", &link).unwrap();
        dir
    })
    .clone()
}

/// Runs test `name` again in a child process with the fixture on LD_LIBRARY_PATH and
/// `env` set; fails with its output if it fails.
fn run_child(name: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let dir = build_fixture();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", &dir)
        .env(CHILD, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
}

#[test]
fn the_cuda_code_runs_against_the_stand_in_driver() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    // libgstcuda made absent: the fallback to this crate's own device memory.
    run_child(
        "the_cuda_code_runs_against_the_stand_in_driver",
        &[
            (
                firehose_cuda::gstcuda::LIBRARY_ENV,
                "/nonexistent/libgstcuda-1.0.so.0".as_ref(),
            ),
            ("GST_DEBUG", "fhcudaupload:2".as_ref()),
        ],
    );
}

/// `[registrations live, device blocks live, copies done, operations queued]` of the
/// fixture (loaded already by the element, so dlopen finds it).
fn fixture_stats() -> [i64; 4] {
    // SAFETY: looks up the fixture's own function in the library already loaded, and
    // calls it with room for its four counters.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
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
    run::refused_start(&run::launch(&format!(
        "fhtestsrc num-packets=10 ! fhcudaupload device={device} ! fakesink"
    )))
}

/// The bytes of `out`'s device memory.
fn device_bytes(out: &gst::Buffer) -> &[u8] {
    let view = devmem::buffer_device_memory(out).expect("device memory");
    // SAFETY: the stand-in driver's device memory is host memory, alive while `out`
    // holds it.
    unsafe { std::slice::from_raw_parts(view.ptr as *const u8, view.size) }
}

fn child() {
    common::register_elements();
    assert!(firehose_cuda::driver::library_present());
    assert!(
        !firehose_cuda::gstcuda::available(),
        "libgstcuda is made absent in this test"
    );
    // The fallback says why, once, at warning level.
    let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
    let w2 = warnings.clone();
    gst::log::add_log_function(move |cat, level, _, _, _, _, msg| {
        if cat.name() == "fhcudaupload" && level == gst::DebugLevel::Warning {
            if let Some(m) = msg.get() {
                w2.lock().unwrap().push(m.to_string());
            }
        }
    });
    // (GST_DEBUG=fhcudaupload:2 is set for this child.)
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
        assert!(
            devmem::device_memory(out.peek_memory(0)).is_some(),
            "without libgstcuda, output is FirehoseCudaMemory"
        );
        let got = device_bytes(out);
        assert_eq!(got.len(), want.len());
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

    let warned: Vec<String> = warnings
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("libgstcuda not usable"))
        .cloned()
        .collect();
    assert_eq!(
        warned.len(),
        1,
        "one warning, however many starts: {warned:?}"
    );
    assert!(warned[0].contains("FirehoseCudaMemory"), "{}", warned[0]);

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
    let p = run::launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 ! fhcudaupload name=up \
         ! fakesink name=sink sync=false",
    );
    let rx = run::handoffs(&p, "sink");
    p.set_state(gst::State::Playing).unwrap();
    // Live: the sink completes its state change on the first buffer, so wait for the
    // bound port instead.
    let port = run::bound_port(&p.by_name("src").unwrap(), Duration::from_secs(5));
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent: Vec<Vec<u8>> = (0..300u32)
        .map(|i| (0..(200 + i % 700)).map(|k| (i * 13 + k) as u8).collect())
        .collect();
    for (i, d) in sent.iter().enumerate() {
        tx.send_to(d, ("127.0.0.1", port)).unwrap();
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
    let mut outputs = Vec::new();
    run::wait_until(
        Duration::from_secs(10),
        || "not every datagram uploaded (loopback, slow send)".into(),
        || {
            outputs.extend(rx.try_iter());
            count(&outputs) >= sent.len()
        },
    );
    let stats = p.by_name("up").unwrap().property::<gst::Structure>("stats");
    p.set_state(gst::State::Null).unwrap();
    outputs.extend(rx.try_iter());
    assert_eq!(count(&outputs), sent.len(), "every datagram uploaded once");
    let mut got = Vec::new();
    for out in &outputs {
        let dev = device_bytes(out);
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
    let p = run::launch("fhtestsrc num-packets=100 ! fhcudaupload ! fakesink");
    let e = run::play_to_end(&p, Duration::from_secs(5))
        .expect_err("the stream must not run on memory that could not be pinned");
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
           heaps-per-chunk=1024 heap-size=1008 \
         ! identity name=tap signal-handoffs=true ! fhcudaupload name=up \
         ! fakesink name=sink sync=false signal-handoffs=true",
        || {},
    );
    assert_eq!(run.inputs.len(), 8, "8 chunks of 1024 packets");
    assert_eq!(run.outputs.len(), run.inputs.len());
    for (out, want) in run.outputs.iter().zip(&run.inputs) {
        assert!(
            device_bytes(out) == &want[..],
            "a chunk differs on the device"
        );
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

#[test]
fn gst_cuda_memory_goes_through_cudadownload_with_the_stand_in_driver() {
    if std::env::var_os(CHILD).is_some() {
        interop_child();
        return;
    }
    // A registry of its own, scanning only coreelements and nvcodec: nvcodec registers
    // cudadownload when it finds a driver (the stand-in) and NVDEC (the stand-in).
    gst::init().unwrap();
    let core = gst::Registry::get()
        .find_plugin("coreelements")
        .and_then(|p| p.filename())
        .expect("GStreamer's coreelements plugin");
    let plugins = core.parent().unwrap().to_path_buf();
    let nvcodec = plugins.join("libgstnvcodec.so");
    assert!(
        nvcodec.exists(),
        "{} missing: install gstreamer1.0-plugins-bad (scripts/setup test does)",
        nvcodec.display()
    );
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fakecuda-plugins");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    std::os::unix::fs::symlink(&core, tmp.join(core.file_name().unwrap())).unwrap();
    std::os::unix::fs::symlink(&nvcodec, tmp.join("libgstnvcodec.so")).unwrap();
    let registry = tmp.join("registry.bin");
    run_child(
        "gst_cuda_memory_goes_through_cudadownload_with_the_stand_in_driver",
        &[
            ("GST_REGISTRY_1_0", registry.as_os_str()),
            ("GST_PLUGIN_SYSTEM_PATH_1_0", tmp.as_os_str()),
            ("GST_PLUGIN_PATH_1_0", "".as_ref()),
            ("GST_PLUGIN_PATH", "".as_ref()),
        ],
    );
}

fn interop_child() {
    use firehose_cuda::gstcuda;
    common::register_elements();
    if gst::ElementFactory::find("fhcheck").is_none() {
        firehose_testkit::check::register(None).unwrap();
    }
    assert!(
        gstcuda::available(),
        "{} missing: install libgstreamer-plugins-bad1.0-0 (scripts/setup test does)",
        gstcuda::LIBRARY
    );

    // Our own caps (fakesink takes them): GstCudaMemory all the same, its size the
    // data's, the meta's pointer the one a CUDA map gives, the bytes those sent.
    let run = common::run_tapped(
        "fhtestsrc num-packets=2000 packet-size=1400 ! identity name=tap signal-handoffs=true \
         ! fhcudaupload name=up max-in-flight=3 ! fakesink name=sink sync=false signal-handoffs=true",
        || {},
    );
    assert!(!run.inputs.is_empty());
    assert_eq!(run.outputs.len(), run.inputs.len());
    for (i, (out, want)) in run.outputs.iter().zip(&run.inputs).enumerate() {
        let mem = out.peek_memory(0);
        assert!(gstcuda::is_cuda_memory(mem), "buffer {i} is GstCudaMemory");
        assert_eq!(out.size(), want.len(), "own caps: the data's size");
        let view = devmem::buffer_device_memory(out).expect("the device meta");
        assert_eq!(Some(view.ptr), gstcuda::cuda_device_ptr(mem));
        let got = device_bytes(out);
        assert_eq!(got.len(), want.len());
        assert!(got == &want[..], "buffer {i} differs on the device");
    }
    assert_eq!(field(&run.stats, "bounce-copies"), 0);
    drop(run);

    // The RGBA view into the stock cudadownload, back to host memory, into fhcheck.
    assert!(
        gst::ElementFactory::find("cudadownload").is_some(),
        "nvcodec registered cudadownload with the stand-in driver"
    );
    let packets = 3000u64;
    let p = run::launch(&format!(
        "fhtestsrc num-packets={packets} packet-size=1400 ! fhcudaupload name=up \
         ! identity name=dev signal-handoffs=true \
         ! video/x-raw(memory:CUDAMemory),format=RGBA ! cudadownload \
         ! fhcheck name=check expected-packets={packets}"
    ));
    let seen: Arc<Mutex<(usize, usize)>> = Arc::default();
    let s2 = seen.clone();
    p.by_name("dev")
        .unwrap()
        .connect("handoff", false, move |args| {
            let b = args[1].get::<gst::Buffer>().unwrap();
            let mut s = s2.lock().unwrap();
            s.0 += 1;
            if b.n_memory() == 1
                && gstcuda::is_cuda_memory(b.peek_memory(0))
                && b.size() % gstcuda::VIEW_ROW_BYTES == 0
            {
                s.1 += 1;
            }
            None
        });
    p.set_state(gst::State::Playing).unwrap();
    run::wait_end(&p.bus().unwrap(), Duration::from_secs(60)).unwrap();
    // cudadownload asked for the context; fhcudaupload answers with its own.
    let mut q = gst::query::Context::new("gst.cuda.context");
    assert!(p
        .by_name("up")
        .unwrap()
        .static_pad("src")
        .unwrap()
        .query(&mut q));
    let ctx = q.context().expect("a context");
    assert!(ctx.structure().has_field("gst.cuda.context"), "{ctx:?}");
    let caps = p
        .by_name("dev")
        .unwrap()
        .static_pad("src")
        .unwrap()
        .current_caps()
        .unwrap();
    let stats = p
        .by_name("check")
        .unwrap()
        .property::<gst::Structure>("stats");
    p.set_state(gst::State::Null).unwrap();
    drop(p);
    let (buffers, cuda) = *seen.lock().unwrap();
    assert!(buffers > 0);
    assert_eq!(
        cuda, buffers,
        "every buffer GstCudaMemory, a whole RGBA frame"
    );
    let s = caps.structure(0).unwrap();
    assert_eq!(s.name(), "video/x-raw");
    assert_eq!(s.get::<i32>("width").unwrap(), gstcuda::VIEW_WIDTH as i32);
    assert_eq!(
        field(&stats, "packets"),
        packets,
        "every packet came back intact through cudadownload: {stats}"
    );
    for k in ["lost", "corrupted", "duplicated", "reordered"] {
        assert_eq!(field(&stats, k), 0, "{k}: {stats}");
    }

    let [_, allocated, _, pending] = fixture_stats();
    assert_eq!(pending, 0, "nothing left queued");
    assert_eq!(allocated, 0, "every device block (GstCudaMemory too) freed");
}
