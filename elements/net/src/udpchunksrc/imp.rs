//! `fhudpchunksrc` implementation: a live push source that receives with a
//! [`DirectReceiver`] from its socket into its chunk engine, and pushes the finished
//! chunks one per `create`.

use std::sync::Mutex;

use firehose_chunk::front::ChunkFront;
use firehose_chunk::settings::ChunkSettings;
use firehose_chunk::{ChunkAssembler, StatsMirror};
use firehose_core::caps as fcaps;
use firehose_core::src::prelude::*;
use firehose_core::src::{self as live, LiveControl};
use firehose_core::stats::StatsInterval;
use firehose_core::sync::lock;

use super::Landing;
use crate::land_counters::LandingCounters;
use crate::landelem::{Feed, LandingElement, LandingInput};

firehose_core::debug_category!(CAT, "fhudpchunksrc", "Firehose UDP chunk source");

/// The element's properties, declared once below.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `transport`, the socket, `batch-size`.
    input: LandingInput,
    chunk: ChunkSettings,
    landing: Landing,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            input: LandingInput::new(
                "Most messages received by one recvmmsg (at most 256 KiB of them); with GRO \
                 each message carries up to 64 KiB of datagrams; a transport has its own",
            ),
            chunk: ChunkSettings::default(),
            landing: Landing::Auto,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group input;
        landing => glib::ParamSpecEnum::builder::<Landing>("landing")
            .nick("Landing")
            .blurb("Receive payloads straight into the chunks: auto = for chunks of at most 2 MiB, which stay in the CPU cache between uses (into larger ones the kernel's copy reads each destination line from memory first: they are copied as by fhdepay), on, off")
            .mutable_ready()
            .build();
        group chunk;
        group stats_interval;
    }
}

#[derive(Default)]
pub struct UdpChunkSrc {
    settings: Mutex<Settings>,
    /// The socket, the chunk engine its payloads land in, the chunks not yet pushed,
    /// and the receive counters.
    land: LandingElement<ChunkAssembler>,
    /// The receiver's waker, outside the running state (which the streaming thread
    /// holds while it waits); the flushing flag that matters is `chunks`'.
    live: LiveControl,
    /// The output caps while started; outside `state` so a caps query never waits for
    /// a receive.
    caps: Mutex<Option<gst::Caps>>,
    /// The engine's pool and counters, and the flag unlock sets: it cuts short a wait
    /// for data or (`when-full=block`) for a pool chunk.
    chunks: ChunkFront,
}

impl ElementStats for UdpChunkSrc {
    fn stats(&self) -> gst::Structure {
        let mut s = self.chunks.stats();
        self.land.append_stats(&mut s);
        s
    }
}

impl UdpChunkSrc {
    /// Mirrors the engine's counters (once per receive) and posts the stats when `due`.
    fn publish(&self, engine: &ChunkAssembler, due: bool) {
        self.chunks.update(engine);
        self.chunks.warn_if_dry(self.obj().upcast_ref(), engine);
        self.post_stats_if(due);
    }
}

// An application's EOS (`gst_element_send_event`, which a bin forwards to its sources):
// GstBaseSrc's own handling unlocks `create` and then ends the stream without calling it
// again, which would lose the chunks still open.
firehose_core::landing_src! {
    UdpChunkSrc = "GstFhUdpChunkSrc", caps fcaps::CHUNK, drain "the open chunks";
    settings settings: Settings, live live;
    stats LandingCounters::stats_keys(&StatsMirror::counters());
    "Firehose UDP chunk source", "Source/Network",
    "Receives UDP payloads straight into pooled chunks, placed by a named packet handler; the handler must support it (SPEAD's does: handler=spead), otherwise every packet is copied once as with fhdepay";
}

