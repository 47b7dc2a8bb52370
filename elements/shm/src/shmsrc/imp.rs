//! `fhshmsrc` implementation: a thin `PushSrc` over [`crate::client::Client`].

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;

use firehose_core::caps::PACKETS;
use firehose_core::property::SettingsElement;
use firehose_core::src::prelude::*;
use firehose_core::src::{output, src_template, LiveControl};
use firehose_core::stats::{names, StatsInterval, StatsTimer};
use firehose_core::sync::lock;
use gst_base::prelude::*;

use super::ConsumerOnFull;
use crate::client::{Client, ClientError, Event};
use crate::endpoint::{Endpoint, Side};
use crate::proto::OnFull;
use crate::proto::NONE_TIME;

firehose_core::debug_category!(CAT, "fhshmsrc", "Firehose shared-memory source");

/// How long one wait for the producer lasts before the loop looks again (an `unlock`
/// ends it at once through the waker).
const WAIT_MS: i32 = 200;

/// The element's settings: its properties but `stats`.
#[derive(Debug, Clone)]
pub struct Settings {
    endpoint: Endpoint,
    on_full: ConsumerOnFull,
    max_held: u32,
    /// `readable-metas`.
    readable_metas: bool,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            endpoint: Endpoint::new(Side::Consumer),
            on_full: ConsumerOnFull::Producer,
            max_held: 0,
            readable_metas: firehose_core::meta::readable::DEFAULT,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group endpoint;
        on_full => glib::ParamSpecEnum::builder::<ConsumerOnFull>("on-full")
            .nick("On full")
            .blurb("The back-pressure this consumer asks the producer for")
            .mutable_ready()
            .build();
        max_held => glib::ParamSpecUInt::builder("max-held")
            .nick("Maximum held")
            .blurb(
                "Buffers this consumer may hold at once (0: the producer's max-held, \
                 which it can only lower)",
            )
            .default_value(0)
            .mutable_ready()
            .build();
        readable_metas => firehose_core::meta::readable::param_spec();
        group stats_interval;
    }
}

firehose_core::counters! {
    /// What the source counts.
    struct SrcCounters {
        buffers: names::BUFFERS,
        bytes: names::BYTES,
        missed: names::MISSED,
        caps_changes: names::CAPS_CHANGES,
    }
}

struct State {
    client: Client,
    timer: StatsTimer,
    /// The senders of split datagrams: each buffer's `GstNetAddressMeta`.
    senders: output::SenderCache,
}

/// The `fhshmsrc` element.
#[derive(Default)]
pub struct ShmSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    live: LiveControl,
    counters: SrcCounters,
    /// The producer's packet batches go out one buffer per datagram: downstream does
    /// not read batches (see `firehose_core::src::output`).
    split: std::sync::atomic::AtomicBool,
    /// `readable-metas`, and whether downstream may read them (the allocation query):
    /// the producer's batches get their `FirehoseBatchMeta` again here.
    readable: firehose_core::meta::readable::ReadableOutput,
}

impl ElementStats for ShmSrc {
    fn stats(&self) -> gst::Structure {
        self.counters.structure()
    }
}

impl SettingsElement for ShmSrc {
    type Settings = Settings;

    fn counters() -> String {
        SrcCounters::describe("")
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl ShmSrc {
    fn fail(&self, e: &ClientError) -> gst::FlowError {
        gst::element_imp_error!(
            self,
            gst::ResourceError::Read,
            ("{}", e),
            ["socket {}", lock(&self.settings).endpoint.socket_path]
        );
        gst::FlowError::Error
    }

    fn buffer(&self, view: crate::client::BufferView) -> gst::Buffer {
        let mut view = view;
        let metas = std::mem::take(&mut view.msg.metas);
        let m = &view.msg;
        let (pts, dts, duration, flags, missed, len) =
            (m.pts, m.dts, m.duration, m.flags, m.missed, m.len);
        let t = |v: u64| (v != NONE_TIME).then(|| gst::ClockTime::from_nseconds(v));
        let mut buf = gst::Buffer::new();
        {
            let b = buf.get_mut().expect("a new buffer is writable");
            b.append_memory(gst::Memory::from_slice(view));
            b.set_pts(t(pts));
            b.set_dts(t(dts));
            b.set_duration(t(duration));
            let mut flags = gst::BufferFlags::from_bits_truncate(flags);
            if missed > 0 {
                flags |= gst::BufferFlags::DISCONT;
                self.counters.missed.add(missed);
            }
            b.set_flags(flags);
            crate::metas::write(b, metas, self.readable.wanted());
        }
        self.counters.buffers.add(1);
        self.counters.bytes.add(len);
        buf
    }
}

impl ObjectImpl for ShmSrc {
    firehose_core::settings_properties!(ShmSrc);

    firehose_core::live_src_constructed!(true);
}

firehose_core::element_subclass!(ShmSrc, "GstFhShmSrc", gst_base::PushSrc);

impl ElementImpl for ShmSrc {
    firehose_core::live_src_send_event!(live);

    firehose_core::element_metadata!(
        "Firehose shared-memory source",
        "Source",
        "Reads the buffers an fhshmsink in another process serves: segments mapped \
         read-only, each buffer a zero-copy view released back when dropped; caps, \
         timestamps and Firehose metas restored",
    );
    // The producer's caps, restored: whatever the fhshmsink at the other end took in
    // (the Firehose formats, video, RTP...), known only once connected, so ANY like
    // GStreamer's shmsrc and unixfdsrc. Packet batches become datagrams for a peer
    // that does not read batches.
    firehose_core::pad_templates!(src_template(&gst::Caps::new_any()));
}

impl BaseSrcImpl for ShmSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let address = s.endpoint.address();
        let mode = match (s.on_full, s.max_held) {
            (ConsumerOnFull::Producer, 0) => None,
            // A limit alone keeps the producer's default mode... which it does not
            // tell before the hello: block, the safe one, unless drop is asked.
            (ConsumerOnFull::Drop, n) => Some((OnFull::Drop, n)),
            (_, n) => Some((OnFull::Block, n)),
        };
        let client = Client::subscribe(&address, mode).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenRead,
                (
                    "Cannot connect to the shared-memory producer at {}: {}; start the \
                     pipeline with fhshmsink socket-path={} first",
                    address,
                    e,
                    s.endpoint.socket_path
                )
            )
        })?;
        self.live.start();
        self.readable.start(s.readable_metas);
        self.live.new_waker().map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::Failed,
                ("Cannot make an eventfd: {}", e)
            )
        })?;
        self.counters.reset();
        *lock(&self.state) = Some(State {
            client,
            timer: s.stats_interval.timer(),
            senders: Default::default(),
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Buffers still downstream keep their mappings; closing the socket tells the
        // producer that everything is released.
        *lock(&self.state) = None;
        self.live.stop();
        self.post_stats();
        Ok(())
    }

    /// Learns whether downstream may read the readable metas.
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        self.readable.decide(self.obj().upcast_ref(), Some(query));
        self.parent_decide_allocation(query)
    }

    firehose_core::live_src_base!(live);
}

