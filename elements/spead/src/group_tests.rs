//! The checks every property group of this crate gets: each property round-trips (set
//! to a value unlike its default, then read back), no two properties share a field
//! unless one is a deprecated alias, and a position past the group is refused.

use firehose_core::property::PropertyGroup;
use gst::glib;
use gst::prelude::*;

/// A value of `p`'s type other than its default.
fn other_value(p: &glib::ParamSpec) -> glib::Value {
    if let Some(p) = p.downcast_ref::<glib::ParamSpecUInt>() {
        let d = p.default_value();
        return if d < p.maximum() { d + 1 } else { d - 1 }.to_value();
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecUInt64>() {
        let d = p.default_value();
        return if d < p.maximum() { d + 1 } else { d - 1 }.to_value();
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecInt>() {
        let d = p.default_value();
        return if d < p.maximum() { d + 1 } else { d - 1 }.to_value();
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecBoolean>() {
        return (!p.default_value()).to_value();
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecString>() {
        return Some(format!("{}-test", p.name())).to_value();
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecEnum>() {
        let class = p.enum_class();
        let other = class
            .values()
            .iter()
            .find(|v| v.value() != p.default_value_as_i32())
            .expect("an enum of two values or more");
        return other.to_value(&class);
    }
    panic!("{}: no test value for {}", p.name(), p.value_type());
}

/// Whether `p` is a deprecated alias (it shares its field with the property it names).
fn is_alias(p: &glib::ParamSpec) -> bool {
    p.blurb()
        .unwrap_or_default()
        .starts_with("Deprecated: use ")
}

/// Sets every property of `g` but the aliases to a value unlike its default, then reads
/// them all back (a property that wrote another's field fails here), and checks that
/// the position after the last is refused. Returns the names, in order.
pub(crate) fn check_group(g: &mut impl PropertyGroup) -> Vec<String> {
    gst::init().unwrap();
    let specs = g.spec_vec();
    assert_eq!(specs.len(), g.count());
    let values: Vec<(usize, &glib::ParamSpec, glib::Value)> = specs
        .iter()
        .enumerate()
        .filter(|(_, p)| !is_alias(p))
        .map(|(i, p)| (i, p, other_value(p)))
        .collect();
    for (i, p, v) in &values {
        assert!(g.set(*i, v, p), "{} is at {i}", p.name());
    }
    for (i, p, v) in &values {
        let got = g.get(*i, p).unwrap_or_else(|| panic!("{}", p.name()));
        assert_eq!(got.serialize().ok(), v.serialize().ok(), "{}", p.name());
    }
    let n = specs.len();
    assert!(!g.set(n, &1u32.to_value(), &specs[0]), "past the group");
    assert!(g.get(n, &specs[0]).is_none(), "past the group");
    specs.iter().map(|p| p.name().to_string()).collect()
}
