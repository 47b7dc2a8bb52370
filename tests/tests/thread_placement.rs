//! `cpu` and `rt-priority` of the packet sources: the thread that receives (GStreamer's
//! streaming thread, which pushes every batch) runs on the CPU asked for, at the
//! priority asked for; a CPU the process may not use is refused at start, naming the
//! CPUs it may.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use firehose_core::thread::Placement;
use firehose_testkit::run;
use gst::prelude::*;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// What the streaming thread of `fhtestsrc <props>` saw while pushing: its CPUs and
/// its scheduling policy, read in a pad probe (which runs on that thread) at each
/// buffer.
fn streaming_thread_of(props: &str) -> Vec<(Vec<u32>, i32)> {
    let pipeline = run::launch(&format!(
        "fhtestsrc name=src num-packets=256 batch-size=32 {props} ! fakesink"
    ));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let pad = pipeline.by_name("src").unwrap().static_pad("src").unwrap();
    let s = seen.clone();
    pad.add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
        move |_, _| {
            // SAFETY: reads the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            s.lock()
                .unwrap()
                .push((Placement::current_cpus().unwrap(), policy));
            gst::PadProbeReturn::Ok
        },
    );
    run::play_to_end(&pipeline, Duration::from_secs(30)).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8, "256 packets in batches of 32");
    seen
}

#[test]
fn the_receive_thread_runs_on_the_cpu_asked_for() {
    init();
    let allowed = Placement::allowed_cpus().unwrap();
    for &cpu in &allowed {
        for (cpus, _) in streaming_thread_of(&format!("cpu={cpu}")) {
            assert_eq!(cpus, [cpu]);
        }
    }
    // Unpinned: wherever the process may run.
    for (cpus, policy) in streaming_thread_of("") {
        assert_eq!(cpus, allowed);
        assert_eq!(policy, libc::SCHED_OTHER);
    }
}

#[test]
fn a_real_time_priority_is_applied_or_refused_naming_cap_sys_nice() {
    init();
    let pipeline = run::launch("fhtestsrc name=src num-packets=64 rt-priority=1 ! fakesink");
    let policy = Arc::new(Mutex::new(None));
    let p = policy.clone();
    let pad = pipeline.by_name("src").unwrap().static_pad("src").unwrap();
    pad.add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
        move |_, _| {
            // SAFETY: reads the calling thread's policy.
            *p.lock().unwrap() = Some(unsafe { libc::sched_getscheduler(0) });
            gst::PadProbeReturn::Ok
        },
    );
    match run::play_to_end(&pipeline, Duration::from_secs(30)) {
        Ok(()) => assert_eq!(*policy.lock().unwrap(), Some(libc::SCHED_FIFO)),
        Err(e) => {
            assert!(e.contains("CAP_SYS_NICE"), "{e}");
            assert_eq!(
                *policy.lock().unwrap(),
                None,
                "nothing pushed after a refusal"
            );
        }
    }
}

#[test]
fn a_cpu_the_process_may_not_use_is_a_start_error_on_every_source() {
    init();
    let allowed = Placement::allowed_cpus().unwrap();
    let cpu = (*allowed.last().unwrap() + 1).to_string();
    for factory in ["fhtestsrc", "fhudpsrc", "fhpcapsrc", "fhxdpsrc", "fhibvsrc"] {
        let e = run::start_error(factory, &[("cpu", &cpu)]);
        assert!(
            e.contains(&format!("cpu {cpu} cannot be used")) && e.contains("may run on CPUs"),
            "{factory}: {e}"
        );
    }
}
