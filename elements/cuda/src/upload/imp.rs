//! `fhcudaupload` implementation: a plain element (sink and src pads, `chain`) over the
//! [`crate::engine`]; this file is the GStreamer side (pads, caps, events, states,
//! properties, the allocation proposal).

use firehose_core::stats::names;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use firehose_core::element::prelude::*;
use firehose_core::element::sink_template;
use firehose_core::property::SettingsElement;
use firehose_core::provider::{Anonymous, MemoryProvider, Registered, Registrar};
use firehose_core::stats::{Counter, StatsInterval, StatsTimer};
use firehose_core::sync::lock;
use firehose_core::{
    HugepagePolicy, MemoryKind, MemoryRegion, PacketBatchMeta, PacketInfo, RegionError,
};

use crate::devmem::{self, DeviceView};
use crate::engine::{
    Backend, Engine, EngineConfig, EngineStats, HostBytes, Layout, UploadError, Uploaded,
};
use crate::gstcuda::{self, Interop};

firehose_core::debug_category!(CAT, "fhcudaupload", "Firehose CUDA upload");

const DEFAULT_MAX_IN_FLIGHT: u32 = 4;

firehose_core::property_enum! {
    /// `layout=whole|payloads`.
    pub enum UploadLayout = "GstFhCudaLayout" {
        /// Each buffer's bytes as they are.
        #[default]
        Whole = 0, "whole", "Whole: each buffer's bytes as they are";
        /// A packet batch's payloads back to back, then an offsets table; other buffers
        /// whole.
        Payloads = 1, "payloads", "Payloads: a packet batch's payloads back to back, then a u32 offsets table";
    }
}

/// The element's settings: its properties but `stats`.
#[derive(Clone, Debug)]
pub struct Settings {
    device: i32,
    max_in_flight: u32,
    layout: UploadLayout,
    pinned_fallback: bool,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            device: 0,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            layout: UploadLayout::Whole,
            pinned_fallback: false,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        device => glib::ParamSpecInt::builder("device")
            .nick("Device")
            .blurb("CUDA device index (nvidia-smi -L lists them)")
            .minimum(0)
            .default_value(0)
            .mutable_ready()
            .build();
        max_in_flight => glib::ParamSpecUInt::builder("max-in-flight")
            .nick("Copies in flight")
            .blurb(
                "Host-to-device copies queued at most; a buffer waits (stall-time-ns) \
                 when this many are queued",
            )
            .minimum(1)
            .maximum(256)
            .default_value(DEFAULT_MAX_IN_FLIGHT)
            .mutable_ready()
            .build();
        layout => glib::ParamSpecEnum::builder::<UploadLayout>("layout")
            .nick("Layout")
            .blurb(
                "whole: each buffer as it is; payloads: a packet batch's payloads back \
                 to back in one device block, followed by a u32 offsets table",
            )
            .mutable_ready()
            .build();
        pinned_fallback => glib::ParamSpecBoolean::builder("pinned-fallback")
            .nick("Pinned fallback")
            .blurb(
                "When host memory cannot be pinned (RLIMIT_MEMLOCK): warn, count \
                 (pinned-fallbacks) and use unpinned memory instead of failing",
            )
            .default_value(false)
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

/// An opened device: the backend of the uploads and the registrar of pinned memory.
pub type Opened = (Arc<dyn Backend>, Arc<dyn Registrar>);

/// What opens the device: CUDA, unless a test put another backend in its place.
pub type BackendFactory = fn(i32) -> Result<Opened, String>;

static BACKEND_FOR_TESTS: Mutex<Option<BackendFactory>> = Mutex::new(None);

/// Replaces CUDA with `factory` for every `fhcudaupload` started from now on in this
/// process (`None`: CUDA again). A test seam: the element's own tests run it over the
/// host backend of [`crate::testing`] on machines without a GPU.
#[doc(hidden)]
pub fn set_backend_for_tests(factory: Option<BackendFactory>) {
    *lock(&BACKEND_FOR_TESTS) = factory;
}

/// The device opened, words saying which it is, and libgstcuda's wrapping of its
/// context (or why there is none).
fn open_backend(device: i32) -> Result<(Opened, String, Result<Interop, String>), String> {
    if let Some(f) = *lock(&BACKEND_FOR_TESTS) {
        return Ok((
            f(device)?,
            "test backend".into(),
            Err("a test backend".into()),
        ));
    }
    let cuda = crate::driver::Cuda::open(device)?;
    let interop = Interop::new(&cuda);
    let i = cuda.info();
    let what = format!(
        "device {} ({}, {} MiB, driver API {}.{})",
        i.index,
        i.name,
        i.total_mem >> 20,
        i.driver_version / 1000,
        i.driver_version % 1000 / 10
    );
    let registrar = cuda.registrar();
    Ok(((cuda, registrar), what, interop))
}

/// Pinned memory (anonymous regions, hugepages where reserved, registered with the
/// driver); under `pinned-fallback=true` a registration that fails gives unpinned memory
/// instead, counted, and its reason kept for a warning.
#[derive(Debug)]
struct PinnedProvider {
    pinned: Registered,
    plain: Anonymous,
    fallback: bool,
    fallbacks: Arc<Counter>,
    reason: Arc<Mutex<Option<String>>>,
}

impl MemoryProvider for PinnedProvider {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Pinned
    }

    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError> {
        match self.pinned.allocate(len) {
            Err(e) if self.fallback => {
                self.fallbacks.add(1);
                *lock(&self.reason) = Some(e.to_string());
                self.plain.allocate(len)
            }
            r => r,
        }
    }
}

