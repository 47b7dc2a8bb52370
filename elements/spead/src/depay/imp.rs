//! `speaddepay` implementation: a thin adapter from [`Reassembler`] (heaps mode) or
//! the core [`ChunkAssembler`] with the `spead` handler (chunks mode) to GStreamer pads.
//!
//! A plain `gst::Element` with `chain` and `chain_list`, not a BaseTransform, which
//! would split buffer lists into single buffers. The engine lock is taken once per
//! buffer or list, never held while pushing.

use firehose_core::sync::lock;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use firehose_chunk::front::{self, ChunkFront};
use firehose_chunk::{ChunkAssembler, ChunkHost, Flow};
use firehose_core::alloc;
use firehose_core::batch::for_each_packet;
use firehose_core::caps as fcaps;
use firehose_core::element::{self, ElementStats, PadRoutes};
use firehose_core::property::SettingsElement;
use firehose_core::stats::StatsTimer;
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::settings::Settings;
use super::Mode;
use crate::heapout::{self, heap_buffer, HeapCounters};
use crate::reassembly::{Heap, Reassembler};

firehose_core::debug_category!(CAT, "speaddepay", "SPEAD heap reassembly");

/// The engine of the mode chosen at start.
enum Engine {
    Heaps(Reassembler),
    Chunks(ChunkAssembler),
}

struct State {
    engine: Engine,
    /// The output caps.
    caps: gst::Caps,
    timer: StatsTimer,
    stop_is_eos: bool,
    /// A stop heap became EOS: refuse input until a flush.
    ended: bool,
    memory: &'static str,
}

/// What one chain call produced, pushed after the engine lock is released.
#[derive(Default)]
struct Output {
    buffers: Vec<gst::Buffer>,
    /// The stream stopped (stop heap with `stop-is-eos`): push EOS after `buffers`.
    eos: bool,
    stats_due: bool,
    /// Heaps also carry the meta every language reads (`readable-metas`).
    readable: bool,
}

pub struct SpeadDepay {
    sinkpad: gst::Pad,
    srcpad: gst::Pad,
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    mirror: HeapCounters,
    /// Says on the bus when the heap pool runs dry.
    dry: firehose_core::src::DryWarning,
    memory: Mutex<Option<&'static str>>,
    /// The mode of the last start (`stats` reads its counters after stop too).
    mode: Mutex<Mode>,
    /// Chunks mode: the engine's pool and counters (kept after stop for `stats`).
    chunks: ChunkFront,
    /// Heaps mode: `readable-metas`, and whether downstream may read them.
    readable: firehose_core::meta::readable::ReadableOutput,
}

impl Output {
    /// Takes a heap the engine finished: as a buffer, as EOS, or not at all after EOS.
    fn take(&mut self, h: Heap, stop_is_eos: bool) {
        if self.eos {
            // The stream ended earlier in this batch: what follows is not part of it.
            return;
        }
        if stop_is_eos && heapout::is_stop(&h) {
            self.eos = true;
            return;
        }
        self.buffers.push(heap_buffer(h, self.readable));
    }
}

impl ElementStats for SpeadDepay {
    /// The counters of the mode that runs, then those of the other mode at 0 (keys
    /// already there keep their value): the same keys in either mode.
    fn stats(&self) -> gst::Structure {
        let (mut s, other) = if *lock(&self.mode) == Mode::Chunks {
            (self.chunks.stats(), HeapCounters::default().stats(None))
        } else {
            (
                self.mirror.stats(*lock(&self.memory)),
                ChunkFront::default().stats(),
            )
        };
        for (name, value) in other.iter() {
            if !s.has_field(name) {
                s.set_value(name, zero_like(value));
            }
        }
        s
    }
}

impl SettingsElement for SpeadDepay {
    type Settings = Settings;

