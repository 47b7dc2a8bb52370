//! The element side of a source built on a [`LandingSource`] (`fhudpchunksrc`,
//! `fhspeadsrc`): what feeds the engine ([`LandingInput`]: `transport`, the socket
//! properties and `batch-size`, declared once), what both keep besides their settings and
//! their engine's counters — the running loop and its stats timer, the receive counters —
//! and the steps both take at start, stop and `create` (an application's EOS is
//! [`LiveControl::request_drain`]). Each element adds only what its engine needs (how its
//! counters are mirrored, what an item becomes).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use firehose_core::endpoint::{stats_value, EndpointCounters, STATS_FIELD as ENDPOINTS_FIELD};
use firehose_core::property::OrDefault;
use firehose_core::src::{self as live, LiveControl, ThreadSettings};
use firehose_core::stats::StatsTimer;
use firehose_core::sync::lock;
use firehose_core::thread::Pinner;
use gst::prelude::*;

use crate::land_counters::LandingCounters;
use crate::landsrc::{LandingSource, SourceEngine, Stop};
use crate::recv::{OpenReport, UdpReceiver};
use crate::socket_settings::SocketSettings;
use crate::transport_input;

/// Default `batch-size`: `fhudpsrc`'s, so one receive takes what one of its batches
/// would. One receive fills at most [`BATCH_BYTES`] of messages: 4 while GRO may coalesce
/// (64 KiB each), up to 64 single datagrams once the receiver has learnt that the stream
/// does not (until 2026-11-26 `fhudpchunksrc`'s default was 4, so a plain sender's
/// datagrams came 4 per `recvmmsg`: under a CPU quota that per-call cost decided the
/// highest lossless rate).
pub const DEFAULT_BATCH_SIZE: u32 = 64;
/// Most messages per receive: the receiver keeps two 64 KiB scratch buffers per message.
pub const MAX_BATCH_SIZE: u32 = 256;
/// Bytes one receive may fill, as `fhudpsrc`'s `batch-bytes`: the scratch a copied
/// packet passes through stays in a CPU's L2 cache until the engine reads it.
pub const BATCH_BYTES: usize = 256 << 10;

/// What feeds a landing source's engine: its properties, `transport`, the socket's and
/// `batch-size`, in that order (a group of the element's settings).
#[derive(Clone, Debug)]
pub struct LandingInput {
    /// `transport`: the packet source that feeds the engine, or `None` for the element's
    /// own socket.
    pub transport: Option<String>,
    /// The element's own socket.
    pub socket: SocketSettings,
    /// `batch-size`: most messages per receive from the socket.
    pub batch_size: u32,
    /// `cpu`, `rt-priority`: where the receive (streaming) thread runs.
    pub thread: ThreadSettings,
    /// The blurb of `batch-size`: what a batch is for this element.
    blurb: &'static str,
}

firehose_core::property_group! {
    LandingInput as s {
        transport: OrDefault => transport_input::property();
        group socket;
        batch_size => live::batch_size(s.blurb, MAX_BATCH_SIZE, DEFAULT_BATCH_SIZE);
        group thread;
    }
}

impl LandingInput {
    /// The defaults, `batch-size` described by `blurb`.
    pub fn new(blurb: &'static str) -> Self {
        Self {
            transport: None,
            socket: SocketSettings::default(),
            batch_size: DEFAULT_BATCH_SIZE,
            thread: ThreadSettings::default(),
            blurb,
        }
    }

    /// Opens the transport, or else the element's own socket, without kernel timestamps:
    /// what the engine makes carries the time of its first receive, not per-datagram
    /// times; and the receive thread's placement for [`LandingElement::start`]. The
    /// placement is checked first: a CPU this process may not use is a start error,
    /// naming the CPUs it may, before anything binds.
    pub fn open(
        &self,
        element: &gst::Element,
        cat: gst::DebugCategory,
    ) -> Result<(Feed, Pinner), gst::ErrorMessage> {
        let pinner = self.thread.pinner()?;
        let feed = match self.transport.as_deref() {
            Some(desc) => Feed::Transport(transport_input::open(desc)?),
            None => {
                let batch = self.batch_size as usize;
                let (rx, report) = self.socket.open(element, cat, false, batch, BATCH_BYTES)?;
                Feed::Socket {
                    rx: Box::new(rx),
                    report,
                    batch,
                }
            }
        };
        Ok((feed, pinner))
    }
}

/// What feeds the engine, opened ([`LandingInput::open`]).
pub enum Feed {
    /// A packet source's transport (`transport=`), whose batches the engine takes where
    /// its device wrote them.
    Transport(transport_input::Opened),
    /// The element's own socket, bound, whose payloads land straight in the engine.
    Socket {
        /// The receiver (boxed: it is much larger than a transport's handle).
        rx: Box<UdpReceiver>,
        /// What the kernel granted.
        report: OpenReport,
        /// Most messages per receive (`batch-size`).
        batch: usize,
    },
}

/// The loop while started, and its stats timer.
struct Running<E: SourceEngine> {
    src: LandingSource<E>,
    timer: StatsTimer,
    /// Places the streaming thread at its first receive.
    pinner: Pinner,
}

/// What a landing source element keeps (see the module documentation). The element's
/// [`LiveControl`] stays its own field (`live_src_base!` names it) and is passed in.
pub struct LandingElement<E: SourceEngine> {
    state: Mutex<Option<Running<E>>>,
    counters: LandingCounters,
    /// The socket's per-endpoint counters, outside `state` (which the streaming thread
    /// holds while it waits); kept after stop so that the last stats still show them.
    endpoints: Mutex<Option<Arc<EndpointCounters>>>,
}

