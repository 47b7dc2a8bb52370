//! Properties declared once: a settings struct lists each property's field, how its
//! value converts, and its `ParamSpec` in one entry of [`property_group!`], which
//! generates the specs, set and get from that one list. Groups nest (`group pool;`), so
//! the properties several elements share (socket, pool, chunk geometry, stats) are
//! declared in one crate and reused in others; an element's settings list the groups it
//! has and its own properties.
//!
//! Why by position, not by name: GObject hands `set_property` the id it installed, and a
//! list that generates specs, setter and getter in the same order cannot have a spec
//! without handling (that does not compile: there is no separate `match` to forget an arm
//! of). Deprecated aliases are entries of their own (`deprecated("new-name")`): they set
//! the same field, through their own conversion when the unit differs, and warn once.
//!
//! ```
//! use firehose_core::property::{AsI32, PropertyGroup};
//! use gst::glib;
//! use gst::prelude::*;
//!
//! #[derive(Default)]
//! struct Example {
//!     port: u32,
//!     gro: bool,
//! }
//!
//! firehose_core::property_group! {
//!     Example as _s {
//!         port: AsI32 => glib::ParamSpecInt::builder("port").minimum(0).build();
//!         gro => glib::ParamSpecBoolean::builder("gro").build();
//!         deprecated("gro") gro => glib::ParamSpecBoolean::builder("coalesce").build();
//!     }
//! }
//!
//! gst::init().unwrap();
//! let mut e = Example::default();
//! let mut specs = vec![];
//! e.specs(&mut specs);
//! assert_eq!(specs.len(), e.count());
//! assert!(e.set(0, &7i32.to_value(), &specs[0]));
//! assert!(e.set(2, &true.to_value(), &specs[2]));
//! assert_eq!((e.port, e.gro), (7, true));
//! assert_eq!(e.get(0, &specs[0]).unwrap().get::<i32>().unwrap(), 7);
//! assert!(!e.set(3, &true.to_value(), &specs[2]), "no fourth property");
//! ```

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::ObjectSubclassExt;

/// Properties declared together: their specs, and set and get by position among them.
/// Implemented by [`property_group!`]; a group may contain others.
pub trait PropertyGroup {
    /// Appends the specs, in order.
    fn specs(&self, out: &mut Vec<glib::ParamSpec>);
    /// How many [`PropertyGroup::specs`] appends.
    fn count(&self) -> usize;
    /// Sets the property at `index` (its position in the specs); false when there is
    /// none (`index` is past the group).
    fn set(&mut self, index: usize, value: &glib::Value, pspec: &glib::ParamSpec) -> bool;
    /// The value of the property at `index`; `None` when there is none.
    fn get(&self, index: usize, pspec: &glib::ParamSpec) -> Option<glib::Value>;

    /// The specs as a vector.
    fn spec_vec(&self) -> Vec<glib::ParamSpec> {
        let mut v = Vec::with_capacity(self.count());
        self.specs(&mut v);
        v
    }

    /// The position and spec of the property called `name` (tests, and code that
    /// holds a name rather than an id).
    fn find(&self, name: &str) -> Option<(usize, glib::ParamSpec)> {
        self.spec_vec()
            .into_iter()
            .enumerate()
            .find(|(_, p)| p.name() == name)
    }

    /// Sets the property called `name`; false when there is none.
    fn set_named(&mut self, name: &str, value: &glib::Value) -> bool {
        match self.find(name) {
            Some((i, p)) => self.set(i, value, &p),
            None => false,
        }
    }

    /// The value of the property called `name`.
    fn get_named(&self, name: &str) -> Option<glib::Value> {
        let (i, p) = self.find(name)?;
        self.get(i, &p)
    }
}

/// How a settings field of type `T` becomes its property's value and back.
pub trait Convert<T> {
    /// Stores `value` (of the spec's type: GObject checks it first) in `field`.
    fn set(field: &mut T, value: &glib::Value, pspec: &glib::ParamSpec);
    /// The property's value of `field`.
    fn get(field: &T, pspec: &glib::ParamSpec) -> glib::Value;
}

/// The field has the property's type.
#[derive(Debug)]
pub struct Plain;

