//! `firehose launch`: exit statuses, error messages, signals, pipeline files, statistics.

mod common;

use std::time::Duration;

use common::{assert_contains_all, run, run_code, spawn, temp_path, usage_errors, Running};

const T: Duration = Duration::from_secs(30);

#[test]
fn finite_pipeline_exits_0_with_summary() {
    run_code(
        &["launch", "fakesrc", "num-buffers=10", "!", "fakesink"],
        T,
        0,
    )
    .assert_stdout(&["firehose: end of stream after"]);
}

#[test]
fn quoted_description_works_too() {
    run_code(&["launch", "-q", "fakesrc num-buffers=3 ! fakesink"], T, 0);
}

#[test]
fn unparsable_pipeline_exits_2_and_says_why() {
    usage_errors(&[
        (
            &["launch", "fakesrc ! nosuchelement ! fakesink"],
            &["could not build the pipeline", "nosuchelement"],
        ),
        (
            &[
                "launch",
                "fakesrc ! capsfilter caps=video/x-raw ! audioconvert ! fakesink",
            ],
            &["could not link"],
        ),
    ]);
}

#[test]
fn bad_property_values_exit_2_and_name_the_property() {
    // Out of range: GLib only warns and the property keeps another value; fatal here.
    let out = run_code(
        &[
            "launch",
            "fhtestsrc num-packets=10 packet-size=999999999 ! fakesink",
        ],
        T,
        2,
    );
    out.assert_stderr(&["out of range", "packet-size"]);
    assert!(
        !out.stderr.contains("running"),
        "never started: {}",
        out.all()
    );
    // Not a number at all.
    usage_errors(&[(
        &["launch", "fhtestsrc num-packets=abc ! fakesink"],
        &["num-packets"],
    )]);
}

#[test]
fn usage_errors_exit_2() {
    usage_errors(&[
        (
            &["launch"],
            &["launch needs a pipeline description or -f FILE"],
        ),
        (&["frobnicate"], &[]),
        (&["launch", "--bogus", "fakesrc ! fakesink"], &["--bogus"]),
    ]);
    for help in [&["help"][..], &["--help"], &["-h"]] {
        run_code(help, T, 0).assert_stdout(&["launch", "demo", "bench"]);
    }
}

#[test]
fn launch_help_lists_its_options() {
    for help in [&["launch", "--help"][..], &["help", "launch"]] {
        run_code(help, T, 0).assert_stdout(&["--file", "--quiet", "--eos-timeout", "--dry-run"]);
    }
    let out = run_code(&["--version"], T, 0);
    assert!(out.stdout.starts_with("firehose "), "{}", out.all());
}

#[test]
fn element_error_exits_1_with_the_elements_message() {
    run_code(
        &["launch", "filesrc location=/nonexistent ! fakesink"],
        T,
        1,
    )
    .assert_stderr(&["ERROR from filesrc0:", "/nonexistent"]);
}

#[test]
fn runtime_error_exits_1() {
    // Fails while streaming (not at start): a file that is not a WAV file.
    run_code(
        &[
            "launch",
            "filesrc location=/etc/passwd ! wavparse ! fakesink",
        ],
        T,
        1,
    )
    .assert_stderr(&["ERROR from"]);
}

/// Starts `firehose args…`, waits until its pipeline runs, lets it run `settle`, then
/// sends it `signal`.
fn started_then_signalled(args: &[&str], settle: Duration, signal: libc::c_int) -> Running {
    let mut p = spawn(args);
    assert!(
        p.wait_stderr("running", T),
        "never started: {}",
        p.stderr_now()
    );
    std::thread::sleep(settle);
    p.signal(signal);
    p
}

fn interrupt_live(desc: &str, signal: libc::c_int) {
    started_then_signalled(&["launch", desc], Duration::from_millis(500), signal)
        .finish(Duration::from_secs(15))
        .assert_code(0)
        .assert_stderr(&["sending EOS"])
        .assert_stdout(&["firehose: interrupted, drained to end of stream after"]);
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
    let mut p = started_then_signalled(
        &["launch", "fakesrc ! identity sleep-time=3000000 ! fakesink"],
        Duration::from_millis(200),
        libc::SIGINT,
    );
    assert!(p.wait_stderr("sending EOS", T));
    p.signal(libc::SIGINT);
    p.finish(Duration::from_secs(10))
        .assert_code(0)
        .assert_stdout(&["second interrupt"]);
}

#[test]
fn eos_timeout_forces_stop() {
    started_then_signalled(
        &[
            "launch",
            "--eos-timeout",
            "0.5",
            "fakesrc ! identity sleep-time=3000000 ! fakesink",
        ],
        Duration::from_millis(200),
        libc::SIGINT,
    )
    .finish(Duration::from_secs(10))
    .assert_code(0)
    .assert_stdout(&["stopped: no EOS within 0.5 s of the interrupt"]);
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
    let out = run_code(&["launch", "--dry-run", "-f", p, "N=7", "MAX=128"], T, 0);
    assert_eq!(
        out.stdout.trim(),
        "fakesrc num-buffers=7 sizetype=2 sizemax=128 ! fakesink",
        "{}",
        out.all()
    );
    run_code(&["launch", "-f", p, "N=7"], T, 0).assert_stdout(&["end of stream"]);
    // A key the file does not use is probably a typo: warn, still run.
    run_code(&["launch", "-q", "-f", p, "N=1", "NN=2"], T, 0).assert_stderr(&["NN is not used"]);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pipeline_file_missing_key_is_a_clear_error() {
    let path = temp_path("missing.pipeline");
    std::fs::write(&path, "fakesrc num-buffers=${N} ! fakesink name=${NAME}\n").unwrap();
    let p = path.to_str().unwrap();
    usage_errors(&[
        (
            &["launch", "-f", p],
            &["needs a value for N, NAME", "N=… NAME=…"],
        ),
        (&["launch", "-f", p, "oops"], &["expected KEY=VALUE"]),
        (
            &["launch", "-f", "/nonexistent.pipeline"],
            &["cannot read pipeline file /nonexistent.pipeline"],
        ),
    ]);
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
    out.assert_stderr(&["RATE is not used"])
        .assert_code(0)
        .assert_stdout(&["fhcheck0    12500 packets, 18400000 bytes"]);

    // ~2.5 s at 60 Mb/s: at least two statistics lines with a rate.
    let out = run_code(
        &[
            "launch",
            "fhtestsrc rate=60000000 num-packets=12500 ! fhcheck expected-packets=12500",
        ],
        T,
        0,
    );
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("[    2.0s]"))
        .unwrap_or_else(|| panic!("no statistics line at 2 s\n{}", out.all()));
    assert_contains_all(line, &["fhtestsrc0 0.06 Gb/s", "fhcheck0 0.06 Gb/s"]);
    assert!(!line.contains("lost="), "{line}");
}

#[test]
fn loss_counters_appear_on_the_line_and_in_the_summary() {
    // fhcheck told to expect packets numbered from 100 while the source starts at 0:
    // a checker must flag that as something (lost/reordered/late); whichever counter it
    // uses, it is nonzero and must be shown.
    run_code(
        &[
            "launch",
            "fhtestsrc num-packets=1000 first-seq=0 ! fhcheck expected-packets=2000",
        ],
        T,
        0,
    )
    .assert_stdout(&["lost=1000"]);
}
