//! The exposition passes `promtool check metrics` (Debian package `prometheus`), lint
//! included: names, units, HELP and TYPE of every known series and of an unknown one.

use firehose_metrics::exposition::{encode, Format, Labelled, Sample, SERIES};
use firehose_metrics::promtool::check_metrics;

/// One `endpoint` entry per address, as a packet source's `endpoints` stats field gives.
fn endpoints(addresses: &[&str]) -> Vec<Labelled> {
    addresses
        .iter()
        .enumerate()
        .map(|(i, a)| Labelled {
            label: "endpoint".into(),
            address: a.to_string(),
            values: vec![("packets".into(), i as u64 + 1), ("bytes".into(), 1000)],
        })
        .collect()
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
            info: vec![
                ("memory".into(), "hugepages".into()),
                ("xdp-mode".into(), "native".into()),
            ],
            labelled: endpoints(&["239.10.0.1:7148", "[ff15::1]:7148", "odd \"one\"\\\n"]),
        },
        Sample {
            pipeline: "pipeline \"two\"".into(),
            element: "rx\\1".into(),
            factory: String::new(),
            values,
            info: Vec::new(),
            labelled: endpoints(&["239.10.0.1:7148"]),
        },
    ];
    let text = encode(&samples, Format::Prometheus);
    if let Err(said) = check_metrics(&text) {
        panic!("promtool: {said}\n{text}");
    }
    assert!(
        text.contains("firehose_endpoint_packets_total{pipeline=\"pipeline0\",element=\"fhudpsrc0\",factory=\"fhudpsrc\",endpoint=\"[ff15::1]:7148\"} 2\n"),
        "{text}"
    );

    // The check can fail: a counter without _total is flagged.
    let said = check_metrics("# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes 1\n")
        .expect_err("promtool accepted a counter without _total");
    assert!(said.contains("_total"), "{said}");
}
