//! Firehose recording and replay.
//!
//! - `fhrecordsink` ([`recordsink`]) writes what it receives to disk: packet batches as
//!   nanosecond pcap or pcapng with synthesized Ethernet/IP/UDP headers, or any buffer
//!   as raw payload plus an index; large aligned `O_DIRECT` writes from pooled memory on
//!   a writer thread, rotation by size or time, a ring of files, an fsync policy.
//! - `fhpcapsrc` ([`pcapsrc`]) replays pcap or pcapng files (tcpdump's, ours) as packet
//!   batches, at the original pace, at a fixed rate or as fast as possible.
//!
//! The engines use no GStreamer types and are tested alone: [`format`] (what goes in the
//! files), [`read`] (parsing captures), [`disk`] (writing them). docs/recording.md is
//! the user guide.

#![warn(missing_docs)]

use gst::glib;

pub mod disk;
pub mod format;
pub mod pcapsrc;
pub mod read;
pub mod recordsink;

pub use format::index;

/// Registers `fhrecordsink` and `fhpcapsrc` with `plugin` (or with the process when
/// `None`, as tests do).
pub fn register_elements(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    recordsink::register(plugin)?;
    pcapsrc::register(plugin)?;
    Ok(())
}

/// Registers `fhrecordsink` and `fhpcapsrc`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    register_elements(Some(plugin))
}
