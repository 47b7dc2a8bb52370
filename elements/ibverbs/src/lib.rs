//! Firehose RDMA (ibverbs) capture: `fhibvsrc`.
//!
//! libibverbs is loaded at run time ([`verbs`], `dlopen`), so the plugin loads on any
//! machine and nothing of rdma-core is needed to build it; without RDMA, `fhibvsrc`
//! fails at start with an element error that starts "no RDMA device" and gives the
//! cause and the fix ([`probe`]).
//!
//! The receive path follows spead2's ibverbs receiver: a raw-packet QP ([`device`]),
//! one flow-steering rule per endpoint ([`flow`]), the multicast group joined through a
//! kernel socket and the interface found in sysfs ([`netif`]), one registered region
//! cut into [`firehose_core::ring`] slots, completions polled and slots re-posted in
//! batches by the [`engine`], which is generic over [`engine::RxDevice`] so that it is
//! tested end to end with a fake device. The C layouts and the header's inline verbs
//! are in [`sys`] (checked against `verbs.h` by `tests/layout.rs`). Frame parsing and filtering
//! are the shared [`firehose_core::frame::accept`]. Nothing touching a real device has run yet (see `docs/kernel-bypass.md`).

use gst::glib;

pub mod device;
pub mod engine;
pub mod flow;
pub mod ibvsrc;
pub mod netif;
pub mod probe;
pub mod sys;
pub mod verbs;

/// Registers `fhibvsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    ibvsrc::register(plugin)
}
