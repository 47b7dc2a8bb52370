//! The OpenMetrics (and Prometheus 0.0.4) text exposition of Firehose counters.
//!
//! No GStreamer types here: a [`Sample`] is the plain `(name, value)` list of one
//! element's `firehose-stats` structure, with the labels that say where it came from,
//! and its per-endpoint breakdown ([`Labelled`]), exposed with an `endpoint` label.
//! Which names are gauges, and the help text of each series, live in [`SERIES`], the one
//! table that decides types; any name not in it is a counter, because every Firehose
//! statistic not listed there counts events since the element started.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use firehose_core::endpoint::MAX_ENDPOINTS;

/// Prefix of every series name.
pub const PREFIX: &str = "firehose_";

/// Content type of the OpenMetrics 1.0 text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus 0.0.4 text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0: family `firehose_packets`, sample `firehose_packets_total`, ends
    /// with `# EOF`. What Prometheus asks for first.
    OpenMetrics,
    /// Prometheus 0.0.4: the family is named after the sample (`firehose_packets_total`),
    /// no `# EOF`. For clients that do not ask for OpenMetrics (curl, older scrapers).
    Prometheus,
}

impl Format {
    /// The format to answer with for an HTTP `Accept` header (OpenMetrics when asked for).
    pub fn negotiate(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Self::OpenMetrics,
            _ => Self::Prometheus,
        }
    }

    /// The HTTP content type of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Self::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }
}

/// The statistics with a fixed meaning, declared once in `firehose_core::stats`
/// (their names, kinds and help).
pub use firehose_core::stats::{Kind, Stat as Series, CATALOGUE as SERIES};

/// The catalogue entry of stats field `stat`, if it is a known one.
pub fn series(stat: &str) -> Option<&'static Series> {
    firehose_core::stats::stat(stat)
}

/// The type of stats field `stat`: a gauge only when [`SERIES`] says so.
pub fn kind_of(stat: &str) -> Kind {
    series(stat).map_or(Kind::Counter, |s| s.kind)
}

/// Time units Firehose statistics carry in their names, and how many make a second.
/// Prometheus wants base units, so `pacing-slip-ns` is exposed as
/// `firehose_pacing_slip_seconds_total`, its value divided by 1e9.
const TIME_UNITS: &[(&str, f64)] = &[("-ns", 1e9), ("-us", 1e6), ("-ms", 1e3)];

/// The stats field without its time unit, and the unit's divisor (1 when it has none).
fn split_unit(stat: &str) -> (&str, f64) {
    for (suffix, per_second) in TIME_UNITS {
        if let Some(base) = stat.strip_suffix(suffix) {
            return (base, *per_second);
        }
    }
    (stat, 1.0)
}

/// The family name of stats field `stat`: `firehose_` + the name with every character
/// outside `[a-zA-Z0-9_]` made `_` ("drops-kernel" → "firehose_drops_kernel"), a time
/// unit made `_seconds`. A counter's family never ends in `_total` itself (OpenMetrics
/// adds it to the sample), unless without it it would be another statistic's family:
/// `consumers-total` (a counter) stays `firehose_consumers_total` beside the gauge
/// `consumers` (`firehose_consumers`), whose family it would otherwise share.
pub fn family_name(stat: &str) -> String {
    let (base, per_second) = split_unit(stat);
    let mut name = String::with_capacity(PREFIX.len() + stat.len() + 8);
    name.push_str(PREFIX);
    name.extend(
        base.chars()
            .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' }),
    );
    if per_second != 1.0 {
        name.push_str("_seconds");
    }
    let clashes = stat
        .strip_suffix("-total")
        .is_some_and(|s| series(s).is_some());
    if kind_of(stat) == Kind::Counter && !clashes {
        if let Some(base) = name.strip_suffix("_total") {
            name.truncate(base.len());
        }
    }
    name
}

/// Writes the value of field `stat` in the family's unit: integers as they are, times
/// in seconds.
fn write_value(stat: &str, value: u64, out: &mut String) {
    let (_, per_second) = split_unit(stat);
    if per_second == 1.0 {
        let _ = write!(out, "{value}");
    } else {
        // Rust prints the shortest exact decimal, never an exponent: valid in both formats.
        let _ = write!(out, "{}", value as f64 / per_second);
    }
}

