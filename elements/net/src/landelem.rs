//! The element side of a source built on a [`LandingSource`] (`fhudpchunksrc`,
//! `fhspeadsrc`): what both keep besides their settings and their engine's counters — the
//! running loop and its stats timer, the receive counters — and the steps both take at
//! start, stop and `create` (an application's EOS is [`LiveControl::request_drain`]). Each element adds
//! only what its engine needs (how its counters are mirrored, what an item becomes).

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use firehose_core::src::LiveControl;
use firehose_core::stats::StatsTimer;
use firehose_core::sync::lock;
use gst::prelude::*;

use crate::land_counters::LandingCounters;
use crate::landsrc::{LandingSource, SourceEngine, Stop};

/// The loop while started, and its stats timer.
struct Running<E: SourceEngine> {
    src: LandingSource<E>,
    timer: StatsTimer,
}

/// What a landing source element keeps (see the module documentation). The element's
/// [`LiveControl`] stays its own field (`live_src_base!` names it) and is passed in.
pub struct LandingElement<E: SourceEngine> {
    state: Mutex<Option<Running<E>>>,
    counters: LandingCounters,
}

impl<E: SourceEngine> Default for LandingElement<E> {
    fn default() -> Self {
        Self {
            state: Mutex::new(None),
            counters: LandingCounters::default(),
        }
    }
}

impl<E: SourceEngine> LandingElement<E> {
    /// The receive counters, for the element's `stats`.
    pub fn counters(&self) -> &LandingCounters {
        &self.counters
    }

    /// Starts a run over `src` (its socket open and bound): counters zeroed, `live`
    /// started with the socket's waker, stats posted by `timer`; `port` notified on
    /// `element` when `port_changed` (port 0 bound a free one: the settings lock must
    /// not be held, a handler may read the property).
    pub fn start(
        &self,
        element: &gst::Element,
        live: &LiveControl,
        src: LandingSource<E>,
        timer: StatsTimer,
        port_changed: bool,
    ) {
        self.counters.reset();
        live.start();
        live.set_waker(src.waker());
        *lock(&self.state) = Some(Running { src, timer });
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
        let Running { src, timer } = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
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
        if let Some(Running { src, timer }) = lock(&self.state).as_mut() {
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
            gst::element_error!(
                element,
                gst::ResourceError::Read,
                ("recvmmsg failed: {}", e)
            );
            gst::FlowError::Error
        }
        Stop::Wait(e) => {
            gst::element_error!(
                element,
                gst::ResourceError::Read,
                ("waiting for datagrams failed: {}", e)
            );
            gst::FlowError::Error
        }
    }
}