impl<E: SourceEngine> Default for LandingElement<E> {
    fn default() -> Self {
        Self {
            state: Mutex::new(None),
            counters: LandingCounters::default(),
            endpoints: Mutex::new(None),
        }
    }
}

impl<E: SourceEngine> LandingElement<E> {
    /// The receive counters, for the element's `stats`.
    pub fn counters(&self) -> &LandingCounters {
        &self.counters
    }

    /// Adds the receive counters to an element's stats structure, and the socket's
    /// per-endpoint counters as its `endpoints` field.
    pub fn append_stats(&self, s: &mut gst::Structure) {
        self.counters.append_to(s);
        // Always there (empty before the first start), so tools can rely on it.
        let endpoints = stats_value(lock(&self.endpoints).as_deref());
        s.set_value(ENDPOINTS_FIELD, endpoints);
    }

    /// Starts a run of `engine` fed by `feed`: counters zeroed, `live` started with the
    /// feed's waker, stats posted by `timer`. A socket has `bound` tell the element's
    /// settings which port it got, true when that changed it (port 0 bound a free one):
    /// `port` is then notified on `element`, once `bound` has released the settings lock
    /// (a handler may read the property). `pinner` places the thread that receives
    /// (from [`LandingInput::open`]).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        element: &gst::Element,
        live: &LiveControl,
        feed: Feed,
        pinner: Pinner,
        engine: E,
        timer: StatsTimer,
        bound: impl FnOnce(&OpenReport) -> bool,
    ) where
        E::Output: Default,
    {
        let out = E::Output::default();
        let (src, port_changed) = match feed {
            Feed::Transport(t) => (
                LandingSource::in_place(t.transport, t.waker, engine, t.ring_bytes, out),
                false,
            ),
            Feed::Socket { rx, report, batch } => {
                let buffer = report.buffer_granted as u64;
                let src = LandingSource::new(*rx, engine, batch, buffer, out);
                (src, bound(&report))
            }
        };
        self.counters.reset();
        *lock(&self.endpoints) = src.endpoint_counters();
        live.start();
        live.set_waker(src.waker());
        *lock(&self.state) = Some(Running { src, timer, pinner });
        if port_changed {
            element.notify("port");
        }
    }

    /// Ends the run: `last` reads the engine's counters one last time (what is still
    /// open goes back to the pool with the engine), then the receiver's and the kernel's.
    pub fn stop(&self, live: &LiveControl, last: impl FnOnce(&E)) {
        if let Some(mut r) = lock(&self.state).take() {
            last(&r.src.engine);
            self.counters.update(&mut r.src, true);
            // The task has stopped and its thread gone back to GStreamer's pool.
            if let Err(e) = r.pinner.restore() {
                gst::warning!(gst::CAT_RUST, "could not unpin the receive thread: {e}");
            }
        }
        live.stop();
    }

    /// Runs `f` on the engine while started (from `decide_allocation`, which GstBaseSrc
    /// calls from the streaming thread between receives, so the state is free).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        lock(&self.state).as_mut().map(|r| f(&mut r.src.engine))
    }

    /// `create`'s work: the next item, receiving (and waiting) until one is finished;
    /// `None` once the stream ended and everything was pushed. After each receive that
    /// got data, `publish(engine, due)` mirrors the engine's counters and posts the stats
    /// when `due` (the receive counters are mirrored here first).
    pub fn next(
        &self,
        element: &gst::Element,
        live: &LiveControl,
        flushing: &AtomicBool,
        publish: impl Fn(&E, bool),
    ) -> Result<Option<E::Item>, gst::FlowError> {
        let mut guard = lock(&self.state);
        let Running { src, timer, pinner } = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        // A thread-local check on every call but the first of each thread.
        if let Err(e) = pinner.on_this_thread() {
            gst::element_error!(element, gst::ResourceError::Settings, ("{}", e));
            return Err(gst::FlowError::Error);
        }
        src.next(
            flushing,
            live.eos_flag(),
            || element.current_running_time().map(gst::ClockTime::nseconds),
            |src, ended| {
                if ended {
                    gst::info!(gst::CAT_RUST, obj = element, "the stream ended");
                }
                let due = self.counters.mirror(src, timer, ended);
                publish(&src.engine, due);
            },
        )
        .map_err(|e| flow_error(element, e))
    }

    /// Mirrors every counter now and has `publish` post the stats (the stream ends).
    pub fn publish_now(&self, publish: impl Fn(&E, bool)) {
        if let Some(Running { src, timer, .. }) = lock(&self.state).as_mut() {
            let due = self.counters.mirror(src, timer, true);
            publish(&src.engine, due);
        }
    }
}

/// Posts the element error for a [`crate::landsrc::LandingSource`] that stopped on an
/// error (nothing for a flush); the flow error `create` returns.
fn flow_error(element: &gst::Element, stop: Stop) -> gst::FlowError {
    match stop {
        Stop::Flushing => gst::FlowError::Flushing,
        Stop::Receive(e) => {
            firehose_core::element::read_error(element, format_args!("recvmmsg failed: {e}"))
        }
        Stop::Wait(e) => firehose_core::element::read_error(
            element,
            format_args!("waiting for datagrams failed: {e}"),
        ),
    }
}
