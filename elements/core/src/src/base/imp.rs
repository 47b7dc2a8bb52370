//! What [`super::PacketSrc`] does around a subclass's transport: its properties, its
//! pool, live control, negotiation and `stats`.

use std::sync::Mutex;
use std::time::Instant;

use gst::glib;
use gst::glib::translate::{IntoGlibPtr, ToGlibPtr};
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use super::{Batch, BatchSize, Class, Methods, Open, Receive, ReceiveInto};
use crate::alloc::CopyOut;
use crate::meta::readable::ReadableOutput;
use crate::property::PropertyGroup;
use crate::src::{
    self as live, LiveControl, OutputSettings, PacketOutput, PoolProps, PoolSettings,
    ThreadSettings,
};
use crate::stats::{self, StatsInterval, StatsTimer};
use crate::sync::lock;
use crate::thread::Pinner;
use crate::{PoolConfig, SlotPool};

crate::debug_category!(CAT, "fhpacketsrc", "Firehose packet source base class");

/// The base's properties, as set (`stats` follows them).
#[derive(Clone, Debug)]
struct Settings {
    /// The subclass's `batch-size` spec.
    batch: BatchSize,
    batch_size: u32,
    output: OutputSettings,
    pool: PoolSettings,
    thread: ThreadSettings,
    stats_interval: StatsInterval,
}

crate::property_group! {
    Settings as s {
        batch_size => live::batch_size(s.batch.blurb, s.batch.max, s.batch.default);
        group output;
        group pool;
        group thread;
        group stats_interval;
    }
}

impl Settings {
    fn new(batch: BatchSize, pool: &'static PoolProps) -> Self {
        Self {
            batch,
            batch_size: batch.default,
            output: OutputSettings::default(),
            pool: PoolSettings::new(pool),
            thread: ThreadSettings::default(),
            stats_interval: StatsInterval::default(),
        }
    }
}

/// What `create` reads once per batch, under one lock: set at start, the pool
/// replaced by `decide_allocation`, kept after stop for the final `stats` read.
#[derive(Debug)]
struct Run {
    batch_size: u32,
    timer: StatsTimer,
    /// The pool batches are received into ([`ReceiveInto::Pool`]); `live` holds it
    /// too, to wake a wait for a slot on `unlock()`.
    pool: Option<SlotPool>,
    /// The slot size `open` returned: a copy slot's size ([`ReceiveInto::Device`]).
    slot_size: usize,
    /// `cpu` and `rt-priority`, applied on the streaming thread at its first batch.
    pinner: Pinner,
}

/// The instance data of the base class.
#[derive(Debug)]
pub struct PacketSrc {
    settings: Mutex<Settings>,
    /// `output`, `caps`, and what was negotiated: batches or one buffer per datagram.
    output: PacketOutput,
    /// `readable-metas`, and whether downstream may read them (the allocation query).
    readable: ReadableOutput,
    live: LiveControl,
    /// The copy into the memory downstream proposed ([`ReceiveInto::Device`]).
    copy: CopyOut,
    run: Mutex<Run>,
}

#[glib::object_subclass]
impl ObjectSubclass for PacketSrc {
    const NAME: &'static str = "GstFhPacketSrc";
    const ABSTRACT: bool = true;
    // Each plugin links its own copy of this crate (crate::props explains): the second
    // to load registers the type as `GstFhPacketSrc-1`.
    const ALLOW_NAME_CONFLICT: bool = true;
    type Type = super::PacketSrc;
    type ParentType = gst_base::PushSrc;
    type Class = Class;

    /// `klass` is the class of the instance being made: the subclass's defaults.
    fn with_class(klass: &Class) -> Self {
        let m = klass.methods.expect("an instance is of a subclass");
        Self {
            settings: Mutex::new(Settings::new(m.batch_size, m.pool)),
            output: PacketOutput::default(),
            readable: ReadableOutput::default(),
            live: LiveControl::default(),
            copy: CopyOut::default(),
            run: Mutex::new(Run {
                batch_size: m.batch_size.default,
                timer: StatsTimer::new(0),
                pool: None,
                slot_size: 0,
                pinner: Pinner::default(),
            }),
        }
    }
}

impl PacketSrc {
    /// The properties the base installs on a subclass's class (`super` explains why
    /// there): `batch-size`, the output ones, the pool ones, `stats-interval`, then
    /// `stats`.
    pub(super) fn param_specs(
        batch: BatchSize,
        pool: &'static PoolProps,
        stats_description: &str,
    ) -> Vec<glib::ParamSpec> {
        let mut v = Settings::new(batch, pool).spec_vec();
        v.push(stats::stats_spec(stats_description));
        v
    }

    /// The subclass's constants and methods (copied out of the class struct).
    fn class(&self) -> Methods {
        let obj = self.obj();
        let class: &Class = obj.class().as_ref();
        class.methods.expect("an instance is of a subclass")
    }

