//! The user docs stay true to the code: docs/metrics.md lists every series, and the
//! Grafana dashboard's queries parse (`promtool check rules`) and name only real series.

use std::collections::BTreeSet;
use std::process::Command;

use firehose_metrics::exposition::{family_name, labelled_family_name, Kind, SERIES};

fn doc(name: &str) -> String {
    let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every sample name the exposition can produce for the known series.
fn series_names() -> BTreeSet<String> {
    SERIES
        .iter()
        .map(|s| match s.kind {
            Kind::Counter => format!("{}_total", family_name(s.stat)),
            Kind::Gauge => family_name(s.stat),
        })
        .collect()
}

#[test]
fn metrics_md_lists_every_series_with_its_type() {
    let md = doc("metrics.md");
    for s in SERIES {
        let (name, kind) = match s.kind {
            Kind::Counter => (format!("{}_total", family_name(s.stat)), "counter"),
            Kind::Gauge => (family_name(s.stat), "gauge"),
        };
        let row = format!("| `{name}` | {kind} | `{}` |", s.stat);
        assert!(md.contains(&row), "docs/metrics.md lacks the row {row}");
    }
}

#[test]
fn metrics_md_lists_the_endpoint_series_and_label() {
    let md = doc("metrics.md");
    for field in ["packets", "bytes"] {
        let name = format!("{}_total", labelled_family_name("endpoint", field));
        let row = format!("| `{name}` | counter | `endpoints` (`{field}` of each) |");
        assert!(md.contains(&row), "docs/metrics.md lacks the row {row}");
    }
    assert!(
        md.contains("| `endpoint` |"),
        "docs/metrics.md lacks the endpoint label"
    );
}

/// The `"expr"` strings of the dashboard JSON (unescaped).
fn exprs(json: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = json;
    while let Some(i) = rest.find("\"expr\": \"") {
        rest = &rest[i + 9..];
        let mut e = String::new();
        let mut chars = rest.char_indices();
        while let Some((j, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        e.push(n);
                    }
                }
                '"' => {
                    rest = &rest[j + 1..];
                    break;
                }
                c => e.push(c),
            }
        }
        out.push(e);
    }
    out
}

#[test]
fn the_dashboard_queries_parse_and_use_real_series() {
    let json = doc("grafana-firehose-dashboard.json");
    let exprs = exprs(&json);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let known = series_names();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        // Grafana's variables, as Grafana substitutes them.
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$pipeline", ".*");
        // Every literal series name is one the exposition produces.
        for (k, _) in e.match_indices("firehose_") {
            let name: String = e[k..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.ends_with('_') {
                assert!(
                    known.contains(&name),
                    "dashboard uses unknown series {name} in {e}"
                );
            }
        }
        rules.push_str(&format!(
            "      - record: dashboard:expr{i}\n        expr: '{}'\n",
            e.replace('\'', "''")
        ));
    }
    let path = std::env::temp_dir().join(format!("fh-dashboard-rules-{}.yml", std::process::id()));
    std::fs::write(&path, &rules).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool not found: install the Debian package `prometheus`");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
