//! `fhspeadsrc` implementation: a live push source over a [`LandingSource`] of the SPEAD
//! [`Reassembler`], pushing one heap per `create`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use firehose_core::caps as fcaps;
use firehose_core::property::SettingsElement;
use firehose_core::src::prelude::*;
use firehose_core::src::{self as live, LiveControl};
use firehose_core::stats::StatsInterval;
use firehose_core::sync::lock;
use firehose_net::land_counters::LandingCounters;
use firehose_net::landelem::LandingElement;
use firehose_net::landsrc::LandingSource;
use firehose_net::socket_settings::SocketSettings;
use firehose_net::transport_input;

use crate::depay::HeapSettings;
use crate::heapout::{self, heap_buffer, HeapCounters};
use crate::reassembly::{Emitted, Reassembler};

firehose_core::debug_category!(CAT, "fhspeadsrc", "Firehose SPEAD source");

/// Default `batch-size`: `fhudpsrc`'s, so one receive takes what one of its batches
/// would (at most `BATCH_BYTES`).
const DEFAULT_BATCH_SIZE: u32 = 64;
/// Most messages per receive: the receiver keeps two 64 KiB scratch buffers per message.
const MAX_BATCH_SIZE: u32 = 256;
/// Bytes one receive may fill, as `fhudpsrc`'s `batch-bytes`: the scratch a copied
/// packet passes through stays in a CPU's L2 cache until the reassembler reads it.
const BATCH_BYTES: usize = 256 << 10;

/// `fhspeadsrc`'s properties: where the packets come from, and the heap reassembler's
/// (those of `speaddepay`'s heaps mode).
#[derive(Clone, Debug)]
pub struct Settings {
    /// `transport`: the packet source that feeds the reassembler, or `None` for the
    /// element's own socket.
    transport: Option<String>,
    socket: SocketSettings,
    batch_size: u32,
    heaps: HeapSettings,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            transport: None,
            socket: SocketSettings::default(),
            batch_size: DEFAULT_BATCH_SIZE,
            heaps: HeapSettings::default(),
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        transport: firehose_core::property::OrDefault => transport_input::property();
        group socket;
        batch_size => live::batch_size(
            "Most datagrams received by one recvmmsg (at most 256 KiB of them); a transport has its own",
            MAX_BATCH_SIZE,
            DEFAULT_BATCH_SIZE,
        );
        group heaps;
        group stats_interval;
    }
}

#[derive(Default)]
pub struct SpeadSrc {
    settings: Mutex<Settings>,
    /// The socket, the reassembler its payloads land in, the heaps not yet pushed, and
    /// the receive counters.
    land: LandingElement<Reassembler>,
    /// The flag unlock sets (it cuts short a wait for data) and the receiver's waker,
    /// outside the running state, which the streaming thread holds while it waits.
    live: LiveControl,
    heap_counters: HeapCounters,
    memory: Mutex<Option<&'static str>>,
    /// `stop-is-eos` of the current run.
    stop_is_eos: AtomicBool,
    /// `readable-metas` of the current run, and whether downstream may read them.
    readable: firehose_core::meta::readable::ReadableOutput,
    /// Says on the bus when the heap pool runs dry.
    dry: firehose_core::src::DryWarning,
}

impl ElementStats for SpeadSrc {
    fn stats(&self) -> gst::Structure {
        let mut s = self.heap_counters.stats(*lock(&self.memory));
        self.land.counters().append_to(&mut s);
        s
    }
}

impl SpeadSrc {
    /// Mirrors the engine's counters (once per receive) and posts the stats when `due`.
    fn publish(&self, engine: &Reassembler, due: bool) {
        self.heap_counters
            .update_warning(engine, self.obj().upcast_ref(), &self.dry);
        self.post_stats_if(due);
    }
}

firehose_core::element_subclass!(SpeadSrc, "GstFhSpeadSrc", gst_base::PushSrc);

impl SettingsElement for SpeadSrc {
    type Settings = Settings;

