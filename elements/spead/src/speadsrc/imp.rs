//! `fhspeadsrc` implementation: a live push source over a [`LandingSource`] of the SPEAD
//! [`Reassembler`], pushing one heap per `create`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use firehose_core::caps as fcaps;
use firehose_core::stats::{self, names, Counter, StatsTimer};
use firehose_core::sync::lock;
use firehose_core::wake::Waker;
use firehose_net::direct::DirectCounts;
use firehose_net::landsrc::LandingSource;
use firehose_net::socket_settings::{flow_error, insert_after, SocketSettings};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use crate::depay::{heap_properties, Settings as HeapSettings};
use crate::heapout::{self, heap_buffer, HeapCounters};
use crate::reassembly::{Emitted, Reassembler};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "fhspeadsrc",
        gst::DebugColorFlags::empty(),
        Some("Firehose SPEAD source"),
    )
});

/// Default `batch-size`: `fhudpsrc`'s, so one receive takes what one of its batches
/// would (at most `BATCH_BYTES`).
const DEFAULT_BATCH_SIZE: u32 = 64;
/// Most messages per receive: the receiver keeps two 64 KiB scratch buffers per message.
const MAX_BATCH_SIZE: u32 = 256;
/// Bytes one receive may fill, as `fhudpsrc`'s `batch-bytes`: the scratch a copied
/// packet passes through stays in a CPU's L2 cache until the reassembler reads it.
const BATCH_BYTES: usize = 256 << 10;

#[derive(Clone, Debug)]
struct Settings {
    socket: SocketSettings,
    heaps: HeapSettings,
    batch_size: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            socket: SocketSettings::default(),
            heaps: HeapSettings::default(),
            batch_size: DEFAULT_BATCH_SIZE,
        }
    }
}

struct State {
    /// The socket, the reassembler its payloads land in, and the heaps not yet pushed.
    src: LandingSource<Reassembler>,
    timer: StatsTimer,
    stop_is_eos: bool,
}

#[derive(Default)]
pub struct SpeadSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Kept outside `state`, which the streaming thread holds while it waits.
    waker: Mutex<Option<Arc<Waker>>>,
    heap_counters: HeapCounters,
    /// The receiver's counters, mirrored once per receive.
    recv_counts: Mutex<DirectCounts>,
    /// Read from the kernel (a system call) only when stats are posted, and at stop.
    kernel_drops: Counter,
    memory: Mutex<Option<&'static str>>,
    /// Set by unlock: cuts short a wait for data.
    flushing: AtomicBool,
    /// Set by an application's EOS: push what was received, then end the stream.
    eos: AtomicBool,
}

impl SpeadSrc {
    fn stats(&self) -> gst::Structure {
        let mut s = self.heap_counters.structure(*lock(&self.memory));
        heapout::receive_fields(&mut s, &lock(&self.recv_counts), self.kernel_drops.get());
        s
    }

    /// Mirrors the counters (once per receive) and posts the stats when due or `force`.
    fn publish(&self, src: &LandingSource<Reassembler>, timer: &mut StatsTimer, force: bool) {
        self.heap_counters.update(&src.engine);
        *lock(&self.recv_counts) = src.counts();
        if timer.due(Instant::now()) || force {
            self.kernel_drops.set(src.rx.kernel_drops());
            stats::post(self.obj().upcast_ref(), self.stats());
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for SpeadSrc {
    const NAME: &'static str = "GstFhSpeadSrc";
    type Type = super::SpeadSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for SpeadSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut v = SocketSettings::properties();
            insert_after(
                &mut v,
                "buffer-size",
                [glib::ParamSpecUInt::builder("batch-size")
                    .nick("Batch size")
                    .blurb("Most datagrams received by one recvmmsg (at most 256 KiB of them)")
                    .minimum(1)
                    .maximum(MAX_BATCH_SIZE)
                    .default_value(DEFAULT_BATCH_SIZE)
                    .mutable_ready()
                    .build()],
            );
            v.extend(heap_properties());
            v.extend(stats::properties(&format!(
                "{}, {}, {}, {}, {}, {}, {}, {}",
                heapout::COUNTERS,
                names::DATAGRAMS,
                names::PACKETS_LANDED,
                names::PACKETS_COPIED,
                names::TRUNCATED,
                names::EMPTY,
                names::BATCHES,
                names::DROPS_KERNEL
            )));
            v
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        if s.socket.set(value, pspec) {
            return;
        }
        match pspec.name() {
            "batch-size" => s.batch_size = value.get().expect("type checked upstream"),
            name => s.heaps.set(name, value),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        if let Some(v) = s.socket.get(pspec) {
            return v;
        }
        match pspec.name() {
            "batch-size" => s.batch_size.to_value(),
            name => s.heaps.get(name),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.set_live(true);
        obj.set_format(gst::Format::Time);
    }
}

impl GstObjectImpl for SpeadSrc {}

impl ElementImpl for SpeadSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "Firehose SPEAD source",
                "Source/Network",
                "Receives SPEAD over UDP into heaps, each payload straight into its heap where the stream allows (one buffer per heap, with a heap meta); interoperates with spead2",
                "Firehose developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &gst::Caps::new_empty_simple(fcaps::SPEAD_HEAP),
            )
            .unwrap()]
        });
        TEMPLATES.as_ref()
    }

    /// An application's EOS: `create` is woken with the `eos` flag, takes what the
    /// socket holds, pushes every heap under construction and returns EOS (GstBaseSrc's
    /// own handling would end the stream without them).
    fn send_event(&self, event: gst::Event) -> bool {
        if event.type_() == gst::EventType::Eos {
            if let Some(w) = lock(&self.waker).as_ref() {
                gst::debug!(
                    CAT,
                    imp = self,
                    "EOS: pushing the heaps under construction first"
                );
                self.eos.store(true, Ordering::Release);
                w.wake();
                return true;
            }
        }
        self.parent_send_event(event)
    }
}

