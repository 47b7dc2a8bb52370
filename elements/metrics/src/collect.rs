//! Reading the counters out of a running pipeline: the elements with a Firehose `stats`
//! property, and their integer fields (and per-endpoint breakdowns) as exposition
//! [`Sample`]s.

use firehose_core::endpoint::MAX_ENDPOINTS;
use gst::prelude::*;

use crate::exposition::{Labelled, Sample};

/// True when `element` has a `stats` property holding a structure (the Firehose elements,
/// and some stock ones whose structure [`stats_property`] then filters out).
pub fn has_stats(element: &gst::Element) -> bool {
    element
        .find_property("stats")
        .is_some_and(|p| p.value_type() == gst::Structure::static_type())
}

/// The "firehose-stats" structure in the `stats` property of `element`, if it has one.
pub fn stats_property(element: &gst::Element) -> Option<gst::Structure> {
    if !has_stats(element) {
        return None;
    }
    // Stock elements have `stats` too (GstBaseSink's, with other fields): only ours count.
    element
        .property_value("stats")
        .get::<gst::Structure>()
        .ok()
        .filter(|s| s.name() == firehose_core::stats::STRUCTURE_NAME)
}

/// Every element under `bin`, at any depth, that has a `stats` structure property.
pub fn stats_elements(bin: &gst::Bin) -> Vec<gst::Element> {
    bin.iterate_recurse()
        .into_iter()
        .flatten()
        .filter(has_stats)
        .collect()
}

/// The integer fields of a stats structure, whatever integer type each was stored as;
/// other fields (mode strings) are left out.
pub fn integer_fields(s: &gst::StructureRef) -> Vec<(String, u64)> {
    s.iter()
        .filter_map(|(name, v)| {
            let n = v
                .get::<u64>()
                .ok()
                .or_else(|| v.get::<u32>().ok().map(u64::from))
                .or_else(|| v.get::<i64>().ok().map(|x| x.max(0) as u64))
                .or_else(|| v.get::<i32>().ok().map(|x| x.max(0) as u64))?;
            Some((name.to_string(), n))
        })
        .collect()
}

/// The string fields of a stats structure (`memory=system`, `xdp-mode=native`).
pub fn text_fields(s: &gst::StructureRef) -> Vec<(String, String)> {
    s.iter()
        .filter_map(|(name, v)| Some((name.to_string(), v.get::<String>().ok()?)))
        .collect()
}

/// The entries of the per-address breakdowns of a stats structure: every field holding
/// a list of structures with an `address` string (a packet source's `endpoints`, see
/// `firehose_core::endpoint::EndpointCounters::to_value`: a `GstCaps`, which PyGObject
/// reads without gst-python's overrides), each entry with the structure's name as its
/// label and its integer fields; at most [`MAX_ENDPOINTS`] of each list, entries without
/// an address left out.
pub fn labelled_fields(s: &gst::StructureRef) -> Vec<Labelled> {
    let mut out = Vec::new();
    for (_, v) in s.iter() {
        let Ok(caps) = v.get::<gst::Caps>() else {
            continue;
        };
        let entries = caps
            .iter()
            .filter_map(|item| {
                Some(Labelled {
                    address: item.get::<&str>("address").ok()?.to_string(),
                    label: item.name().to_string(),
                    values: integer_fields(item),
                })
            })
            .take(MAX_ENDPOINTS);
        out.extend(entries);
    }
    out
}

/// The name of the top-level bin (normally the pipeline) holding `element`.
pub fn top_level_name(element: &gst::Element) -> String {
    let mut top: gst::Object = element.clone().upcast();
    while let Some(parent) = top.parent() {
        top = parent;
    }
    top.name().to_string()
}

/// The sample of one element now, labelled with its top-level bin, or `None` when it has
/// no Firehose stats.
pub fn sample(element: &gst::Element) -> Option<Sample> {
    let s = stats_property(element)?;
    Some(Sample {
        pipeline: top_level_name(element),
        element: element.name().to_string(),
        factory: element
            .factory()
            .map(|f| f.name().to_string())
            .unwrap_or_default(),
        values: integer_fields(&s),
        info: text_fields(&s),
        labelled: labelled_fields(&s),
    })
}

