//! Firehose test kit: a source of verifiable packets and a checker for them.
//!
//! - `fhtestsrc` produces `application/x-firehose-packets` batches of "Firehose test
//!   packets" ([`pattern`]) numbered in sequence, at a chosen rate or as fast as possible.
//! - `fhcheck` verifies every byte of every packet and accounts lost, duplicated,
//!   reordered and late packets ([`checker`]).
//!
//! Put any Firehose chain between them (e.g. `fhudpsink` … `fhudpsrc`) to prove that it
//! delivers every packet intact. The engines ([`pattern`], [`checker`]) use no GStreamer
//! types and can be tested and benchmarked alone; [`testsrc`] and [`check`] are thin
//! element adapters over them. `fhtestsrc` is a `PacketSrc` subclass (the worked
//! example of docs/architecture.md) whose transport is [`generate`], paced with
//! [`firehose_core::pace`].

#![warn(missing_docs)]

use gst::glib;

pub mod check;
pub mod checker;
pub mod elementdoc;
pub mod generate;
pub mod netns;
pub mod pattern;
pub mod run;
pub mod starterror;
pub mod testsrc;

/// Registers `fhtestsrc` and `fhcheck` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    testsrc::register(Some(plugin))?;
    check::register(Some(plugin))?;
    Ok(())
}
