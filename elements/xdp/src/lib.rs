//! Firehose AF_XDP capture: `fhxdpsrc`.

use gst::glib;

/// Registers `fhxdpsrc` with `plugin`.
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
