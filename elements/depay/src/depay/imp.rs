//! `fhdepay` implementation: a thin adapter from packet buffers to a
//! [`ChunkAssembler`], and from its finished chunks to buffers.

use firehose_core::sync::lock;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use firehose_chunk::front::{self, ChunkFront};
use firehose_chunk::{ChunkAssembler, Flow, StatsMirror};
use firehose_core::alloc;
use firehose_core::caps as fcaps;
use firehose_core::element::{self, ElementStats, PadRoutes};
use firehose_core::property::SettingsElement;
use firehose_core::props::WhenFull;
use firehose_core::stats::{StatsInterval, StatsTimer};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use firehose_chunk::settings::ChunkSettings;

firehose_core::debug_category!(CAT, "fhdepay", "Firehose depacketizer");

/// The chunk engine's properties, and how often to post stats.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    chunk: ChunkSettings,
    stats_interval: StatsInterval,
}

firehose_core::property_group! {
    Settings as _s {
        group chunk;
        group stats_interval;
    }
}

struct State {
    engine: ChunkAssembler,
    caps: gst::Caps,
    timer: StatsTimer,
    /// The handler ended the stream; EOS has been sent downstream.
    ended: bool,
}

pub struct FhDepay {
    sinkpad: gst::Pad,
    srcpad: gst::Pad,
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// The pool, the counters' mirror and the flushing flag (shared chunk glue).
    front: ChunkFront,
}

impl FhDepay {
    /// Posts the stats when due or `force` (the front mirrored the counters).
    fn publish(&self, state: &mut State, force: bool) {
        self.post_stats_if(state.timer.due(Instant::now()) || force);
    }

    /// Runs `buffers` through the engine under one lock, then pushes what left the
    /// window outside it (a slow downstream must not block `stats` or a state change).
    fn process<'a>(
        &self,
        buffers: impl Iterator<Item = &'a gst::BufferRef>,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut out = Vec::new();
        let flow = {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            if state.ended {
                return Err(gst::FlowError::Eos);
            }
            let flow = self.front.feed(&mut state.engine, buffers, true, &mut out);
            self.front
                .warn_if_dry(self.obj().upcast_ref(), &state.engine);
            state.ended = flow == Flow::End;
            self.publish(state, state.ended);
            flow
        };
        self.push_chunks(out)?;
        if flow == Flow::End {
            gst::info!(CAT, imp = self, "the handler ended the stream");
            self.srcpad.push_event(gst::event::Eos::new());
            return Err(gst::FlowError::Eos);
        }
        if self.front.is_flushing() {
            return Err(gst::FlowError::Flushing);
        }
        Ok(gst::FlowSuccess::Ok)
    }

    fn push_chunks(&self, out: Vec<gst::Buffer>) -> Result<gst::FlowSuccess, gst::FlowError> {
        for chunk in out {
            self.srcpad.push(chunk)?;
        }
        Ok(gst::FlowSuccess::Ok)
    }

    fn chain(
        &self,
        _pad: &gst::Pad,
        buffer: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.process(std::iter::once(buffer.as_ref()))
    }

    fn chain_list(
        &self,
        _pad: &gst::Pad,
        list: gst::BufferList,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.process(list.iter())
    }

    fn sink_event(&self, pad: &gst::Pad, event: gst::Event) -> bool {
        use gst::EventView;
        match event.view() {
            // The output caps depend on the settings only.
            EventView::Caps(_) => {
                let caps = lock(&self.state).as_ref().map(|s| s.caps.clone());
                match caps {
                    Some(caps) => {
                        let pushed = self.srcpad.push_event(gst::event::Caps::new(&caps));
                        pushed && self.decide_allocation(&caps)
                    }
                    None => false,
                }
            }
            // Chunk PTS are input PTS: a time segment carries over, any other becomes one.
            EventView::Segment(s) if s.segment().format() != gst::Format::Time => {
                let seg = gst::FormattedSegment::<gst::ClockTime>::new();
                self.srcpad.push_event(gst::event::Segment::new(&seg))
            }
            EventView::Eos(_) => {
                let mut out = Vec::new();
                let ended = {
                    let mut guard = lock(&self.state);
                    match guard.as_mut() {
                        Some(state) if !state.ended => {
                            self.front.drain(&mut state.engine, &mut out);
                            self.publish(state, true);
                            false
                        }
                        Some(_) => true,
                        None => false,
                    }
                };
                if ended {
                    // EOS went downstream when the handler ended the stream.
                    return true;
                }
                if let Err(e) = self.push_chunks(out) {
                    gst::debug!(CAT, imp = self, "chunks at EOS not delivered: {e:?}");
                }
                self.srcpad.push_event(event)
            }
            EventView::FlushStart(_) => {
                self.front.set_flushing(true);
                self.srcpad.push_event(event)
            }
            EventView::FlushStop(_) => {
                if let Some(state) = lock(&self.state).as_mut() {
                    state.engine.reset();
                    state.ended = false;
                }
                self.front.set_flushing(false);
                self.srcpad.push_event(event)
            }
            _ => gst::Pad::event_default(pad, Some(&*self.obj()), event),
        }
    }

    /// It reads packet batches (a packet source sends them) and only their Rust metas.
    /// Downstream's allocation answer is for chunks, not for our input: an upstream
    /// element must not size its packet buffers by it.
    fn sink_query(&self, pad: &gst::Pad, query: &mut gst::QueryRef) -> bool {
        firehose_core::src::output::consumer_query(query, |query| {
            if let gst::QueryViewMut::Allocation(_) = query.view_mut() {
                return false;
            }
            gst::Pad::query_default(pad, Some(&*self.obj()), query)
        })
    }

    /// Once the output caps are set, `when-full=auto` learns whether upstream is live
    /// (not live: wait for a pool chunk rather than drop), and downstream may propose
    /// the memory chunks are cut from (shared segments, pinned pages): the engine
    /// switches to it before its first packet. False when the proposed memory could not
    /// be had (an element error says why).
    fn decide_allocation(&self, caps: &gst::Caps) -> bool {
        // Asked of upstream before the state lock is taken.
        let when_full = lock(&self.settings).chunk.when_full;
        let block = when_full == WhenFull::Auto && when_full.blocks_for(&self.sinkpad);
        let query = alloc::query_downstream(&self.srcpad, caps);
        let obj = self.obj();
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return true;
        };
        if block {
            self.front.block_when_full(&mut state.engine);
        }
        match query {
            Some(query) => self
                .front
                .decide_allocation(obj.upcast_ref(), &query, &mut state.engine)
                .map_err(|e| e.log_with_imp(self))
                .is_ok(),
            None => {
                self.front.unanswered(obj.upcast_ref());
                true
            }
        }
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let obj = self.obj();
        let element = obj.upcast_ref();
        let host = s.chunk.host(element, *CAT, self.front.cancel())?;
        let (engine, caps) = self.front.start(element, host, s.chunk.readable_metas);
        *lock(&self.state) = Some(State {
            engine,
            caps,
            timer: s.stats_interval.timer(),
            ended: false,
        });
        Ok(())
    }
}