impl<T> Convert<T> for Plain
where
    T: ToValue + for<'a> glib::value::FromValue<'a>,
{
    fn set(field: &mut T, value: &glib::Value, _: &glib::ParamSpec) {
        *field = value.get().expect("GObject checks the type first");
    }
    fn get(field: &T, _: &glib::ParamSpec) -> glib::Value {
        field.to_value()
    }
}

/// A `u32` field behind an `int` property whose minimum is 0 (ports, byte counts that
/// GStreamer's stock elements declare as `int`).
#[derive(Debug)]
pub struct AsI32;

impl Convert<u32> for AsI32 {
    fn set(field: &mut u32, value: &glib::Value, _: &glib::ParamSpec) {
        *field = value
            .get::<i32>()
            .expect("GObject checks the type first")
            .max(0) as u32;
    }
    fn get(field: &u32, _: &glib::ParamSpec) -> glib::Value {
        i32::try_from(*field).unwrap_or(i32::MAX).to_value()
    }
}

/// A string where NULL or a blank one (empty, or only spaces) sets the spec's default:
/// unset (`None`) for an optional one whose spec has none, "" for a `String` field
/// whose spec has none. What a user who clears a property expects, and what an unset
/// property reads back as.
#[derive(Debug)]
pub struct OrDefault;

impl OrDefault {
    /// The value set, or the spec's default when it is NULL or blank.
    fn of(value: &glib::Value, pspec: &glib::ParamSpec) -> Option<String> {
        value
            .get::<Option<String>>()
            .expect("GObject checks the type first")
            .filter(|s| !s.trim().is_empty())
            .or_else(|| {
                pspec
                    .downcast_ref::<glib::ParamSpecString>()
                    .and_then(|p| p.default_value())
                    .map(Into::into)
            })
    }
}

impl Convert<Option<String>> for OrDefault {
    fn set(field: &mut Option<String>, value: &glib::Value, pspec: &glib::ParamSpec) {
        *field = Self::of(value, pspec);
    }
    fn get(field: &Option<String>, _: &glib::ParamSpec) -> glib::Value {
        field.to_value()
    }
}

impl Convert<String> for OrDefault {
    fn set(field: &mut String, value: &glib::Value, pspec: &glib::ParamSpec) {
        *field = Self::of(value, pspec).unwrap_or_default();
    }
    fn get(field: &String, _: &glib::ParamSpec) -> glib::Value {
        field.to_value()
    }
}

/// Warns, once per element type and property, that `pspec` is a deprecated alias of
/// `instead` (called by the setter [`property_group!`] generates for a
/// `deprecated("…")` entry). A `g_warning`, so gst-launch and Python users see it
/// without a debug level set.
pub fn warn_deprecated(pspec: &glib::ParamSpec, instead: &str) {
    static WARNED: Mutex<BTreeSet<(usize, String)>> = Mutex::new(BTreeSet::new());
    let owner = pspec.owner_type();
    let key = (owner.into_glib(), pspec.name().to_string());
    let first = WARNED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key);
    if first {
        glib::g_warning!(
            "firehose",
            "{}: property '{}' is deprecated and will be removed; use '{}'",
            owner.name(),
            pspec.name(),
            instead
        );
    }
}

use glib::translate::IntoGlib;

static CAT: std::sync::LazyLock<gst::DebugCategory> = std::sync::LazyLock::new(|| {
    gst::DebugCategory::new(
        "fhproperty",
        gst::DebugColorFlags::empty(),
        Some("Firehose element properties"),
    )
});

/// Reports a property id no group answers: GObject only passes ids it installed, so
/// this is a bug in an element's list, logged instead of panicking in a property call.
pub fn no_such_property(obj: &gst::Element, pspec: &glib::ParamSpec) {
    gst::error!(
        CAT,
        obj = obj,
        "no handler for property {} (a bug: please report it)",
        pspec.name()
    );
}

