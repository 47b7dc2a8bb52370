//! `fhshmsink` implementation: a thin `BaseSink` over [`crate::hub::Hub`], with a
//! service thread that accepts consumers and reads their releases.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use firehose_core::element::prelude::*;
use firehose_core::element::sink_template;
use firehose_core::property::SettingsElement;
use firehose_core::stats::{names, StatsInterval, StatsTimer};
use firehose_core::sync::lock;
use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};
use gst_base::prelude::*;

use super::OnFullMode;
use crate::endpoint::{Endpoint, Side};
use crate::hub::{Hub, HubCounters, Leave};
use crate::proto::{BufferMsg, Msg, OnFull, NONE_TIME};
use crate::segments::{Lookup, Registry, SegmentProvider};
use crate::wire::{self, Address};

firehose_core::debug_category!(CAT, "fhshmsink", "Firehose shared-memory sink");

const DEFAULT_MODE: u32 = 0o600;
const DEFAULT_MAX_HELD: u32 = 64;
const DEFAULT_COPY_SLOTS: u32 = 16;
/// Smallest copy slot: small buffers share a slot size, so a stream of slowly growing
/// buffers does not make a new pool each time.
const MIN_COPY_SLOT: usize = 64 * 1024;
/// How often the service thread looks at its stop flag when nothing happens.
const SERVICE_POLL_MS: i32 = 100;
/// While buffers keep coming and consumers read rings, the service thread reads their
/// release rings this often without announcing that it sleeps (so a release needs no
/// wake-up); once a tick passes without a buffer it announces it (the streaming thread
/// may be waiting upstream for the slots those releases free) and sleeps until woken.
const RING_TICK_NS: u64 = 200_000;
/// An environment variable: the tick in microseconds instead of [`RING_TICK_NS`] (for
/// measurements: a shorter tick returns slots sooner, at the cost of more wake-ups).
const RING_TICK_ENV: &str = "FIREHOSE_SHM_TICK_US";

/// The element's settings: its properties but `stats`.
#[derive(Debug, Clone)]
pub struct Settings {
    endpoint: Endpoint,
    socket_mode: u32,
    on_full: OnFullMode,
    max_held: u32,
    copy_slots: u32,
    wait_for_connection: bool,
    allow_uid: i64,
    stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            endpoint: Endpoint::new(Side::Producer),
            socket_mode: DEFAULT_MODE,
            on_full: OnFullMode::Block,
            max_held: DEFAULT_MAX_HELD,
            copy_slots: DEFAULT_COPY_SLOTS,
            wait_for_connection: false,
            allow_uid: -1,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        group endpoint;
        socket_mode => glib::ParamSpecUInt::builder("socket-mode")
            .nick("Socket mode")
            .blurb("Permissions of the socket file (0600 = 384: this user only)")
            .maximum(0o777)
            .default_value(DEFAULT_MODE)
            .mutable_ready()
            .build();
        on_full => glib::ParamSpecEnum::builder::<OnFullMode>("on-full")
            .nick("On full")
            .blurb("What to do when a consumer holds max-held buffers")
            .mutable_ready()
            .build();
        max_held => glib::ParamSpecUInt::builder("max-held")
            .nick("Maximum held")
            .blurb("Buffers one consumer may hold at once")
            .minimum(1)
            .maximum(65536)
            .default_value(DEFAULT_MAX_HELD)
            .mutable_ready()
            .build();
        copy_slots => glib::ParamSpecUInt::builder("copy-slots")
            .nick("Copy slots")
            .blurb(
                "Slots of the sink's own shared pool, used when upstream's memory is \
                 not shared and each buffer is copied once",
            )
            .minimum(2)
            .maximum(65536)
            .default_value(DEFAULT_COPY_SLOTS)
            .mutable_ready()
            .build();
        wait_for_connection => glib::ParamSpecBoolean::builder("wait-for-connection")
            .nick("Wait for connection")
            .blurb(
                "Hold each buffer until a consumer is attached (default: buffers with \
                 no consumer are dropped, a capture never waits for one)",
            )
            .default_value(false)
            .mutable_ready()
            .build();
        allow_uid => glib::ParamSpecInt64::builder("allow-uid")
            .nick("Allowed uid")
            .blurb("Another uid admitted besides this process's and root's (-1: none)")
            .minimum(-1)
            .maximum(u32::MAX.into())
            .default_value(-1)
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

firehose_core::counters! {
    /// What the streaming thread counts.
    struct SinkCounters {
        buffers: names::BUFFERS,
        bytes: names::BYTES,
        bytes_copied: names::BYTES_COPIED,
        drops_no_slot: names::DROPS_NO_SLOT,
        consumers_refused: names::CONSUMERS_REFUSED,
    }
}

/// What the streaming thread, the service thread and `unlock` share.
#[derive(Default)]
struct Shared {
    hub: Mutex<Hub<gst::Buffer>>,
    /// Signalled when a consumer released something or left (a blocked render waits).
    released: Condvar,
    /// Renders waiting on `released` (changed and read under the hub's lock): nobody is
    /// signalled, and no `futex` call made, when nobody waits.
    waiters: std::sync::atomic::AtomicUsize,
    flushing: AtomicBool,
    stop: AtomicBool,
}

struct State {
    lookup: Lookup,
    copy_pool: Option<SlotPool>,
    timer: StatsTimer,
    service: Option<JoinHandle<()>>,
    address: Address,
    on_full: OnFull,
    wait_for_connection: bool,
    /// The buffer message, reused.
    msg: BufferMsg,
    /// A packet list's vector, reused.
    spare_packets: Vec<crate::proto::PacketMeta>,
}

/// The `fhshmsink` element.
pub struct ShmSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    hub_counters: Arc<HubCounters>,
    counters: Arc<SinkCounters>,
    /// The copy pool, for its counters in `stats` (outside `state`, which a blocked
    /// render holds).
    copy_pool: Mutex<Option<SlotPool>>,
}