/// An input buffer, mapped and held until its copy has completed.
struct Input {
    map: gst::MappedBuffer<gst::buffer::Readable>,
    pinned: bool,
}

// SAFETY: a readable map of a buffer points into its memory, which does not move and
// is not written while the map (and so the buffer) is held.
unsafe impl HostBytes for Input {
    fn bytes(&self) -> &[u8] {
        self.map.as_slice()
    }
    fn pinned(&self) -> bool {
        self.pinned
    }
}

/// Streaming state, from READY→PAUSED to PAUSED→READY.
struct State {
    /// First, so it is dropped (waiting for its copies) before anything else.
    engine: Engine<Input, gst::Buffer>,
    provider: Arc<PinnedProvider>,
    layout: UploadLayout,
    device: i32,
    /// libgstcuda's context and pools: output in `GstCudaMemory` (where present).
    interop: Option<Arc<Interop>>,
    /// Downstream takes the RGBA view (`video/x-raw(memory:CUDAMemory)`), not our caps.
    view: bool,
    /// The height of the view caps last pushed.
    view_height: u32,
    /// The payload ranges of the current batch (kept, so no allocation per buffer).
    ranges: Vec<Range<usize>>,
    timer: StatsTimer,
}

/// The `fhcudaupload` element.
///
/// Two threads: upstream's streaming thread submits (`chain`), and the src pad's task
/// waits for the oldest transfer and pushes results as they complete, so a live stream
/// that pauses does not leave buffers in flight until the next one arrives. Whoever
/// pushes holds `push_lock` from taking a result to pushing it, so results and
/// serialized events go out in their order.
pub struct CudaUpload {
    sinkpad: gst::Pad,
    srcpad: gst::Pad,
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Signalled (with `state`) when a transfer is submitted or the task must look up.
    wake: Condvar,
    push_lock: Mutex<()>,
    /// What the last push downstream returned: `chain` returns an error it holds.
    flow: Mutex<Result<gst::FlowSuccess, gst::FlowError>>,
    flushing: AtomicBool,
    stats: Arc<EngineStats>,
    /// Pinned registrations that failed and fell back to unpinned memory.
    fallbacks: Arc<Counter>,
}

impl ElementStats for CudaUpload {
    fn stats(&self) -> gst::Structure {
        let mut s = self.stats.structure();
        s.set(names::PINNED_FALLBACKS, self.fallbacks.get());
        s
    }
}

