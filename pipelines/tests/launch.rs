//! `firehose launch`: exit statuses, error messages, signals, pipeline files, statistics.

mod common;

use std::time::Duration;

use common::{run, spawn, temp_path};

const T: Duration = Duration::from_secs(30);

#[test]
fn finite_pipeline_exits_0_with_summary() {
    let out = run(&["launch", "fakesrc", "num-buffers=10", "!", "fakesink"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(
        out.stdout.contains("firehose: end of stream after"),
        "{}",
        out.all()
    );
}

#[test]
fn quoted_description_works_too() {
    let out = run(&["launch", "-q", "fakesrc num-buffers=3 ! fakesink"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
}

#[test]
fn unparsable_pipeline_exits_2_and_says_why() {
    let out = run(&["launch", "fakesrc ! nosuchelement ! fakesink"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("could not build the pipeline"),
        "{}",
        out.all()
    );
    assert!(out.stderr.contains("nosuchelement"), "{}", out.all());

    let out = run(
        &[
            "launch",
            "fakesrc ! capsfilter caps=video/x-raw ! audioconvert ! fakesink",
        ],
        T,
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("could not link"), "{}", out.all());
}

#[test]
fn bad_property_values_exit_2_and_name_the_property() {
    // Out of range: GLib only warns and the property keeps another value; fatal here.
    let out = run(
        &[
            "launch",
            "fhtestsrc num-packets=10 packet-size=999999999 ! fakesink",
        ],
        T,
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("out of range") && out.stderr.contains("packet-size"),
        "{}",
        out.all()
    );
    assert!(
        !out.stderr.contains("running"),
        "never started: {}",
        out.all()
    );
    // Not a number at all.
    let out = run(&["launch", "fhtestsrc num-packets=abc ! fakesink"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("num-packets"), "{}", out.all());
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["launch"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr
            .contains("launch needs a pipeline description or -f FILE"),
        "{}",
        out.all()
    );
    let out = run(&["frobnicate"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    let out = run(&["launch", "--bogus", "fakesrc ! fakesink"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("--bogus"), "{}", out.all());
    for help in [&["help"][..], &["--help"], &["-h"]] {
        let out = run(help, T);
        assert_eq!(out.code, Some(0), "{}", out.all());
        for command in ["launch", "demo", "bench"] {
            assert!(out.stdout.contains(command), "{command}\n{}", out.all());
        }
    }
}

#[test]
fn launch_help_lists_its_options() {
    for help in [&["launch", "--help"][..], &["help", "launch"]] {
        let out = run(help, T);
        assert_eq!(out.code, Some(0), "{}", out.all());
        for option in ["--file", "--quiet", "--eos-timeout", "--dry-run"] {
            assert!(out.stdout.contains(option), "{option}\n{}", out.all());
        }
    }
    let out = run(&["--version"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.starts_with("firehose "), "{}", out.all());
}

#[test]
fn element_error_exits_1_with_the_elements_message() {
    let out = run(&["launch", "filesrc location=/nonexistent ! fakesink"], T);
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("ERROR from filesrc0:"), "{}", out.all());
    assert!(out.stderr.contains("/nonexistent"), "{}", out.all());
}

#[test]
fn runtime_error_exits_1() {
    // Fails while streaming (not at start): a file that is not a WAV file.
    let out = run(
        &[
            "launch",
            "filesrc location=/etc/passwd ! wavparse ! fakesink",
        ],
        T,
    );
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("ERROR from"), "{}", out.all());
}

fn interrupt_live(desc: &str, signal: libc::c_int) {
    let mut p = spawn(&["launch", desc]);
    assert!(p.wait_stderr("running", T), "never started");
    std::thread::sleep(Duration::from_millis(500));
    p.signal(signal);
    let out = p.finish(Duration::from_secs(15));
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stderr.contains("sending EOS"), "{}", out.all());
    assert!(
        out.stdout
            .contains("firehose: interrupted, drained to end of stream after"),
        "{}",
        out.all()
    );
}

#[test]
fn sigint_on_live_pipeline_drains_and_exits_0() {
    interrupt_live("fakesrc is-live=true ! fakesink", libc::SIGINT);
}

#[test]
fn sigterm_on_idle_udp_receiver_drains_and_exits_0() {
    interrupt_live("udpsrc port=0 ! fakesink", libc::SIGTERM);
}

#[test]
fn second_interrupt_forces_stop() {
    // identity sleeps 3 s per buffer, so EOS waits behind it.
    let mut p = spawn(&["launch", "fakesrc ! identity sleep-time=3000000 ! fakesink"]);
    assert!(p.wait_stderr("running", T));
    std::thread::sleep(Duration::from_millis(200));
    p.signal(libc::SIGINT);
    assert!(p.wait_stderr("sending EOS", T));
    p.signal(libc::SIGINT);
    let out = p.finish(Duration::from_secs(10));
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("second interrupt"), "{}", out.all());
}

#[test]
fn eos_timeout_forces_stop() {
    let mut p = spawn(&[
        "launch",
        "--eos-timeout",
        "0.5",
        "fakesrc ! identity sleep-time=3000000 ! fakesink",
    ]);
    assert!(p.wait_stderr("running", T));
    std::thread::sleep(Duration::from_millis(200));
    p.signal(libc::SIGINT);
    let out = p.finish(Duration::from_secs(10));
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(
        out.stdout
            .contains("stopped: no EOS within 0.5 s of the interrupt"),
        "{}",
        out.all()
    );
}

#[test]
fn pipeline_file_substitutes_keys_and_defaults() {
    let path = temp_path("subst.pipeline");
    std::fs::write(
        &path,
        "# a comment with ${NOT_A_KEY}\nfakesrc num-buffers=${N}\n  sizetype=${SIZETYPE:-2} sizemax=${MAX:-64}\n! fakesink\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let out = run(&["launch", "--dry-run", "-f", p, "N=7", "MAX=128"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert_eq!(
        out.stdout.trim(),
        "fakesrc num-buffers=7 sizetype=2 sizemax=128 ! fakesink",
        "{}",
        out.all()
    );
    let out = run(&["launch", "-f", p, "N=7"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("end of stream"), "{}", out.all());
    // A key the file does not use is probably a typo: warn, still run.
    let out = run(&["launch", "-q", "-f", p, "N=1", "NN=2"], T);
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stderr.contains("NN is not used"), "{}", out.all());
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pipeline_file_missing_key_is_a_clear_error() {
    let path = temp_path("missing.pipeline");
    std::fs::write(&path, "fakesrc num-buffers=${N} ! fakesink name=${NAME}\n").unwrap();
    let out = run(&["launch", "-f", path.to_str().unwrap()], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("needs a value for N, NAME"),
        "{}",
        out.all()
    );
    assert!(out.stderr.contains("N=… NAME=…"), "{}", out.all());
    let out = run(&["launch", "-f", path.to_str().unwrap(), "oops"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("expected KEY=VALUE"), "{}", out.all());
    let out = run(&["launch", "-f", "/nonexistent.pipeline"], T);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr
            .contains("cannot read pipeline file /nonexistent.pipeline"),
        "{}",
        out.all()
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn shipped_pipeline_files_build() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "pipeline") {
            let out = run(&["launch", "--dry-run", "-f", path.to_str().unwrap()], T);
            assert_eq!(out.code, Some(0), "{}: {}", path.display(), out.all());
            n += 1;
        }
    }
    assert!(n >= 4, "expected the shipped *.pipeline files, found {n}");
}

#[test]
fn firehose_elements_show_rates_and_totals() {
    let out = run(
        &[
            "launch",
            "-f",
            "pipelines/selftest.pipeline",
            "PACKETS=12500",
            "RATE=60000000",
        ],
        T,
    );
    // RATE is not a key of selftest.pipeline: warned about, not fatal.
    assert!(out.stderr.contains("RATE is not used"), "{}", out.all());
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(
        out.stdout
            .contains("fhcheck0    12500 packets, 18400000 bytes"),
        "{}",
        out.all()
    );

    // ~2.5 s at 60 Mb/s: at least two statistics lines with a rate.
    let out = run(
        &[
            "launch",
            "fhtestsrc rate=60000000 num-packets=12500 ! fhcheck expected-packets=12500",
        ],
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("[    2.0s]"))
        .unwrap_or_else(|| panic!("no statistics line at 2 s\n{}", out.all()));
    assert!(line.contains("fhtestsrc0 0.06 Gb/s"), "{line}");
    assert!(line.contains("fhcheck0 0.06 Gb/s"), "{line}");
    assert!(!line.contains("lost="), "{line}");
}

#[test]
fn loss_counters_appear_on_the_line_and_in_the_summary() {
    // fhcheck told to expect packets numbered from 100 while the source starts at 0:
    // a checker must flag that as something (lost/reordered/late); whichever counter it
    // uses, it is nonzero and must be shown.
    let out = run(
        &[
            "launch",
            "fhtestsrc num-packets=1000 first-seq=0 ! fhcheck expected-packets=2000",
        ],
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("lost=1000"), "{}", out.all());
}
