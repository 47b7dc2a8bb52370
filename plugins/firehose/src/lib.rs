//! The `firehose` GStreamer plugin (`libgstfirehose.so`).
//!
//! Only registration lives here; the elements are in the `elements/` crates. Also built
//! as an rlib so the `firehose` command and the tests can register the elements
//! statically with [`plugin_register_static`].

use gst::glib;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // The metas every language reads; idempotent, the DPDK plugin registers them too.
    firehose_core::meta::message::register();
    // The crates that bring packet handlers come first: the elements that host handlers
    // (`fhdepay`, `fhudpchunksrc`) name the registered ones in the description of their
    // `handler` property, which is written when the element's class is made.
    firehose_spead::register(plugin)?;
    firehose_depay::register(plugin)?;
    firehose_net::register(plugin)?;
    firehose_testkit::register(plugin)?;
    firehose_record::register(plugin)?;
    firehose_ibverbs::register(plugin)?;
    firehose_xdp::register(plugin)?;
    firehose_metrics::register(plugin)?;
    firehose_cuda::register(plugin)?;
    firehose_shm::register(plugin)?;
    Ok(())
}

gst::plugin_define!(
    firehose,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    concat!(env!("CARGO_PKG_VERSION"), "-", env!("COMMIT_ID")),
    "MPL",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_REPOSITORY"),
    env!("BUILD_REL_DATE")
);

/// Registers every Firehose element in this process (idempotent).
pub fn register_static() -> Result<(), glib::BoolError> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), glib::BoolError>> = OnceLock::new();
    DONE.get_or_init(plugin_register_static).clone()
}