/// `ObjectImpl::set_property` of an element whose own properties are the group in
/// `settings` (ids count from 1; a PacketSrc subclass, whose base appends the rest):
/// true when set, so the caller may act on the change.
pub fn set_in<G: PropertyGroup>(
    obj: &impl IsA<gst::Element>,
    settings: &Mutex<G>,
    id: usize,
    value: &glib::Value,
    pspec: &glib::ParamSpec,
) -> bool {
    let done = crate::sync::lock(settings).set(id.wrapping_sub(1), value, pspec);
    if !done {
        no_such_property(obj.upcast_ref(), pspec);
    }
    done
}

/// `ObjectImpl::property` of an element whose own properties are the group in
/// `settings`, as [`set_in`].
pub fn get_in<G: PropertyGroup>(
    obj: &impl IsA<gst::Element>,
    settings: &Mutex<G>,
    id: usize,
    pspec: &glib::ParamSpec,
) -> glib::Value {
    let value = crate::sync::lock(settings).get(id.wrapping_sub(1), pspec);
    value.unwrap_or_else(|| {
        no_such_property(obj.upcast_ref(), pspec);
        pspec.default_value().clone()
    })
}

/// Expands to the three property methods of `ObjectImpl` for an element whose own
/// properties are the group in its field `$field` (a `Mutex` of it), `$defaults` giving
/// the specs: a PacketSrc subclass, whose base appends the rest. [`set_in`] and
/// [`get_in`] without the ten lines each such element would repeat. Use inside
/// `impl ObjectImpl`.
#[macro_export]
macro_rules! own_properties {
    ($defaults:expr, $field:ident) => {
        $crate::properties!(|| $crate::property::PropertyGroup::spec_vec(&$defaults));

        fn set_property(
            &self,
            id: usize,
            value: &$crate::__glib::Value,
            pspec: &$crate::__glib::ParamSpec,
        ) {
            let obj = $crate::__gst::subclass::prelude::ObjectSubclassExt::obj(self);
            $crate::property::set_in(&*obj, &self.$field, id, value, pspec);
        }

        fn property(&self, id: usize, pspec: &$crate::__glib::ParamSpec) -> $crate::__glib::Value {
            let obj = $crate::__gst::subclass::prelude::ObjectSubclassExt::obj(self);
            $crate::property::get_in(&*obj, &self.$field, id, pspec)
        }
    };
}

/// An element whose properties are its settings (one [`PropertyGroup`], usually made
/// of groups shared with other elements and its own entries) and then the read-only
/// `stats`. Its `ObjectImpl` gets the three property methods from
/// [`settings_properties!`](crate::settings_properties).
pub trait SettingsElement: crate::element::ElementStats {
    /// The settings struct; its defaults are a new element's (and the specs' source).
    type Settings: PropertyGroup + Default + Send;
    /// The counters `stats` holds, for its description.
    fn counters() -> String;
    /// The settings, behind the lock the element reads them under.
    fn settings(&self) -> &Mutex<Self::Settings>;
    /// Called after property `pspec` was set, outside the lock (an element that
    /// validates or notifies).
    fn settings_changed(&self, _pspec: &glib::ParamSpec) {}
}

/// The specs of an element's settings, then `stats`.
pub fn element_specs<E: SettingsElement>() -> Vec<glib::ParamSpec> {
    let mut v = E::Settings::default().spec_vec();
    v.push(crate::stats::stats_spec(&E::counters()));
    v
}

/// `ObjectImpl::set_property` of a [`SettingsElement`] (ids count from 1).
pub fn set_element_property<E: SettingsElement>(
    imp: &E,
    id: usize,
    value: &glib::Value,
    pspec: &glib::ParamSpec,
) {
    let done = crate::sync::lock(imp.settings()).set(id.wrapping_sub(1), value, pspec);
    if done {
        imp.settings_changed(pspec);
    } else {
        no_such_property(imp.obj().upcast_ref::<gst::Element>(), pspec);
    }
}

/// `ObjectImpl::property` of a [`SettingsElement`]: a setting, or `stats` (the id after
/// them).
pub fn element_property<E: SettingsElement>(
    imp: &E,
    id: usize,
    pspec: &glib::ParamSpec,
) -> glib::Value {
    let index = id.wrapping_sub(1);
    let (count, value) = {
        let s = crate::sync::lock(imp.settings());
        (s.count(), s.get(index, pspec))
    };
    if let Some(v) = value {
        return v;
    }
    if index == count {
        return imp.stats().to_value();
    }
    no_such_property(imp.obj().upcast_ref::<gst::Element>(), pspec);
    pspec.default_value().clone()
}

