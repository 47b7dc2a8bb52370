//! Firehose AF_XDP capture: `fhxdpsrc`.
//!
//! The element loads its own XDP program, hand-assembled in Rust ([`bpf`], [`prog`]),
//! with plain `bpf(2)` calls ([`sys`]) — no clang, libbpf or libxdp — and receives
//! through an AF_XDP socket ([`xsk`]) whose frames are lent downstream without a copy
//! ([`xdpsrc`]). Frames are parsed and filtered by the shared [`firehose_core::frame::accept`].

use gst::glib;

pub mod bpf;
pub mod engine;
pub mod prog;
#[cfg(test)]
pub(crate) mod rx;
pub mod sys;
pub mod xdpsrc;
pub mod xsk;

/// Registers `fhxdpsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    xdpsrc::register(plugin)
}
