//! `speadpay` implementation: a plain element (`chain` + `chain_list`, no BaseTransform,
//! so buffer lists stay lists) over the [`crate::send`] engine.
//!
//! This file is the GStreamer side (pads, events, states, properties); what the heaps
//! hold comes from [`super::plain`] and [`super::relay`], the output slabs from
//! [`super::batch`].

use firehose_core::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use firehose_core::element::{self, ElementStats, PadRoutes};
use firehose_core::property::SettingsElement;
use firehose_core::stats::{self, names, StatsTimer};
use firehose_core::{caps, PoolConfig, SlotPool};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::batch::{self, Pending};
use super::plain::PlainSpec;
use super::relay::heap_items;
use super::settings::{self, Settings};
use crate::descriptor::{self, Descriptor};
use crate::descset::DescriptorSet;
use crate::heap::HeapMeta;
use crate::send::{HeapPackets, Item, PacketConfig};
use crate::wire::Flavour;

firehose_core::debug_category!(CAT, "speadpay", "SPEAD payloader");

/// Slabs in flight: one being filled, one being sent by the sink, and room for a short
/// queue between them.
const POOL_SLOTS: usize = 8;

/// A descriptor list as upstream shares it, and its encoding in the output flavour.
type KnownDescriptors = (DescriptorSet, Vec<Vec<u8>>);

/// Streaming state, from READY→PAUSED to PAUSED→READY.
struct State {
    cfg: PacketConfig,
    pool: SlotPool,
    pending: Option<Pending>,
    cnt_start: u64,
    cnt_step: u64,
    /// Data heaps sent so far (descriptor and stop heaps are not counted).
    sent: u64,
    /// Heaps of any kind sent so far: the next heap's cnt is `start + index·step`.
    index: u64,
    descriptors_separate: bool,
    descriptors_every: u32,
    stop_at_eos: bool,
    plain: PlainSpec,
    /// The plain-buffer descriptors, encoded with the first buffer; and the buffer
    /// length they fix, if they fix one.
    plain_descriptors: Option<(Vec<Vec<u8>>, Option<u64>)>,
    warned_len: bool,
    /// The heap input's known descriptors, encoded in the output flavour, kept while
    /// upstream sends the same list.
    known: Option<KnownDescriptors>,
    timer: StatsTimer,
}

impl State {
    /// HEAP_CNT of the heap `ahead` heaps after the next one.
    fn cnt(&self, ahead: u64) -> u64 {
        let index = self.index.wrapping_add(ahead);
        self.cnt_start
            .wrapping_add(index.wrapping_mul(self.cnt_step))
    }

    /// Descriptors go with the first heap and every `descriptors-every` heaps.
    fn descriptors_due(&self) -> bool {
        self.sent == 0
            || (self.descriptors_every > 0
                && self.sent.is_multiple_of(self.descriptors_every.into()))
    }
}

firehose_core::counters! {
    /// What `stats` reads, from any thread (the pool's counts follow).
    struct Counters {
        heaps: names::HEAPS,
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
    }
}

/// The `speadpay` element.
pub struct SpeadPay {
    sinkpad: gst::Pad,
    srcpad: gst::Pad,
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Outside `state`, so a flush can wake a pool wait while `state` is held.
    pool: Mutex<Option<SlotPool>>,
    flushing: AtomicBool,
    counters: Counters,
}

impl ElementStats for SpeadPay {
    fn stats(&self) -> gst::Structure {
        let mut fields = self.counters.fields();
        fields.extend(firehose_core::src::pool_counts(lock(&self.pool).as_ref()));
        stats::structure(&fields)
    }
}

impl SettingsElement for SpeadPay {
    type Settings = Settings;

