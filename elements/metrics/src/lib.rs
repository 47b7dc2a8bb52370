//! Firehose metrics: every element's counters for Prometheus and Grafana.
//!
//! - [`exposition`] turns `(name, value)` counters into the OpenMetrics (or Prometheus
//!   0.0.4) text format, with `pipeline`, `element` and `factory` labels and the right
//!   counter/gauge types; no GStreamer types, unit-tested alone.
//! - [`http`] serves that text on `GET /metrics` from one thread (localhost by default).
//! - [`collect`] reads the `stats` property of a pipeline's Firehose elements.
//! - [`promtool`] runs `promtool check metrics` on an exposition (tests).
//! - [`tracer`] is `fhmetrics`, a GStreamer tracer that does all of the above for
//!   gst-launch and embedding applications: `GST_TRACERS="fhmetrics(port=9400)"`.
//!
//! `firehose launch --metrics ADDR:PORT` uses [`collect`] and [`http`] directly.

#![warn(missing_docs)]

use gst::glib;

pub mod collect;
pub mod exposition;
pub mod http;
pub mod promtool;
pub mod tracer;

/// Registers the `fhmetrics` tracer with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    tracer::register(Some(plugin))
}