    fn counters() -> String {
        super::settings::stats_description()
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl SpeadDepay {
    /// Feeds buffers to the engine under one lock and collects the heap buffers.
    fn process<'a>(
        &self,
        buffers: impl IntoIterator<Item = &'a gst::BufferRef>,
    ) -> Result<Output, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        if state.ended {
            return Err(gst::FlowError::Eos);
        }
        let mut out = Output {
            readable: self.readable.wanted(),
            ..Output::default()
        };
        let stop_is_eos = state.stop_is_eos;
        let engine = match &mut state.engine {
            Engine::Heaps(h) => h,
            Engine::Chunks(engine) => {
                let flow = self
                    .chunks
                    .feed(engine, buffers, stop_is_eos, &mut out.buffers);
                self.chunks.warn_if_dry(self.obj().upcast_ref(), engine);
                out.eos = flow == Flow::End;
                state.ended = out.eos;
                out.stats_due = state.timer.due(Instant::now()) || out.eos;
                return Ok(out);
            }
        };
        let mut emit = |h: Heap| out.take(h, stop_is_eos);
        for buf in buffers {
            let stamp = buf.pts().map(gst::ClockTime::nseconds);
            let batch = for_each_packet(buf, |_, packet| engine.push(packet, stamp, &mut emit));
            if batch.is_none() {
                match buf.map_readable() {
                    Ok(map) => engine.push(map.as_slice(), stamp, &mut emit),
                    Err(_) => gst::warning!(CAT, imp = self, "could not map an input buffer"),
                }
            }
        }
        state.ended = out.eos;
        self.mirror
            .update_warning(engine, self.obj().upcast_ref(), &self.dry);
        out.stats_due = state.timer.due(Instant::now());
        Ok(out)
    }

