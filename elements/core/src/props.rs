//! Property enums shared by Firehose elements (GObject enum types).
//!
//! Each plugin (`libgstfirehose.so`, `libgstfirehosedpdk.so`) links its own copy of this
//! crate, and both may load into one process (gst-launch with both on GST_PLUGIN_PATH,
//! the registry scanner): the copy that comes second finds each enum's type by name and
//! uses it (same values: same source) instead of registering it again
//! (`shared_enum!` below), so both plugins' properties have the one type.

use gst::glib;
use gst::prelude::*;

use crate::memory::HugepagePolicy;

/// The GObject enum type of a Rust enum, shared between copies of this crate: each
/// plugin (`libgstfirehose.so`, `libgstfirehosedpdk.so`) links its own copy, and both
/// may load into one process (gst-launch with both on GST_PLUGIN_PATH, the registry
/// scanner). The copy that comes second finds the type by name and uses it (same values:
/// same source) instead of registering it again, which GLib refuses and which
/// `#[derive(glib::Enum)]` turns into a panic. Implements what that derive does: the
/// type, values in and out of `glib::Value`, and `ParamSpecEnum` builders. Declared as
/// with [`property_enum!`](crate::property_enum): one line per value.
macro_rules! shared_enum {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident = $gname:literal {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $value:literal, $nick:literal, $name:literal;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default)]
        #[repr(u32)]
        pub enum $ty {
            $(
                $(#[$variant_meta])*
                $variant = $value,
            )+
        }

        impl $ty {
            fn register_enum() -> glib::Type {
                static TYPE: std::sync::OnceLock<glib::Type> = std::sync::OnceLock::new();
                *TYPE.get_or_init(|| {
                    const N: usize = [$($value),+].len() + 1;
                    // GLib keeps pointers into the table for ever: leaked once.
                    let values: &'static mut [glib::gobject_ffi::GEnumValue; N] = Box::leak(Box::new([
                        $(glib::gobject_ffi::GEnumValue {
                            value: $value,
                            value_name: concat!($name, "\0").as_ptr().cast(),
                            value_nick: concat!($nick, "\0").as_ptr().cast(),
                        },)+
                        glib::gobject_ffi::GEnumValue {
                            value: 0,
                            value_name: std::ptr::null(),
                            value_nick: std::ptr::null(),
                        },
                    ]));
                    let name = concat!($gname, "\0").as_ptr().cast();
                    // SAFETY: a NUL-terminated name; a NULL-terminated value table that
                    // lives for ever; the type found by name has the same values.
                    unsafe {
                        let existing = glib::gobject_ffi::g_type_from_name(name);
                        let t = if existing != glib::gobject_ffi::G_TYPE_INVALID {
                            existing
                        } else {
                            glib::gobject_ffi::g_enum_register_static(name, values.as_ptr())
                        };
                        let t: glib::Type = glib::translate::from_glib(t);
                        assert!(t.is_valid(), "registering {}", $gname);
                        t
                    }
                })
            }
        }

        impl glib::translate::IntoGlib for $ty {
            type GlibType = i32;
            fn into_glib(self) -> i32 {
                self as i32
            }
        }

        impl glib::translate::TryFromGlib<i32> for $ty {
            type Error = i32;
            unsafe fn try_from_glib(value: i32) -> Result<Self, i32> {
                match value {
                    $(v if v == $value => Ok($ty::$variant),)+
                    other => Err(other),
                }
            }
        }

        impl glib::translate::FromGlib<i32> for $ty {
            unsafe fn from_glib(value: i32) -> Self {
                // SAFETY: GLib only hands out values of the registered table.
                unsafe { <Self as glib::translate::TryFromGlib<i32>>::try_from_glib(value) }
                    .unwrap_or_default()
            }
        }

        impl glib::value::ValueType for $ty {
            type Type = Self;
        }

        // SAFETY: reads a GValue the checker has confirmed holds this enum type.
        unsafe impl<'a> glib::value::FromValue<'a> for $ty {
            type Checker = glib::value::GenericValueTypeChecker<Self>;
            unsafe fn from_value(value: &'a glib::Value) -> Self {
                // SAFETY: as above.
                unsafe {
                    glib::translate::from_glib(glib::gobject_ffi::g_value_get_enum(
                        glib::translate::ToGlibPtr::to_glib_none(value).0,
                    ))
                }
            }
        }

        impl glib::value::ToValue for $ty {
            fn to_value(&self) -> glib::Value {
                let mut value = glib::Value::for_value_type::<Self>();
                // SAFETY: the value was made for this enum type.
                unsafe {
                    glib::gobject_ffi::g_value_set_enum(
                        glib::translate::ToGlibPtrMut::to_glib_none_mut(&mut value).0,
                        glib::translate::IntoGlib::into_glib(*self),
                    )
                }
                value
            }
            fn value_type(&self) -> glib::Type {
                <Self as glib::prelude::StaticType>::static_type()
            }
        }

        impl From<$ty> for glib::Value {
            fn from(v: $ty) -> Self {
                glib::value::ToValue::to_value(&v)
            }
        }

        impl glib::prelude::StaticType for $ty {
            fn static_type() -> glib::Type {
                Self::register_enum()
            }
        }

        impl glib::HasParamSpec for $ty {
            type ParamSpec = glib::ParamSpecEnum;
            type SetValue = Self;
            type BuilderFn = fn(&str, Self) -> glib::ParamSpecEnumBuilder<'_, Self>;
            fn param_spec_builder() -> Self::BuilderFn {
                |name, default_value| Self::ParamSpec::builder_with_default(name, default_value)
            }
        }
    };
}

