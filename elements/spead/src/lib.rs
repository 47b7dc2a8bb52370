//! SPEAD for Firehose.
//!
//! The engine (no GStreamer types except the heap meta): [`wire`] decodes and encodes
//! SPEAD-64-* packets without allocating; [`descriptor`] handles item descriptors;
//! [`heap`] is what a reassembled heap carries downstream.

use gst::glib;

pub mod descriptor;
pub mod heap;
pub mod wire;

/// Registers the SPEAD elements and the `spead` packet handler.
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
