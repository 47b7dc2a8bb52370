//! A peer process for the shared-memory transport's tests and for trying it by hand.
//!
//! - `fhshm-peer read SOCKET [--hold-ms N] [--max N]` (`@name`: abstract): a consumer without GStreamer (the
//!   crate's client engine): reads buffers until EOS (or `--max` buffers), checks that
//!   each byte equals its offset in the stream modulo 251 when `--check` is given,
//!   holds each buffer `--hold-ms` before releasing it, and prints
//!   `buffers=N bytes=N missed=N end=eos|closed|max|error:...`.
//! - `fhshm-peer serve SOCKET SIZE COUNT [--on-full block|drop]`: a producer: `COUNT`
//!   buffers of `SIZE` bytes (the byte pattern above) through `fhshmsink`, after the
//!   first consumer attached, then EOS; `COUNT` 0 runs until killed.

use std::time::{Duration, Instant};

use firehose_shm::client::{Client, ClientError, Event};
use firehose_shm::wire::Address;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn read(path: &str, args: &[String]) -> i32 {
    let hold = Duration::from_millis(arg(args, "--hold-ms", 0));
    let max: u64 = arg(args, "--max", u64::MAX);
    let check = args.iter().any(|a| a == "--check");
    // `@name`: a name in the abstract namespace.
    let address = match path.strip_prefix('@') {
        Some(name) => Address::new(name, true),
        None => Address::new(path, false),
    };
    let mut client = match Client::connect(&address) {
        Ok(c) => c,
        Err(e) => {
            println!("buffers=0 bytes=0 missed=0 end=error:connect {e}");
            return 2;
        }
    };
    let (mut buffers, mut bytes, mut missed) = (0u64, 0u64, 0u64);
    let mut expect = 0u64;
    let end = loop {
        if buffers >= max {
            break "max".to_string();
        }
        match client.wait_event(1000) {
            Ok(Some(Event::Buffer(v))) => {
                missed += v.msg.missed;
                if check {
                    if v.msg.missed > 0 {
                        // Resynchronise on the first byte after a gap.
                        expect = u64::from(v.as_ref().first().copied().unwrap_or(0));
                    }
                    for &b in v.as_ref() {
                        if u64::from(b) != expect % 251 {
                            println!("corrupt byte at {bytes}");
                            return 3;
                        }
                        expect += 1;
                    }
                }
                buffers += 1;
                bytes += v.msg.len;
                if !hold.is_zero() {
                    std::thread::sleep(hold);
                }
            }
            Ok(Some(Event::Eos)) => break "eos".into(),
            Ok(Some(Event::Error(e))) => break format!("error:{e}"),
            Ok(Some(Event::Caps(_))) | Ok(None) => {}
            Err(ClientError::Closed) => break "closed".into(),
            Err(e) => break format!("error:{e}"),
        }
    };
    let (packets, batches) = client.packet_counts();
    println!(
        "buffers={buffers} bytes={bytes} missed={missed} end={end} packets={packets} \
         batches={batches}"
    );
    0
}

fn serve(path: &str, size: usize, count: u64, args: &[String]) -> i32 {
    use gst::prelude::*;
    gst::init().expect("gst init");
    firehose_core::meta::message::register();
    for (name, t) in [
        ("fhshmsink", firehose_shm::shmsink::ShmSink::static_type()),
        ("fhshmsrc", firehose_shm::shmsrc::ShmSrc::static_type()),
    ] {
        gst::Element::register(None, name, gst::Rank::NONE, t).expect("register");
    }
    let on_full: String = arg(args, "--on-full", "block".to_string());
    // `appsrc` through its signals: no dependency on gstreamer-app for one element.
    let appsrc = gst::ElementFactory::make("appsrc")
        .property("is-live", true)
        .property_from_str("format", "time")
        .build()
        .expect("appsrc (gstreamer1.0-plugins-base)");
    let sink = gst::ElementFactory::make("fhshmsink")
        .property("socket-path", path)
        .property_from_str("on-full", &on_full)
        .build()
        .expect("fhshmsink");
    let pipeline = gst::Pipeline::new();
    pipeline.add_many([&appsrc, &sink]).expect("add");
    appsrc.link(&sink).expect("link");
    pipeline.set_state(gst::State::Playing).expect("playing");
    // Wait for a consumer, so that a test sees every buffer.
    let start = Instant::now();
    while sink
        .property::<gst::Structure>("stats")
        .get::<u64>("consumers")
        != Ok(1)
    {
        if start.elapsed() > Duration::from_secs(10) {
            eprintln!("no consumer in 10 s");
            return 2;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut offset = 0u64;
    let mut i = 0u64;
    while count == 0 || i < count {
        let data: Vec<u8> = (0..size as u64)
            .map(|k| ((offset + k) % 251) as u8)
            .collect();
        offset += size as u64;
        let mut b = gst::Buffer::from_mut_slice(data);
        b.get_mut()
            .expect("new")
            .set_pts(gst::ClockTime::from_nseconds(i));
        if appsrc.emit_by_name::<gst::FlowReturn>("push-buffer", &[&b]) != gst::FlowReturn::Ok {
            break;
        }
        i += 1;
    }
    let _ = appsrc.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    let bus = pipeline.bus().expect("bus");
    let _ = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(30),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let stats = sink.property::<gst::Structure>("stats");
    println!("{stats}");
    let _ = pipeline.set_state(gst::State::Null);
    0
}

fn main() {
    // A test that fails (or is killed) must not leave its peer running.
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let args: Vec<String> = std::env::args().collect();
    let code = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("read"), Some(p)) => read(p, &args[3..]),
        (Some("serve"), Some(p)) => {
            let size = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4096);
            let count = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(100);
            serve(p, size, count, &args[5..])
        }
        _ => {
            eprintln!("usage: fhshm-peer read SOCKET [--hold-ms N] [--max N] [--check] | serve SOCKET SIZE COUNT [--on-full block|drop]");
            2
        }
    };
    std::process::exit(code);
}
