//! SPEAD for Firehose.
//!
//! The engine (no GStreamer types except the heap meta): [`wire`] decodes and encodes
//! SPEAD-64-* packets without allocating; [`descriptor`] handles item descriptors;
//! [`heap`] is what a reassembled heap carries downstream.

use gst::glib;

pub mod chunk;
pub mod depay;
pub mod descriptor;
pub mod heap;
pub mod reassembly;
pub mod pay;
pub mod send;
pub mod wire;

/// Registers the SPEAD elements and the `spead` packet handler.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::handler::register_handler(chunk::NAME, chunk::factory);
    pay::register(plugin)?;
    depay::register(plugin)?;
    Ok(())
}
