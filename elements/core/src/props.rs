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

/// `landing=auto|on|off`: whether payloads are received straight into chunks or heaps
/// (`fhudpchunksrc`, `fhspeadsrc`).
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstFirehoseLanding")]
pub enum Landing {
    /// Into chunks or heaps of at most 2 MiB, which stay in the CPU caches between uses
    /// of their memory ([`crate::chunk::LANDING_MAX_CHUNK_BYTES`]); larger ones are
    /// copied into.
    #[default]
    #[enum_value(
        name = "Auto: land payloads in chunks or heaps of at most 2 MiB, copy into larger ones",
        nick = "auto"
    )]
    Auto = 0,
    /// Whatever their size.
    #[enum_value(
        name = "On: land payloads straight in the chunks or heaps",
        nick = "on"
    )]
    On = 1,
    /// Never: every payload is copied once, from a receive batch.
    #[enum_value(
        name = "Off: copy every payload once, from a receive batch",
        nick = "off"
    )]
    Off = 2,
}

impl Landing {
    /// The largest chunk or heap payloads land in, or `None` for never.
    pub fn max_bytes(self) -> Option<usize> {
        match self {
            Landing::Auto => Some(crate::chunk::LANDING_MAX_CHUNK_BYTES),
            Landing::On => Some(usize::MAX),
            Landing::Off => None,
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