/// The counters of one element at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Name of the top-level pipeline (or bin) holding the element.
    pub pipeline: String,
    /// The element's name.
    pub element: String,
    /// The element's factory (`fhudpsrc`…), empty when unknown.
    pub factory: String,
    /// `(stats field, value)`, integer fields only.
    pub values: Vec<(String, u64)>,
    /// `(stats field, text)`: the text fields (`memory=system`, `xdp-mode=native`),
    /// exported as labels of one `firehose_element_info` sample.
    pub info: Vec<(String, String)>,
    /// The entries of per-address breakdowns (a packet source's `endpoints`), each
    /// exported with its address as a label beside the element's own totals.
    pub labelled: Vec<Labelled>,
}

/// One entry of a per-address breakdown in a stats structure: one endpoint of a packet
/// source (an `endpoint` structure of its `endpoints` array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// The entry's kind (the structure's name, `endpoint`): the label that carries its
    /// address, and the prefix of its families (`firehose_endpoint_packets`).
    pub label: String,
    /// The entry's address, the label's value (`239.10.0.1:7148`, `[::1]:7148`).
    pub address: String,
    /// `(field, value)`: the entry's integer fields (`packets`, `bytes`).
    pub values: Vec<(String, u64)>,
}

/// Family of the per-element info sample (OpenMetrics type `info`).
pub const INFO_FAMILY: &str = "firehose_element";

/// Label names the info sample may not take: the identity labels, and Prometheus's.
fn reserved_label(name: &str) -> bool {
    matches!(name, "pipeline" | "element" | "factory") || name.starts_with("__")
}

/// A stats field as a label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn label_name(field: &str) -> String {
    let mut name: String = field
        .chars()
        .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Writes `{pipeline="…",element="…",factory="…"[,extra…]}`.
fn write_labels(s: &Sample, extra: &[(String, &str)], out: &mut String) {
    out.push_str("{pipeline=\"");
    escape_label(&s.pipeline, out);
    out.push_str("\",element=\"");
    escape_label(&s.element, out);
    out.push_str("\",factory=\"");
    escape_label(&s.factory, out);
    out.push('"');
    for (name, value) in extra {
        out.push(',');
        out.push_str(name);
        out.push_str("=\"");
        escape_label(value, out);
        out.push('"');
    }
    out.push('}');
}

/// Writes the info family: one sample (value 1) per element that has text fields.
fn write_info(samples: &[&Sample], format: Format, out: &mut String) {
    let with_info: Vec<&&Sample> = samples.iter().filter(|s| !s.info.is_empty()).collect();
    if with_info.is_empty() {
        return;
    }
    let sample_name = format!("{INFO_FAMILY}_info");
    let (header, type_name) = match format {
        Format::OpenMetrics => (INFO_FAMILY, "info"),
        // 0.0.4 has no info type: the convention is a gauge named *_info, always 1.
        Format::Prometheus => (sample_name.as_str(), "gauge"),
    };
    let _ = writeln!(out, "# TYPE {header} {type_name}");
    let _ = writeln!(
        out,
        "# HELP {header} Text settings an element reports in its stats (memory, modes)"
    );
    for s in with_info {
        let mut extra: Vec<(String, &str)> = Vec::new();
        for (field, text) in &s.info {
            let name = label_name(field);
            if !reserved_label(&name) && !extra.iter().any(|(n, _)| *n == name) {
                extra.push((name, text));
            }
        }
        out.push_str(&sample_name);
        write_labels(s, &extra, out);
        out.push_str(" 1\n");
    }
}

/// Escapes a label value: backslash, double quote and newline, as both formats require.
fn escape_label(v: &str, out: &mut String) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

/// Escapes a HELP text (backslash and newline; OpenMetrics also escapes quotes).
fn escape_help(v: &str, out: &mut String) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

/// The family of field `field` of a per-address breakdown whose entries are named
/// `label`: `firehose_` + the label + the field's own family (`endpoint`, `packets` →
/// `firehose_endpoint_packets`), so that the breakdown sits beside the element's total
/// (`firehose_packets`) rather than in it, where `sum()` would count every packet twice.
pub fn labelled_family_name(label: &str, field: &str) -> String {
    let field_family = family_name(field);
    let mut name = String::with_capacity(field_family.len() + label.len() + 1);
    name.push_str(PREFIX);
    name.push_str(&label_name(label));
    name.push('_');
    name.push_str(&field_family[PREFIX.len()..]);
    name
}

/// One sample of a family: which element, the breakdown label's value if any, the value.
struct Point<'a> {
    sample: usize,
    address: Option<&'a str>,
    value: u64,
}

/// The samples of one family, and what they are of: the stats field, and for a
/// breakdown the raw label (to tell apart sources that map onto one family name).
struct Family<'a> {
    label: Option<&'a str>,
    field: &'a str,
    points: Vec<Point<'a>>,
}