    /// Pushes what [`Self::process`] produced: one buffer, or one list for several.
    fn push(&self, out: Output) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.post_stats_if(out.stats_due);
        let mut res = Ok(gst::FlowSuccess::Ok);
        let mut buffers = out.buffers;
        if buffers.len() == 1 {
            res = self.srcpad.push(buffers.pop().expect("one buffer"));
        } else if !buffers.is_empty() {
            let mut list = gst::BufferList::new_sized(buffers.len());
            let l = list.get_mut().expect("a new list is writable");
            for b in buffers {
                l.add(b);
            }
            res = self.srcpad.push_list(list);
        }
        if out.eos {
            gst::info!(CAT, imp = self, "stop heap: end of stream");
            self.srcpad.push_event(gst::event::Eos::new());
            return res.and(Err(gst::FlowError::Eos));
        }
        res
    }

    fn chain(
        &self,
        _pad: &gst::Pad,
        buffer: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let out = self.process([buffer.as_ref()])?;
        self.push(out)
    }

    fn chain_list(
        &self,
        _pad: &gst::Pad,
        list: gst::BufferList,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let out = self.process(list.iter())?;
        self.push(out)
    }

    /// End of input: every heap under construction goes through the incomplete policy.
    /// True when EOS went downstream already (a stop heap).
    fn drain(&self) -> bool {
        let mut out = Output::default();
        {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return false;
            };
            if state.ended {
                // EOS already went downstream with the stop heap.
                return true;
            }
            out.readable = self.readable.wanted();
            match &mut state.engine {
                Engine::Heaps(engine) => {
                    let stop_is_eos = state.stop_is_eos;
                    engine.flush(&mut |h| out.take(h, stop_is_eos));
                    self.mirror.update(engine);
                }
                Engine::Chunks(engine) => {
                    self.chunks.drain(engine, &mut out.buffers);
                    out.stats_due = true;
                }
            }
            // A stop heap among those flushed: its EOS goes instead of upstream's.
            state.ended = out.eos;
        }
        let eos = out.eos;
        let _ = self.push(out);
        eos
    }

    /// It reads packet batches (a packet source sends them) and only their Rust metas.
    /// In chunks mode downstream's allocation answer is for chunks, not for our input:
    /// an upstream element must not size its packet buffers by it.
    fn sink_query(&self, pad: &gst::Pad, query: &mut gst::QueryRef) -> bool {
        firehose_core::src::output::consumer_query(query, |query| {
            let allocation = matches!(query.view(), gst::QueryView::Allocation(_));
            if allocation && *lock(&self.mode) == Mode::Chunks {
                return false;
            }
            gst::Pad::query_default(pad, Some(&*self.obj()), query)
        })
    }

    fn sink_event(&self, pad: &gst::Pad, event: gst::Event) -> bool {
        gst::log!(CAT, obj = pad, "event {:?}", event.type_());
        match event.view() {
            // The output caps depend on the settings only.
            gst::EventView::Caps(_) => {
                let caps = lock(&self.state).as_ref().map(|s| s.caps.clone());
                match caps {
                    Some(caps) => {
                        let pushed = self.srcpad.push_event(gst::event::Caps::new(&caps));
                        pushed && self.decide_allocation(&caps)
                    }
                    None => false,
                }
            }
            gst::EventView::Segment(s) if s.segment().format() != gst::Format::Time => {
                // Heaps carry the PTS of their packets: a time segment whatever came in.
                self.srcpad
                    .push_event(gst::event::Segment::new(&gst::FormattedSegment::<
                        gst::ClockTime,
                    >::new()))
            }
            gst::EventView::Eos(_) => {
                if self.drain() {
                    return true;
                }
                self.srcpad.push_event(event)
            }
            gst::EventView::FlushStop(_) => {
                if let Some(state) = lock(&self.state).as_mut() {
                    match &mut state.engine {
                        Engine::Heaps(engine) => {
                            engine.reset();
                            self.mirror.update(engine);
                        }
                        Engine::Chunks(engine) => engine.reset(),
                    }
                    state.ended = false;
                }
                self.srcpad.push_event(event)
            }
            _ => gst::Pad::event_default(pad, Some(&*self.obj()), event),
        }
    }

    /// Once the output caps are set, downstream may propose the memory heaps or chunks
    /// are cut from (shared segments, pinned pages): the engine switches to it before
    /// its first packet. False when the proposed memory could not be had (an element
    /// error says why).
    fn decide_allocation(&self, caps: &gst::Caps) -> bool {
        let query = alloc::query_downstream(&self.srcpad, caps);
        self.readable
            .decide(self.obj().upcast_ref(), query.as_deref());
        let Some(query) = query else {
            self.chunks.unanswered(self.obj().upcast_ref());
            return true;
        };
        let obj = self.obj();
        let element = obj.upcast_ref();
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return true;
        };
        let decided = match &mut state.engine {
            Engine::Heaps(engine) => {
                heapout::decide_allocation(element, &query, engine).map(|kind| {
                    if let Some(kind) = kind {
                        state.memory = kind;
                        *lock(&self.memory) = Some(kind);
                        self.mirror.update(engine);
                    }
                })
            }
            Engine::Chunks(engine) => {
                let decided = self.chunks.decide_allocation(element, &query, engine);
                state.memory = engine.pool().kind().as_str();
                *lock(&self.memory) = Some(state.memory);
                decided
            }
        };
        decided.map_err(|e| e.log_with_imp(self)).is_ok()
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        *lock(&self.mode) = s.mode;
        self.dry.reset();
        if s.mode == Mode::Chunks {
            return self.start_chunks(&s);
        }
        let engine =
            heapout::new_reassembler(&s.heaps.reassembly_config(), self.obj().upcast_ref())?;
        gst::info!(
            CAT,
            imp = self,
            "{} bytes of {} payload memory for heaps up to {} bytes, window {} x {}",
            engine.pool_bytes(),
            engine.memory_kind().as_str(),
            s.heaps.max_heap_size,
            s.heaps.max_heaps,
            s.heaps.substreams
        );
        let memory = engine.memory_kind().as_str();
        self.mirror.update(&engine);
        *lock(&self.memory) = Some(memory);
        self.readable.start(s.heaps.readable_metas);
        *lock(&self.state) = Some(State {
            engine: Engine::Heaps(engine),
            caps: gst::Caps::new_empty_simple(fcaps::SPEAD_HEAP),
            timer: s.stats_interval.timer(),
            stop_is_eos: s.heaps.stop_is_eos,
            ended: false,
            memory,
        });
        Ok(())
    }

    /// `mode=chunks`: the chunk engine with the `spead` handler, as `fhdepay` builds it.
    fn start_chunks(&self, s: &Settings) -> Result<(), gst::ErrorMessage> {
        // The handler is this crate's: make sure the registry has it, whoever registered
        // the element (idempotent).
        firehose_chunk::handler::register_handler(crate::chunk::NAME, crate::chunk::factory);
        let cfg = s.chunk_config();
        let (slots, slot_size) = (cfg.slots_per_chunk, cfg.slot_size);
        let chunks = s.pool_chunks();
        let host = ChunkHost::new(cfg, s.handler_config(), chunks, s.heaps.memory.into())?;
        let memory = host.pool.kind().as_str();
        gst::info!(
            CAT,
            imp = self,
            "chunks of {slots} heaps × {slot_size} B, {chunks} in the pool ({memory}); {}",
            s.handler_config()
        );
        let (engine, caps) =
            self.chunks
                .start(self.obj().upcast_ref(), host, s.heaps.readable_metas);
        *lock(&self.memory) = Some(memory);
        *lock(&self.state) = Some(State {
            engine: Engine::Chunks(engine),
            caps,
            timer: s.stats_interval.timer(),
            stop_is_eos: s.heaps.stop_is_eos,
            ended: false,
            memory,
        });
        Ok(())
    }

    fn stop(&self) {
        if let Some(state) = lock(&self.state).take() {
            // Heaps and chunks still queued downstream keep their pool memory alive
            // until dropped.
            match &state.engine {
                Engine::Heaps(engine) => self.mirror.update(engine),
                Engine::Chunks(engine) => self.chunks.update(engine),
            }
            gst::debug!(CAT, imp = self, "stopped ({} memory)", state.memory);
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for SpeadDepay {
    const NAME: &'static str = "GstFhSpeadDepay";
    type Type = super::SpeadDepay;
    type ParentType = gst::Element;

    fn with_class(klass: &Self::Class) -> Self {
        let sinkpad = gst::Pad::builder_from_template(&klass.pad_template("sink").unwrap())
            .chain_to(Self::chain)
            .chain_list_to(Self::chain_list)
            .event_to(Self::sink_event)
            .query_to(Self::sink_query)
            .build();
        let srcpad = gst::Pad::builder_from_template(&klass.pad_template("src").unwrap()).build();
        Self {
            sinkpad,
            srcpad,
            settings: Mutex::new(Settings::default()),
            state: Mutex::new(None),
            mirror: HeapCounters::default(),
            dry: firehose_core::src::DryWarning::default(),
            memory: Mutex::new(None),
            mode: Mutex::new(Mode::Heaps),
            chunks: ChunkFront::default(),
            readable: Default::default(),
        }
    }
}

impl ObjectImpl for SpeadDepay {
    firehose_core::settings_properties!(SpeadDepay);

    fn constructed(&self) {
        self.parent_constructed();
        element::add_pads(&*self.obj(), &[&self.sinkpad, &self.srcpad]);
    }
}

impl GstObjectImpl for SpeadDepay {}

impl ElementImpl for SpeadDepay {
    firehose_core::element_metadata!(
        "SPEAD depayloader",
        "Codec/Depayloader/Network",
        "Reassembles SPEAD packets into heaps (one buffer each, in pool memory, with a heap meta), or with mode=chunks places them into chunks as spead2's chunk stream does; interoperates with spead2",
    );

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let src = [fcaps::SPEAD_HEAP, fcaps::CHUNK]
                .into_iter()
                .map(gst::Caps::new_empty_simple)
                .collect::<gst::Caps>();
            front::pad_templates(&src)
        });
        TEMPLATES.as_ref()
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        if transition == gst::StateChange::ReadyToPaused {
            element::start_or_post(self, self.start())?;
        }
        let res = self.parent_change_state(transition)?;
        if transition == gst::StateChange::PausedToReady {
            self.stop();
        }
        Ok(res)
    }
}

/// 0 for a counter, `none` for a text field: a key of the mode that does not run.
fn zero_like(v: &glib::SendValue) -> glib::SendValue {
    if v.type_() == glib::Type::STRING {
        firehose_core::stats::NOT_KNOWN.to_send_value()
    } else {
        0u64.to_send_value()
    }
}
