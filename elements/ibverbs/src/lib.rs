//! Firehose RDMA (ibverbs) capture: `fhibvsrc`.
//!
//! libibverbs is loaded at run time ([`verbs`], `dlopen`), so the plugin loads on any
//! machine; without RDMA, `fhibvsrc` fails at start with an element error that starts
//! "no RDMA device" and gives the cause and the fix ([`probe`]).
//!
//! The GStreamer-free parts are tested without hardware: the device decision
//! ([`probe::decide`]), the receive ring's slot accounting ([`firehose_core::ring`]) and the frame →
//! packet-entry parsing ([`rx`], over the shared [`firehose_core::frame`] parser).
//! The raw-packet QP receive path itself is not implemented yet (see
//! `docs/kernel-bypass.md`): on a machine with a device, start fails saying so.

use gst::glib;

pub mod ibvsrc;
pub mod probe;
pub mod rx;
pub mod verbs;

/// Registers `fhibvsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    ibvsrc::register(plugin)
}
