//! (in progress) fhdepay and the seq handler.
use gst::glib;

/// Registers `fhdepay` and the `seq` handler.
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
