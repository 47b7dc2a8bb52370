//! `fhrecordsink` implementation: a `BaseSink` that formats each buffer into staging
//! blocks ([`crate::disk::stage`]) written by a writer thread ([`crate::disk::writer`]).

use firehose_core::sync::lock;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use firehose_core::element::ElementStats;
use firehose_core::property::SettingsElement;
use firehose_core::stats::{self, names, StatsTimer};
use firehose_core::{PacketBatchMeta, PoolConfig, SlotPool};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;

use super::encode::{unix_ns, Encoder};
use super::props::Settings;
use super::{upstream, Fsync};
use crate::disk::file::ALIGN;
use crate::disk::name::Template;
use crate::disk::stage::{Reserve, Stage};
use crate::disk::writer::{
    Cmd, FsyncPolicy, Notice, WriteError, Writer, WriterConfig, WriterShared,
};
use crate::format::pcap::IfStats;
use crate::read::salvage::index_path;

firehose_core::debug_category!(CAT, "fhrecordsink", "Firehose recorder");

/// Destination of synthesized headers when neither the property nor upstream says.
const FALLBACK_DESTINATION: &str = "127.0.0.1:7148";
/// Fewest staging blocks: one being filled, one being written, one spare.
const MIN_BLOCKS: usize = 3;

struct State {
    settings: Settings,
    writer: Writer,
    stage: Stage,
    enc: Encoder,
    template: Template,
    next_index: u64,
    /// Whether a full queue waits: `when-full`, with `auto` resolved at the first buffer
    /// by whether upstream is live.
    wait: Option<bool>,
    /// When the open file was opened (`None`: no file open).
    opened: Option<Instant>,
    /// Bytes every file starts with, and the most a file's trailer takes.
    header_len: u64,
    trailer_len: u64,
    destination_known: bool,
    timer: StatsTimer,
    error_posted: bool,
}

firehose_core::counters! {
    /// What the streaming thread counts (`stats` adds the writer's counts between them).
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
        drops_disk: names::DROPS_DISK,
        truncated: names::TRUNCATED,
    }
}

/// The `fhrecordsink` element.
#[derive(Default)]
pub struct RecordSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Outside `state` so `unlock()` and `stats` never wait for a blocked render.
    pool: Mutex<Option<SlotPool>>,
    shared: Mutex<Option<Arc<WriterShared>>>,
    flushing: AtomicBool,
    counters: Counters,
}

/// Waits never end early: headers and trailers must be written whole.
static NEVER: AtomicBool = AtomicBool::new(false);

impl ElementStats for RecordSink {
    fn stats(&self) -> gst::Structure {
        let c = &self.counters;
        let (written, files, latency_ns) = lock(&self.shared).as_ref().map_or((0, 0, 0), |s| {
            (
                s.bytes_written.get(),
                s.files.get(),
                s.latency_max_ns.load(Ordering::Relaxed),
            )
        });
        let mut fields = vec![
            (names::PACKETS, c.packets.get()),
            (names::BYTES, c.bytes.get()),
            (names::BATCHES, c.batches.get()),
            (names::BYTES_WRITTEN, written),
            (names::FILES, files),
            (names::DROPS_DISK, c.drops_disk.get()),
            (names::TRUNCATED, c.truncated.get()),
            (names::WRITE_LATENCY_MAX_US, latency_ns / 1000),
        ];
        fields.extend(firehose_core::src::pool_counts(lock(&self.pool).as_ref()));
        stats::structure(&fields)
    }
}

impl SettingsElement for RecordSink {
    type Settings = Settings;