shared_enum! {
    /// `hugepages=auto|require|off` (see [`HugepagePolicy`]).
    pub enum Hugepages = "GstFhHugepages" {
        /// Hugepages if reserved, else normal pages with one warning.
        #[default]
        Auto = 0, "auto", "Auto: hugepages if reserved, else normal pages with a warning";
        /// Hugepages or fail at start with the command that reserves them.
        Require = 1, "require", "Require: fail at start without hugepages";
        /// Normal pages.
        Off = 2, "off", "Off: normal pages";
    }
}

impl From<Hugepages> for HugepagePolicy {
    fn from(h: Hugepages) -> Self {
        match h {
            Hugepages::Auto => HugepagePolicy::Auto,
            Hugepages::Require => HugepagePolicy::Require,
            Hugepages::Off => HugepagePolicy::Off,
        }
    }
}

shared_enum! {
    /// `when-full=auto|drop|block`: what an element does when its pool or queue has no
    /// room.
    pub enum WhenFull = "GstFhWhenFull" {
        /// Keep receiving, drop what does not fit and count it (`drops-pool`): live default.
        Drop = 0, "drop", "Drop: receive and count as drops-pool (live)";
        /// Wait for a slot (the kernel socket buffer absorbs, then drops: `drops-kernel`).
        Block = 1, "block", "Block: wait for a free slot";
        /// Block when the data comes from a source that is not live (a replay, a file: it
        /// can wait, and dropping would lose data for nothing), drop when it is live (a
        /// network: waiting would only move the loss into the kernel).
        #[default]
        Auto = 2, "auto", "Auto: block when upstream is not live (replay, files), drop when it is";
    }
}

impl WhenFull {
    /// Whether to wait when full, given whether the data's source is live (a source
    /// element asks this of itself).
    pub fn blocks(self, live: bool) -> bool {
        match self {
            WhenFull::Drop => false,
            WhenFull::Block => true,
            WhenFull::Auto => !live,
        }
    }

    /// [`WhenFull::blocks`] for an element downstream of `sinkpad`, which asks upstream
    /// with a latency query (answered once upstream is prerolling or playing: call it
    /// when the caps or the first buffer arrive). An upstream that does not answer is
    /// taken as live: dropping and counting is what a capture did before `auto`.
    pub fn blocks_for(self, sinkpad: &gst::Pad) -> bool {
        if self != WhenFull::Auto {
            return self.blocks(true);
        }
        let mut q = gst::query::Latency::new();
        let live = !sinkpad.peer_query(&mut q) || q.result().0;
        self.blocks(live)
    }
}

