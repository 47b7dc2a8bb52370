//! The live-source layer: what every Firehose source needs around its receive loop,
//! written once. [`PacketSrc`] (the base class, [`base`]) assembles it for the packet
//! sources (`fhudpsrc`, `fhxdpsrc`, `fhibvsrc`, `fhdpdksrc`, `fhpcapsrc`,
//! `fhtestsrc`); the landing sources (`fhudpchunksrc`, `fhspeadsrc`) and `fhshmsrc`
//! still use the parts and macros below themselves.
//!
//! - [`LiveControl`]: the flushing flag, the eventfd waker and the pools an `unlock()`
//!   must reach, so `BaseSrcImpl::unlock` / `unlock_stop` are one line and every kind
//!   of wait (`poll`, a pool wait, a pacing sleep, a nap between polls) ends at once.
//! - [`counters!`](crate::counters): an element's counter set declared once, with its
//!   `stats` structure, its reset at start and its description generated from it;
//!   [`append_pool`] adds the pool's counters.
//! - [`PoolSettings`] / [`PoolProps`]: the `memory` and `pool-size` properties (bytes)
//!   of every element that owns a pool, with the deprecated aliases (`hugepages` and
//!   the old slot counts: `slots`, `frames`, `mbufs`) still working; and
//!   [`batch_size`], [`set_live`].
//! - [`src_template`]: the `src` pad template; [`caps_query`].
//! - [`output`]: `output=auto|batch|list` and `caps` of a packet source: batches to
//!   elements that understand them, one buffer per datagram to stock elements.
//! - [`live_src_base!`](crate::live_src_base) (for the sources not on the base),
//!   [`live_src_send_event!`](crate::live_src_send_event) and
//!   [`live_src_constructed!`](crate::live_src_constructed): the `BaseSrcImpl`,
//!   `ElementImpl` and `ObjectImpl` items every source writes the same way (the EOS
//!   handling keeps the batch `create` was returning: [`LiveControl::request_eos`]).

pub mod base;
mod control;
mod counters;
mod dry;
mod nic_props;
pub mod output;
mod pool_props;
mod thread_props;

pub use base::{
    Batch, BatchSize, Open, PacketSrc, PacketSrcExt, PacketSrcImpl, Receive, ReceiveInto,
};
pub use control::LiveControl;
pub use counters::{append_pool, append_slot_pool};
pub use dry::DryWarning;
pub use nic_props::{FilterProps, FilterSettings, OldSlotName, SlotProps, SlotSize};
pub use output::{OutputSettings, PacketOutput};
pub use pool_props::{CountAlias, PoolProps, PoolSettings, PoolSize};
pub use thread_props::ThreadSettings;

use gst::glib;
use gst::prelude::*;

/// What a source's `imp.rs` imports: [`crate::element::prelude`] and `CreateSuccess`.
pub mod prelude {
    pub use crate::element::prelude::*;
    pub use gst_base::subclass::base_src::CreateSuccess;
}