impl SettingsElement for CudaUpload {
    type Settings = Settings;

    fn counters() -> String {
        EngineStats::describe("pinned-fallbacks")
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl CudaUpload {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let ((backend, registrar), what, interop) = open_backend(s.device)
            .map_err(|e| gst::error_msg!(gst::ResourceError::NotFound, ("{}", e)))?;
        gst::info!(CAT, imp = self, "uploading to {what}");
        let interop = match interop {
            Ok(i) => {
                gst::info!(CAT, imp = self, "output in GstCudaMemory (libgstcuda)");
                Some(Arc::new(i))
            }
            Err(e) => {
                self.warn_no_interop(&e);
                None
            }
        };
        self.stats.reset();
        self.fallbacks.reset();
        let provider = Arc::new(PinnedProvider {
            pinned: Registered::new(Arc::new(Anonymous(HugepagePolicy::Auto)), registrar),
            plain: Anonymous(HugepagePolicy::Auto),
            fallback: s.pinned_fallback,
            fallbacks: self.fallbacks.clone(),
            reason: Arc::default(),
        });
        let mut engine = Engine::new(
            backend,
            &EngineConfig {
                max_in_flight: s.max_in_flight as usize,
                bounce_provider: provider.clone(),
                stats: self.stats.clone(),
            },
        )
        .map_err(|e| gst::error_msg!(gst::ResourceError::Failed, ("{}", e)))?;
        if let Some(i) = &interop {
            engine.set_block_source(Some(i.clone() as Arc<dyn crate::engine::BlockSource>));
        }
        *lock(&self.state) = Some(State {
            engine,
            provider,
            layout: s.layout,
            device: s.device,
            interop,
            view: false,
            view_height: 0,
            ranges: Vec::new(),
            timer: s.stats_interval.timer(),
        });
        Ok(())
    }

    /// Says, once per process at warning level and at each start at info level, that
    /// output stays in `FirehoseCudaMemory` because libgstcuda is not usable.
    fn warn_no_interop(&self, why: &str) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        let mut first = false;
        ONCE.call_once(|| first = true);
        let text = format!(
            "libgstcuda not usable ({why}): output in FirehoseCudaMemory, which stock \
             CUDA elements (cudadownload, nvcodec) do not take; install \
             libgstreamer-plugins-bad1.0-0 for GstCudaMemory"
        );
        if first {
            gst::warning!(CAT, imp = self, "{text}");
        } else {
            gst::info!(CAT, imp = self, "{text}");
        }
    }

    /// Drops the state: the engine waits for its copies, then frees what it holds.
    fn stop(&self) {
        let st = lock(&self.state).take();
        drop(st);
    }

    fn upload_error(&self, e: UploadError) -> gst::FlowError {
        gst::element_imp_error!(
            self,
            gst::ResourceError::Write,
            ("upload to the device failed: {}", e)
        );
        gst::FlowError::Error
    }

    /// The output buffer of a completed transfer: the tag (timestamps, metas) with the
    /// device memory and the device meta. A `GstCudaMemory` comes in a buffer of
    /// libgstcuda's pool, which becomes the output (the tag's metas copied to it); its
    /// size is the data's, or under the view the whole frame's.
    fn finish(u: Uploaded<gst::Buffer>, device: i32, whole_frame: bool) -> gst::Buffer {
        let view = DeviceView {
            ptr: u.block.ptr(),
            size: u.size,
            stream: u.block.stream_handle(),
            device,
        };
        let (tag, size, payloads) = (u.tag, u.size, u.payloads);
        let mut buf = if u.block.is_external() {
            let owner = u
                .block
                .take_owner()
                .expect("an external block has an owner");
            let mut out = *owner
                .downcast::<gst::Buffer>()
                .expect("external blocks are buffers of libgstcuda's pool");
            let b = out.get_mut().expect("a buffer just taken from the pool");
            let _ = tag.copy_into(
                b,
                gst::BufferCopyFlags::FLAGS
                    | gst::BufferCopyFlags::TIMESTAMPS
                    | gst::BufferCopyFlags::META,
                ..,
            );
            if !whole_frame {
                b.set_size(size);
            }
            out
        } else {
            let mut buf = tag;
            let b = buf.get_mut().expect("the tag buffer is ours alone");
            b.append_memory(devmem::wrap(u.block, size, device));
            buf
        };
        let b = buf.get_mut().expect("the output buffer is ours alone");
        devmem::add_meta(b, &view, payloads.as_ref());
        buf
    }