/// Expands to the three property methods of `ObjectImpl` for `$imp`, a
/// [`SettingsElement`]: its settings' specs then `stats`, set and get. Use inside
/// `impl ObjectImpl for $imp`.
#[macro_export]
macro_rules! settings_properties {
    ($imp:ty) => {
        $crate::properties!($crate::property::element_specs::<$imp>);

        fn set_property(
            &self,
            id: usize,
            value: &$crate::__glib::Value,
            pspec: &$crate::__glib::ParamSpec,
        ) {
            $crate::property::set_element_property(self, id, value, pspec)
        }

        fn property(&self, id: usize, pspec: &$crate::__glib::ParamSpec) -> $crate::__glib::Value {
            $crate::property::element_property(self, id, pspec)
        }
    };
}

/// Declares a settings struct's properties once; implements [`PropertyGroup`].
///
/// `Type as s { entries }`: `s` names the settings instance in the entries' expressions
/// (conditions and specs that depend on what the element is, such as a pool's
/// description). Each entry ends with `;` and is one of:
///
/// - `field => spec;` — a property whose value is the field's own type ([`Plain`]);
/// - `field: Conv => spec;` — converted by `Conv` ([`Convert`]: [`AsI32`], [`OrDefault`],
///   [`OrDefault`], or the element's own);
/// - `deprecated("new-name") field[: Conv] => spec;` — an old name kept as an alias:
///   sets the same field and warns once ([`warn_deprecated`]);
/// - `group field;` — the properties of a nested group, in its order;
/// - any of these after `when(condition)` — present only when the condition (on `s`)
///   holds, for groups shared by elements that have some properties and not others.
///
/// Fields may be paths (`pool.size`) and tuple indices (`0`).
#[macro_export]
macro_rules! property_group {
    ($ty:ty as $s:ident { $($body:tt)* }) => {
        $crate::property_group!(@m $ty, $s, [] $($body)*);
    };

    (@m $ty:ty, $s:ident, [$($done:tt)*]) => {
        $crate::__property_group_impl!($ty, $s, [$($done)*]);
    };
    (@m $ty:ty, $s:ident, [$($done:tt)*] when ($cond:expr) $($rest:tt)*) => {
        $crate::property_group!(@e $ty, $s, [$($done)*] [$cond] $($rest)*);
    };
    (@m $ty:ty, $s:ident, [$($done:tt)*] $($rest:tt)+) => {
        $crate::property_group!(@e $ty, $s, [$($done)*] [true] $($rest)*);
    };

    (@e $ty:ty, $s:ident, [$($done:tt)*] [$cond:expr] group $($f:tt).+ ; $($rest:tt)*) => {
        $crate::property_group!(@m $ty, $s, [$($done)* [group [$cond] [$($f).+]]] $($rest)*);
    };
    (@e $ty:ty, $s:ident, [$($done:tt)*] [$cond:expr]
        deprecated ($new:expr) $($f:tt).+ $(: $conv:ty)? => $spec:expr ; $($rest:tt)*) => {
        $crate::property_group!(@m $ty, $s,
            [$($done)* [prop [$cond] [$($f).+] [$($conv)?] [$spec] [$new]]] $($rest)*);
    };
    (@e $ty:ty, $s:ident, [$($done:tt)*] [$cond:expr]
        $($f:tt).+ $(: $conv:ty)? => $spec:expr ; $($rest:tt)*) => {
        $crate::property_group!(@m $ty, $s,
            [$($done)* [prop [$cond] [$($f).+] [$($conv)?] [$spec] []]] $($rest)*);
    };
}