    /// Sets the base's property at `index` among them (the subclass's class routes
    /// them here).
    pub(super) fn set_base_property(
        &self,
        index: usize,
        value: &glib::Value,
        pspec: &glib::ParamSpec,
    ) {
        let mut s = lock(&self.settings);
        if !s.set(index, value, pspec) {
            drop(s);
            crate::property::no_such_property(self.obj().upcast_ref(), pspec);
            return;
        }
        self.output.apply(&s.output);
    }

    /// The value of the base's property at `index` among them.
    pub(super) fn base_property(&self, index: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let mut s = lock(&self.settings).clone();
        if index == s.count() {
            return self.stats().to_value();
        }
        // The pool's size in bytes and as a count convert with the slot size its other
        // settings give now.
        s.pool.sizing.slot_bytes = (self.class().slot_bytes)(&self.obj(), s.batch_size);
        s.get(index, pspec).unwrap_or_else(|| {
            crate::property::no_such_property(self.obj().upcast_ref(), pspec);
            pspec.default_value().clone()
        })
    }

    pub(super) fn pool_settings(&self) -> PoolSettings {
        lock(&self.settings).pool
    }

    pub(super) fn live(&self) -> &LiveControl {
        &self.live
    }

    /// The subclass's transport, opened with this element's settings for an engine that
    /// takes its batches in place (the element itself never starts).
    pub(super) fn open_in_place(
        &self,
        waker: std::sync::Arc<crate::wake::Waker>,
    ) -> Result<Box<dyn crate::transport::InPlaceTransport>, gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let open = Open {
            batch_size: s.batch_size,
            pool: s.pool,
        };
        (self.class().open_in_place)(&self.obj(), &open, waker)
    }

    /// The subclass's counters, and the pool's or the copy's.
    fn stats(&self) -> gst::Structure {
        let class = self.class();
        let mut s = (class.counters)(&self.obj());
        match class.receive_into {
            ReceiveInto::Pool => live::append_slot_pool(&mut s, lock(&self.run).pool.as_ref()),
            ReceiveInto::Device { .. } => self.copy.append_stats(&mut s),
        }
        s
    }

    fn post_stats(&self) {
        stats::post(self.obj().upcast_ref(), self.stats());
    }

    pub(super) fn post_stats_if_due(&self) {
        let due = lock(&self.run).timer.due(Instant::now());
        if due {
            (self.class().refresh_counters)(&self.obj());
            self.post_stats();
        }
    }

    /// The pool of `slots` slots of `slot_size` bytes, with `memory`.
    fn make_pool(&self, slot_size: usize, s: &Settings) -> Result<SlotPool, gst::ErrorMessage> {
        let what = self.class().pool.what;
        let slots = s.pool.count(slot_size as u64).max(2) as usize;
        let pool = SlotPool::new(&PoolConfig {
            slot_size,
            slots,
            hugepages: s.pool.policy(),
        })
        .map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::NoSpaceLeft,
                ("cannot allocate the {slots} x {slot_size}-byte {what}: {e}; lower pool-size or batch-size")
            )
        })?;
        if let Some(why) = pool.fallback_reason() {
            // memory=auto says it once (docs/elements.md): on the bus for a live
            // capture, whose loss rate may depend on it; in the log for a source that
            // paces itself (replay, the test source), which loses nothing either way.
            if self.class().live {
                gst::element_imp_warning!(self, gst::ResourceError::Settings, ("{}", why));
            } else {
                gst::warning!(CAT, imp = self, "{what} in normal pages: {why}");
            }
        }
        Ok(pool)
    }
}

impl PacketSrc {
    /// What `create` returns for `out`: a buffer as it is; a list submitted to
    /// GstBaseSrc, which pushes it after `create` returns with no buffer (a subclass's
    /// `create` is this one, reached from C: `super` says why).
    fn submit(&self, out: CreateSuccess) -> CreateSuccess {
        match out {
            CreateSuccess::NewBufferList(list) => {
                let obj = self.obj();
                let src: &gst_base::BaseSrc = obj.upcast_ref();
                // SAFETY: called from `create` on the streaming thread, as the function
                // requires; it takes ownership of the list.
                unsafe {
                    gst_base::ffi::gst_base_src_submit_buffer_list(
                        src.to_glib_none().0,
                        list.into_glib_ptr(),
                    )
                };
                CreateSuccess::FilledBuffer
            }
            other => other,
        }
    }
}

impl ObjectImpl for PacketSrc {
    fn constructed(&self) {
        self.parent_constructed();
        // Not live for a source that paces itself; buffers carry times, so segments
        // are in time.
        live::set_live(&*self.obj(), self.class().live);
    }
}

impl GstObjectImpl for PacketSrc {}

impl ElementImpl for PacketSrc {
    crate::pad_templates!(live::output::packets_src_template());