impl BaseSrcImpl for UdpChunkSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let element = self.obj();
        let element = element.upcast_ref::<gst::Element>();
        let host = s.chunk.host(element, *CAT, self.chunks.cancel())?;
        let (mut engine, caps) = self.chunks.start(element, host, s.chunk.readable_metas);
        let (feed, pinner) = s.input.open(element, *CAT)?;
        match &feed {
            Feed::Transport(t) => gst::info!(
                CAT,
                imp = self,
                "{} feeds the chunks in place (one copy per payload)",
                t.factory
            ),
            Feed::Socket { rx, report, .. } => {
                match s.landing {
                    Landing::Auto => {}
                    Landing::On => engine.set_landing(true),
                    Landing::Off => engine.set_landing(false),
                }
                gst::info!(
                    CAT,
                    imp = self,
                    "bound {:?}, rcvbuf {} B, gro {}, {} messages per receive",
                    report.local,
                    report.buffer_granted,
                    report.gro,
                    rx.batch_len()
                );
                if !engine.can_land() {
                    gst::info!(
                        CAT,
                        imp = self,
                        "the handler cannot be received into chunks directly: every packet is copied once, as with fhdepay"
                    );
                } else if !engine.lands_directly() {
                    gst::info!(
                        CAT,
                        imp = self,
                        "landing={:?}, chunks of {} bytes: every packet is copied once, as with fhdepay",
                        s.landing,
                        engine.config().chunk_bytes()
                    );
                }
            }
        }
        *lock(&self.caps) = Some(caps);
        let timer = s.stats_interval.timer();
        self.land
            .start(element, &self.live, feed, pinner, engine, timer, |report| {
                lock(&self.settings).input.socket.set_bound_port(report)
            });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Chunks still open go back to the pool with the engine.
        self.land
            .stop(&self.live, |engine| self.chunks.update(engine));
        *lock(&self.caps) = None;
        Ok(())
    }

    /// Downstream may propose the memory chunks are cut from (shared segments, pinned
    /// pages): the kernel then receives straight into it.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let element = self.obj();
        self.land
            .with_engine(|engine| {
                self.chunks
                    .decide_allocation(element.upcast_ref(), query, engine)
            })
            .transpose()?;
        self.parent_decide_allocation(query)
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let caps = lock(&self.caps)
            .clone()
            .unwrap_or_else(|| gst::Caps::new_empty_simple(fcaps::CHUNK));
        live::caps_query(caps, filter)
    }

    firehose_core::live_src_base!(live, flushing: chunks);
}

impl PushSrcImpl for UdpChunkSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let obj = self.obj();
        let flushing = self.chunks.cancel();
        let next = self
            .land
            .next(obj.upcast_ref(), &self.live, flushing, |engine, due| {
                self.publish(engine, due)
            })?;
        match next {
            Some(chunk) => Ok(CreateSuccess::NewBuffer(self.chunks.buffer(chunk))),
            // Ended and every chunk pushed: GstBaseSrc sends EOS downstream.
            None => Err(gst::FlowError::Eos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::landelem::DEFAULT_BATCH_SIZE;
    use crate::socket_settings::SocketSettings;
    use firehose_core::property::PropertyGroup;
    use firehose_core::stats::names;

    fn element() -> super::super::UdpChunkSrc {
        gst::init().unwrap();
        glib::Object::new()
    }

    #[test]
    fn properties_are_the_socket_ones_its_own_and_the_chunk_ones() {
        let el = element();
        let own = el.type_();
        let names: Vec<String> = el
            .list_properties()
            .iter()
            .filter(|p| p.owner_type() == own)
            .map(|p| p.name().to_string())
            .collect();
        let mut want: Vec<String> = vec!["transport".into()];
        let names_of = |g: &dyn PropertyGroup| {
            g.spec_vec()
                .iter()
                .map(|p| p.name().to_string())
                .collect::<Vec<_>>()
        };
        want.extend(names_of(&SocketSettings::default()));
        want.push("batch-size".into());
        want.extend(names_of(&firehose_core::src::ThreadSettings::default()));
        want.push("landing".into());
        want.extend(names_of(&ChunkSettings::default()));
        want.extend(["stats-interval".into(), "stats".into()]);
        assert_eq!(names, want);
        assert_eq!(el.property::<u32>("batch-size"), DEFAULT_BATCH_SIZE);
        assert_eq!(el.property::<Landing>("landing"), Landing::Auto);
        el.set_property("landing", Landing::Off);
        assert_eq!(el.property::<Landing>("landing"), Landing::Off);
        assert_eq!(el.property::<i32>("port"), 5004);
        assert_eq!(el.property::<u32>("heaps-per-chunk"), 64);
    }

    #[test]
    fn every_setting_reaches_its_group() {
        let el = element();
        el.set_property("address", "127.0.0.1");
        el.set_property("port", 0i32);
        el.set_property("gro", false);
        el.set_property("batch-size", 16u32);
        el.set_property("handler", "spead");
        el.set_property("heap-size", 65536u32);
        el.set_property("stats-interval", 0u32);
        let s = lock(&el.imp().settings).clone();
        let socket = &s.input.socket;
        assert_eq!((socket.address.as_str(), socket.port), ("127.0.0.1", 0));
        assert!(!socket.gro);
        assert_eq!(s.input.batch_size, 16);
        assert_eq!(s.chunk.handler.as_deref(), Some("spead"));
        assert_eq!(s.chunk.geometry.heap_size, 65536);
        assert_eq!(s.stats_interval.0, 0);
        assert_eq!(el.property::<u32>("batch-size"), 16);
        assert_eq!(
            el.property::<Option<String>>("handler").as_deref(),
            Some("spead")
        );
    }

    #[test]
    fn stats_hold_the_engine_and_receive_counters_before_start() {
        let el = element();
        let s = el.property::<gst::Structure>("stats");
        for name in [
            names::PACKETS,
            names::CHUNKS,
            names::DATAGRAMS,
            names::PACKETS_LANDED,
            names::PACKETS_COPIED,
            names::DROPS_KERNEL,
            names::POOL_SLOTS,
        ] {
            assert_eq!(s.get::<u64>(name), Ok(0), "{name}");
        }
    }
}