/// The impl [`property_group!`] expands to, from its parsed entries.
#[doc(hidden)]
#[macro_export]
macro_rules! __property_group_impl {
    ($ty:ty, $s:ident, [$($entry:tt)*]) => {
        impl $crate::property::PropertyGroup for $ty {
            #[allow(unused_variables, clippy::redundant_locals)]
            fn specs(&self, out: &mut ::std::vec::Vec<$crate::__glib::ParamSpec>) {
                let $s = self;
                $($crate::__property_entry!(specs, $s, out, $entry);)*
            }
            #[allow(unused_variables, clippy::redundant_locals)]
            fn count(&self) -> usize {
                let $s = self;
                0 $(+ $crate::__property_entry!(count, $s, $entry))*
            }
            #[allow(unused_variables, unused_assignments, unused_mut, clippy::redundant_locals)]
            fn set(
                &mut self,
                index: usize,
                value: &$crate::__glib::Value,
                pspec: &$crate::__glib::ParamSpec,
            ) -> bool {
                let $s = self;
                let mut index = index;
                $(if let ::std::option::Option::Some(done) =
                    $crate::__property_entry!(set, $s, index, value, pspec, $entry) {
                    return done;
                })*
                false
            }
            #[allow(unused_variables, unused_assignments, unused_mut, clippy::redundant_locals)]
            fn get(
                &self,
                index: usize,
                pspec: &$crate::__glib::ParamSpec,
            ) -> ::std::option::Option<$crate::__glib::Value> {
                let $s = self;
                let mut index = index;
                $(if let ::std::option::Option::Some(v) =
                    $crate::__property_entry!(get, $s, index, pspec, $entry) {
                    return v;
                })*
                ::std::option::Option::None
            }
        }
    };
}

/// One entry's part of each generated method. `set` and `get` return `Some` when the
/// entry holds `index` (the group's answer), else step `index` past the entry.
#[doc(hidden)]
#[macro_export]
macro_rules! __property_entry {
    (specs, $s:ident, $out:ident, [prop [$cond:expr] [$($f:tt).+] [$($conv:ty)?] [$spec:expr] [$($new:expr)?]]) => {
        if $cond {
            $out.push($spec);
        }
    };
    (specs, $s:ident, $out:ident, [group [$cond:expr] [$($f:tt).+]]) => {
        if $cond {
            $crate::property::PropertyGroup::specs(&$s.$($f).+, $out);
        }
    };
    (count, $s:ident, [prop [$cond:expr] $($rest:tt)*]) => {
        usize::from($cond)
    };
    (count, $s:ident, [group [$cond:expr] [$($f:tt).+]]) => {
        if $cond {
            $crate::property::PropertyGroup::count(&$s.$($f).+)
        } else {
            0
        }
    };
    (set, $s:ident, $i:ident, $v:ident, $p:ident, [prop [$cond:expr] [$($f:tt).+] [$($conv:ty)?] [$spec:expr] [$($new:expr)?]]) => {
        if !$cond {
            None
        } else if $i == 0 {
            <$crate::__property_conv!($($conv)?) as $crate::property::Convert<_>>::set(
                &mut $s.$($f).+, $v, $p);
            $($crate::property::warn_deprecated($p, $new);)?
            Some(true)
        } else {
            $i -= 1;
            None
        }
    };
    (set, $s:ident, $i:ident, $v:ident, $p:ident, [group [$cond:expr] [$($f:tt).+]]) => {
        if !$cond {
            None
        } else {
            let n = $crate::property::PropertyGroup::count(&$s.$($f).+);
            if $i < n {
                Some($crate::property::PropertyGroup::set(&mut $s.$($f).+, $i, $v, $p))
            } else {
                $i -= n;
                None
            }
        }
    };
    (get, $s:ident, $i:ident, $p:ident, [prop [$cond:expr] [$($f:tt).+] [$($conv:ty)?] [$spec:expr] [$($new:expr)?]]) => {
        if !$cond {
            None
        } else if $i == 0 {
            Some(Some(<$crate::__property_conv!($($conv)?) as $crate::property::Convert<_>>::get(
                &$s.$($f).+, $p)))
        } else {
            $i -= 1;
            None
        }
    };
    (get, $s:ident, $i:ident, $p:ident, [group [$cond:expr] [$($f:tt).+]]) => {
        if !$cond {
            None
        } else {
            let n = $crate::property::PropertyGroup::count(&$s.$($f).+);
            if $i < n {
                Some($crate::property::PropertyGroup::get(&$s.$($f).+, $i, $p))
            } else {
                $i -= n;
                None
            }
        }
    };
}

