//! Property enums shared by Firehose elements (GObject enum types).

use gst::glib;

use crate::memory::HugepagePolicy;

/// `hugepages=auto|require|off` (see [`HugepagePolicy`]).
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFirehoseHugepages")]
pub enum Hugepages {
    /// Hugepages if reserved, else normal pages with one warning.
    #[default]
    #[enum_value(
        name = "Auto: hugepages if reserved, else normal pages with a warning",
        nick = "auto"
    )]
    Auto = 0,
    /// Hugepages or fail at start with the command that reserves them.
    #[enum_value(name = "Require: fail at start without hugepages", nick = "require")]
    Require = 1,
    /// Normal pages.
    #[enum_value(name = "Off: normal pages", nick = "off")]
    Off = 2,
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

/// `when-full=drop|block`: what a source does when its pool has no free slot.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFirehoseWhenFull")]
pub enum WhenFull {
    /// Keep receiving, drop what does not fit and count it (`drops-pool`): live default.
    #[default]
    #[enum_value(name = "Drop: receive and count as drops-pool (live)", nick = "drop")]
    Drop = 0,
    /// Wait for a slot (the kernel socket buffer absorbs, then drops: `drops-kernel`).
    #[enum_value(name = "Block: wait for a free slot", nick = "block")]
    Block = 1,
}

/// `memory=auto|hugepages|system`: what backs an element's pool (see
/// [`HugepagePolicy`]). Replaces `hugepages=auto|require|off`, which stays as a
/// deprecated alias ([`Memory::from`] a [`Hugepages`]).
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFirehoseMemory")]
pub enum Memory {
    /// Hugepages if reserved, else normal pages with one warning.
    #[default]
    #[enum_value(
        name = "Auto: hugepages if reserved, else normal pages with a warning",
        nick = "auto"
    )]
    Auto = 0,
    /// Hugepages, or fail at start with the command that reserves them.
    #[enum_value(
        name = "Hugepages: fail at start without hugepages",
        nick = "hugepages"
    )]
    Hugepages = 1,
    /// Normal (system) pages.
    #[enum_value(name = "System: normal pages", nick = "system")]
    System = 2,
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

/// The `memory` property of an element whose pool is `what` (e.g. "chunk pool"), and
/// its deprecated alias `hugepages`; set and read with [`set_memory`] and
/// [`memory_value`].
pub fn memory_properties(what: &str) -> [glib::ParamSpec; 2] {
    use gst::prelude::*;
    [
        glib::ParamSpecEnum::builder::<Memory>("memory")
            .nick("Memory")
            .blurb(&format!(
                "What backs the {what}: auto (hugepages if reserved, else normal pages with a \
                 warning), hugepages (fail at start without them), system (normal pages)"
            ))
            .mutable_ready()
            .build(),
        glib::ParamSpecEnum::builder::<Hugepages>("hugepages")
            .nick("Hugepages")
            .blurb("Deprecated: use memory (auto = auto, require = hugepages, off = system)")
            .mutable_ready()
            .build(),
    ]
}

/// Sets `memory` from property `name` (`memory`, or the deprecated `hugepages`); false
/// for any other property.
pub fn set_memory(memory: &mut Memory, name: &str, value: &glib::Value) -> bool {
    match name {
        "memory" => *memory = value.get().expect("type checked upstream"),
        "hugepages" => {
            *memory = value
                .get::<Hugepages>()
                .expect("type checked upstream")
                .into()
        }
        _ => return false,
    }
    true
}

/// The value of property `name` (`memory` or `hugepages`) for `memory`; `None` for any
/// other property.
pub fn memory_value(memory: Memory, name: &str) -> Option<glib::Value> {
    use gst::prelude::*;
    match name {
        "memory" => Some(memory.to_value()),
        "hugepages" => Some(Hugepages::from(memory).to_value()),
        _ => None,
    }
}