shared_enum! {
    /// `memory=auto|hugepages|system`: what backs an element's pool (see
    /// [`HugepagePolicy`]). Replaces `hugepages=auto|require|off`, which stays as a
    /// deprecated alias ([`Memory::from`] a [`Hugepages`]).
    pub enum Memory = "GstFhMemory" {
        /// Hugepages if reserved, else normal pages with one warning.
        #[default]
        Auto = 0, "auto", "Auto: hugepages if reserved, else normal pages with a warning";
        /// Hugepages, or fail at start with the command that reserves them.
        Hugepages = 1, "hugepages", "Hugepages: fail at start without hugepages";
        /// Normal (system) pages.
        System = 2, "system", "System: normal pages";
    }
}

impl From<Memory> for HugepagePolicy {
    fn from(m: Memory) -> Self {
        match m {
            Memory::Auto => HugepagePolicy::Auto,
            Memory::Hugepages => HugepagePolicy::Require,
            Memory::System => HugepagePolicy::Off,
        }
    }
}

impl From<Hugepages> for Memory {
    fn from(h: Hugepages) -> Self {
        match h {
            Hugepages::Auto => Memory::Auto,
            Hugepages::Require => Memory::Hugepages,
            Hugepages::Off => Memory::System,
        }
    }
}

impl From<Memory> for Hugepages {
    fn from(m: Memory) -> Self {
        match m {
            Memory::Auto => Hugepages::Auto,
            Memory::Hugepages => Hugepages::Require,
            Memory::System => Hugepages::Off,
        }
    }
}

/// The `memory` property of an element whose pool is `what` (e.g. "chunk pool").
pub fn memory_spec(what: &str) -> glib::ParamSpec {
    glib::ParamSpecEnum::builder::<Memory>("memory")
        .nick("Memory")
        .blurb(&format!(
            "What backs the {what}: auto (hugepages if reserved, else normal pages with a \
             warning), hugepages (fail at start without them), system (normal pages)"
        ))
        .mutable_ready()
        .build()
}

/// `hugepages`, the deprecated alias of `memory`: a [`Memory`] field behind it
/// converts with [`HugepagesAlias`].
pub fn hugepages_spec() -> glib::ParamSpec {
    glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
        .nick("Hugepages")
        .blurb("Deprecated: use memory (auto = auto, require = hugepages, off = system)")
        .mutable_ready()
        .build()
}

/// A [`Memory`] field behind the deprecated `hugepages` property
/// ([`crate::property::Convert`]).
#[derive(Debug)]
pub struct HugepagesAlias;

impl crate::property::Convert<Memory> for HugepagesAlias {
    fn set(field: &mut Memory, value: &glib::Value, _: &glib::ParamSpec) {
        *field = value
            .get::<Hugepages>()
            .expect("GObject checks the type first")
            .into();
    }
    fn get(field: &Memory, _: &glib::ParamSpec) -> glib::Value {
        Hugepages::from(*field).to_value()
    }
}

shared_enum! {
    /// `output=auto|batch|list`: what a packet source pushes.
    pub enum Output = "GstFhOutput" {
        /// One buffer per batch, `application/x-firehose-packets` with a packet-batch meta.
        Batch = 0, "batch", "Batch: one buffer per batch, application/x-firehose-packets";
        /// A buffer list of one buffer per datagram (sub-memories of the batch, no copy),
        /// with the `caps` property's caps (`application/octet-stream` when unset).
        List = 1, "list", "List: one buffer per datagram in a buffer list (the caps property's caps)";
        /// Batch when the element downstream understands packet batches (it answers a caps
        /// query with caps that include `application/x-firehose-packets`, not with ANY),
        /// list otherwise: stock elements (filesink, appsink, …) get plain datagrams.
        #[default]
        Auto = 2, "auto", "Auto: batch when downstream understands packet batches, list otherwise";
    }
}