/// The conversion of an entry: [`Plain`] unless one is named.
#[doc(hidden)]
#[macro_export]
macro_rules! __property_conv {
    () => {
        $crate::property::Plain
    };
    ($conv:ty) => {
        $conv
    };
}

/// A test of a group: sets each property but the deprecated aliases (blurb
/// "Deprecated: …", which set another's field and are tested on their own) to a value
/// other than its default, taken from its spec, and checks that it reads back the
/// same (all set first, then all read, so one that writes another's field fails
/// too); then that nothing answers past the group's end. Panics naming the property
/// that failed; returns the names in order. For the unit tests of the crates that
/// declare groups.
///
/// ```should_panic
/// use firehose_core::property::{assert_round_trips, Convert};
/// use gst::glib;
/// use gst::prelude::*;
///
/// /// A conversion that forgets what it is given: the check catches it.
/// struct Forget;
/// impl Convert<u32> for Forget {
///     fn set(_: &mut u32, _: &glib::Value, _: &glib::ParamSpec) {}
///     fn get(field: &u32, _: &glib::ParamSpec) -> glib::Value {
///         field.to_value()
///     }
/// }
/// #[derive(Default)]
/// struct G {
///     n: u32,
/// }
/// firehose_core::property_group! {
///     G as _s {
///         n: Forget => glib::ParamSpecUInt::builder("n").build();
///     }
/// }
/// assert_round_trips(&mut G::default());
/// ```
pub fn assert_round_trips(group: &mut impl PropertyGroup) -> Vec<String> {
    // Enum specs need their GTypes registered; init is idempotent.
    gst::init().expect("GStreamer initialises");
    let specs = group.spec_vec();
    assert_eq!(specs.len(), group.count(), "count() and specs() disagree");
    let is_alias = |p: &glib::ParamSpec| p.blurb().is_some_and(|b| b.starts_with("Deprecated"));
    let values: Vec<_> = specs
        .iter()
        .enumerate()
        .filter(|(_, p)| !is_alias(p) && p.flags().contains(glib::ParamFlags::WRITABLE))
        .map(|(i, p)| {
            let v = other_value(p)
                .unwrap_or_else(|| panic!("{}: no test value for a {}", p.name(), p.value_type()));
            (i, p, v)
        })
        .collect();
    // All set before any is read: a property that writes another's field fails too.
    for (i, p, v) in &values {
        assert!(group.set(*i, v, p), "{}: not set", p.name());
    }
    for (i, p, v) in &values {
        let got = group
            .get(*i, p)
            .unwrap_or_else(|| panic!("{}: no value", p.name()));
        assert_eq!(
            got.serialize().ok(),
            v.serialize().ok(),
            "{}: set one value, read another",
            p.name()
        );
    }
    if let Some(last) = specs.last() {
        let n = specs.len();
        assert!(
            !group.set(n, last.default_value(), last),
            "set past the end"
        );
        assert!(group.get(n, last).is_none(), "a value past the end");
    }
    specs.iter().map(|p| p.name().to_string()).collect()
}