impl BaseSrcImpl for SpeadSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let element = self.obj();
        let element = element.upcast_ref::<gst::Element>();
        let mut engine = heapout::new_reassembler(&s.heaps, element)?;
        engine.set_landing(s.heaps.landing.max_bytes());
        // Heaps carry the time of their first receive, not per-datagram kernel times.
        let batch = s.batch_size as usize;
        let (rx, report) = s.socket.open(element, *CAT, false, batch, BATCH_BYTES)?;
        let memory = engine.memory_kind().as_str();
        gst::info!(
            CAT,
            imp = self,
            "bound {:?}, rcvbuf {} B, gro {}; {} bytes of {} heap memory for heaps up to {} bytes, landing {}",
            report.local,
            report.buffer_granted,
            report.gro,
            engine.pool_bytes(),
            memory,
            s.heaps.max_heap_size,
            engine.lands_directly()
        );
        let port_changed = lock(&self.settings).socket.set_bound_port(&report);
        self.heap_counters.update(&engine);
        *lock(&self.recv_counts) = DirectCounts::default();
        self.kernel_drops.reset();
        *lock(&self.memory) = Some(memory);
        self.flushing.store(false, Ordering::Release);
        self.eos.store(false, Ordering::Release);
        *lock(&self.waker) = Some(rx.waker());
        let buffer = report.buffer_granted as u64;
        *lock(&self.state) = Some(State {
            src: LandingSource::new(rx, engine, batch, buffer, Emitted::default()),
            timer: StatsTimer::new(s.heaps.stats_interval),
            stop_is_eos: s.heaps.stop_is_eos,
        });
        if port_changed {
            self.obj().notify("port");
        }
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Heaps under construction go back to the pool with the engine; those queued
        // downstream keep their memory alive until dropped.
        if let Some(state) = lock(&self.state).take() {
            self.heap_counters.update(&state.src.engine);
            *lock(&self.recv_counts) = state.src.counts();
            self.kernel_drops.set(state.src.rx.kernel_drops());
        }
        *lock(&self.waker) = None;
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::Release);
        if let Some(w) = lock(&self.waker).as_ref() {
            w.wake();
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(w) = lock(&self.waker).as_ref() {
            w.clear();
        }
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }
}

impl PushSrcImpl for SpeadSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let State {
            src,
            timer,
            stop_is_eos,
        } = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let obj = self.obj();
        let next = src.next(
            &self.flushing,
            &self.eos,
            || obj.current_running_time().map(gst::ClockTime::nseconds),
            |src, ended| self.publish(src, timer, ended),
        );
        match next.map_err(|e| flow_error(obj.upcast_ref(), e))? {
            Some(h) if *stop_is_eos && heapout::is_stop(&h) => {
                gst::info!(CAT, imp = self, "stop heap: end of stream");
                self.publish(src, timer, true);
                Err(gst::FlowError::Eos)
            }
            Some(h) => Ok(CreateSuccess::NewBuffer(heap_buffer(h))),
            // Ended and every heap pushed: GstBaseSrc sends EOS downstream.
            None => Err(gst::FlowError::Eos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element() -> super::super::SpeadSrc {
        gst::init().unwrap();
        glib::Object::new()
    }

    #[test]
    fn properties_are_the_socket_ones_batch_size_and_the_heap_ones() {
        let el = element();
        let has = |n: &str| el.find_property(n).is_some();
        for name in [
            "address",
            "port",
            "gro",
            "batch-size",
            "max-heaps",
            "landing",
            "stop-is-eos",
            "stats",
        ] {
            assert!(has(name), "{name}");
        }
        for chunks_only in ["mode", "heaps-per-chunk", "place-item"] {
            assert!(!has(chunks_only), "{chunks_only}");
        }
        el.set_property("max-heap-size", 1u64 << 20);
        el.set_property("batch-size", 8u32);
        el.set_property("port", 0i32);
        let s = lock(&el.imp().settings).clone();
        assert_eq!(
            (s.heaps.max_heap_size, s.batch_size, s.socket.port),
            (1 << 20, 8, 0)
        );
    }

    #[test]
    fn stats_hold_the_heap_and_receive_counters_before_start() {
        let s = element().property::<gst::Structure>("stats");
        for name in [
            names::HEAPS,
            names::PACKETS_LANDED,
            names::DATAGRAMS,
            names::DROPS_KERNEL,
            names::POOL_SLOTS,
        ] {
            assert_eq!(s.get::<u64>(name), Ok(0), "{name}");
        }
    }
}
