//! `firehose demo`: the loopback self-check passes, and fails loudly when packets are
//! missing.

mod common;

use std::time::Duration;

use common::{run_code, usage_errors};

#[test]
fn demo_one_second_passes() {
    run_code(&["demo", "--seconds", "1"], Duration::from_secs(60), 0)
        .assert_stdout(&["firehose demo: PASS: all 16984 packets", "fhcheck lost=0"]);
}

#[test]
fn demo_rejects_bad_options() {
    usage_errors(&[
        (&["demo", "--rate", "2"], &["did you mean 2G"]),
        (&["demo", "--seconds"], &["--seconds", "value"]),
    ]);
}
