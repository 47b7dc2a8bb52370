//! The element reference in `docs/elements.md`, generated from the elements themselves
//! (name, type, default, range and description of every property), so that a test can
//! fail when the document is stale. Used by each plugin's `element_docs` test.

use std::fmt::Write;

use gst::glib;
use gst::prelude::*;

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

/// The markdown reference of every element of `plugin` (already registered): per
/// element its description and a table of its own properties.
pub fn reference(plugin: &str) -> String {
    let mut out = String::new();
    let mut names: Vec<String> = gst::Registry::get()
        .features_by_plugin(plugin)
        .into_iter()
        .filter_map(|f| f.downcast::<gst::ElementFactory>().ok())
        .map(|f| f.name().to_string())
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "plugin {plugin} has no elements registered"
    );
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

/// Replaces the section of the markdown file at `path` between the lines
/// `<!-- BEGIN GENERATED: {section} -->` and `<!-- END GENERATED: {section} -->` with
/// `generated` when `FIREHOSE_BLESS` is set; otherwise returns an error when the file
/// differs from that (stale docs), naming `regenerate`, the command that fixes it.
pub fn check_or_bless(
    path: &std::path::Path,
    section: &str,
    generated: &str,
    regenerate: &str,
) -> Result<(), String> {
    let begin = format!("<!-- BEGIN GENERATED: {section} -->");
    let end = format!("<!-- END GENERATED: {section} -->");
    let doc = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (head, rest) = doc
        .split_once(&begin)
        .ok_or_else(|| format!("{}: no line {begin}", path.display()))?;
    let (_, tail) = rest
        .split_once(&end)
        .ok_or_else(|| format!("{}: no line {end}", path.display()))?;
    let want = format!("{head}{begin}\n\n{generated}{end}{tail}");
    if std::env::var_os("FIREHOSE_BLESS").is_some() {
        return std::fs::write(path, &want).map_err(|e| format!("{}: {e}", path.display()));
    }
    if doc == want {
        Ok(())
    } else {
        Err(format!(
            "{} ({section}) is stale: regenerate with {regenerate}",
            path.display()
        ))
    }
}
