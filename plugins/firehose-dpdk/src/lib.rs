//! The `firehosedpdk` GStreamer plugin (`libgstfirehosedpdk.so`): the DPDK elements,
//! kept apart from the main plugin so that it never depends on libdpdk.

use gst::glib;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // The metas every language reads; idempotent, the main plugin registers them too.
    firehose_core::meta::message::register();
    firehose_dpdk::register(plugin)
}

gst::plugin_define!(
    firehosedpdk,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    concat!(env!("CARGO_PKG_VERSION"), "-", env!("COMMIT_ID")),
    "MPL",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_REPOSITORY"),
    env!("BUILD_REL_DATE")
);

/// Registers the DPDK elements in this process (idempotent).
pub fn register_static() -> Result<(), glib::BoolError> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), glib::BoolError>> = OnceLock::new();
    DONE.get_or_init(plugin_register_static).clone()
}