impl PushSrcImpl for ShmSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        self.live.create(|| {
            let mut guard = lock(&self.state);
            let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            let waker = self.live.waker().ok_or(gst::FlowError::Flushing)?;
            loop {
                if self.live.is_flushing() {
                    return Err(gst::FlowError::Flushing);
                }
                if state.timer.due(Instant::now()) {
                    self.post_stats();
                }
                match state.client.poll_event() {
                    Ok(Some(Event::Buffer(view))) => {
                        let buf = self.buffer(view);
                        return Ok(if self.split.load(Ordering::Relaxed) {
                            CreateSuccess::NewBufferList(output::datagram_list(
                                &buf,
                                Some(&mut state.senders),
                            ))
                        } else {
                            CreateSuccess::NewBuffer(buf)
                        });
                    }
                    Ok(Some(Event::Caps(c))) => {
                        let caps = c.parse::<gst::Caps>().map_err(|_| {
                            self.fail(&ClientError::Protocol(crate::proto::ProtoError::Invalid(
                                format!("caps that do not parse: {c}"),
                            )))
                        })?;
                        self.counters.caps_changes.add(1);
                        gst::debug!(CAT, imp = self, "caps {caps}");
                        // Packet batches only to an element that reads them, as a packet
                        // source does with output=auto; plain datagrams to any other.
                        let datagrams = output::datagram_caps();
                        let split = caps.structure(0).is_some_and(|s| s.name() == PACKETS)
                            && !output::peer_understands_packets(
                                &self.obj().static_pad("src").expect("a src pad"),
                                &datagrams,
                            );
                        self.split.store(split, Ordering::Relaxed);
                        let caps = if split { datagrams } else { caps };
                        if self.obj().set_caps(&caps).is_err() {
                            gst::element_imp_error!(
                                self,
                                gst::CoreError::Negotiation,
                                ("Downstream does not accept the producer's caps {}", caps)
                            );
                            return Err(gst::FlowError::NotNegotiated);
                        }
                    }
                    Ok(Some(Event::Eos)) => return Err(gst::FlowError::Eos),
                    Ok(Some(Event::Error(m))) => {
                        gst::element_imp_error!(
                            self,
                            gst::ResourceError::Read,
                            ("The shared-memory producer reported: {}", m)
                        );
                        return Err(gst::FlowError::Error);
                    }
                    Ok(None) => {
                        let fd = state.client.fd().as_raw_fd();
                        let _ = match state.client.nap_ns() {
                            // The ring was empty: look again soon (nobody wakes a nap).
                            Some(ns) => firehose_core::wake::wait_readable_ns(fd, &waker, ns),
                            None => firehose_core::wake::wait_readable(fd, &waker, WAIT_MS),
                        };
                    }
                    Err(e) => return Err(self.fail(&e)),
                }
            }
        })
    }
}

#[cfg(test)]
#[test]
fn the_consumer_settings_round_trip_in_their_order() {
    use firehose_core::property::{assert_round_trips, PropertyGroup};
    let mut s = Settings::default();
    assert_round_trips(&mut s);
    assert_eq!(s.max_held, 1);
    assert_eq!(s.readable_metas, !firehose_core::meta::readable::DEFAULT);
    assert!(s.endpoint.abstract_ns);
    let names: Vec<String> = s.spec_vec().iter().map(|p| p.name().into()).collect();
    assert_eq!(
        names,
        [
            "socket-path",
            "abstract",
            "on-full",
            "max-held",
            "readable-metas",
            "stats-interval"
        ]
    );
}