#[glib::object_subclass]
impl ObjectSubclass for FhDepay {
    const NAME: &'static str = "GstFhDepay";
    type Type = super::FhDepay;
    type ParentType = gst::Element;

    fn with_class(klass: &Self::Class) -> Self {
        let templ = klass.pad_template("sink").expect("sink template");
        let sinkpad = gst::Pad::builder_from_template(&templ)
            .chain_to(Self::chain)
            .chain_list_to(Self::chain_list)
            .event_to(Self::sink_event)
            .query_to(Self::sink_query)
            .build();
        let templ = klass.pad_template("src").expect("src template");
        let srcpad = gst::Pad::builder_from_template(&templ).build();
        Self {
            sinkpad,
            srcpad,
            settings: Mutex::default(),
            state: Mutex::default(),
            front: ChunkFront::default(),
        }
    }
}

impl ElementStats for FhDepay {
    fn stats(&self) -> gst::Structure {
        self.front.stats()
    }
}

impl SettingsElement for FhDepay {
    type Settings = Settings;

    fn counters() -> String {
        StatsMirror::counters()
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl ObjectImpl for FhDepay {
    firehose_core::settings_properties!(FhDepay);

    fn constructed(&self) {
        self.parent_constructed();
        element::add_pads(&*self.obj(), &[&self.sinkpad, &self.srcpad]);
    }
}

impl GstObjectImpl for FhDepay {}

impl ElementImpl for FhDepay {
    firehose_core::element_metadata!(
        "Firehose depacketizer",
        "Codec/Depayloader/Network",
        "Places the messages of a packet stream by index into pooled chunks with a named packet handler (seq, spead, or your own)",
    );

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> =
            LazyLock::new(|| front::pad_templates(&gst::Caps::new_empty_simple(fcaps::CHUNK)));
        TEMPLATES.as_ref()
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        match transition {
            gst::StateChange::ReadyToPaused => element::start_or_post(self, self.start())?,
            gst::StateChange::PausedToReady => {
                // Wake a streaming thread waiting for a pool chunk, so pad deactivation
                // can take the stream lock.
                self.front.set_flushing(true);
            }
            _ => {}
        }
        let ret = self.parent_change_state(transition)?;
        if transition == gst::StateChange::PausedToReady {
            // Open chunks go back to the pool with the engine.
            *lock(&self.state) = None;
        }
        Ok(ret)
    }
}