    /// Pushes every completed transfer (all of them with `drain`: the caller waits for
    /// the copies in flight), one at a time, holding `push_lock` so no other thread
    /// pushes in between.
    fn push_ready(&self, drain: bool) -> Result<gst::FlowSuccess, gst::FlowError> {
        let _push = lock(&self.push_lock);
        if drain {
            if let Some(st) = lock(&self.state).as_mut() {
                st.engine.drain().map_err(|e| self.upload_error(e))?;
            }
        }
        loop {
            let (next, caps) = {
                let mut guard = lock(&self.state);
                let Some(st) = guard.as_mut() else {
                    return Err(gst::FlowError::Flushing);
                };
                let (device, view) = (st.device, st.view);
                let next = st
                    .engine
                    .pop_ready()
                    .map_err(|e| self.upload_error(e))?
                    .map(|u| Self::finish(u, device, view));
                // Under the view, caps of the frame's height go before it when it
                // differs from the last.
                let mut caps = None;
                if let (true, Some(b)) = (view, next.as_ref()) {
                    let height = (b.size() / gstcuda::VIEW_ROW_BYTES) as u32;
                    if height != st.view_height {
                        st.view_height = height;
                        caps = Some(gstcuda::view_caps(height));
                    }
                }
                (next, caps)
            };
            let Some(buf) = next else {
                return Ok(gst::FlowSuccess::Ok);
            };
            if let Some(caps) = caps {
                gst::debug!(CAT, imp = self, "view caps {caps}");
                if !self.srcpad.push_event(gst::event::Caps::new(&caps)) {
                    let r = Err(gst::FlowError::NotNegotiated);
                    *lock(&self.flow) = r;
                    r?;
                }
            }
            let r = self.srcpad.push(buf);
            *lock(&self.flow) = r;
            r?;
        }
    }

