//! Property enums shared by Firehose elements (GObject enum types).

use gst::glib;
use gst::prelude::*;

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

/// `when-full=auto|drop|block`: what an element does when its pool or queue has no
/// room.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFirehoseWhenFull")]
pub enum WhenFull {
    /// Keep receiving, drop what does not fit and count it (`drops-pool`): live default.
    #[enum_value(name = "Drop: receive and count as drops-pool (live)", nick = "drop")]
    Drop = 0,
    /// Wait for a slot (the kernel socket buffer absorbs, then drops: `drops-kernel`).
    #[enum_value(name = "Block: wait for a free slot", nick = "block")]
    Block = 1,
    /// Block when the data comes from a source that is not live (a replay, a file: it
    /// can wait, and dropping would lose data for nothing), drop when it is live (a
    /// network: waiting would only move the loss into the kernel).
    #[default]
    #[enum_value(
        name = "Auto: block when upstream is not live (replay, files), drop when it is",
        nick = "auto"
    )]
    Auto = 2,
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
