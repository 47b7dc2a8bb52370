//! Firehose DPDK elements: `fhdpdksrc` and `fhdpdksink`.

use gst::glib;

/// Registers the DPDK elements with `plugin`.
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