    fn counters() -> String {
        "packets, bytes, batches, bytes-written, files, drops-disk, truncated, \
         write-latency-max-us, pool-*"
            .into()
    }

    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

impl RecordSink {
    /// The error to post for a failed write: the path, what happened, and the fix.
    fn write_error(e: &WriteError) -> gst::ErrorMessage {
        let path = e.path.display();
        if e.error.raw_os_error() == Some(libc::EEXIST) {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "{} exists: fhrecordsink never overwrites a file. Set overwrite=true to \
                     replace it, choose another location, or put %d in the location so that \
                     numbered files continue after those present",
                    path
                ),
                ["{}", e.error]
            )
        } else if e.error.raw_os_error() == Some(libc::ELOOP) {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "{} is a symbolic link: fhrecordsink does not write through links (one \
                     could point the recording at any file). Give the real path",
                    path
                ),
                ["{}", e.error]
            )
        } else if e.is_disk_full() {
            gst::error_msg!(
                gst::ResourceError::NoSpaceLeft,
                (
                    "Disk full while writing {}: everything recorded before this point is in \
                     the file and readable. Free space on that filesystem, record to a larger \
                     one, or bound the recording with max-size and max-files (a ring of files)",
                    path
                ),
                ["{}", e.error]
            )
        } else {
            gst::error_msg!(
                gst::ResourceError::Write,
                (
                    "Cannot write {}: {}. Check that its directory exists, is writable and \
                     is not full",
                    path,
                    e.error
                ),
                ["{:?}", e.error]
            )
        }
    }

    /// Posts the writer's error once; Err if the writer has failed.
    fn check_writer(&self, state: &mut State) -> Result<(), gst::FlowError> {
        if !state.writer.shared().failed.load(Ordering::Acquire) {
            return Ok(());
        }
        if !state.error_posted {
            state.error_posted = true;
            if let Some(e) = state.writer.shared().error() {
                self.post_error_message(Self::write_error(&e));
            }
        }
        Err(gst::FlowError::Error)
    }

    fn open_next(&self, state: &mut State) {
        let now = SystemTime::now();
        if !state.settings.overwrite {
            // Numbered files continue after those present: never onto a capture.
            state.next_index = first_free(&state.template, state.next_index, now);
        }
        let name = state.template.render(state.next_index, now);
        state.next_index += 1;
        let path = PathBuf::from(name);
        let index = state.enc.index_header().map(|h| (index_path(&path), h));
        gst::debug!(CAT, imp = self, "opening {}", path.display());
        let header = state.enc.file_header();
        let head = header.clone();
        state
            .stage
            .begin_file(Cmd::Open { path, head, index }, &state.writer);
        if !header.is_empty() {
            state.stage.reserve(header.len(), true, &NEVER);
            state.stage.put(&header, &state.writer);
        }
        state.opened = Some(Instant::now());
    }

    /// Interface statistics for a pcapng trailer: our counts, plus the drops of the
    /// source upstream when it has Firehose statistics.
    fn if_stats(&self, state: &State) -> IfStats {
        let delivered = self.counters.packets.get();
        let os_drops = self.counters.drops_disk.get();
        let name = state.settings.stats_source.as_deref().unwrap_or("");
        let up = upstream::counts(self.obj().upcast_ref(), name).unwrap_or_default();
        let now = unix_ns();
        IfStats {
            start_ns: state.enc.first_ts.unwrap_or(now),
            end_ns: now,
            received: up.packets.max(delivered + os_drops) + up.drops,
            if_drops: up.drops,
            os_drops,
            delivered,
        }
    }

    fn close_file(&self, state: &mut State) {
        if state.opened.take().is_none() {
            return;
        }
        let stats = self.if_stats(state);
        let trailer = state.enc.file_trailer(&stats);
        if !trailer.is_empty() {
            state.stage.reserve(trailer.len(), true, &NEVER);
            state.stage.put(&trailer, &state.writer);
        }
        state.stage.end_file(&state.writer);
    }

    fn rotation_due(&self, state: &State, bound: usize) -> bool {
        let s = &state.settings;
        let staged = state.stage.file_bytes();
        let by_size = s.max_size > 0
            && staged > state.header_len
            && staged + bound as u64 + state.trailer_len > s.max_size;
        let by_time = s.max_duration > 0
            && state
                .opened
                .is_some_and(|t| t.elapsed() >= Duration::from_nanos(s.max_duration));
        by_size || by_time
    }

    /// The destination for synthesized headers: the property, else the source's bound
    /// address and port (known once it streams), else 127.0.0.1:7148.
    fn resolve_destination(&self, state: &mut State) {
        state.destination_known = true;
        if state.settings.destination.is_some() {
            return;
        }
        if let Some(a) = upstream::source_address(self.obj().upcast_ref()) {
            gst::debug!(CAT, imp = self, "destination from upstream: {a}");
            state.enc.set_destination(a);
        }
    }

    /// Closes the open file and waits until everything is on disk.
    fn finish(&self, state: &mut State) -> Result<(), gst::FlowError> {
        self.close_file(state);
        state.writer.barrier();
        self.check_writer(state)
    }

    fn prepare(&self, settings: &Settings) -> Result<State, gst::ErrorMessage> {
        let settings_error =
            |msg: String| gst::error_msg!(gst::ResourceError::Settings, ("{}", msg));
        let location = settings.location.clone().ok_or_else(|| {
            settings_error(
                "No location set: give a file name, e.g. location=capture-%05d.pcap".into(),
            )
        })?;
        let template = Template::parse(&location).map_err(settings_error)?;
        if !settings.overwrite && !template.has_index() {
            // Said at start, not at the first buffer: the name is known now.
            let path = template.render(0, SystemTime::now());
            if std::fs::symlink_metadata(&path).is_ok() {
                return Err(gst::error_msg!(
                    gst::ResourceError::OpenWrite,
                    (
                        "{} exists: fhrecordsink never overwrites a file. Set overwrite=true \
                         to replace it, or choose another location",
                        path
                    )
                ));
            }
        }
        let rotates = settings.max_size > 0 || settings.max_duration > 0;
        if rotates && !template.has_index() {
            return Err(settings_error(format!(
                "location '{location}' has no %d: with max-size or max-duration every file \
                 needs its own name, e.g. capture-%05d.pcap"
            )));
        }
        let destination: SocketAddr = match settings.destination.as_deref() {
            Some(d) => d.parse().map_err(|_| {
                settings_error(format!(
                    "destination '{d}' is not an address:port (e.g. 10.0.0.2:7148 or [::1]:7148)"
                ))
            })?,
            None => FALLBACK_DESTINATION.parse().expect("valid constant"),
        };
        let block = (settings.block_size as usize)
            .max(ALIGN)
            .next_multiple_of(ALIGN);
        let slots = ((settings.queue_size as usize) / block).max(MIN_BLOCKS);
        let pool = SlotPool::new(&PoolConfig {
            slot_size: block,
            slots,
            hugepages: settings.memory.into(),
        })
        .map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::NoSpaceLeft,
                ("Cannot allocate the {slots} x {block}-byte write queue: {e}; lower queue-size")
            )
        })?;
        if let Some(why) = pool.fallback_reason() {
            gst::warning!(CAT, imp = self, "write queue not in hugepages: {why}");
        }
        let weak = self.obj().downgrade();
        let notify = Box::new(move |n: Notice| {
            let Some(el) = weak.upgrade() else { return };
            match n {
                Notice::DirectRefused(p) => gst::element_warning!(
                    el,
                    gst::ResourceError::Write,
                    (
                        "The filesystem of {} refuses O_DIRECT: writing through the page cache \
                         (slower, and memory pressure at high rates). Record to a disk \
                         filesystem (ext4, xfs) for direct writes, or set direct=false to \
                         silence this",
                        p.display()
                    )
                ),
                Notice::RemoveFailed(p, e) => gst::element_warning!(
                    el,
                    gst::ResourceError::Write,
                    (
                        "Cannot remove {} from the ring of files: {}",
                        p.display(),
                        e
                    )
                ),
            }
        });
        let fsync = match settings.fsync {
            Fsync::None => FsyncPolicy::None,
            Fsync::OnRotate => FsyncPolicy::OnRotate,
            Fsync::Bytes => FsyncPolicy::Bytes(settings.fsync_bytes),
        };
        let writer = Writer::spawn(
            WriterConfig {
                direct: settings.direct,
                preallocate: settings.preallocate,
                overwrite: settings.overwrite,
                fsync,
                ring: settings.max_files,
                // Never more blocks in one write than there are to fill: one is being
                // staged.
                depth: settings.io_depth.min(slots.saturating_sub(1).max(1) as u32),
            },
            // Every block plus its index message, and room for control commands.
            2 * slots + 16,
            notify,
        )
        .map_err(|e| {
            gst::error_msg!(
                gst::CoreError::Failed,
                ("Cannot start the writer thread: {e}")
            )
        })?;
        let enc = Encoder::new(settings.format, settings.snaplen, destination);
        let header_len = enc.file_header().len() as u64;
        let trailer_len = enc.file_trailer(&IfStats::default()).len() as u64;
        *lock(&self.pool) = Some(pool.clone());
        *lock(&self.shared) = Some(writer.shared().clone());
        Ok(State {
            settings: settings.clone(),
            writer,
            stage: Stage::new(pool),
            enc,
            template,
            next_index: 0,
            wait: None,
            opened: None,
            header_len,
            trailer_len,
            destination_known: false,
            timer: settings.stats_interval.timer(),
            error_posted: false,
        })
    }
}

