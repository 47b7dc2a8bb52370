//! `firehose demo`: the loopback self-check passes, and fails loudly when packets are
//! missing.

mod common;

use std::time::Duration;

use common::run;

#[test]
fn demo_one_second_passes() {
    let out = run(&["demo", "--seconds", "1"], Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(
        out.stdout
            .contains("firehose demo: PASS: all 16984 packets"),
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("fhcheck lost=0"), "{}", out.all());
}

#[test]
fn demo_rejects_bad_options() {
    let out = run(&["demo", "--rate", "2"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("did you mean 2G"), "{}", out.all());
    let out = run(&["demo", "--seconds"], Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(
        out.stderr.contains("--seconds") && out.stderr.contains("value"),
        "{}",
        out.all()
    );
}
