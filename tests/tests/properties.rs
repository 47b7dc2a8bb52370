//! Every writable property of every Firehose element keeps what is set: set to a value
//! other than its default, it reads back that value. Properties are declared once
//! (`firehose_core::property_group!`), so a spec without a setter or getter cannot
//! compile; this checks the other half, that each entry's conversion round-trips and
//! that the position routing (an element's own properties, then the groups it has, then
//! a base class's) lands every id on its own field. A property routed to the wrong
//! field, or to none, reads back something else and fails here.

use firehose_core::property;
use gst::glib;
use gst::prelude::*;

/// String properties parsed when set, and a valid value other than the default (a bad
/// one is kept aside for the start error, and the property reads what is in force).
const PARSED: &[(&str, &str)] = &[("rate", "max")];

/// A value of `p`'s type other than its default ([`property::other_value`], or a valid
/// one for a parsed string), or `None` for types it does not vary (boxed caps and
/// structures).
fn other_value(p: &glib::ParamSpec) -> Option<glib::Value> {
    let string = p.downcast_ref::<glib::ParamSpecString>().is_some();
    match PARSED.iter().find(|(name, _)| string && *name == p.name()) {
        Some((_, v)) => Some(v.to_value()),
        None => property::other_value(p),
    }
}

#[test]
fn every_writable_property_reads_back_what_was_set() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    let factories: Vec<_> = gst::Registry::get()
        .features_by_plugin("firehose")
        .into_iter()
        .filter_map(|f| f.downcast::<gst::ElementFactory>().ok())
        .collect();
    assert!(factories.len() >= 15, "{} elements", factories.len());
    let mut checked = 0;
    let mut wrong = vec![];
    for f in factories {
        let probe = f.create().build().unwrap();
        for p in probe.list_properties() {
            let ours = p.owner_type().name().starts_with("GstFh");
            let writable = p.flags().contains(glib::ParamFlags::WRITABLE)
                && !p.flags().contains(glib::ParamFlags::CONSTRUCT_ONLY);
            if !ours || !writable || !p.flags().contains(glib::ParamFlags::READABLE) {
                continue;
            }
            let Some(v) = other_value(&p) else { continue };
            // A fresh element per property: aliases and the slot size a pool's count
            // converts with depend on the others.
            let el = f.create().build().unwrap();
            el.set_property_from_value(p.name(), &v);
            let got = el.property_value(p.name());
            let text = |v: &glib::Value| v.serialize().ok().map(|s| s.to_string());
            if text(&got) != text(&v) {
                wrong.push(format!(
                    "{}: {} set to {:?} reads {:?}",
                    f.name(),
                    p.name(),
                    v,
                    got
                ));
            }
            checked += 1;
        }
        // `stats` is the last of an element's own: it reads without a setting.
        if probe.find_property("stats").is_some() {
            let s = probe.property::<gst::Structure>("stats");
            assert_eq!(
                s.name(),
                firehose_core::stats::STRUCTURE_NAME,
                "{}",
                f.name()
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 150, "{checked} properties checked");
}