/// The counts of `pool` (zeros before it exists), for an element's `stats`:
/// `pool-slots`, `pool-in-use`, `pool-high-water` and `pool-exhausted`
/// ([`append_pool`] adds `memory` too).
pub fn pool_counts(pool: Option<&crate::SlotPool>) -> [(&'static str, u64); 4] {
    use crate::stats::names;
    let p = pool.map(crate::SlotPool::stats).unwrap_or_default();
    [
        (names::POOL_SLOTS, p.slots as u64),
        (names::POOL_IN_USE, p.in_use as u64),
        (names::POOL_HIGH_WATER, p.high_water as u64),
        (names::POOL_EXHAUSTED, p.exhausted),
    ]
}

/// The always-present `src` pad template with `caps`.
pub fn src_template(caps: &gst::Caps) -> gst::PadTemplate {
    crate::element::always_template("src", gst::PadDirection::Src, caps)
}

/// The `batch-size` property: `blurb`, 1 to `max`, `default`.
pub fn batch_size(blurb: &str, max: u32, default: u32) -> glib::ParamSpec {
    glib::ParamSpecUInt::builder("batch-size")
        .nick("Batch size")
        .blurb(blurb)
        .minimum(1)
        .maximum(max)
        .default_value(default)
        .mutable_ready()
        .build()
}

/// Expands to `ElementImpl::send_event` of a source whose [`LiveControl`] is field
/// `$live`: an application's EOS goes to [`LiveControl::request_eos`] (nothing received
/// is thrown away; `create` must run through [`LiveControl::create`]), anything else,
/// or an EOS before start, to GstBaseSrc. Use inside `impl ElementImpl`.
///
/// `live_src_send_event!(live, drain: "the open chunks")`: for a landing source, the EOS
/// goes to [`LiveControl::request_drain`] instead: `create` is woken with the `eos`
/// flag, takes what the socket holds, pushes what is still open (said in the log) and
/// returns EOS, which GstBaseSrc sends downstream (its own handling would end the stream
/// without them).
#[macro_export]
macro_rules! live_src_send_event {
    ($live:ident) => {
        $crate::live_src_send_event!(@ $live, request_eos, "what was received, then ending the stream");
    };
    ($live:ident, drain: $what:literal) => {
        $crate::live_src_send_event!(@ $live, request_drain, concat!($what, " first"));
    };
    (@ $live:ident, $request:ident, $what:expr) => {
        fn send_event(&self, event: $crate::__gst::Event) -> bool {
            if event.type_() == $crate::__gst::EventType::Eos && self.$live.$request() {
                $crate::__gst::debug!($crate::__gst::CAT_RUST, imp = self, "EOS: pushing {}", $what);
                return true;
            }
            self.parent_send_event(event)
        }
    };
}

/// What a live source sets in `constructed`: live (`live = false` for sources that
/// pace themselves, like replay and the test source), and time segments.
pub fn set_live(src: &impl IsA<gst_base::BaseSrc>, live: bool) {
    use gst_base::prelude::BaseSrcExt;
    let src = src.upcast_ref::<gst_base::BaseSrc>();
    if live {
        src.set_live(true);
    }
    src.set_format(gst::Format::Time);
}

/// `BaseSrcImpl::caps` for a source whose caps are `caps`: them, or their intersection
/// with `filter` (in `caps`' order).
pub fn caps_query(caps: gst::Caps, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
    Some(match filter {
        Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
        None => caps,
    })
}

/// Expands to the `BaseSrcImpl` items of a source not on [`PacketSrc`] (the landing
/// sources, `fhshmsrc`): `is_seekable` (false: a live stream cannot seek), and
/// `unlock` / `unlock_stop` through the [`LiveControl`] in field `$live`. Use inside
/// `impl BaseSrcImpl`.
///
/// - `live_src_base!(live)`: just those.
/// - `live_src_base!(live, flushing: field)`: `unlock` also calls
///   `self.field.set_flushing(true)` first and `unlock_stop` `set_flushing(false)` last
///   (a chunk engine's front, whose own flag cuts short a wait for a pool chunk).
#[macro_export]
macro_rules! live_src_base {
    ($live:ident $(, flushing: $also:ident)? $(,)?) => {
        fn is_seekable(&self) -> bool {
            false
        }

        fn unlock(&self) -> ::std::result::Result<(), $crate::__gst::ErrorMessage> {
            $( self.$also.set_flushing(true); )?
            self.$live.unlock()
        }

        fn unlock_stop(&self) -> ::std::result::Result<(), $crate::__gst::ErrorMessage> {
            self.$live.unlock_stop()?;
            $( self.$also.set_flushing(false); )?
            ::std::result::Result::Ok(())
        }
    };
}

/// Declares a landing source `$imp` (`fhudpchunksrc`, `fhspeadsrc`: a live source not on
/// [`PacketSrc`], in an element's `imp` module with [`prelude`]`::*` in scope; the
/// wrapper type is `super::$imp`), GType `$type_name`: its GObject subclass of
/// `GstPushSrc`; its [`SettingsElement`](crate::property::SettingsElement), whose
/// settings are the group type `$settings` in the field named after `settings`, and
/// whose `stats` blurb is `$stats`; its `ObjectImpl` (those properties, then live and
/// time segments: [`live_src_constructed!`](crate::live_src_constructed)); and its
/// `ElementImpl`: its metadata, the `src` pad template of caps named `$caps`, and an
/// application's EOS drained
/// ([`live_src_send_event!`](crate::live_src_send_event)`($live, drain: $what)`, with
/// the [`LiveControl`] in the field named after `live`). Every field the expansion reads
/// is named in the invocation. Its `BaseSrcImpl` and `PushSrcImpl` are its own.
///
/// ```text
/// firehose_core::landing_src! {
///     UdpChunkSrc = "GstFhUdpChunkSrc", caps fcaps::CHUNK, drain "the open chunks";
///     settings settings: Settings, live live;
///     stats format!("{}, {}", StatsMirror::counters(), LandingCounters::describe(""));
///     "Firehose UDP chunk source", "Source/Network", "Receives UDP payloads …";
/// }
/// ```
#[macro_export]
macro_rules! landing_src {
    (
        $imp:ident = $type_name:literal, caps $caps:expr, drain $what:literal;
        settings $field:ident: $settings:ty, live $live:ident;
        stats $stats:expr;
        $long_name:expr, $classification:expr, $description:expr $(;)?
    ) => {
        $crate::element_subclass!($imp, $type_name, $crate::__gst_base::PushSrc);

        impl $crate::property::SettingsElement for $imp {
            type Settings = $settings;

            fn counters() -> ::std::string::String {
                $stats
            }

            fn settings(&self) -> &::std::sync::Mutex<$settings> {
                &self.$field
            }
        }

        impl ObjectImpl for $imp {
            $crate::settings_properties!($imp);

            $crate::live_src_constructed!(true);
        }

        impl ElementImpl for $imp {
            $crate::element_metadata!($long_name, $classification, $description);

            $crate::pad_templates!($crate::src::src_template(
                &$crate::__gst::Caps::new_empty_simple($caps)
            ));

            $crate::live_src_send_event!($live, drain: $what);
        }
    };
}

/// Expands to `ObjectImpl::constructed` of a source: chains up, then [`set_live`] with
/// `$live` (false for a source that paces itself). Use inside `impl ObjectImpl`.
#[macro_export]
macro_rules! live_src_constructed {
    ($live:expr) => {
        fn constructed(&self) {
            self.parent_constructed();
            $crate::src::set_live(&*self.obj(), $live);
        }
    };
}