    fn counters() -> String {
        settings::COUNTERS.into()
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl SpeadPay {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let settings_error =
            |msg: String| gst::error_msg!(gst::LibraryError::Settings, ("{}", msg));
        let flavour = Flavour::parse(s.flavour.trim()).ok_or_else(|| {
            settings_error(format!(
                "flavour '{}' is not a SPEAD-64 flavour: write 64-40 (spead2's default), \
                 64-48 (MeerKAT) or another 64-A with A a multiple of 8",
                s.flavour
            ))
        })?;
        let cfg = PacketConfig::new(flavour, s.packet_size as usize)
            .map_err(|e| settings_error(format!("packet-size: {e}")))?;
        if s.heap_cnt_start > flavour.max_value() {
            return Err(settings_error(format!(
                "heap-cnt-start {} does not fit SPEAD-{flavour} (at most {})",
                s.heap_cnt_start,
                flavour.max_value()
            )));
        }
        let plain = PlainSpec::from_settings(&s, flavour).map_err(settings_error)?;
        let slot_size = (s.batch_bytes as usize).max(cfg.packet_size());
        let pool = SlotPool::new(&PoolConfig {
            slot_size,
            slots: POOL_SLOTS,
            hugepages: s.memory.into(),
        })
        .map_err(|e| gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", e)))?;
        if let Some(reason) = pool.fallback_reason() {
            gst::warning!(CAT, imp = self, "pool in normal pages: {reason}");
        }
        gst::info!(
            CAT,
            imp = self,
            "SPEAD-{flavour}, {}-byte packets, slabs of {} bytes ({})",
            cfg.packet_size(),
            pool.slot_size(),
            pool.kind().as_str()
        );
        self.counters.reset();
        self.flushing.store(false, Ordering::Release);
        *lock(&self.pool) = Some(pool.clone());
        *lock(&self.state) = Some(State {
            cfg,
            pool,
            pending: None,
            cnt_start: s.heap_cnt_start,
            cnt_step: s.heap_cnt_step,
            sent: 0,
            index: 0,
            descriptors_separate: s.descriptors_separate,
            descriptors_every: s.descriptors_every,
            stop_at_eos: s.stop_at_eos,
            plain,
            plain_descriptors: None,
            warned_len: false,
            known: None,
            timer: s.stats_interval.timer(),
        });
        Ok(())
    }

    fn stop(&self) {
        *lock(&self.state) = None;
        *lock(&self.pool) = None;
    }

    fn set_flushing(&self, flushing: bool) {
        self.flushing.store(flushing, Ordering::Release);
        if flushing {
            if let Some(pool) = lock(&self.pool).as_ref() {
                pool.wake_waiters();
            }
        }
    }

    fn encode_all<'a>(
        list: impl IntoIterator<Item = &'a Descriptor>,
        flavour: Flavour,
    ) -> Vec<Vec<u8>> {
        list.into_iter()
            .map(|d| descriptor::encode(d, flavour))
            .collect()
    }

    /// Turns one input buffer into a heap and writes its packets.
    fn send_buffer(
        &self,
        state: &mut State,
        buffer: &gst::BufferRef,
    ) -> Result<(), gst::FlowError> {
        let map = buffer.map_readable().map_err(|_| {
            gst::element_imp_error!(
                self,
                gst::StreamError::Failed,
                ("Cannot map an input buffer for reading"),
                ["speadpay needs system-memory input (download GPU memory first)"]
            );
            gst::FlowError::Error
        })?;
        let data = map.as_slice();
        let flavour = state.cfg.flavour();
        let due = state.descriptors_due();
        let meta = buffer.meta::<HeapMeta>();

        // Owned bytes the items borrow: filled first, borrowed after.
        if meta.is_none() && state.plain_descriptors.is_none() {
            let list = state.plain.descriptors(flavour, data.len()).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Format, ("{}", e));
                gst::FlowError::Error
            })?;
            let fixed = list.last().and_then(|d| state.plain.fixed_len(d));
            state.plain_descriptors = Some((Self::encode_all(&list, flavour), fixed));
        }
        if let Some(m) = &meta {
            let known = &m.info().descriptors;
            let stale = state
                .known
                .as_ref()
                .is_none_or(|(list, _)| !list.same_as(known));
            if stale && !known.is_empty() {
                state.known = Some((known.clone(), Self::encode_all(known.iter(), flavour)));
            }
        }

        // Descriptors and values apart: the descriptors go first in the heap, or in a
        // heap of their own with `descriptors-separate`.
        let mut descs: Vec<Item<'_>> = Vec::new();
        let mut items: Vec<Item<'_>> = Vec::new();
        match &meta {
            Some(m) => {
                let info = m.info();
                let known = state.known.as_ref().map(|(_, encoded)| encoded.as_slice());
                let same_flavour = info.flavour == flavour;
                if let Some(bad) =
                    heap_items(info, data, known, same_flavour, due, &mut descs, &mut items)
                {
                    gst::warning!(
                        CAT,
                        imp = self,
                        "heap {}: {bad} item(s) point outside the buffer; sent without them",
                        info.heap_cnt
                    );
                }
            }
            None => {
                let (encoded, fixed) = state.plain_descriptors.as_ref().expect("encoded above");
                if let Some(want) = fixed {
                    if *want != data.len() as u64 && !state.warned_len {
                        state.warned_len = true;
                        gst::element_imp_warning!(
                            self,
                            gst::StreamError::Format,
                            (
                                "A buffer has {} bytes but the item's descriptor says {want}: \
                              spead2 receivers will reject such heaps (set item-shape, or \
                              send buffers of one size)",
                                data.len()
                            )
                        );
                    }
                }
                if due {
                    descs.extend(encoded.iter().map(|d| Item::descriptor(d)));
                }
                state.plain.items(data, state.sent, flavour, &mut items);
            }
        }
        let separate = state.descriptors_separate && !descs.is_empty();
        if !separate {
            descs.append(&mut items);
            items = descs;
            descs = Vec::new();
        }
        let heaps: &[&[Item<'_>]] = if separate {
            &[&descs, &items]
        } else {
            &[&items]
        };
        for (k, heap_items) in heaps.iter().enumerate() {
            let cnt = state.cnt(k as u64);
            let mut heap = state.cfg.heap(cnt, heap_items).map_err(|e| {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Encode,
                    ("Cannot send heap {cnt}: {e}"),
                    ["set flavour to one that fits the values (e.g. 64-48) or send less"]
                );
                gst::FlowError::Error
            })?;
            self.write_heap(&mut state.pending, &state.pool, &mut heap, buffer.pts())?;
        }
        let n = heaps.len() as u64;
        drop(items);
        drop(descs);
        state.index += n;
        state.sent += 1;
        self.counters.heaps.add(1);
        Ok(())
    }

    /// Writes every packet of `heap` into slabs, pushing each slab that fills up. The
    /// last, partly filled slab stays pending for the next heap of a buffer list.
    fn write_heap(
        &self,
        pending: &mut Option<Pending>,
        pool: &SlotPool,
        heap: &mut HeapPackets<'_>,
        pts: Option<gst::ClockTime>,
    ) -> Result<(), gst::FlowError> {
        batch::write_heap(pending, pool, &self.flushing, heap, pts, |p| {
            self.push_pending(p)
        })
    }

    /// Pushes the pending slab, if it holds any packet.
    fn push_pending(&self, pending: &mut Option<Pending>) -> Result<(), gst::FlowError> {
        let Some(batch) = pending.take().and_then(Pending::finish) else {
            return Ok(());
        };
        self.counters.packets.add(batch.packets);
        self.counters.bytes.add(batch.bytes);
        self.counters.batches.add(1);
        if self.srcpad.current_caps().is_none() {
            // Upstream sent no caps (e.g. appsrc without caps): ours are fixed anyway.
            self.srcpad
                .push_event(gst::event::Caps::new(&caps::packets_caps()));
        }
        self.srcpad.push(batch.buffer).map(|_| ())
    }

    fn post_stats_if_due(&self) {
        let due = lock(&self.state)
            .as_mut()
            .is_some_and(|s| s.timer.due(Instant::now()));
        self.post_stats_if(due);
    }

    fn chain(
        &self,
        _pad: &gst::Pad,
        buffer: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            self.send_buffer(state, &buffer)?;
            self.push_pending(&mut state.pending)?;
        }
        self.post_stats_if_due();
        Ok(gst::FlowSuccess::Ok)
    }

    fn chain_list(
        &self,
        _pad: &gst::Pad,
        list: gst::BufferList,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            // Small heaps share slabs: one push per slab, not per heap.
            for buffer in list.iter() {
                self.send_buffer(state, buffer)?;
            }
            self.push_pending(&mut state.pending)?;
        }
        self.post_stats_if_due();
        Ok(gst::FlowSuccess::Ok)
    }

    /// Sends the stop heap (at EOS).
    fn send_stop(&self) -> Result<(), gst::FlowError> {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        if !state.stop_at_eos {
            return self.push_pending(&mut state.pending);
        }
        let items = [Item::stop()];
        let cnt = state.cnt(0);
        let mut heap = state.cfg.heap(cnt, &items).map_err(|e| {
            gst::error!(CAT, imp = self, "cannot send the stop heap: {e}");
            gst::FlowError::Error
        })?;
        self.write_heap(&mut state.pending, &state.pool, &mut heap, None)?;
        self.push_pending(&mut state.pending)?;
        gst::debug!(CAT, imp = self, "stop heap {cnt} sent");
        Ok(())
    }

    fn sink_event(&self, pad: &gst::Pad, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::Caps(_) => self
                .srcpad
                .push_event(gst::event::Caps::new(&caps::packets_caps())),
            // Our caps are fixed: send them right after stream-start, so that a segment
            // never precedes them even when upstream (e.g. fakesrc) sends no caps.
            gst::EventView::StreamStart(_) => {
                let ok = self.srcpad.push_event(event);
                self.srcpad
                    .push_event(gst::event::Caps::new(&caps::packets_caps()));
                ok
            }
            gst::EventView::Eos(_) => {
                if let Err(e) = self.send_stop() {
                    gst::warning!(CAT, imp = self, "stop heap not sent: {e:?}");
                }
                self.post_stats();
                self.srcpad.push_event(event)
            }
            gst::EventView::FlushStart(_) => {
                self.set_flushing(true);
                self.srcpad.push_event(event)
            }
            gst::EventView::FlushStop(_) => {
                if let Some(state) = lock(&self.state).as_mut() {
                    state.pending = None;
                }
                self.set_flushing(false);
                self.srcpad.push_event(event)
            }
            _ => gst::Pad::event_default(pad, Some(&*self.obj()), event),
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for SpeadPay {
    const NAME: &'static str = "GstFhSpeadPay";
    type Type = super::SpeadPay;
    type ParentType = gst::Element;

    fn with_class(klass: &Self::Class) -> Self {
        let sink_templ = klass.pad_template("sink").expect("sink template");
        let sinkpad = gst::Pad::builder_from_template(&sink_templ)
            .chain_to(Self::chain)
            .chain_list_to(Self::chain_list)
            .event_to(Self::sink_event)
            .build();
        let src_templ = klass.pad_template("src").expect("src template");
        let srcpad = gst::Pad::builder_from_template(&src_templ).build();
        Self {
            sinkpad,
            srcpad,
            settings: Mutex::new(Settings::default()),
            state: Mutex::new(None),
            pool: Mutex::new(None),
            flushing: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }
}

impl ObjectImpl for SpeadPay {
    firehose_core::settings_properties!(SpeadPay);

    fn constructed(&self) {
        self.parent_constructed();
        element::add_pads(&*self.obj(), &[&self.sinkpad, &self.srcpad]);
    }
}

impl GstObjectImpl for SpeadPay {}

impl ElementImpl for SpeadPay {
    firehose_core::element_metadata!(
        "SPEAD payloader",
        "Codec/Payloader/Network",
        "Cuts heaps (from speaddepay, or one per plain buffer) into SPEAD packets as \
         spead2's sender does, in pooled batches for fhudpsink; stop heap at EOS",
    );

    firehose_core::pad_templates!(
        firehose_core::element::sink_template(&gst::Caps::new_any()),
        firehose_core::src::src_template(&caps::packets_caps()),
    );

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        match transition {
            gst::StateChange::ReadyToPaused => element::start_or_post(self, self.start())?,
            // Before the pads deactivate, which waits for a chain blocked on the pool.
            gst::StateChange::PausedToReady => self.set_flushing(true),
            _ => {}
        }
        let ret = self.parent_change_state(transition)?;
        if transition == gst::StateChange::PausedToReady {
            self.stop();
        }
        Ok(ret)
    }
}