/// A valid value of `p`'s type that is not its default (`None` for types this does
/// not know, such as boxed caps): what [`assert_round_trips`] and the every-element
/// property test set.
pub fn other_value(p: &glib::ParamSpec) -> Option<glib::Value> {
    macro_rules! step {
        ($t:ty) => {
            if let Some(p) = p.downcast_ref::<$t>() {
                let d = p.default_value();
                return Some(if d < p.maximum() { d + 1 } else { d - 1 }.to_value());
            }
        };
    }
    step!(glib::ParamSpecUInt);
    step!(glib::ParamSpecInt);
    step!(glib::ParamSpecUInt64);
    step!(glib::ParamSpecInt64);
    if let Some(p) = p.downcast_ref::<glib::ParamSpecDouble>() {
        let d = p.default_value();
        return Some(
            if d < p.maximum() {
                (d + 1.0).min(p.maximum())
            } else {
                p.minimum()
            }
            .to_value(),
        );
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecBoolean>() {
        return Some((!p.default_value()).to_value());
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecString>() {
        return Some(format!("{}-test", p.default_value().unwrap_or("value")).to_value());
    }
    if let Some(p) = p.downcast_ref::<glib::ParamSpecEnum>() {
        let class = p.enum_class();
        let d = p.default_value_as_i32();
        let other = class.values().iter().find(|v| v.value() != d)?;
        return class.to_value(other.value());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Inner {
        size: u32,
        name: Option<String>,
    }

    crate::property_group! {
        Inner as _s {
            size => glib::ParamSpecUInt::builder("size").build();
            name: OrDefault => glib::ParamSpecString::builder("name").build();
        }
    }

    #[derive(Default)]
    struct Outer {
        with_extra: bool,
        extra: u32,
        inner: Inner,
        port: u32,
        host: String,
    }

    crate::property_group! {
        Outer as s {
            when(s.with_extra) extra => glib::ParamSpecUInt::builder("extra").build();
            group inner;
            port: AsI32 => glib::ParamSpecInt::builder("port").minimum(0).build();
            deprecated("port") port: AsI32 => glib::ParamSpecInt::builder("old-port").build();
            host: OrDefault => glib::ParamSpecString::builder("host")
                .default_value(Some("localhost"))
                .build();
        }
    }

    fn names(g: &dyn PropertyGroup) -> Vec<String> {
        g.spec_vec().iter().map(|p| p.name().to_string()).collect()
    }

    #[test]
    fn nested_and_conditional_entries_take_their_positions() {
        gst::init().unwrap();
        let mut o = Outer::default();
        assert_eq!(names(&o), ["size", "name", "port", "old-port", "host"]);
        assert_eq!(o.count(), 5);
        let specs = o.spec_vec();
        assert!(o.set(1, &"eth0".to_value(), &specs[1]));
        assert_eq!(o.inner.name.as_deref(), Some("eth0"));
        assert!(o.set(1, &"".to_value(), &specs[1]));
        assert_eq!(o.inner.name, None, "empty is unset");
        assert!(o.set(2, &9i32.to_value(), &specs[2]));
        assert_eq!(o.get(0, &specs[0]).unwrap().get::<u32>().unwrap(), 0);
        assert_eq!(o.get(3, &specs[3]).unwrap().get::<i32>().unwrap(), 9);
        assert!(o.set(4, &None::<String>.to_value(), &specs[4]));
        assert_eq!(o.host, "localhost", "NULL is the spec's default");
        assert!(!o.set(5, &1u32.to_value(), &specs[0]), "past the end");
        assert!(o.get(5, &specs[0]).is_none());

        let mut e = Outer {
            with_extra: true,
            ..Default::default()
        };
        assert_eq!(names(&e)[0], "extra");
        assert_eq!(e.count(), 6);
        assert!(e.set_named("extra", &3u32.to_value()));
        assert!(e.set_named("size", &4u32.to_value()));
        assert_eq!((e.extra, e.inner.size), (3, 4));
    }

    #[test]
    fn an_alias_sets_the_same_field() {
        gst::init().unwrap();
        let mut o = Outer::default();
        assert!(o.set_named("old-port", &7148i32.to_value()));
        assert_eq!(o.port, 7148);
        assert_eq!(o.get_named("port").unwrap().get::<i32>().unwrap(), 7148);
    }

    #[test]
    fn a_string_field_gets_the_default_or_nothing() {
        gst::init().unwrap();
        let with = glib::ParamSpecString::builder("p")
            .default_value(Some("0"))
            .build();
        let without = glib::ParamSpecString::builder("q").build();
        let mut s = String::from("x");
        <OrDefault as Convert<String>>::set(&mut s, &"".to_value(), &with);
        assert_eq!(s, "0");
        <OrDefault as Convert<String>>::set(&mut s, &None::<String>.to_value(), &without);
        assert_eq!(s, "");
        <OrDefault as Convert<String>>::set(&mut s, &"eth1".to_value(), &without);
        assert_eq!(s, "eth1");
    }
}
