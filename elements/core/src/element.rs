//! The GObject/GStreamer skeleton every Firehose element repeats, written once: its
//! debug category ([`debug_category!`](crate::debug_category)), its metadata
//! ([`element_metadata!`](crate::element_metadata)), its pad templates
//! ([`pad_templates!`](crate::pad_templates), [`sink_template`]), and the `stats` it
//! posts ([`ElementStats`]).
//!
//! Why macros: these are items of the element's own trait impls (`ElementImpl`,
//! `BaseSrcImpl`, …), which a helper function cannot provide; each macro expands to
//! exactly the item an element would otherwise write by hand.

use gst::prelude::*;
use gst::subclass::prelude::*;

use crate::stats;

/// What an element's `imp.rs` uses of GStreamer's subclassing API, and
/// [`ElementStats`], in one import.
pub mod prelude {
    pub use super::ElementStats;
    pub use gst::glib;
    pub use gst::prelude::*;
    pub use gst::subclass::prelude::*;
    pub use gst_base::subclass::prelude::*;
}

/// The author in every element's metadata.
pub const AUTHOR: &str = "Firehose developers";

/// Declares `static $name: LazyLock<gst::DebugCategory>`: the debug category of an
/// element, named after it, without colours.
///
/// ```
/// firehose_core::debug_category!(CAT, "fhexample", "An example element");
/// # gst::init().unwrap();
/// assert_eq!(CAT.name(), "fhexample");
/// ```
#[macro_export]
macro_rules! debug_category {
    ($name:ident, $element:expr, $description:expr $(,)?) => {
        static $name: ::std::sync::LazyLock<$crate::__gst::DebugCategory> =
            ::std::sync::LazyLock::new(|| {
                $crate::__gst::DebugCategory::new(
                    $element,
                    $crate::__gst::DebugColorFlags::empty(),
                    ::std::option::Option::Some($description),
                )
            });
    };
}

/// Declares the GObject subclass `$imp` (in an element's `imp` module; the wrapper type
/// is `super::$imp`) named `$type_name`, of `$parent`, and its empty `GstObjectImpl`.
#[macro_export]
macro_rules! element_subclass {
    ($imp:ident, $type_name:expr, $parent:ty $(,)?) => {
        #[$crate::__glib::object_subclass]
        impl ObjectSubclass for $imp {
            const NAME: &'static str = $type_name;
            type Type = super::$imp;
            type ParentType = $parent;
        }

        impl GstObjectImpl for $imp {}
    };
}

/// Expands to `ObjectImpl::properties`: the `ParamSpec`s that `$build` (a closure)
/// returns, built once. Use inside `impl ObjectImpl`.
#[macro_export]
macro_rules! properties {
    ($build:expr $(,)?) => {
        fn properties() -> &'static [$crate::__glib::ParamSpec] {
            static PROPS: ::std::sync::LazyLock<::std::vec::Vec<$crate::__glib::ParamSpec>> =
                ::std::sync::LazyLock::new($build);
            PROPS.as_ref()
        }
    };
}

/// Expands to `ElementImpl::metadata`: long name, classification and description, by
/// [`AUTHOR`]. Use inside `impl ElementImpl`.
#[macro_export]
macro_rules! element_metadata {
    ($long_name:expr, $classification:expr, $description:expr $(,)?) => {
        fn metadata() -> ::std::option::Option<&'static $crate::__gst::subclass::ElementMetadata> {
            static META: ::std::sync::LazyLock<$crate::__gst::subclass::ElementMetadata> =
                ::std::sync::LazyLock::new(|| {
                    $crate::__gst::subclass::ElementMetadata::new(
                        $long_name,
                        $classification,
                        $description,
                        $crate::element::AUTHOR,
                    )
                });
            ::std::option::Option::Some(&*META)
        }
    };
}

/// Expands to `ElementImpl::pad_templates`, the templates built once from the
/// expressions given (e.g. [`crate::src::src_template`], [`sink_template`]). Use inside
/// `impl ElementImpl`.
#[macro_export]
macro_rules! pad_templates {
    ($($template:expr),+ $(,)?) => {
        fn pad_templates() -> &'static [$crate::__gst::PadTemplate] {
            static TEMPLATES: ::std::sync::LazyLock<::std::vec::Vec<$crate::__gst::PadTemplate>> =
                ::std::sync::LazyLock::new(|| ::std::vec![$($template),+]);
            TEMPLATES.as_ref()
        }
    };
}

/// The always-present `sink` pad template with `caps`.
pub fn sink_template(caps: &gst::Caps) -> gst::PadTemplate {
    gst::PadTemplate::new(
        "sink",
        gst::PadDirection::Sink,
        gst::PadPresence::Always,
        caps,
    )
    .expect("a valid sink pad template")
}

/// An element with a `stats` property: what it reads, and the element message with the
/// same structure that it posts every `stats-interval` and at the end.
pub trait ElementStats: ObjectSubclass<Type: IsA<gst::Element>> {
    /// The `firehose-stats` structure of the element's counters now.
    fn stats(&self) -> gst::Structure;

    /// Posts [`ElementStats::stats`] as an element message.
    fn post_stats(&self) {
        stats::post(self.obj().upcast_ref(), self.stats());
    }

    /// [`ElementStats::post_stats`] if `due` (what a [`stats::StatsTimer`] said, asked
    /// under the state lock, which the caller has released by now).
    fn post_stats_if(&self, due: bool) {
        if due {
            self.post_stats();
        }
    }
}
