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

use std::sync::{Arc, Mutex, OnceLock};

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
        settings: Mutex<(i32, String)>,
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
        fn properties() -> &'static [glib::ParamSpec] {
            static PROPS: OnceLock<Vec<glib::ParamSpec>> = OnceLock::new();
            PROPS.get_or_init(|| {
                vec![
                    // An int, not a uint: "port=9400" in GST_TRACERS parses as a gint and
                    // the parameters are refused on a type mismatch.
                    glib::ParamSpecInt::builder("port")
                        .nick("Port")
                        .blurb("TCP port of the /metrics endpoint (0 = any free port)")
                        .minimum(0)
                        .maximum(65535)
                        .default_value(DEFAULT_PORT)
                        .construct()
                        .build(),
                    glib::ParamSpecString::builder("address")
                        .nick("Address")
                        .blurb("Address to listen on (127.0.0.1 = this host only)")
                        .default_value(Some(DEFAULT_ADDRESS))
                        .construct()
                        .build(),
                ]
            })
        }

        fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
            let mut s = self.settings.lock().unwrap();
            match pspec.name() {
                "port" => s.0 = value.get().expect("type checked upstream"),
                "address" => {
                    s.1 = value
                        .get::<Option<String>>()
                        .expect("type checked upstream")
                        .unwrap_or_else(|| DEFAULT_ADDRESS.into())
                }
                other => unreachable!("unknown property {other}"),
            }
        }

        fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
            let s = self.settings.lock().unwrap();
            match pspec.name() {
                "port" => s.0.to_value(),
                "address" => s.1.to_value(),
                other => unreachable!("unknown property {other}"),
            }
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
            let (port, address) = self.settings.lock().unwrap().clone();
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