impl<'a> Family<'a> {
    /// Adds a point when the family is of `label`/`field`; a different source that maps
    /// onto the same name ("a-b" and "a_b") is left out, as it would repeat a series.
    fn add(&mut self, label: Option<&'a str>, field: &'a str, point: Point<'a>) {
        if self.label == label && self.field == field {
            self.points.push(point);
        }
    }
}

/// Writes `samples` as a text exposition: one family per stats field (sorted by name),
/// `# TYPE` and `# HELP` once per family, one sample per element with `pipeline`,
/// `element` and `factory` labels; a breakdown ([`Labelled`]) adds one family per field
/// with one sample per entry, labelled with its address (at most [`MAX_ENDPOINTS`] entries
/// per element and label). An element listed twice (same pipeline and name), or an entry
/// listed twice in one element, keeps its first values: a series may appear only once.
pub fn encode(samples: &[Sample], format: Format) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut unique: Vec<&Sample> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        if !seen.insert((&s.pipeline, &s.element)) {
            continue;
        }
        unique.push(s);
        for (field, value) in &s.values {
            let point = Point {
                sample: i,
                address: None,
                value: *value,
            };
            families
                .entry(family_name(field))
                .or_insert_with(|| Family {
                    label: None,
                    field,
                    points: Vec::new(),
                })
                .add(None, field, point);
        }
        let mut entries: HashSet<(&str, &str)> = HashSet::new();
        let mut per_label: HashMap<&str, usize> = HashMap::new();
        for entry in &s.labelled {
            if reserved_label(&label_name(&entry.label))
                || !entries.insert((&entry.label, &entry.address))
            {
                continue;
            }
            let n = per_label.entry(&entry.label).or_default();
            *n += 1;
            if *n > MAX_ENDPOINTS {
                continue;
            }
            for (field, value) in &entry.values {
                let point = Point {
                    sample: i,
                    address: Some(&entry.address),
                    value: *value,
                };
                let label = Some(entry.label.as_str());
                families
                    .entry(labelled_family_name(&entry.label, field))
                    .or_insert_with(|| Family {
                        label,
                        field,
                        points: Vec::new(),
                    })
                    .add(label, field, point);
            }
        }
    }
    let mut out = String::new();
    write_info(&unique, format, &mut out);
    for (family, f) in &families {
        let kind = kind_of(f.field);
        let (type_name, sample_name) = match (kind, format) {
            (Kind::Gauge, _) => ("gauge", family.clone()),
            (Kind::Counter, _) => ("counter", format!("{family}_total")),
        };
        // 0.0.4 parsers match TYPE to the sample name, so there the family carries _total.
        let header = match format {
            Format::OpenMetrics => family.as_str(),
            Format::Prometheus => sample_name.as_str(),
        };
        let mut help = series(f.field)
            .map(|s| s.help.to_string())
            .unwrap_or_else(|| format!("Firehose statistic {}", f.field));
        if let Some(label) = f.label {
            let _ = write!(help, ", per {label}");
        }
        let _ = writeln!(out, "# TYPE {header} {type_name}");
        out.push_str("# HELP ");
        out.push_str(header);
        out.push(' ');
        escape_help(&help, &mut out);
        out.push('\n');
        let label_name = f.label.map(label_name);
        for p in &f.points {
            out.push_str(&sample_name);
            match (&label_name, p.address) {
                (Some(name), Some(address)) => {
                    write_labels(&samples[p.sample], &[(name.clone(), address)], &mut out)
                }
                _ => write_labels(&samples[p.sample], &[], &mut out),
            }
            out.push(' ');
            write_value(f.field, p.value, &mut out);
            out.push('\n');
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pipeline: &str, element: &str, values: &[(&str, u64)]) -> Sample {
        Sample {
            pipeline: pipeline.into(),
            element: element.into(),
            factory: "fhudpsrc".into(),
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            info: Vec::new(),
            labelled: Vec::new(),
        }
    }

    fn endpoint(address: &str, packets: u64, bytes: u64) -> Labelled {
        Labelled {
            label: "endpoint".into(),
            address: address.into(),
            values: vec![("packets".into(), packets), ("bytes".into(), bytes)],
        }
    }

    #[test]
    fn endpoints_are_labelled_series_beside_the_totals() {
        let mut s = sample("p", "rx", &[("packets", 30), ("bytes", 3000)]);
        s.labelled = vec![
            endpoint("239.10.0.1:7148", 10, 1000),
            endpoint("[::1]:7148", 20, 2000),
            // Listed twice in one element: the first values only.
            endpoint("239.10.0.1:7148", 99, 99),
            // An entry kind that would override an identity label is left out.
            Labelled {
                label: "element".into(),
                address: "spoof".into(),
                values: vec![("packets".into(), 5)],
            },
        ];
        let mut other = sample("p", "rx2", &[("packets", 1)]);
        other.labelled = vec![endpoint("a\"b\\c\nd", 1, 2)];
        let text = encode(&[s.clone(), other.clone()], Format::OpenMetrics);
        for want in [
            "# TYPE firehose_endpoint_packets counter\n\
             # HELP firehose_endpoint_packets Datagrams or packets delivered downstream, per endpoint\n\
             firehose_endpoint_packets_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\",endpoint=\"239.10.0.1:7148\"} 10\n\
             firehose_endpoint_packets_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\",endpoint=\"[::1]:7148\"} 20\n\
             firehose_endpoint_packets_total{pipeline=\"p\",element=\"rx2\",factory=\"fhudpsrc\",endpoint=\"a\\\"b\\\\c\\nd\"} 1\n",
            "# TYPE firehose_endpoint_bytes counter\n",
            "firehose_endpoint_bytes_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\",endpoint=\"[::1]:7148\"} 2000\n",
            // The element's totals stay as they are, unlabelled.
            "firehose_packets_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\"} 30\n",
            "firehose_bytes_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\"} 3000\n",
        ] {
            assert!(text.contains(want), "lacks {want}\n{text}");
        }
        assert_eq!(text.matches("# TYPE firehose_endpoint_packets ").count(), 1);
        assert_eq!(text.matches("# HELP firehose_endpoint_bytes ").count(), 1);
        assert_eq!(text.matches("firehose_endpoint_packets_total{").count(), 3);
        assert!(!text.contains("} 99\n"), "{text}");
        assert!(!text.contains("spoof"), "{text}");
        assert!(!text.contains("firehose_element_packets"), "{text}");
        assert!(text.ends_with("# EOF\n"));

        // Prometheus 0.0.4: the family carries _total, the samples are the same.
        let text = encode(&[s, other], Format::Prometheus);
        assert!(
            text.contains(
                "# TYPE firehose_endpoint_packets_total counter\n\
                 # HELP firehose_endpoint_packets_total Datagrams or packets delivered downstream, per endpoint\n\
                 firehose_endpoint_packets_total{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\",endpoint=\"239.10.0.1:7148\"} 10\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE firehose_endpoint_bytes_total counter\n"));
        assert!(!text.contains("EOF"));
        assert_eq!(
            labelled_family_name("endpoint", "packets"),
            "firehose_endpoint_packets"
        );
        assert_eq!(
            labelled_family_name("endpoint", "pacing-slip-ns"),
            "firehose_endpoint_pacing_slip_seconds"
        );
    }

    #[test]
    fn at_most_max_endpoints_per_element() {
        let mut s = sample("p", "rx", &[]);
        s.labelled = (0..MAX_ENDPOINTS + 5)
            .map(|i| endpoint(&format!("10.0.{}.{}:1", i / 256, i % 256), 1, 1))
            .collect();
        let text = encode(&[s], Format::Prometheus);
        assert_eq!(
            text.matches("firehose_endpoint_packets_total{").count(),
            MAX_ENDPOINTS
        );
        assert!(text.contains("endpoint=\"10.0.0.255:1\""));
        assert!(
            !text.contains("endpoint=\"10.0.1.0:1\""),
            "the first ones are kept"
        );
    }

    #[test]
    fn text_fields_become_one_info_sample() {
        let mut s = sample("p", "rx", &[("packets", 1)]);
        s.info = vec![
            ("memory".into(), "system".into()),
            ("xdp-mode".into(), "native \"drv\"".into()),
            // Never overrides an identity label.
            ("element".into(), "spoof".into()),
        ];
        let plain = sample("p", "sink", &[("packets", 1)]);
        let text = encode(&[s.clone(), plain.clone()], Format::OpenMetrics);
        assert!(text.starts_with("# TYPE firehose_element info\n"), "{text}");
        assert!(text.contains(
            "firehose_element_info{pipeline=\"p\",element=\"rx\",factory=\"fhudpsrc\",memory=\"system\",xdp_mode=\"native \\\"drv\\\"\"} 1\n"
        ), "{text}");
        assert_eq!(
            text.matches("firehose_element_info{").count(),
            1,
            "only elements with text fields"
        );
        let text = encode(&[s, plain], Format::Prometheus);
        assert!(
            text.starts_with("# TYPE firehose_element_info gauge\n"),
            "{text}"
        );
        assert_eq!(label_name("9x-y"), "_9x_y");
        // No text fields anywhere: no info family at all.
        assert!(!encode(&[sample("p", "e", &[])], Format::OpenMetrics).contains("info"));
    }

    #[test]
    fn counters_get_total_gauges_do_not() {
        let text = encode(
            &[sample(
                "pipeline0",
                "src",
                &[("packets", 7), ("pool-in-use", 3), ("drops-kernel", 1)],
            )],
            Format::OpenMetrics,
        );
        assert!(text.contains("# TYPE firehose_packets counter\n"), "{text}");
        assert!(text.contains(
            "firehose_packets_total{pipeline=\"pipeline0\",element=\"src\",factory=\"fhudpsrc\"} 7\n"
        ));
        assert!(text.contains("# TYPE firehose_pool_in_use gauge\n"));
        assert!(text.contains("firehose_pool_in_use{pipeline=\"pipeline0\""));
        assert!(!text.contains("pool_in_use_total"));
        assert!(text.contains("firehose_drops_kernel_total{"));
        assert!(text.ends_with("# EOF\n"));
        // Prometheus 0.0.4 names the family after the sample and has no EOF.
        let text = encode(&[sample("p", "src", &[("packets", 7)])], Format::Prometheus);
        assert!(
            text.starts_with("# TYPE firehose_packets_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("EOF"));
    }

    #[test]
    fn one_family_per_stat_across_elements_sorted() {
        let text = encode(
            &[
                sample("p", "b", &[("packets", 1), ("bytes", 10)]),
                sample("p", "a", &[("packets", 2)]),
                // The same element twice keeps its first values only.
                sample("p", "b", &[("packets", 99)]),
            ],
            Format::OpenMetrics,
        );
        assert_eq!(text.matches("# TYPE firehose_packets counter").count(), 1);
        assert_eq!(text.matches("firehose_packets_total{").count(), 2);
        assert!(!text.contains("} 99"));
        let bytes = text.find("# TYPE firehose_bytes").unwrap();
        let packets = text.find("# TYPE firehose_packets").unwrap();
        assert!(bytes < packets, "families sorted by name");
    }

    #[test]
    fn names_and_labels_are_escaped() {
        assert_eq!(family_name("drops-kernel"), "firehose_drops_kernel");
        assert_eq!(family_name("x.y z"), "firehose_x_y_z");
        assert_eq!(family_name("frames-total"), "firehose_frames");
        assert_eq!(kind_of("unheard-of"), Kind::Counter);
        // Base units: times in seconds.
        assert_eq!(
            family_name("pacing-slip-ns"),
            "firehose_pacing_slip_seconds"
        );
        assert_eq!(
            family_name("write-latency-max-us"),
            "firehose_write_latency_max_seconds"
        );
        let text = encode(
            &[sample(
                "p",
                "e",
                &[
                    ("pacing-slip-ns", 25_000_000),
                    ("write-latency-max-us", 1500),
                ],
            )],
            Format::OpenMetrics,
        );
        assert!(text.contains("firehose_pacing_slip_seconds_total{pipeline=\"p\",element=\"e\",factory=\"fhudpsrc\"} 0.025\n"), "{text}");
        assert!(text.contains("# TYPE firehose_write_latency_max_seconds gauge"));
        assert!(text.contains("} 0.0015\n"), "{text}");
        assert_eq!(kind_of("pool-high-water"), Kind::Gauge);
        let text = encode(
            &[sample("my \"pipe\"\n", "a\\b", &[("packets", 1)])],
            Format::OpenMetrics,
        );
        assert!(
            text.contains("pipeline=\"my \\\"pipe\\\"\\n\",element=\"a\\\\b\""),
            "{text}"
        );
        // A field that maps onto an existing family is left out, not repeated.
        let text = encode(
            &[sample("p", "e", &[("a-b", 1), ("a_b", 2)])],
            Format::OpenMetrics,
        );
        assert_eq!(text.matches("firehose_a_b_total{").count(), 1);
    }

    #[test]
    fn every_statistic_has_a_family_of_its_own() {
        let mut seen = std::collections::BTreeMap::new();
        for s in SERIES {
            if let Some(other) = seen.insert(family_name(s.stat), s.stat) {
                panic!(
                    "{} and {other} share the family {}",
                    s.stat,
                    family_name(s.stat)
                );
            }
        }
        assert_eq!(family_name("consumers-total"), "firehose_consumers_total");
        assert_eq!(family_name("consumers"), "firehose_consumers");
    }

    #[test]
    fn no_samples_is_just_eof() {
        assert_eq!(encode(&[], Format::OpenMetrics), "# EOF\n");
        assert_eq!(encode(&[], Format::Prometheus), "");
    }

    #[test]
    fn negotiation() {
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::negotiate(None), Format::Prometheus);
    }
}
