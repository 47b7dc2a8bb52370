//! docs/elements.md must describe every property of every element as the code defines
//! it (name, type, default, range, description). The reference section of that file is
//! generated from the elements themselves; this test fails when it is stale.
//! Regenerate with: `FIREHOSE_BLESS=1 cargo test -p firehose-tests --test element_docs`.

use std::fmt::Write;

use gst::glib;
use gst::prelude::*;

const BEGIN: &str = "<!-- BEGIN GENERATED: element reference -->";
const END: &str = "<!-- END GENERATED: element reference -->";

fn value_text(v: &glib::Value) -> String {
    if let Ok(s) = v.get::<Option<String>>() {
        return s
            .map(|s| format!("\"{s}\""))
            .unwrap_or_else(|| "(none)".into());
    }
    if let Ok(s) = v.serialize() {
        let s = s.to_string();
        if !s.is_empty() {
            return s;
        }
    }
    "(none)".into()
}

fn range_text(p: &glib::ParamSpec) -> String {
    macro_rules! range {
        ($t:ty) => {
            if let Some(p) = p.downcast_ref::<$t>() {
                return format!("{} – {}", p.minimum(), p.maximum());
            }
        };
    }
    range!(glib::ParamSpecInt);
    range!(glib::ParamSpecUInt);
    range!(glib::ParamSpecInt64);
    range!(glib::ParamSpecUInt64);
    if let Some(e) = p.downcast_ref::<glib::ParamSpecEnum>() {
        let class = e.enum_class();
        return class
            .values()
            .iter()
            .map(|v| format!("`{}`", v.nick()))
            .collect::<Vec<_>>()
            .join(", ");
    }
    String::new()
}

fn reference() -> String {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    let mut out = String::new();
    let mut names: Vec<String> = gst::Registry::get()
        .features_by_plugin("firehose")
        .into_iter()
        .filter_map(|f| f.downcast::<gst::ElementFactory>().ok())
        .map(|f| f.name().to_string())
        .collect();
    names.sort();
    assert!(names.len() >= 4, "elements registered: {names:?}");
    for name in names {
        let factory = gst::ElementFactory::find(&name).unwrap();
        let el = factory.create().build().unwrap();
        writeln!(out, "### `{name}`\n").unwrap();
        writeln!(
            out,
            "{} ({}).\n",
            factory
                .metadata(gst::ELEMENT_METADATA_DESCRIPTION)
                .unwrap_or(""),
            factory.metadata(gst::ELEMENT_METADATA_KLASS).unwrap_or("")
        )
        .unwrap();
        writeln!(
            out,
            "| property | type | default | range / values | description |"
        )
        .unwrap();
        writeln!(out, "|---|---|---|---|---|").unwrap();
        let own = el.type_();
        for p in el.list_properties().iter() {
            // Only the element's own properties; inherited ones (name, sync, …) are
            // GStreamer's and documented there.
            if p.owner_type() != own {
                continue;
            }
            let default = if p.flags().contains(glib::ParamFlags::WRITABLE) {
                value_text(p.default_value())
            } else {
                "read-only".into()
            };
            writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                p.name(),
                p.value_type().name(),
                default.replace('|', "\\|"),
                range_text(p).replace('|', "\\|"),
                p.blurb().unwrap_or("").replace('|', "\\|")
            )
            .unwrap();
        }
        writeln!(out).unwrap();
    }
    out
}

#[test]
fn element_reference_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/elements.md");
    let doc = std::fs::read_to_string(path).expect("docs/elements.md exists");
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("generated section start marker");
    let (_, tail) = rest.split_once(END).expect("generated section end marker");
    let want = format!("{head}{BEGIN}\n\n{}{END}{tail}", reference());
    if std::env::var_os("FIREHOSE_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    assert!(
        doc == want,
        "docs/elements.md is stale: regenerate with FIREHOSE_BLESS=1 cargo test -p firehose-tests --test element_docs"
    );
}