impl Default for ShmSink {
    fn default() -> Self {
        let shared = Arc::new(Shared::default());
        let hub_counters = lock(&shared.hub).counters.clone();
        Self {
            settings: Mutex::default(),
            state: Mutex::default(),
            shared,
            registry: Registry::new(),
            hub_counters,
            counters: Arc::default(),
            copy_pool: Mutex::default(),
        }
    }
}

impl ElementStats for ShmSink {
    fn stats(&self) -> gst::Structure {
        let mut s = self.counters.structure();
        let h = &self.hub_counters;
        for (name, v) in [
            (names::CONSUMERS, h.consumers.get()),
            (names::CONSUMERS_DROP, h.consumers_drop.get()),
            (names::CONSUMERS_TOTAL, h.consumers_total.get()),
            (names::CONSUMERS_LOST, h.consumers_lost.get()),
            (names::CONSUMERS_MALFORMED, h.consumers_malformed.get()),
            (names::MESSAGES, h.messages.get()),
            (names::RELEASED, h.released.get()),
            (names::RELEASE_MESSAGES, h.release_messages.get()),
            (names::RELEASES_UNKNOWN, h.releases_unknown.get()),
            (names::DROPS_HELD, h.drops_held.get()),
            (names::DROPS_SOCKET_FULL, h.drops_socket.get()),
            (names::DROPS_FLUSHING, h.drops_flushing.get()),
            (names::METAS_DROPPED, h.metas_dropped.get()),
            (names::BATCHES, h.batches.get()),
            (names::BATCHED_MESSAGES, h.batched.get()),
            (names::RING_CONSUMERS, h.ring_consumers.get()),
            (names::RING_PACKETS, h.ring_packets.get()),
            (names::RING_FULL, h.ring_full.get()),
            (names::RING_RELEASES, h.ring_releases.get()),
            (names::WAKES_SENT, h.wakes_sent.get()),
            (names::WAKES_RECEIVED, h.wakes_received.get()),
        ] {
            s.set(name, v);
        }
        firehose_core::src::append_slot_pool(&mut s, lock(&self.copy_pool).as_ref());
        s
    }
}

