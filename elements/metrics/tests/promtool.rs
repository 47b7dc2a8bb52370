//! The exposition passes `promtool check metrics` (Debian package `prometheus`), lint
//! included: names, units, HELP and TYPE of every known series and of an unknown one.

use std::io::Write;
use std::process::{Command, Stdio};

use firehose_metrics::exposition::{encode, Format, Sample, SERIES};

fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool not found: install the Debian package `prometheus` (scripts/setup test does)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn every_series_passes_promtool() {
    let mut values: Vec<(String, u64)> = SERIES
        .iter()
        .enumerate()
        .map(|(i, s)| (s.stat.to_string(), i as u64 * 1000 + 7))
        .collect();
    // Fields no table knows about still make valid series.
    values.push(("some-new-thing".into(), 3));
    values.push(("some-wait-ms".into(), 1500));
    let samples = vec![
        Sample {
            pipeline: "pipeline0".into(),
            element: "fhudpsrc0".into(),
            factory: "fhudpsrc".into(),
            values: values.clone(),
        },
        Sample {
            pipeline: "pipeline \"two\"".into(),
            element: "rx\\1".into(),
            factory: String::new(),
            values,
        },
    ];
    let text = encode(&samples, Format::Prometheus);
    let (ok, said) = promtool(&text);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{text}");

    // The check can fail: a counter without _total is flagged.
    let (ok, said) = promtool("# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes 1\n");
    assert!(!ok, "promtool accepted a counter without _total: {said}");
}