    /// One round of the src pad's task: waits (outside any lock) for the oldest
    /// transfer, then pushes what has completed. Pauses itself when flushing, stopped,
    /// or downstream refused a buffer.
    fn task_iteration(&self) {
        let waited = {
            let mut guard = lock(&self.state);
            loop {
                if self.flushing.load(Ordering::Acquire) {
                    drop(guard);
                    let _ = self.srcpad.pause_task();
                    return;
                }
                match guard.as_ref() {
                    None => {
                        drop(guard);
                        let _ = self.srcpad.pause_task();
                        return;
                    }
                    Some(st) if st.engine.has_done() => break None,
                    Some(st) => {
                        if let Some(ev) = st.engine.next_event() {
                            break Some((st.engine.backend().clone(), ev));
                        }
                    }
                }
                guard = self
                    .wake
                    .wait_timeout(guard, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if let Some((backend, ev)) = waited {
            // An error shows again (and is reported) in pop_ready below.
            let _ = backend.wait(ev);
        }
        if let Err(e) = self.push_ready(false) {
            gst::debug!(CAT, imp = self, "pausing the task: {e:?}");
            if e != gst::FlowError::Flushing && e != gst::FlowError::Eos {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Failed,
                    ("downstream refused a buffer: {:?}", e)
                );
            }
            let _ = self.srcpad.pause_task();
        }
    }

    /// Starts the src pad's task (after start, and after a flush).
    fn start_task(&self) {
        let weak = self.obj().downgrade();
        let _ = self.srcpad.start_task(move || {
            if let Some(el) = weak.upgrade() {
                el.imp().task_iteration();
            }
        });
    }

    /// Stops the task: wakes it so it sees `flushing`, then waits for it to end.
    fn stop_task(&self) {
        self.flushing.store(true, Ordering::Release);
        self.wake.notify_all();
        let _ = self.srcpad.stop_task();
    }

    fn warn_fallback(&self, st: &State) {
        if let Some(reason) = lock(&st.provider.reason).take() {
            gst::element_imp_warning!(
                self,
                gst::ResourceError::Settings,
                (
                    "pinned memory unavailable, using unpinned memory (pinned-fallback=true; \
                     copies are slower): {}",
                    reason
                )
            );
        }
    }

    fn chain(
        &self,
        _pad: &gst::Pad,
        buffer: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        // An error downstream returned to the task stops upstream too.
        let flow = *lock(&self.flow);
        if let Err(e) = flow {
            gst::debug!(
                CAT,
                imp = self,
                "refusing a buffer: downstream returned {e:?}"
            );
            return Err(e);
        }
        let mut guard = lock(&self.state);
        let Some(st) = guard.as_mut() else {
            return Err(gst::FlowError::Flushing);
        };
        let pinned = buffer.n_memory() == 1
            && firehose_core::gstmem::buffer_memory_kind(&buffer) == Some(MemoryKind::Pinned);
        let mut tag = gst::Buffer::new();
        {
            let t = tag.get_mut().expect("a new buffer is writable");
            let _ = buffer.copy_into(
                t,
                gst::BufferCopyFlags::FLAGS
                    | gst::BufferCopyFlags::TIMESTAMPS
                    | gst::BufferCopyFlags::META,
                ..,
            );
        }
        let payloads = st.layout == UploadLayout::Payloads
            && self.payload_ranges(&buffer, &mut tag, &mut st.ranges);
        let map = buffer.into_mapped_buffer_readable().map_err(|_| {
            gst::element_imp_error!(
                self,
                gst::ResourceError::Read,
                ("could not map an input buffer for reading")
            );
            gst::FlowError::Error
        })?;
        let input = Input { map, pinned };
        let layout = if payloads {
            Layout::Payloads(&st.ranges)
        } else {
            Layout::Whole
        };
        st.engine
            .submit(input, layout, tag)
            .map_err(|e| self.upload_error(e))?;
        self.warn_fallback(st);
        let due = st.timer.due(Instant::now());
        drop(guard);
        self.wake.notify_all();
        self.post_stats_if(due);
        Ok(gst::FlowSuccess::Ok)
    }

    /// Fills `ranges` with the payloads of `buffer`'s batch and puts the batch meta of
    /// the gathered block on `tag` (offsets into the device block). False if `buffer`
    /// is not a batch. Ranges past the buffer are left out (the engine counts them).
    fn payload_ranges(
        &self,
        buffer: &gst::Buffer,
        tag: &mut gst::Buffer,
        ranges: &mut Vec<Range<usize>>,
    ) -> bool {
        let Some(meta) = buffer.meta::<PacketBatchMeta>() else {
            return false;
        };
        let size = buffer.size();
        ranges.clear();
        let mut out = Vec::with_capacity(meta.packets().len());
        let mut at = 0u32;
        for p in meta.packets() {
            let r = p.range();
            ranges.push(r.clone());
            if r.end <= size {
                out.push(PacketInfo { offset: at, ..*p });
                at = at.wrapping_add(p.len);
            }
        }
        let t = tag.get_mut().expect("the tag buffer is ours alone");
        // The readable batch meta (if upstream attached one) moves with the offsets.
        let readable_api = firehose_core::meta::readable::batch_api();
        let readable = firehose_core::meta::readable::batch(t).is_some();
        // Entry i of the destination meta still describes datagram i: kept as it is.
        let dests = t
            .meta::<firehose_core::meta::dest::PacketDestMeta>()
            .map(|m| m.dests().to_vec());
        t.foreach_meta_mut(|meta| {
            if meta.api() == PacketBatchMeta::meta_api() || meta.api() == readable_api {
                std::ops::ControlFlow::Continue(gst::buffer::BufferMetaForeachAction::Remove)
            } else {
                std::ops::ControlFlow::Continue(gst::buffer::BufferMetaForeachAction::Keep)
            }
        });
        if readable {
            firehose_core::meta::readable::add_batch(t, &out, dests.as_deref());
        }
        PacketBatchMeta::add(t, out);
        true
    }

    /// Input caps with the device memory feature (and `layout=payloads` on batches
    /// gathered so).
    fn output_caps(&self, caps: &gst::CapsRef) -> gst::Caps {
        let layout = lock(&self.settings).layout;
        let mut out = with_memory(caps, Some(devmem::CAPS_FEATURE));
        {
            let o = out.get_mut().expect("a new copy is writable");
            for i in 0..o.size() {
                let s = o.structure_mut(i).expect("index in range");
                if layout == UploadLayout::Payloads && s.name() == firehose_core::caps::PACKETS {
                    s.set("layout", "payloads");
                }
            }
        }
        out
    }

    fn sink_event(&self, _pad: &gst::Pad, event: gst::Event) -> bool {
        use gst::EventView;
        match event.view() {
            EventView::FlushStart(_) => {
                self.flushing.store(true, Ordering::Release);
                self.wake.notify_all();
                let ok = self.srcpad.push_event(event);
                // Downstream is flushing, so the task's push returns: it pauses.
                let _ = self.srcpad.pause_task();
                ok
            }
            EventView::FlushStop(_) => {
                {
                    let _push = lock(&self.push_lock);
                    if let Some(st) = lock(&self.state).as_mut() {
                        if let Err(e) = st.engine.discard() {
                            let _ = self.upload_error(e);
                        }
                    }
                }
                *lock(&self.flow) = Ok(gst::FlowSuccess::Ok);
                let ok = self.srcpad.push_event(event);
                self.flushing.store(false, Ordering::Release);
                if lock(&self.state).is_some() {
                    self.start_task();
                }
                ok
            }
            EventView::Caps(c) => {
                let own = self.output_caps(c.caps());
                // Downstream takes only the RGBA view: caps 1 row high now (caps go
                // before the segment), then each buffer's height before it.
                let view = self.choose_view(&own);
                let out = if view { gstcuda::view_caps(1) } else { own };
                gst::debug!(CAT, imp = self, "output caps {out}");
                // What was uploaded under the old caps goes out first, under them.
                if !self.push_serialized_then(|st| {
                    st.view = view;
                    st.view_height = u32::from(view);
                }) {
                    return false;
                }
                let _push = lock(&self.push_lock);
                self.srcpad.push_event(gst::event::Caps::new(&out))
            }
            EventView::Eos(_) => {
                let ok = self.push_serialized(event);
                self.post_stats();
                ok
            }
            _ if event.is_serialized() => self.push_serialized(event),
            _ => self.srcpad.push_event(event),
        }
    }

    /// Whether downstream takes the RGBA view of `GstCudaMemory` and not `own` (our
    /// caps with the feature): only where libgstcuda is in use.
    fn choose_view(&self, own: &gst::Caps) -> bool {
        if lock(&self.state)
            .as_ref()
            .is_none_or(|st| st.interop.is_none())
        {
            return false;
        }
        if self.srcpad.peer_query_accept_caps(own) {
            return false;
        }
        let theirs = self.srcpad.peer_query_caps(Some(&gstcuda::view_template()));
        !theirs.is_empty()
    }

    /// Pushes every transfer in flight, then changes the state with `f`, with no push
    /// from the task in between.
    fn push_serialized_then(&self, f: impl FnOnce(&mut State)) -> bool {
        let in_flight = lock(&self.state)
            .as_ref()
            .is_some_and(|st| st.engine.in_flight() > 0 || st.engine.has_done());
        if in_flight && self.push_ready(true).is_err() {
            return false;
        }
        let _push = lock(&self.push_lock);
        if let Some(st) = lock(&self.state).as_mut() {
            f(st);
        }
        true
    }

    /// Pushes every transfer in flight, then `event`, with no push from the task in
    /// between: a serialized event keeps its place in the stream.
    fn push_serialized(&self, event: gst::Event) -> bool {
        let _push = lock(&self.push_lock);
        let in_flight = lock(&self.state)
            .as_ref()
            .is_some_and(|st| st.engine.in_flight() > 0 || st.engine.has_done());
        // push_ready takes push_lock itself: release ours first, then hold it again
        // for the event (the task may push nothing in between: nothing is left).
        drop(_push);
        if in_flight && self.push_ready(true).is_err() {
            return false;
        }
        let _push = lock(&self.push_lock);
        self.srcpad.push_event(event)
    }

    fn sink_query(&self, pad: &gst::Pad, query: &mut gst::QueryRef) -> bool {
        // It uploads packet batches as they are: a packet source sends them.
        if firehose_core::src::output::answer_packets_query(query) {
            return true;
        }
        match query.view_mut() {
            gst::QueryViewMut::Allocation(q) => {
                let Some(provider) = lock(&self.state).as_ref().map(|s| s.provider.clone()) else {
                    return false;
                };
                // Upstream sources that own a pool cut it from pinned memory: the device
                // reads what they receive, with no bounce copy.
                firehose_core::alloc::propose(q, provider);
                true
            }
            // What downstream takes in device memory, upstream may send in host memory;
            // and anything, where downstream takes the RGBA view.
            gst::QueryViewMut::Caps(q) => {
                if self.view_possible()
                    && !self
                        .srcpad
                        .peer_query_caps(Some(&gstcuda::view_template()))
                        .is_empty()
                {
                    let caps = q.filter().map_or_else(gst::Caps::new_any, |f| f.to_owned());
                    q.set_result(&caps);
                    return true;
                }
                let filter = q
                    .filter()
                    .map(|f| with_memory(f, Some(devmem::CAPS_FEATURE)));
                let theirs = self.srcpad.peer_query_caps(filter.as_ref());
                q.set_result(&with_memory(&theirs, None));
                true
            }
            _ => gst::Pad::query_default(pad, Some(&*self.obj()), query),
        }
    }

    /// Whether output can be `GstCudaMemory`: libgstcuda is in use, or (not started
    /// yet) can be opened.
    fn view_possible(&self) -> bool {
        match lock(&self.state).as_ref() {
            Some(st) => st.interop.is_some(),
            None => lock(&BACKEND_FOR_TESTS).is_none() && gstcuda::available(),
        }
    }

    fn src_query(&self, pad: &gst::Pad, query: &mut gst::QueryRef) -> bool {
        if let gst::QueryViewMut::Context(q) = query.view_mut() {
            if q.context_type() == "gst.cuda.context" {
                let interop = lock(&self.state).as_ref().and_then(|st| st.interop.clone());
                return interop
                    .is_some_and(|i| i.handle_context_query(self.obj().upcast_ref(), query));
            }
        }
        match query.view_mut() {
            // What upstream sends in host memory comes out in device memory; where
            // libgstcuda is in use, also the RGBA view of it.
            gst::QueryViewMut::Caps(q) => {
                let filter = q.filter().map(|f| with_memory(f, None));
                let theirs = self.sinkpad.peer_query_caps(filter.as_ref());
                let theirs = if theirs.is_any() {
                    with_memory(&src_caps(), None)
                } else {
                    theirs
                };
                let mut out = with_memory(&theirs, Some(devmem::CAPS_FEATURE));
                if self.view_possible() && !out.is_any() {
                    let view = match q.filter() {
                        Some(f) => f.intersect(&gstcuda::view_template()),
                        None => gstcuda::view_template(),
                    };
                    out.merge(view);
                }
                q.set_result(&out);
                true
            }
            _ => gst::Pad::query_default(pad, Some(&*self.obj()), query),
        }
    }
}

/// What the src pad produces: the Firehose formats and plain bytes, in device memory.
fn src_caps() -> gst::Caps {
    with_memory(
        &firehose_core::src::output::firehose_caps(),
        Some(devmem::CAPS_FEATURE),
    )
}

/// `caps` with every structure's memory feature set to `feature` (`None`: system
/// memory); ANY stays ANY.
fn with_memory(caps: &gst::CapsRef, feature: Option<&str>) -> gst::Caps {
    let mut out = caps.to_owned();
    if out.is_any() {
        return out;
    }
    {
        let o = out.get_mut().expect("a new copy is writable");
        for i in 0..o.size() {
            o.set_features(i, feature.map(|f| gst::CapsFeatures::new([f])));
        }
    }
    out
}

#[glib::object_subclass]
impl ObjectSubclass for CudaUpload {
    const NAME: &'static str = "GstFhCudaUpload";
    type Type = super::CudaUpload;
    type ParentType = gst::Element;

    fn with_class(klass: &Self::Class) -> Self {
        let sinkpad = gst::Pad::builder_from_template(&klass.pad_template("sink").unwrap())
            .chain_to(Self::chain)
            .event_to(Self::sink_event)
            .query_to(Self::sink_query)
            .build();
        let srcpad = gst::Pad::builder_from_template(&klass.pad_template("src").unwrap())
            .query_to(Self::src_query)
            .build();
        Self {
            sinkpad,
            srcpad,
            settings: Mutex::default(),
            state: Mutex::new(None),
            wake: Condvar::new(),
            push_lock: Mutex::new(()),
            flow: Mutex::new(Ok(gst::FlowSuccess::Ok)),
            flushing: AtomicBool::new(false),
            stats: Arc::default(),
            fallbacks: Arc::default(),
        }
    }
}

impl GstObjectImpl for CudaUpload {}

impl ObjectImpl for CudaUpload {
    firehose_core::settings_properties!(CudaUpload);

    fn constructed(&self) {
        self.parent_constructed();
        firehose_core::element::add_pads(&*self.obj(), &[&self.sinkpad, &self.srcpad]);
    }
}

impl ElementImpl for CudaUpload {
    firehose_core::element_metadata!(
        "Firehose CUDA upload",
        "Filter/Converter/Hardware",
        "Copies buffers (packet batches, heaps, chunks, bytes) to CUDA device memory by \
         asynchronous DMA from pinned host memory; offers pinned memory to upstream pools. \
         Output in GstCudaMemory where libgstcuda is present, with an RGBA view \
         (video/x-raw(memory:CUDAMemory)) for stock CUDA elements such as cudadownload"
    );

    firehose_core::pad_templates!(
        sink_template(&gst::Caps::new_any()),
        firehose_core::src::src_template(&src_caps())
    );

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        if transition == gst::StateChange::ReadyToPaused {
            firehose_core::element::start_or_post(self, self.start())?;
        }
        if transition == gst::StateChange::PausedToReady {
            self.stop_task();
        }
        let r = self.parent_change_state(transition);
        match transition {
            gst::StateChange::ReadyToPaused if r.is_err() => self.stop(),
            gst::StateChange::ReadyToPaused => {
                self.flushing.store(false, Ordering::Release);
                *lock(&self.flow) = Ok(gst::FlowSuccess::Ok);
                self.start_task();
            }
            gst::StateChange::PausedToReady => self.stop(),
            _ => {}
        }
        r
    }
}

#[cfg(test)]
#[test]
fn the_upload_settings_round_trip() {
    let mut s = Settings::default();
    firehose_core::property::assert_round_trips(&mut s);
    let got = (s.device, s.max_in_flight, s.layout, s.pinned_fallback);
    let want = (1, DEFAULT_MAX_IN_FLIGHT + 1, UploadLayout::Payloads, true);
    assert_eq!(got, want, "each one set");
}
