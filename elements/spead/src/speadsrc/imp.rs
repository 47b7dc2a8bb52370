//! `fhspeadsrc` implementation: a live push source over a [`LandingSource`] of the SPEAD
//! [`Reassembler`], pushing one heap per `create`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use firehose_core::caps as fcaps;
use firehose_core::src::prelude::*;
use firehose_core::src::LiveControl;
use firehose_core::stats::StatsInterval;
use firehose_core::sync::lock;
use firehose_net::land_counters::LandingCounters;
use firehose_net::landelem::{Feed, LandingElement, LandingInput};

use crate::depay::HeapSettings;
use crate::heapout::{self, heap_buffer, HeapCounters};
use crate::reassembly::Reassembler;

firehose_core::debug_category!(CAT, "fhspeadsrc", "Firehose SPEAD source");

/// `fhspeadsrc`'s properties: where the packets come from, and the heap reassembler's
/// (those of `speaddepay`'s heaps mode).
#[derive(Clone, Debug)]
pub struct Settings {
    /// `transport`, the socket, `batch-size`.
    input: LandingInput,
    heaps: HeapSettings,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            input: LandingInput::new(
                "Most datagrams received by one recvmmsg (at most 256 KiB of them); a \
                 transport has its own",
            ),
            heaps: HeapSettings::default(),
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group input;
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
        self.land.append_stats(&mut s);
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

firehose_core::landing_src! {
    SpeadSrc = "GstFhSpeadSrc", caps fcaps::SPEAD_HEAP, drain "the heaps under construction";
    settings settings: Settings, live live;
    stats LandingCounters::stats_keys(&heapout::counters());
    "Firehose SPEAD source", "Source/Network",
    "Receives SPEAD over UDP into heaps, each payload straight into its heap where the stream allows (one buffer per heap, with a heap meta); interoperates with spead2";
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
        let (feed, pinner) = s.input.open(element, *CAT)?;
        match &feed {
            Feed::Transport(t) => gst::info!(
                CAT,
                imp = self,
                "{} feeds the heaps in place; {} bytes of {} heap memory for heaps up to {} bytes",
                t.factory,
                engine.pool_bytes(),
                memory,
                s.heaps.max_heap_size
            ),
            Feed::Socket { report, .. } => gst::info!(
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
            ),
        }
        let timer = s.stats_interval.timer();
        self.land
            .start(element, &self.live, feed, pinner, engine, timer, |report| {
                lock(&self.settings).input.socket.set_bound_port(report)
            });
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
            (
                s.heaps.max_heap_size,
                s.input.batch_size,
                s.input.socket.port
            ),
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
