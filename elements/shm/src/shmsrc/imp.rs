//! `fhshmsrc` implementation: a thin `PushSrc` over [`crate::client::Client`].

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;

use firehose_core::caps::PACKETS;
use firehose_core::src::prelude::*;
use firehose_core::src::{output, src_template, LiveControl};
use firehose_core::stats::{names, StatsInterval, StatsTimer};
use firehose_core::sync::lock;
use gst_base::prelude::*;

use super::ConsumerOnFull;
use crate::client::{Client, ClientError, Event};
use crate::proto::OnFull;
use crate::proto::NONE_TIME;
use crate::wire::Address;

firehose_core::debug_category!(CAT, "fhshmsrc", "Firehose shared-memory source");

const DEFAULT_PATH: &str = "/tmp/firehose-shm.sock";
/// How long one wait for the producer lasts before the loop looks again (an `unlock`
/// ends it at once through the waker).
const WAIT_MS: i32 = 200;

#[derive(Debug, Clone)]
struct Settings {
    socket_path: String,
    abstract_ns: bool,
    on_full: ConsumerOnFull,
    max_held: u32,
    stats_interval: StatsInterval,
    /// `readable-metas`.
    readable_metas: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            socket_path: DEFAULT_PATH.into(),
            abstract_ns: false,
            on_full: ConsumerOnFull::Producer,
            max_held: 0,
            stats_interval: StatsInterval::default(),
            readable_metas: firehose_core::meta::readable::DEFAULT,
        }
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

impl ShmSrc {
    fn fail(&self, e: &ClientError) -> gst::FlowError {
        gst::element_imp_error!(
            self,
            gst::ResourceError::Read,
            ("{}", e),
            ["socket {}", lock(&self.settings).socket_path]
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
    firehose_core::properties!(|| {
        let mut v = vec![
            glib::ParamSpecString::builder("socket-path")
                .nick("Socket path")
                .blurb("The fhshmsink's unix socket (an abstract name when abstract=true)")
                .default_value(Some(DEFAULT_PATH))
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("abstract")
                .nick("Abstract namespace")
                .blurb("socket-path is a name in Linux's abstract namespace")
                .default_value(false)
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder::<ConsumerOnFull>("on-full")
                .nick("On full")
                .blurb("The back-pressure this consumer asks the producer for")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-held")
                .nick("Maximum held")
                .blurb(
                    "Buffers this consumer may hold at once (0: the producer's max-held, \
                     which it can only lower)",
                )
                .default_value(0)
                .mutable_ready()
                .build(),
            firehose_core::meta::readable::param_spec(),
        ];
        v.extend(firehose_core::stats::properties(&SrcCounters::describe("")));
        v
    });

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        match pspec.name() {
            "socket-path" => {
                s.socket_path = value
                    .get::<Option<String>>()
                    .expect("type checked upstream")
                    .unwrap_or_else(|| DEFAULT_PATH.into())
            }
            "abstract" => s.abstract_ns = value.get().expect("type checked upstream"),
            "on-full" => s.on_full = value.get().expect("type checked upstream"),
            "max-held" => s.max_held = value.get().expect("type checked upstream"),
            firehose_core::meta::readable::PROPERTY => {
                s.readable_metas = value.get().expect("type checked upstream")
            }
            other => s.stats_interval.set(other, value),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return self.stats().to_value();
        }
        let s = lock(&self.settings);
        match pspec.name() {
            "socket-path" => s.socket_path.to_value(),
            "abstract" => s.abstract_ns.to_value(),
            "on-full" => s.on_full.to_value(),
            "max-held" => s.max_held.to_value(),
            firehose_core::meta::readable::PROPERTY => s.readable_metas.to_value(),
            other => s.stats_interval.value(other),
        }
    }

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
        let address = Address::new(&s.socket_path, s.abstract_ns);
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
                    s.socket_path
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
