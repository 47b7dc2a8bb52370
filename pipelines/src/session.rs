//! Driving one pipeline: build it from a description, start it, read its bus, stop it.
//!
//! Shared by `launch`, `demo` and `bench`, so that every command reports errors and
//! statistics the same way.

use std::time::{Duration, Instant};

use gst::prelude::*;

use crate::statsline::StatsBoard;

/// How long an element may stay silent before its `stats` property is polled instead.
const SILENCE_BEFORE_POLL: Duration = Duration::from_millis(2500);

/// What a bus read ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusEvent {
    /// The whole pipeline reached end-of-stream.
    Eos,
    /// An element posted an error; the text is ready to print.
    Error(String),
}

/// One pipeline, its bus and the statistics its elements reported.
#[derive(Debug)]
pub struct Session {
    /// The pipeline being driven.
    pub pipeline: gst::Pipeline,
    bus: gst::Bus,
    /// Latest statistics per element.
    pub board: StatsBoard,
    /// Elements with a `stats` property holding a structure (the Firehose elements).
    stats_elements: Vec<gst::Element>,
    started_at: Option<Instant>,
    finished_at: Option<Instant>,
}

/// Parses a gst-launch style description into a pipeline. Every parse problem is fatal
/// (no half-built pipelines with missing elements); a lone element is put in a pipeline.
pub fn parse(description: &str) -> Result<gst::Pipeline, String> {
    // A value out of a property's range is only a GLib warning while parsing (the
    // property keeps another value and the pipeline runs): caught here and made fatal,
    // as an unparsable value already is.
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = refused.clone();
    let handler = gst::glib::log_set_handler(
        Some("GLib-GObject"),
        gst::glib::LogLevels::LEVEL_WARNING | gst::glib::LogLevels::LEVEL_CRITICAL,
        false,
        false,
        move |_, _, message| {
            if let Ok(mut v) = seen.lock() {
                v.push(message.to_string());
            }
        },
    );
    let parsed = gst::parse::launch_full(description, None, gst::ParseFlags::FATAL_ERRORS);
    gst::glib::log_remove_handler(Some("GLib-GObject"), handler);
    let element = parsed.map_err(|e| e.message().to_string())?;
    let refused = std::mem::take(&mut *refused.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(first) = refused
        .into_iter()
        .find(|m| m.contains("out of range") || m.contains("invalid"))
    {
        // The pipeline is dropped unstarted.
        return Err(first);
    }
    match element.downcast::<gst::Pipeline>() {
        Ok(pipeline) => Ok(pipeline),
        Err(element) => {
            let pipeline = gst::Pipeline::new();
            pipeline
                .add(&element)
                .map_err(|e| format!("could not put {} in a pipeline: {e}", element.name()))?;
            Ok(pipeline)
        }
    }
}

/// "ERROR from <element>: <message>\n<debug>" for an error message.
pub fn format_error(err: &gst::message::Error) -> String {
    let src = err
        .src()
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| "pipeline".into());
    let mut text = format!("ERROR from {src}: {}", err.error());
    if let Some(debug) = err.debug() {
        text.push('\n');
        text.push_str(&debug);
    }
    text
}

/// Reads an integer property whatever its integer type (elements differ: `gint`,
/// `guint`, `guint64`…).
pub fn int_property(element: &gst::Element, name: &str) -> Option<u64> {
    element.find_property(name)?;
    let v = element.property_value(name);
    v.get::<u32>()
        .map(u64::from)
        .or_else(|_| v.get::<i32>().map(|x| x.max(0) as u64))
        .or_else(|_| v.get::<u64>())
        .or_else(|_| v.get::<i64>().map(|x| x.max(0) as u64))
        .ok()
}

/// The "firehose-stats" structure in the `stats` property of an element, if it has one
/// (shared with the metrics endpoint, so both see the same elements).
pub use firehose_metrics::collect::stats_property;

impl Session {
    /// Parses `description` (see [`parse`]) and wraps it in a session.
    pub fn from_description(description: &str) -> Result<Self, String> {
        Ok(Self::new(parse(description)?))
    }

    /// A session around an existing pipeline.
    pub fn new(pipeline: gst::Pipeline) -> Self {
        let bus = pipeline.bus().expect("a pipeline always has a bus");
        let mut s = Self {
            pipeline,
            bus,
            board: StatsBoard::new(),
            stats_elements: Vec::new(),
            started_at: None,
            finished_at: None,
        };
        s.find_stats_elements();
        s
    }

    fn find_stats_elements(&mut self) {
        self.stats_elements = firehose_metrics::collect::stats_elements(self.pipeline.upcast_ref());
    }

    /// The element called `name` anywhere in the pipeline.
    pub fn element(&self, name: &str) -> Option<gst::Element> {
        self.pipeline.by_name(name)
    }

    /// Sets the pipeline to PLAYING. On failure returns the element's error text (or a
    /// generic one when no element said why).
    pub fn start(&mut self) -> Result<(), String> {
        let now = Instant::now();
        self.started_at = Some(now);
        self.board.restart_clock(now);
        match self.pipeline.set_state(gst::State::Playing) {
            Ok(_) => Ok(()),
            Err(_) => {
                // The failing element posts its error before the state change returns.
                let msg = self.bus.timed_pop_filtered(
                    gst::ClockTime::from_mseconds(500),
                    &[gst::MessageType::Error],
                );
                Err(match msg.as_ref().map(|m| m.view()) {
                    Some(gst::MessageView::Error(e)) => format_error(e),
                    _ => "ERROR: the pipeline could not be started (no element said why; \
                          run with GST_DEBUG=3 for details)"
                        .into(),
                })
            }
        }
    }

