//! (in progress) fhrecordsink and fhpcapsrc.
use gst::glib;

/// Registers `fhrecordsink` and `fhpcapsrc`.
pub fn register(_plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    Ok(())
}