// No clock sync: a recorder writes as fast as data comes.
firehose_core::packet_sink! {
    RecordSink = "GstFhRecordSink";
    "Firehose recorder", "Sink/File",
    "Records packet batches as pcap/pcapng, or any buffer as raw payload plus index, \
     with O_DIRECT block writes, rotation and a ring of files";
}

impl BaseSinkImpl for RecordSink {
    firehose_core::packet_sink_query!();

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = lock(&self.settings).clone();
        let mut state = self.prepare(&settings)?;
        self.counters.reset();
        // Open the first file now, so a bad location fails at start, not at the first
        // buffer.
        self.open_next(&mut state);
        state.writer.barrier();
        if let Some(e) = state.writer.shared().error() {
            return Err(Self::write_error(&e));
        }
        gst::debug!(CAT, imp = self, "started with {settings:?}");
        *lock(&self.state) = Some(state);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let Some(mut state) = lock(&self.state).take() else {
            return Ok(());
        };
        // Stopping without EOS still leaves complete files.
        self.close_file(&mut state);
        state.writer.shutdown();
        state.stage.release();
        let error = (!state.error_posted)
            .then(|| state.writer.shared().error())
            .flatten();
        *lock(&self.pool) = None;
        self.post_stats();
        match error {
            Some(e) => Err(Self::write_error(&e)),
            None => Ok(()),
        }
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::Release);
        if let Some(pool) = lock(&self.pool).as_ref() {
            pool.wake_waiters();
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            let mut guard = lock(&self.state);
            if let Some(state) = guard.as_mut() {
                // EOS (and so Ctrl-C in firehose launch) finalizes every file before the
                // application hears of the EOS.
                if self.finish(state).is_err() {
                    drop(guard);
                    return false;
                }
            }
            drop(guard);
            self.post_stats();
        }
        self.parent_event(event)
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        self.check_writer(state)?;
        if !state.destination_known {
            self.resolve_destination(state);
        }
        let bound = state.enc.bound(buffer);
        if state.opened.is_some() && self.rotation_due(state, bound) {
            self.close_file(state);
        }
        if state.opened.is_none() {
            self.open_next(state);
        }
        let when_full = state.settings.when_full;
        let wait = *state.wait.get_or_insert_with(|| {
            when_full.blocks_for(&self.obj().static_pad("sink").expect("sink pad"))
        });
        match state.stage.reserve(bound, wait, &self.flushing) {
            Reserve::Ok => {}
            Reserve::Full => {
                let n = buffer
                    .meta::<PacketBatchMeta>()
                    .map_or(1, |m| m.packets().len());
                self.counters.drops_disk.add(n as u64);
                return Ok(gst::FlowSuccess::Ok);
            }
            Reserve::Cancelled => return Err(gst::FlowError::Flushing),
            Reserve::TooLarge => {
                let max = state.stage.max_reservation();
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::Settings,
                    (
                        "A buffer of {} bytes does not fit the write queue ({} bytes usable): \
                         raise queue-size to at least {} or use smaller buffers upstream",
                        buffer.size(),
                        max,
                        bound + 2 * state.settings.block_size as usize
                    )
                );
                return Err(gst::FlowError::Error);
            }
        }
        let w = state.enc.encode(buffer, &mut state.stage, &state.writer);
        self.counters.packets.add(w.packets);
        self.counters.bytes.add(w.bytes);
        self.counters.truncated.add(w.truncated);
        self.counters.batches.add(1);
        let due = state.timer.due(Instant::now());
        drop(guard);
        if due {
            self.post_stats();
        }
        Ok(gst::FlowSuccess::Ok)
    }
}

/// The first file number from `from` whose file (named by `template` at `now`) does not
/// exist yet, nor its raw index (a kill can leave an index whose data file was never
/// created); `from` itself when the template has no number.
fn first_free(template: &Template, from: u64, now: SystemTime) -> u64 {
    if !template.has_index() {
        return from;
    }
    // Bounded: a directory with a million numbered captures is an operator's choice,
    // and the open then says the file exists.
    (from..from.saturating_add(1 << 20))
        .find(|&i| {
            let name = template.render(i, now);
            std::fs::symlink_metadata(&name).is_err()
                && std::fs::symlink_metadata(index_path(Path::new(&name))).is_err()
        })
        .unwrap_or(from)
}