    /// Reads bus messages for up to `timeout`, updating statistics, and returns at the
    /// first EOS or error (or `None` when the time is up).
    pub fn poll(&mut self, timeout: Duration) -> Option<BusEvent> {
        let deadline = Instant::now() + timeout;
        // Past the deadline, messages already queued are still read (timed_pop with 0
        // returns at once when the bus is empty), but a bounded number of them, so a bus
        // flooded by some element cannot keep the caller from its other work.
        let mut late = 0;
        while late < 1000 {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .bus
                .timed_pop(gst::ClockTime::from_nseconds(left.as_nanos() as u64))?;
            if let Some(event) = self.handle(&msg) {
                return Some(event);
            }
            if left.is_zero() {
                late += 1;
            }
        }
        None
    }

    /// Polls until the pipeline ends (EOS or error) or `timeout` passes (`None`).
    pub fn wait_end(&mut self, timeout: Duration) -> Option<BusEvent> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(event) = self.poll(deadline.saturating_duration_since(Instant::now())) {
                return Some(event);
            }
        }
        None
    }

    fn handle(&mut self, msg: &gst::Message) -> Option<BusEvent> {
        let now = Instant::now();
        match msg.view() {
            gst::MessageView::Eos(_) => {
                self.finished_at.get_or_insert(now);
                return Some(BusEvent::Eos);
            }
            gst::MessageView::Error(e) => {
                self.finished_at.get_or_insert(now);
                return Some(BusEvent::Error(format_error(e)));
            }
            gst::MessageView::Warning(w) => {
                let src = w.src().map(|s| s.name().to_string()).unwrap_or_default();
                eprintln!("WARNING from {src}: {}", w.error());
            }
            gst::MessageView::Element(e) => {
                if let (Some(s), Some(src)) = (e.structure(), msg.src()) {
                    if s.name() == firehose_core::stats::STRUCTURE_NAME {
                        self.board.update(&src.name(), s, now);
                    }
                }
            }
            // As gst-launch does: live sources can change the latency once running.
            gst::MessageView::Latency(_) => {
                let _ = self.pipeline.recalculate_latency();
            }
            // The clock went away (e.g. its provider was removed): pick a new one.
            gst::MessageView::ClockLost(_) => {
                let _ = self.pipeline.set_state(gst::State::Paused);
                let _ = self.pipeline.set_state(gst::State::Playing);
            }
            _ => {}
        }
        None
    }

    /// Asks the sources to finish: they push EOS, which reaches the bus once every sink
    /// has it. Never blocks the caller.
    pub fn send_eos(&self) {
        // Not `pipeline.send_event`: that holds the pipeline's state lock while a source
        // waits for its streaming thread, and a streaming thread blocked in a sink's
        // preroll needs that lock to reach PLAYING — a deadlock (seen with
        // `fakesrc ! identity sleep-time=… ! fakesink` interrupted before PLAYING).
        // Each source is told directly instead, from a helper thread, because a source
        // may still wait up to one buffer's push before it takes the event.
        let sources: Vec<gst::Element> = self
            .pipeline
            .iterate_sources()
            .into_iter()
            .flatten()
            .collect();
        let spawned = std::thread::Builder::new()
            .name("firehose-eos".into())
            .spawn(move || {
                for source in sources {
                    source.send_event(gst::event::Eos::new());
                }
            });
        if let Err(e) = spawned {
            eprintln!("firehose: cannot start a thread to send EOS ({e}); sending it inline");
            for source in self.pipeline.iterate_sources().into_iter().flatten() {
                source.send_event(gst::event::Eos::new());
            }
        }
    }

    /// Reads the `stats` property of elements that have not reported for a while, so
    /// the live line keeps moving when `stats-interval` is long or 0.
    pub fn poll_silent(&mut self, now: Instant) {
        for e in &self.stats_elements {
            let name = e.name();
            let stale = self
                .board
                .last_update(&name)
                .is_none_or(|t| now.saturating_duration_since(t) >= SILENCE_BEFORE_POLL);
            if stale {
                if let Some(s) = stats_property(e) {
                    self.board.update(&name, &s, now);
                }
            }
        }
    }

    /// Reads every element's `stats` property now (at the end: the final totals).
    pub fn refresh_stats(&mut self) {
        self.find_stats_elements();
        let now = Instant::now();
        for e in &self.stats_elements {
            if let Some(s) = stats_property(e) {
                self.board.update(&e.name(), &s, now);
            }
        }
    }

    /// Time from [`Session::start`] to the end (EOS/error/stop) or to now. Not from
    /// PLAYING: a live source with a syncing sink reaches PLAYING only with its first
    /// buffer, which may never come.
    pub fn elapsed(&self) -> Duration {
        match self.started_at {
            Some(t0) => self
                .finished_at
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(t0),
            None => Duration::ZERO,
        }
    }

    /// Stops the pipeline (state NULL): sockets are closed and threads joined.
    pub fn stop(&mut self) {
        self.finished_at.get_or_insert_with(Instant::now);
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A pipeline dropped in PLAYING leaks its streaming threads; always go to NULL.
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}