    // An application's EOS ends the stream after the batch being received is pushed.
    crate::live_src_send_event!(live);
}

impl BaseSrcImpl for PacketSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let class = self.class();
        // Checked before anything opens: a CPU this process may not use is a start
        // error, not a streaming one.
        let pinner = s.thread.pinner()?;
        // Before `open`, which may install a waker in it.
        self.live.start();
        let open = Open {
            batch_size: s.batch_size,
            pool: s.pool,
        };
        let opened =
            (class.open)(&self.obj(), &open).and_then(|slot_size| match class.receive_into {
                ReceiveInto::Pool => self
                    .make_pool(slot_size, &s)
                    .map(|p| (slot_size, Some(p)))
                    .inspect_err(|_| (class.close)(&self.obj())),
                ReceiveInto::Device { .. } => Ok((slot_size, None)),
            });
        let (slot_size, pool) = match opened {
            Ok(p) => p,
            Err(e) => {
                self.live.stop();
                return Err(e);
            }
        };
        self.readable.start(s.pool.readable_metas);
        if let Some(pool) = &pool {
            self.live.add_pool(pool.clone());
            gst::debug!(
                CAT,
                imp = self,
                "started with {s:?}: {} slots of {} bytes ({})",
                pool.stats().slots,
                pool.slot_size(),
                pool.kind().as_str()
            );
        } else {
            gst::debug!(
                CAT,
                imp = self,
                "started with {s:?}, in the device's memory"
            );
        }
        *lock(&self.run) = Run {
            batch_size: s.batch_size,
            timer: s.stats_interval.timer(),
            pool,
            slot_size,
            pinner,
        };
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        (self.class().close)(&self.obj());
        // The task has stopped: its thread goes back to GStreamer's pool, where any
        // element may take it, so it gets its earlier CPUs and scheduling back.
        if let Err(e) = lock(&self.run).pinner.restore() {
            gst::warning!(CAT, imp = self, "could not unpin the receive thread: {e}");
        }
        // The pool stays reachable for the final `stats` read (the next start
        // replaces it); slots still held downstream keep its memory alive until they
        // are dropped.
        self.live.stop();
        Ok(())
    }

    crate::live_src_base!(live);

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        self.output.caps(filter)
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        self.output.negotiate(self.obj().upcast_ref())
    }

    /// An element downstream that needs its memory (`fhshmsink`'s shared segments,
    /// pinned pages) proposes its provider ([`crate::alloc`]): the pool is cut from it,
    /// so each batch is received straight into that memory, with no copy. Another
    /// allocator cannot be received into: say so, and keep the own pool.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let obj = self.obj();
        let element: &gst::Element = obj.upcast_ref();
        self.readable.decide(element, Some(query));
        match self.class().receive_into {
            ReceiveInto::Device { why } => {
                let slot = lock(&self.run).slot_size;
                self.copy.decide(element, query, why, slot.max(1))?;
            }
            ReceiveInto::Pool => {
                // From the streaming thread before the first create: nothing holds the
                // pool's lock for long.
                let current = lock(&self.run).pool.clone();
                if let Some(current) = current {
                    if let Some(pool) = crate::alloc::decide_pool(element, query, &current)? {
                        gst::info!(
                            CAT,
                            imp = self,
                            "receiving into {} memory, as downstream proposed",
                            pool.kind().as_str()
                        );
                        self.live.set_pool(pool.clone());
                        lock(&self.run).pool = Some(pool);
                    }
                }
            }
        }
        self.parent_decide_allocation(query)
    }
}

impl PushSrcImpl for PacketSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        self.live.create(|| {
            // One lock per batch for the base.
            let (pool, batch_size, due) = {
                let mut run = lock(&self.run);
                // A thread-local check on every batch but the first of each thread.
                if let Err(e) = run.pinner.on_this_thread() {
                    gst::element_imp_error!(self, gst::ResourceError::Settings, ("{}", e));
                    return Err(gst::FlowError::Error);
                }
                let due = run.timer.due(Instant::now());
                (run.pool.clone(), run.batch_size, due)
            };
            let rx = Receive {
                pool: pool.as_ref(),
                live: &self.live,
                batch_size,
                readable: self.readable.wanted(),
                output: &self.output,
                base: self,
            };
            let class = self.class();
            match (class.receive)(&self.obj(), &rx) {
                Ok(batch) => {
                    if due {
                        (class.refresh_counters)(&self.obj());
                        self.post_stats();
                    }
                    Ok(self.submit(match batch {
                        Batch::Buffer(buf) => self.output.push(self.copy.out(buf)),
                        Batch::List(list) => CreateSuccess::NewBufferList(list),
                    }))
                }
                Err(gst::FlowError::Eos) => {
                    (class.refresh_counters)(&self.obj());
                    self.post_stats();
                    Err(gst::FlowError::Eos)
                }
                Err(e) => Err(e),
            }
        })
    }
}
