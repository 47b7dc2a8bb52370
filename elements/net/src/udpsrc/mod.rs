//! (in progress)
use gst::glib;

/// Registers the element (in progress).
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