/// The samples of every Firehose element under `bin`.
pub fn snapshot(bin: &gst::Bin) -> Vec<Sample> {
    stats_elements(bin).iter().filter_map(sample).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_fields_of_any_type_strings_skipped() {
        gst::init().unwrap();
        let s = gst::Structure::builder("firehose-stats")
            .field("packets", 5u64)
            .field("slots", 3u32)
            .field("signed", -2i64)
            .field("xdp-mode", "native")
            .build();
        assert_eq!(
            text_fields(&s),
            vec![("xdp-mode".to_string(), "native".to_string())]
        );
        assert_eq!(
            integer_fields(&s),
            vec![
                ("packets".to_string(), 5),
                ("slots".to_string(), 3),
                ("signed".to_string(), 0)
            ]
        );
    }

    #[test]
    fn endpoints_become_labelled_entries_totals_stay() {
        use firehose_core::endpoint::{parse_list, EndpointCounters, Tally, ENDPOINT_STRUCTURE};
        gst::init().unwrap();
        let list = parse_list("239.10.0.1+1:7148,[::1]:7148", 0, &[]).unwrap();
        let counters = EndpointCounters::new(&list);
        let mut tally = Tally::new(list.len());
        tally.count(0, 100);
        tally.count(0, 100);
        tally.count(2, 7);
        counters.add(&mut tally);
        let s = gst::Structure::builder(firehose_core::stats::STRUCTURE_NAME)
            .field("packets", 3u64)
            .field("bytes", 207u64)
            .field("endpoints", counters.to_value())
            .build();
        let entry = |address: &str, packets, bytes| Labelled {
            label: ENDPOINT_STRUCTURE.into(),
            address: address.into(),
            values: vec![("packets".into(), packets), ("bytes".into(), bytes)],
        };
        assert_eq!(
            labelled_fields(&s),
            vec![
                entry("239.10.0.1:7148", 2, 200),
                entry("239.10.0.2:7148", 0, 0),
                entry("[::1]:7148", 1, 7),
            ]
        );
        // The totals are the element's own, and the array is neither a number nor text.
        assert_eq!(
            integer_fields(&s),
            vec![("packets".to_string(), 3), ("bytes".to_string(), 207)]
        );
        assert!(text_fields(&s).is_empty());

        // Entries without an address, and arrays of other things, are not breakdowns.
        let odd = gst::Structure::builder(firehose_core::stats::STRUCTURE_NAME)
            .field(
                "unnamed",
                gst::Caps::builder(ENDPOINT_STRUCTURE)
                    .field("packets", 1u64)
                    .build(),
            )
            .field("numbers", gst::Array::new([5u64, 6]))
            .build();
        assert!(labelled_fields(&odd).is_empty());
    }

    #[test]
    fn at_most_max_endpoints_of_a_list() {
        gst::init().unwrap();
        let mut caps = gst::Caps::new_empty();
        for i in 0..MAX_ENDPOINTS + 3 {
            caps.make_mut().append_structure(
                gst::Structure::builder("endpoint")
                    .field("address", format!("10.0.{}.{}:1", i / 256, i % 256))
                    .field("packets", i as u64)
                    .build(),
            );
        }
        let s = gst::Structure::builder(firehose_core::stats::STRUCTURE_NAME)
            .field("endpoints", caps)
            .build();
        let entries = labelled_fields(&s);
        assert_eq!(entries.len(), MAX_ENDPOINTS);
        assert_eq!(entries.last().unwrap().address, "10.0.0.255:1");
    }

    #[test]
    fn stock_stats_are_not_ours() {
        gst::init().unwrap();
        let pipeline = gst::parse::launch("fakesrc num-buffers=1 ! fakesink name=sink").unwrap();
        let bin = pipeline.downcast::<gst::Bin>().unwrap();
        let sink = bin.by_name("sink").unwrap();
        // GstBaseSink has a `stats` structure property, but not a firehose-stats one.
        assert!(has_stats(&sink));
        assert!(sample(&sink).is_none());
        assert!(snapshot(&bin).is_empty());
        assert_eq!(top_level_name(&sink), bin.name());
    }
}
