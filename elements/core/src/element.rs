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
    pub use super::{ElementStats, PadRoutes};
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

/// Declares the sink `$imp` (in an element's `imp` module, with
/// [`prelude`]`::*` in scope; the wrapper type is `super::$imp`), GType `$type_name`: its
/// GObject subclass of `GstBaseSink`, its `ObjectImpl` (the properties of a
/// [`SettingsElement`](crate::property::SettingsElement):
/// [`settings_properties!`](crate::settings_properties); `constructed` turns clock sync
/// off, for a sink that paces itself or takes data as fast as it comes), and its
/// `ElementImpl`: its metadata ([`element_metadata!`](crate::element_metadata)) and a
/// [`sink_template`] of ANY caps. Its `BaseSinkImpl` is its own (with
/// [`packet_sink_query!`](crate::packet_sink_query)).
///
/// ```text
/// firehose_core::packet_sink! {
///     UdpSink = "GstFhUdpSink";
///     "Firehose UDP sink", "Sink/Network", "Sends datagrams …";
/// }
/// ```
#[macro_export]
macro_rules! packet_sink {
    (
        $imp:ident = $type_name:literal;
        $long_name:expr, $classification:expr, $description:expr $(;)?
    ) => {
        $crate::element_subclass!($imp, $type_name, $crate::__gst_base::BaseSink);

        impl ObjectImpl for $imp {
            $crate::settings_properties!($imp);

            fn constructed(&self) {
                self.parent_constructed();
                $crate::__gst_base::prelude::BaseSinkExt::set_sync(&*self.obj(), false);
            }
        }

        impl ElementImpl for $imp {
            $crate::element_metadata!($long_name, $classification, $description);

            $crate::pad_templates!($crate::element::sink_template(
                &$crate::__gst::Caps::new_any()
            ));
        }
    };
}

/// Expands to `BaseSinkImpl::query` of a sink that reads packet batches
/// ([`crate::src::output::consumer_query`]): it answers the query by which a packet
/// source asks whether its peer reads packet batches (`output=auto`): yes; and says in
/// the allocation query that it reads only the Rust metas (the readable ones can be
/// left out). Use inside `impl BaseSinkImpl`.
#[macro_export]
macro_rules! packet_sink_query {
    () => {
        fn query(&self, query: &mut $crate::__gst::QueryRef) -> bool {
            $crate::src::output::consumer_query(query, |q| {
                $crate::__gst_base::subclass::prelude::BaseSinkImplExt::parent_query(self, q)
            })
        }
    };
}

/// The always-present pad template `name`, of `direction`, with `caps`.
pub fn always_template(
    name: &str,
    direction: gst::PadDirection,
    caps: &gst::Caps,
) -> gst::PadTemplate {
    gst::PadTemplate::new(name, direction, gst::PadPresence::Always, caps)
        .expect("a valid pad template")
}

/// The always-present `sink` pad template with `caps`.
pub fn sink_template(caps: &gst::Caps) -> gst::PadTemplate {
    always_template("sink", gst::PadDirection::Sink, caps)
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

/// What a chain function returns.
type FlowResult = Result<gst::FlowSuccess, gst::FlowError>;

/// Routes the functions of an element's own pad to methods of its implementation `T`,
/// each behind `catch_panic_pad_function` (after a panic in one, it fails instead of
/// unwinding into GStreamer): `.chain_to(Self::sink_chain)` for the closure each
/// gst-plugins-rs element writes around each. Use on the builder in `with_class`.
pub trait PadRoutes: Sized {
    /// The chain function: `f(imp, pad, buffer)`.
    fn chain_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, gst::Buffer) -> FlowResult) -> Self;
    /// The chain-list function: `f(imp, pad, list)`.
    fn chain_list_to<T: ElementImpl>(
        self,
        f: fn(&T, &gst::Pad, gst::BufferList) -> FlowResult,
    ) -> Self;
    /// The event function: `f(imp, pad, event)`.
    fn event_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, gst::Event) -> bool) -> Self;
    /// The query function: `f(imp, pad, query)`.
    fn query_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, &mut gst::QueryRef) -> bool) -> Self;
}

impl PadRoutes for gst::PadBuilder<gst::Pad> {
    fn chain_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, gst::Buffer) -> FlowResult) -> Self {
        self.chain_function(move |pad, parent, buffer| {
            T::catch_panic_pad_function(
                parent,
                || Err(gst::FlowError::Error),
                |imp| f(imp, pad, buffer),
            )
        })
    }

    fn chain_list_to<T: ElementImpl>(
        self,
        f: fn(&T, &gst::Pad, gst::BufferList) -> FlowResult,
    ) -> Self {
        self.chain_list_function(move |pad, parent, list| {
            T::catch_panic_pad_function(
                parent,
                || Err(gst::FlowError::Error),
                |imp| f(imp, pad, list),
            )
        })
    }

    fn event_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, gst::Event) -> bool) -> Self {
        self.event_function(move |pad, parent, event| {
            T::catch_panic_pad_function(parent, || false, |imp| f(imp, pad, event))
        })
    }

    fn query_to<T: ElementImpl>(self, f: fn(&T, &gst::Pad, &mut gst::QueryRef) -> bool) -> Self {
        self.query_function(move |pad, parent, query| {
            T::catch_panic_pad_function(parent, || false, |imp| f(imp, pad, query))
        })
    }
}

/// Adds `pads` (an element's own, made in `with_class`) to `element`: for
/// `ObjectImpl::constructed`.
pub fn add_pads(element: &impl IsA<gst::Element>, pads: &[&gst::Pad]) {
    for pad in pads {
        element
            .add_pad(*pad)
            .expect("a pad of its own is added once");
    }
}

/// `started` (what an element's start at READY → PAUSED returned) for `change_state`:
/// its error posted on the bus, the state change failed.
pub fn start_or_post<T: ElementImpl>(
    imp: &T,
    started: Result<(), gst::ErrorMessage>,
) -> Result<(), gst::StateChangeError> {
    started.map_err(|e| {
        imp.post_error_message(e);
        gst::StateChangeError
    })
}

/// Posts `message` as `element`'s `ResourceError::Read` error and returns
/// `FlowError::Error`: a receive or a map that failed ends the stream with an error
/// that says why.
pub fn read_error(
    element: &impl IsA<gst::Element>,
    message: impl std::fmt::Display,
) -> gst::FlowError {
    gst::element_error!(element, gst::ResourceError::Read, ("{}", message));
    gst::FlowError::Error
}

/// Registers the element type `T` as `name` with `plugin` (or with the process when
/// `None`), at rank NONE: a Firehose element is chosen by name, never autoplugged.
pub fn register<T: StaticType>(
    plugin: Option<&gst::Plugin>,
    name: &str,
) -> Result<(), gst::glib::BoolError> {
    gst::Element::register(plugin, name, gst::Rank::NONE, T::static_type())
}
