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

pub use base::{
    Batch, BatchSize, Open, PacketSrc, PacketSrcExt, PacketSrcImpl, Receive, ReceiveInto,
};
pub use control::LiveControl;
pub use counters::{append_pool, append_slot_pool};
pub use dry::DryWarning;
pub use nic_props::{FilterProps, FilterSettings, OldSlotName, SlotProps, SlotSize};
pub use output::{OutputSettings, PacketOutput};
pub use pool_props::{CountAlias, PoolProps, PoolSettings, PoolSize};

use gst::glib;
use gst::prelude::*;

/// What a source's `imp.rs` imports: [`crate::element::prelude`] and `CreateSuccess`.
pub mod prelude {
    pub use crate::element::prelude::*;
    pub use gst_base::subclass::base_src::CreateSuccess;
}

/// The always-present `src` pad template with `caps`.
pub fn src_template(caps: &gst::Caps) -> gst::PadTemplate {
    gst::PadTemplate::new(
        "src",
        gst::PadDirection::Src,
        gst::PadPresence::Always,
        caps,
    )
    .expect("a valid src pad template")
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
#[macro_export]
macro_rules! live_src_send_event {
    ($live:ident) => {
        fn send_event(&self, event: $crate::__gst::Event) -> bool {
            if event.type_() == $crate::__gst::EventType::Eos && self.$live.request_eos() {
                $crate::__gst::debug!(
                    $crate::__gst::CAT_RUST,
                    imp = self,
                    "EOS: pushing what was received, then ending the stream"
                );
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