    fn counters() -> String {
        format!(
            "{}, {}",
            &heapout::counters(),
            LandingCounters::describe("")
        )
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl ObjectImpl for SpeadSrc {
    firehose_core::settings_properties!(SpeadSrc);

    firehose_core::live_src_constructed!(true);
}

impl ElementImpl for SpeadSrc {
    firehose_core::element_metadata!(
        "Firehose SPEAD source",
        "Source/Network",
        "Receives SPEAD over UDP into heaps, each payload straight into its heap where the stream allows (one buffer per heap, with a heap meta); interoperates with spead2",
    );

    firehose_core::pad_templates!(live::src_template(&gst::Caps::new_empty_simple(
        fcaps::SPEAD_HEAP
    )));

    /// An application's EOS: `create` is woken with the `eos` flag, takes what the
    /// socket holds, pushes every heap under construction and returns EOS (GstBaseSrc's
    /// own handling would end the stream without them).
    fn send_event(&self, event: gst::Event) -> bool {
        if event.type_() == gst::EventType::Eos && self.live.request_drain() {
            gst::debug!(
                CAT,
                imp = self,
                "EOS: pushing the heaps under construction first"
            );
            return true;
        }
        self.parent_send_event(event)
    }
}

impl BaseSrcImpl for SpeadSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let element = self.obj();
        let element = element.upcast_ref::<gst::Element>();
        let mut engine = heapout::new_reassembler(&s.heaps.reassembly_config(), element)?;
        engine.set_landing(s.heaps.landing.max_bytes());
        let memory = engine.memory_kind().as_str();
        self.heap_counters.update(&engine);
        self.dry.reset();
        *lock(&self.memory) = Some(memory);
        self.stop_is_eos
            .store(s.heaps.stop_is_eos, Ordering::Relaxed);
        self.readable.start(s.heaps.readable_metas);
        let (src, port_changed) = match s.transport.as_deref() {
            Some(desc) => {
                let t = transport_input::open(desc)?;
                gst::info!(
                    CAT,
                    imp = self,
                    "{} feeds the heaps in place; {} bytes of {} heap memory for heaps up to {} bytes",
                    t.factory,
                    engine.pool_bytes(),
                    memory,
                    s.heaps.max_heap_size
                );
                let src = LandingSource::in_place(
                    t.transport,
                    t.waker,
                    engine,
                    t.ring_bytes,
                    Emitted::default(),
                );
                (src, false)
            }
            None => {
                // Heaps carry the time of their first receive, not per-datagram kernel
                // times.
                let batch = s.batch_size as usize;
                let (rx, report) = s.socket.open(element, *CAT, false, batch, BATCH_BYTES)?;
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
                let buffer = report.buffer_granted as u64;
                let src = LandingSource::new(rx, engine, batch, buffer, Emitted::default());
                (src, port_changed)
            }
        };
        let timer = s.stats_interval.timer();
        self.land
            .start(element, &self.live, src, timer, port_changed);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Heaps under construction go back to the pool with the engine; those queued
        // downstream keep their memory alive until dropped.
        self.land
            .stop(&self.live, |engine| self.heap_counters.update(engine));
        Ok(())
    }

    /// Downstream may propose the memory heaps are cut from (shared segments, pinned
    /// pages): payloads then land straight in it.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let element = self.obj();
        self.readable.decide(element.upcast_ref(), Some(query));
        self.land
            .with_engine(|engine| {
                let kind = heapout::decide_allocation(element.upcast_ref(), query, engine)?;
                if let Some(kind) = kind {
                    *lock(&self.memory) = Some(kind);
                    self.heap_counters.update(engine);
                }
                Ok::<_, gst::LoggableError>(())
            })
            .transpose()?;
        self.parent_decide_allocation(query)
    }

    firehose_core::live_src_base!(live);
}

impl PushSrcImpl for SpeadSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let obj = self.obj();
        let next = self.land.next(
            obj.upcast_ref(),
            &self.live,
            self.live.flag(),
            |engine, due| self.publish(engine, due),
        )?;
        match next {
            Some(h) if self.stop_is_eos.load(Ordering::Relaxed) && heapout::is_stop(&h) => {
                gst::info!(CAT, imp = self, "stop heap: end of stream");
                self.land
                    .publish_now(|engine, due| self.publish(engine, due));
                Err(gst::FlowError::Eos)
            }
            Some(h) => Ok(CreateSuccess::NewBuffer(heap_buffer(
                h,
                self.readable.wanted(),
            ))),
            // Ended and every heap pushed: GstBaseSrc sends EOS downstream.
            None => Err(gst::FlowError::Eos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::stats::names;

    fn element() -> super::super::SpeadSrc {
        gst::init().unwrap();
        glib::Object::new()
    }

    #[test]
    fn properties_are_the_socket_ones_batch_size_and_the_heap_ones() {
        let el = element();
        let has = |n: &str| el.find_property(n).is_some();
        for name in [
            "transport",
            "address",
            "port",
            "gro",
            "batch-size",
            "max-heaps",
            "landing",
            "stop-is-eos",
            "stats-interval",
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
    fn every_setting_round_trips() {
        let names = firehose_core::property::assert_round_trips(&mut Settings::default());
        assert_eq!(names.first().map(String::as_str), Some("transport"));
        let at = |n: &str| names.iter().position(|m| m == n).unwrap();
        assert!(at("port") < at("batch-size") && at("batch-size") < at("max-heaps"));
        assert_eq!(names.last().map(String::as_str), Some("stats-interval"));
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
