//! `fhmetrics`: a GStreamer tracer that serves every Firehose element's counters over HTTP,
//! for gst-launch and applications that embed GStreamer, with no code change:
//!
//! ```text
//! GST_TRACERS="fhmetrics(port=9400)" gst-launch-1.0 fhudpsrc port=5000 ! fakesink
//! curl -s http://127.0.0.1:9400/metrics
//! ```
//!
//! Parameters: `port` (default 9400; 0 picks a free one, printed on stderr) and `address`
//! (default 127.0.0.1, localhost only; `0.0.0.0` to let other hosts scrape).
//!
//! The tracer hooks `element-new` and keeps a weak reference to each element that has a
//! `stats` property; every scrape reads those still alive, labelled with their top-level
//! pipeline. Nothing runs per buffer.

use std::sync::{Arc, Mutex};

use firehose_core::property::{OrDefault, PropertyGroup};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use crate::collect;
use crate::exposition::{encode, Format};
use crate::http::MetricsServer;

/// Default TCP port of the tracer's endpoint.
pub const DEFAULT_PORT: i32 = 9400;
/// Default address: localhost only.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1";

static CAT: std::sync::LazyLock<gst::DebugCategory> = std::sync::LazyLock::new(|| {
    gst::DebugCategory::new(
        "fhmetrics",
        gst::DebugColorFlags::empty(),
        Some("Firehose metrics tracer"),
    )
});

/// The tracer's parameters (`GST_TRACERS="fhmetrics(port=N,address=A)"`), set at
/// construction.
#[derive(Clone, Debug)]
struct Settings {
    port: i32,
    address: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            port: DEFAULT_PORT,
            address: DEFAULT_ADDRESS.into(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        // An int, not a uint: "port=9400" in GST_TRACERS parses as a gint and the
        // parameters are refused on a type mismatch.
        port => glib::ParamSpecInt::builder("port")
            .nick("Port")
            .blurb("TCP port of the /metrics endpoint (0 = any free port)")
            .minimum(0)
            .maximum(65535)
            .default_value(DEFAULT_PORT)
            .construct()
            .build();
        // NULL (or empty) is the default: there is no "no address".
        address: OrDefault => glib::ParamSpecString::builder("address")
            .nick("Address")
            .blurb("Address to listen on (127.0.0.1 = this host only)")
            .default_value(Some(DEFAULT_ADDRESS))
            .construct()
            .build();
    }
}

/// The elements a tracer watches (weak: the tracer must not keep them alive).
#[derive(Default)]
struct Watched(Vec<glib::WeakRef<gst::Element>>);

impl Watched {
    fn add(&mut self, e: &gst::Element) {
        // Drop references to gone elements now and then, so a process that makes many
        // short pipelines does not grow the list without bound.
        if self.0.len() >= 64 && self.0.len().is_power_of_two() {
            self.0.retain(|w| w.upgrade().is_some());
        }
        self.0.push(e.downgrade());
    }

    fn alive(&self) -> Vec<gst::Element> {
        self.0.iter().filter_map(|w| w.upgrade()).collect()
    }
}

mod imp {
    use super::*;

    #[derive(Default)]
    pub struct FhMetrics {
        settings: Mutex<Settings>,
        watched: Arc<Mutex<Watched>>,
        /// The endpoint; `None` inside until the first element appears, or after a
        /// failed bind (`tried` then stops further attempts).
        server: Mutex<(bool, Option<MetricsServer>)>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for FhMetrics {
        const NAME: &'static str = "GstFhMetrics";
        type Type = super::FhMetrics;
        type ParentType = gst::Tracer;
    }

    impl ObjectImpl for FhMetrics {
        firehose_core::properties!(|| Settings::default().spec_vec());

        fn set_property(&self, id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
            let done = self
                .settings
                .lock()
                .unwrap()
                .set(id.wrapping_sub(1), value, pspec);
            if !done {
                gst::error!(CAT, imp = self, "no property {} (a bug)", pspec.name());
            }
        }

        fn property(&self, id: usize, pspec: &glib::ParamSpec) -> glib::Value {
            let value = self.settings.lock().unwrap().get(id.wrapping_sub(1), pspec);
            value.unwrap_or_else(|| {
                gst::error!(CAT, imp = self, "no property {} (a bug)", pspec.name());
                pspec.default_value().clone()
            })
        }

        fn constructed(&self) {
            self.parent_constructed();
            self.register_hook(TracerHook::ElementNew);
        }
    }

    impl FhMetrics {
        /// Starts the endpoint once. Not at construction: gst-inspect-1.0 makes a
        /// tracer object just to list its properties, and must not open a port.
        fn ensure_server(&self) {
            let mut server = self.server.lock().unwrap();
            if server.0 {
                return;
            }
            server.0 = true;
            let Settings { port, address } = self.settings.lock().unwrap().clone();
            let addr = match crate::http::parse_addr(&format!("{address}:{port}")) {
                Ok(a) => a,
                Err(e) => {
                    gst::error!(CAT, "fhmetrics: {e}");
                    eprintln!("fhmetrics: {e}; no metrics will be served");
                    return;
                }
            };
            let watched = self.watched.clone();
            let render = Arc::new(move |format: Format| {
                let elements = watched.lock().unwrap().alive();
                let samples: Vec<_> = elements.iter().filter_map(collect::sample).collect();
                encode(&samples, format)
            });
            match MetricsServer::start(addr, render) {
                Ok(started) => {
                    let at = started.local_addr();
                    gst::info!(CAT, "serving http://{at}/metrics");
                    eprintln!("fhmetrics: serving http://{at}/metrics");
                    server.1 = Some(started);
                }
                Err(e) => {
                    gst::error!(CAT, "cannot listen on {addr}: {e}");
                    eprintln!(
                        "fhmetrics: cannot listen on {addr}: {e}; choose another with \
                         GST_TRACERS=\"fhmetrics(port=N)\""
                    );
                }
            }
        }
    }

    impl GstObjectImpl for FhMetrics {}

    impl TracerImpl for FhMetrics {
        const USE_STRUCTURE_PARAMS: bool = true;

        fn element_new(&self, _ts: u64, element: &gst::Element) {
            self.ensure_server();
            if collect::has_stats(element) {
                self.watched.lock().unwrap().add(element);
            }
        }
    }

    impl FhMetrics {
        pub(super) fn server_addr(&self) -> Option<std::net::SocketAddr> {
            self.server
                .lock()
                .unwrap()
                .1
                .as_ref()
                .map(|s| s.local_addr())
        }
    }
}

glib::wrapper! {
    /// The `fhmetrics` tracer.
    pub struct FhMetrics(ObjectSubclass<imp::FhMetrics>) @extends gst::Tracer, gst::Object;
}

impl FhMetrics {
    /// The address the endpoint listens on, once the first element was made and if it
    /// could bind.
    pub fn server_addr(&self) -> Option<std::net::SocketAddr> {
        self.imp().server_addr()
    }
}

/// Registers the `fhmetrics` tracer with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Tracer::register(plugin, "fhmetrics", FhMetrics::static_type())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameters_round_trip_and_null_is_the_default_address() {
        gst::init().unwrap();
        let mut s = Settings::default();
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!(
            (s.port, s.address.as_str()),
            (DEFAULT_PORT + 1, "127.0.0.1-test")
        );
        assert!(s.set_named("address", &None::<String>.to_value()));
        assert_eq!(s.address, DEFAULT_ADDRESS);
    }
}