impl SettingsElement for ShmSink {
    type Settings = Settings;

    fn counters() -> String {
        SinkCounters::describe(HUB_COUNTERS)
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

const HUB_COUNTERS: &str = "consumers, consumers-drop, consumers-total, consumers-lost, \
                            consumers-malformed, messages, released, release-messages, releases-unknown, drops-held, drops-socket-full, drops-flushing, \
                            metas-dropped, batches, batched-messages, ring-consumers, ring-packets, \
                            ring-full, ring-releases, wakes-sent, wakes-received, pool-*, memory (the copy pool's)";

/// The service thread: accepts consumers (checking their uid), reads their releases
/// and notices when they go away.
fn serve(
    shared: Arc<Shared>,
    listener: std::os::fd::OwnedFd,
    counters: Arc<SinkCounters>,
    settings: Settings,
    element: glib::WeakRef<super::ShmSink>,
) {
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let on_full: OnFull = settings.on_full.into();
    let mut ids = Vec::new();
    let mut pfds: Vec<libc::pollfd> = Vec::new();
    let (mut epoch, mut last_buffers) = (0u64, u64::MAX);
    // Whether the last round read releases from a ring: then it ticks once more before
    // it announces that it sleeps (a consumer that keeps releasing to an idle producer
    // would otherwise wake it for every few).
    let mut drained = false;
    let tick_ns = std::env::var(RING_TICK_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(RING_TICK_NS, |us| us.max(1) * 1000);
    while !shared.stop.load(Ordering::Acquire) {
        let mut active = std::mem::take(&mut drained);
        let rings = {
            let mut hub = lock(&shared.hub);
            if hub.drain_rings() {
                shared.wake_waiters();
                active = true;
            }
            hub.poll_set(&mut ids);
            hub.has_rings()
        };
        // With rings: a short tick while buffers come, else an announced sleep.
        let mut asleep = false;
        let timeout_ns = if !rings {
            SERVICE_POLL_MS as u64 * 1_000_000
        } else if counters.buffers.get() != last_buffers || active {
            last_buffers = counters.buffers.get();
            tick_ns
        } else {
            epoch += 1;
            if lock(&shared.hub).rings_asleep(epoch) {
                // Releases came as it announced: read them first.
                lock(&shared.hub).rings_asleep(0);
                continue;
            }
            asleep = true;
            SERVICE_POLL_MS as u64 * 1_000_000
        };
        pfds.clear();
        pfds.push(pollfd(listener.as_raw_fd()));
        pfds.extend(ids.iter().map(|&(fd, _, out)| {
            let mut p = pollfd(fd);
            if out {
                // Its queue waits for room in the socket.
                p.events |= libc::POLLOUT;
            }
            p
        }));
        // An error is taken as a timeout: the loop looks again (as on a signal).
        let n = firehose_core::wake::ppoll(&mut pfds, Some(timeout_ns)).unwrap_or(0);
        if asleep {
            lock(&shared.hub).rings_asleep(0);
        }
        if n == 0 {
            // Also sees block-mode consumers whose socket stays full (stuck).
            if ids.iter().any(|i| i.2) {
                lock(&shared.hub).flush();
            }
            continue;
        }
        let mut changed = false;
        if pfds[0].revents != 0 {
            while let Ok(Some(fd)) = wire::accept(listener.as_fd()) {
                let uid = wire::peer_cred(fd.as_fd()).map(|c| c.0);
                let allowed = matches!(uid, Ok(u) if u == me || u == 0
                    || i64::from(u) == settings.allow_uid);
                if !allowed {
                    counters.consumers_refused.add(1);
                    let mut out = Vec::new();
                    let why = format!(
                        "refused: uid {:?} is not this producer's ({me}) nor root; set \
                         allow-uid on fhshmsink to admit it",
                        uid.ok()
                    );
                    if crate::proto::encode(&Msg::Error(why.clone()), &mut out).is_ok() {
                        let _ = wire::send(fd.as_fd(), &out, None);
                    }
                    if let Some(e) = element.upgrade() {
                        gst::warning!(CAT, obj = e, "consumer {why}");
                    }
                    continue;
                }
                let r = lock(&shared.hub).attach(fd, on_full, settings.max_held);
                changed |= r.is_ok();
                if let Some(e) = element.upgrade() {
                    match r {
                        Ok(id) => gst::info!(CAT, obj = e, "consumer {id} attached"),
                        Err(err) => gst::warning!(CAT, obj = e, "consumer set-up failed: {err}"),
                    }
                }
            }
        }
        {
            let mut hub = lock(&shared.hub);
            drained = hub.drain_rings();
            changed |= drained;
            for (p, &(_, id, _)) in pfds[1..].iter().zip(&ids) {
                if p.revents & !libc::POLLOUT != 0 {
                    changed |= hub.service(id);
                }
            }
            if ids.iter().any(|i| i.2) {
                hub.flush();
            }
            if let Some(e) = element.upgrade() {
                for (id, why) in hub.take_left() {
                    match why {
                        Leave::Lost(m) => gst::info!(CAT, obj = e, "consumer {id} lost: {m}"),
                        Leave::Malformed(m) => gst::warning!(
                            CAT,
                            obj = e,
                            "consumer {id} broke the protocol and was disconnected: {m}"
                        ),
                        Leave::Stopped => {}
                    }
                }
            }
            if changed {
                shared.wake_waiters();
            }
        }
    }
}

impl Shared {
    /// Wakes the renders waiting on `released`, if any (call with the hub's lock held).
    fn wake_waiters(&self) {
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.released.notify_all();
        }
    }

    /// Waits on `released` for at most 50 ms, counted in `waiters`.
    fn wait<'a>(
        &self,
        hub: std::sync::MutexGuard<'a, Hub<gst::Buffer>>,
    ) -> std::sync::MutexGuard<'a, Hub<gst::Buffer>> {
        self.waiters.fetch_add(1, Ordering::Relaxed);
        let hub = self
            .released
            .wait_timeout(hub, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        hub
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

impl ShmSink {
    /// Where `buf`'s bytes are in a segment: its own memory when it lies in one (no
    /// copy), else a copy into the sink's pool. `None`: dropped (no free copy slot in
    /// drop mode).
    fn locate(
        &self,
        state: &mut State,
        buf: &gst::Buffer,
    ) -> Result<Option<(u32, u64, u64, gst::Buffer)>, gst::FlowError> {
        if buf.n_memory() == 1 {
            if let Ok(map) = buf.peek_memory(0).map_readable() {
                if let Some((seg, off)) = state.lookup.find(map.as_ptr() as usize, map.len()) {
                    return Ok(Some((seg, off, map.len() as u64, buf.clone())));
                }
            }
        }
        let map = buf.map_readable().map_err(|_| {
            gst::element_imp_error!(self, gst::ResourceError::Read, ("cannot map a buffer"));
            gst::FlowError::Error
        })?;
        let len = map.len();
        if state.copy_pool.as_ref().is_none_or(|p| p.slot_size() < len) {
            let slots = lock(&self.settings).copy_slots as usize;
            let provider = SegmentProvider::new("fhshmsink", &self.registry);
            let pool = SlotPool::with_provider(
                &PoolConfig {
                    slot_size: len.max(MIN_COPY_SLOT).next_power_of_two(),
                    slots,
                    hugepages: HugepagePolicy::Off,
                },
                &provider,
            )
            .map_err(|e| {
                gst::element_imp_error!(self, gst::ResourceError::NoSpaceLeft, ("{}", e));
                gst::FlowError::Error
            })?;
            gst::info!(
                CAT,
                imp = self,
                "upstream memory is not shared: copying into {slots} slots of {} bytes",
                pool.slot_size()
            );
            *lock(&self.copy_pool) = Some(pool.clone());
            state.copy_pool = Some(pool);
            self.sync_segments(state);
        }
        let pool = state.copy_pool.as_ref().expect("made above");
        let slot = match pool.try_acquire() {
            Some(s) => s,
            None if state.on_full == OnFull::Block => {
                // Queued buffers hold slots: they go before this waits for one.
                lock(&self.shared.hub).flush();
                match pool.acquire_blocking(&self.shared.flushing, Duration::from_millis(50)) {
                    Some(s) => s,
                    None => return Err(gst::FlowError::Flushing),
                }
            }
            None => {
                self.counters.drops_no_slot.add(1);
                return Ok(None);
            }
        };
        let mut slot = slot;
        slot.as_mut_full()[..len].copy_from_slice(&map);
        slot.set_len(len);
        self.counters.bytes_copied.add(len as u64);
        let ptr = slot.as_mut_full().as_ptr() as usize;
        let (seg, off) = state
            .lookup
            .find(ptr, len)
            .expect("the copy pool's segment is registered");
        Ok(Some((
            seg,
            off,
            len as u64,
            firehose_core::gstmem::slot_into_buffer(slot),
        )))
    }

    fn sync_segments(&self, state: &mut State) {
        if let Some(live) = state.lookup.refresh(&self.registry) {
            lock(&self.shared.hub).sync_segments(live);
        }
    }

    /// Queues `buf` for every consumer and, if `flush`, sends the queues (else the
    /// caller does, [`Hub::flush`]; it comes before anything here waits).
    fn render_one(
        &self,
        state: &mut State,
        buf: &gst::Buffer,
        flush: bool,
    ) -> Result<(), gst::FlowError> {
        self.counters.buffers.add(1);
        self.counters.bytes.add(buf.size() as u64);
        self.sync_segments(state);
        if self.hub_counters.consumers.get() == 0 {
            if !state.wait_for_connection {
                return Ok(());
            }
            let mut hub = lock(&self.shared.hub);
            while hub.consumers() == 0 {
                if self.shared.flushing.load(Ordering::Acquire) {
                    return Err(gst::FlowError::Flushing);
                }
                hub = self.shared.wait(hub);
            }
        }
        let Some((segment, offset, len, item)) = self.locate(state, buf)? else {
            return Ok(());
        };
        let t = |c: Option<gst::ClockTime>| c.map_or(NONE_TIME, |c| c.nseconds());
        // The message and its metas' lists are kept from buffer to buffer: no allocation
        // per buffer.
        let msg = &mut state.msg;
        msg.segment = segment;
        msg.offset = offset;
        msg.len = len;
        msg.pts = t(buf.pts());
        msg.dts = t(buf.dts());
        msg.duration = t(buf.duration());
        msg.flags = buf.flags().bits();
        // Empty the last buffer's metas first (a render that returned early, flushing,
        // left them), keeping their vectors.
        crate::metas::recycle(&mut msg.metas, &mut state.spare_packets);
        crate::metas::read_reusing(buf, &mut msg.metas, &mut state.spare_packets);
        let shared = &self.shared;
        let mut hub = lock(&shared.hub);
        hub.drain_rings();
        if hub.must_wait() {
            hub.flush();
        }
        loop {
            // Releases in rings count before anything waits.
            hub.drain_rings();
            if !hub.must_wait() {
                break;
            }
            if shared.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            hub = shared.wait(hub);
        }
        hub.queue(msg, item, &shared.flushing);
        if flush {
            hub.flush();
        }
        Ok(())
    }

    fn after(&self, state: &mut State) {
        if state.timer.due(Instant::now()) {
            self.post_stats();
        }
    }
}

impl ObjectImpl for ShmSink {
    firehose_core::settings_properties!(ShmSink);

    fn constructed(&self) {
        self.parent_constructed();
        // Consumers set their own pace; the sink passes buffers on as they come.
        self.obj().set_sync(false);
    }
}

firehose_core::element_subclass!(ShmSink, "GstFhShmSink", gst_base::BaseSink);

impl ElementImpl for ShmSink {
    firehose_core::element_metadata!(
        "Firehose shared-memory sink",
        "Sink",
        "Serves buffers to other processes through memfd segments passed over a unix \
         socket: no copy when upstream receives into the segments it proposes, per-consumer \
         back-pressure (block or drop), caps, timestamps and Firehose metas carried",
    );
    firehose_core::pad_templates!(sink_template(&gst::Caps::new_any()));
}

impl BaseSinkImpl for ShmSink {
    /// Answers the query by which a packet source asks whether its peer reads packet
    /// batches (`output=auto`): yes; and says in the allocation query that it reads
    /// only the Rust metas (the readable ones can be left out).
    fn query(&self, query: &mut gst::QueryRef) -> bool {
        firehose_core::src::output::consumer_query(query, |q| {
            BaseSinkImplExt::parent_query(self, q)
        })
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let address = s.endpoint.address();
        let listener = wire::listen(&address, s.socket_mode).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "Cannot listen on {}: {}; choose another socket-path (a directory \
                     this user can write) or stop the process that uses it",
                    address,
                    e
                )
            )
        })?;
        self.counters.reset();
        let shared = &self.shared;
        shared.stop.store(false, Ordering::Release);
        shared.flushing.store(false, Ordering::Release);
        let thread = {
            let (shared, counters, settings) = (shared.clone(), self.counters.clone(), s.clone());
            let element = self.obj().downgrade();
            std::thread::Builder::new()
                .name("fhshmsink-serve".into())
                .spawn(move || serve(shared, listener, counters, settings, element))
                .map_err(|e| {
                    gst::error_msg!(
                        gst::ResourceError::Failed,
                        ("Cannot start the service thread: {}", e)
                    )
                })?
        };
        *lock(&self.state) = Some(State {
            lookup: Lookup::default(),
            copy_pool: None,
            timer: s.stats_interval.timer(),
            service: Some(thread),
            address,
            on_full: s.on_full.into(),
            wait_for_connection: s.wait_for_connection,
            msg: BufferMsg::default(),
            spare_packets: Vec::new(),
        });
        gst::info!(CAT, imp = self, "listening on {}", s.endpoint.socket_path);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let state = lock(&self.state).take();
        self.shared.stop.store(true, Ordering::Release);
        if let Some(mut st) = state {
            if let Some(t) = st.service.take() {
                let _ = t.join();
            }
            if let Address::Path(p) = &st.address {
                let _ = std::fs::remove_file(p);
            }
            lock(&self.shared.hub).clear();
            st.copy_pool = None;
            *lock(&self.copy_pool) = None;
        }
        self.post_stats();
        Ok(())
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        lock(&self.shared.hub).set_caps(caps.to_string());
        Ok(())
    }

    fn propose_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        firehose_core::alloc::propose(
            query,
            Arc::new(SegmentProvider::new("fhshmsink", &self.registry)),
        );
        Ok(())
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            lock(&self.shared.hub).broadcast(&Msg::Eos);
        }
        self.parent_event(event)
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        self.render_one(state, buffer, true)?;
        self.after(state);
        Ok(gst::FlowSuccess::Ok)
    }

    fn render_list(&self, list: &gst::BufferList) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        // Every buffer of the list is queued, then each consumer gets them in one packet
        // (several if the list is long, or if something waits on the way).
        let r = list
            .iter_owned()
            .try_for_each(|b| self.render_one(state, &b, false));
        lock(&self.shared.hub).flush();
        r?;
        self.after(state);
        Ok(gst::FlowSuccess::Ok)
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.shared.flushing.store(true, Ordering::Release);
        self.shared.released.notify_all();
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.shared.flushing.store(false, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
#[test]
fn the_producer_settings_round_trip() {
    let mut s = Settings::default();
    firehose_core::property::assert_round_trips(&mut s);
    let sizes = (s.socket_mode, s.max_held, s.copy_slots, s.allow_uid);
    let want = (
        DEFAULT_MODE + 1,
        DEFAULT_MAX_HELD + 1,
        DEFAULT_COPY_SLOTS + 1,
        0,
    );
    assert_eq!(sizes, want);
    assert_eq!(s.on_full, OnFullMode::Drop);
    assert!(s.wait_for_connection && s.endpoint.abstract_ns);
}
