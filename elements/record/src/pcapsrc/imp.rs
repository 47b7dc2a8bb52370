//! `fhpcapsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is [`super::replay::Replay`], paced by [`firehose_core::pace`]: one pool
//! slot filled per batch. The base owns batch-size, the pool, output, caps, readable
//! metas, stats and live control.

use firehose_core::sync::lock;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firehose_core::pace::{Interrupt, Pacer};
use firehose_core::src::prelude::*;
use firehose_core::src::{Batch, BatchSize, Open, PacketSrcImpl, PoolProps, PoolSize, Receive};
use firehose_core::stats::names;
use firehose_core::{gstmem, PacketBatchMeta, PacketInfo};

use super::props::Settings;
use super::replay::{Filter, Replay, Splitter};
use super::{Pace, Rate};

firehose_core::debug_category!(CAT, "fhpcapsrc", "Firehose pcap replay source");

/// Bytes per pool slot: room for a batch of jumbo datagrams, and always for one more
/// datagram of the largest size.
const SLOT_SIZE: usize = 2 << 20;
/// The largest UDP payload: a slot with less room left is pushed.
const MAX_DATAGRAM: usize = 65535;
const POOL_SLOTS: u64 = 16;
/// The pool properties: 16 slots of 2 MiB by default.
const POOL: PoolProps = PoolProps {
    what: "replay pool",
    size_blurb: "Bytes of preallocated replay pool, in slots of 2 MiB (at least 2)",
    default: PoolSize::Bytes(POOL_SLOTS * SLOT_SIZE as u64),
    default_slot_bytes: SLOT_SIZE as u64,
    memory: true,
    hugepages_alias: true,
    count_alias: None,
};
const POOL_POLL: Duration = Duration::from_millis(100);
/// Least time between two warnings about records that could not be cut into packets.
const UNSPLIT_WARN_EVERY: Duration = Duration::from_secs(10);

struct State {
    settings: Settings,
    /// `batch-size` at start.
    batch_size: u32,
    rate: Rate,
    replay: Replay,
    /// Passes started so far (the first included).
    pass: u32,
    /// Datagrams delivered in the current pass: a pass with none ends the stream, so a
    /// file with no matching datagram cannot loop forever doing nothing.
    pass_delivered: u64,
    /// When the stream started.
    start: Instant,
    /// Original timing: the capture time and the instant the current pass is anchored
    /// to (its first datagram's).
    anchor: Option<(u64, Instant)>,
    /// Original timing: the first pass's anchor, where PTS 0 is. PTS follows the
    /// capture's schedule from there, so neither start-up nor a late push on a loaded
    /// machine moves it.
    origin: Option<Instant>,
    pacer: Pacer,
    sent: u64,
    eos: bool,
    splitter: Splitter,
    /// When the last warning about a record that could not be split went out.
    unsplit_warned: Option<Instant>,
    /// A warning to post once the state lock is released.
    warning: Option<String>,
}

firehose_core::counters! {
    /// Counters read by the `stats` property from any thread.
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
        malformed: names::MALFORMED,
        truncated: names::TRUNCATED,
        filtered: names::FILTERED,
        records_split: names::RECORDS_SPLIT,
        records_unsplit: names::RECORDS_UNSPLIT,
    }
}

/// The `fhpcapsrc` element.
#[derive(Default)]
pub struct PcapSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    counters: Counters,
}

impl PcapSrc {
    fn sync_counts(&self, state: &State) {
        let r = state.replay.counts();
        self.counters.malformed.set(r.malformed);
        self.counters.truncated.set(r.truncated);
        self.counters.filtered.set(r.filtered);
        let c = state.splitter.counts();
        self.counters.records_split.set(c.split);
        self.counters.records_unsplit.set(c.unsplit);
    }

    fn read_error(&self, e: &std::io::Error) -> gst::FlowError {
        let loc = lock(&self.settings).location.clone().unwrap_or_default();
        gst::element_imp_error!(
            self,
            gst::ResourceError::Read,
            ("Cannot read {}: {}", loc, e)
        );
        gst::FlowError::Error
    }

    /// Fills `data` with a batch; returns its datagrams (empty at the end of the
    /// stream) or Flushing when a pacing wait was interrupted.
    fn fill(
        &self,
        state: &mut State,
        data: &mut [u8],
        interrupt: &Interrupt,
    ) -> Result<Vec<PacketInfo>, gst::FlowError> {
        let batch = state.batch_size as usize;
        let mut packets = Vec::with_capacity(batch);
        let mut fill = 0usize;
        while packets.len() < batch && data.len() - fill >= MAX_DATAGRAM {
            let d = match state.replay.next(&mut data[fill..]) {
                Ok(Some(d)) => d,
                Ok(None) => {
                    let loops = state.settings.loops;
                    if (loops != 0 && state.pass >= loops) || state.pass_delivered == 0 {
                        state.eos = true;
                        break;
                    }
                    state.pass += 1;
                    state.pass_delivered = 0;
                    state.anchor = None;
                    state.replay.rewind().map_err(|e| self.read_error(&e))?;
                    continue;
                }
                // A damaged file: the datagrams before the damage go first, the next
                // call fails.
                Err(_) if !packets.is_empty() && state.replay.damage().is_some() => break,
                Err(e) => return Err(self.read_error(&e)),
            };
            if state.rate == Rate::Original {
                let (ts0, t0) = *state.anchor.get_or_insert((d.ts_ns, Instant::now()));
                state.origin.get_or_insert(t0);
                // A capture going back in time (merged files) plays its packet at once.
                let due = t0 + Duration::from_nanos(d.ts_ns.saturating_sub(ts0));
                if due > Instant::now() {
                    if !packets.is_empty() {
                        // Not due yet: it starts the next batch, none is sent early.
                        state.replay.unread(d, &data[fill..fill + d.len]);
                        break;
                    }
                    if !interrupt.sleep_until(due) {
                        state.replay.unread(d, &data[fill..fill + d.len]);
                        return Err(gst::FlowError::Flushing);
                    }
                }
            }
            let record = fill..fill + d.len;
            let unsplit = state.splitter.cut(&data[record.clone()]);
            let pieces = state.splitter.pieces();
            if !packets.is_empty() && packets.len() + pieces.len() > batch {
                // A record's packets stay together: this one starts the next batch.
                state.replay.unread(d, &data[fill..fill + d.len]);
                break;
            }
            for &len in pieces {
                packets.push(PacketInfo {
                    offset: fill as u32,
                    len,
                    rx_time_ns: d.ts_ns,
                    src: d.src.into(),
                });
                fill += len as usize;
            }
            state.splitter.delivered(unsplit.is_some());
            if let Some(u) = unsplit {
                let now = Instant::now();
                if state
                    .unsplit_warned
                    .is_none_or(|t| now.duration_since(t) >= UNSPLIT_WARN_EVERY)
                {
                    state.unsplit_warned = Some(now);
                    let what = state.splitter.describe(&u, &data[record]);
                    state.warning = Some(format!(
                        "{what}: its first {} packet(s) were replayed one by one, the rest as \
                         one datagram ({} such records so far, records-unsplit). The capture \
                         holds coalesced (GSO) sends with damage inside; set split=none to \
                         replay records whole",
                        u.packets,
                        state.splitter.counts().unsplit
                    ));
                }
            }
            state.pass_delivered += 1;
        }
        Ok(packets)
    }
}

firehose_core::packet_src! {
    PcapSrc = "GstFhPcapSrc", own properties settings = Settings::default();
    "Firehose pcap replay", "Source/File/Network",
    "Replays the UDP datagrams of a pcap or pcapng file as packet batches, at the \
     original pace, a set rate or as fast as possible";
}

impl PacketSrcImpl for PcapSrc {
    // Not live: replay paces itself.
    const LIVE: bool = false;
    const BATCH_SIZE: BatchSize = BatchSize::up_to(1024, "Most datagrams per buffer");
    const POOL: &'static PoolProps = &POOL;
    const STATS: &'static [&'static [&'static str]] = &[Counters::NAMES];

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let batch_size = open.batch_size;
        let settings = lock(&self.settings).clone();
        let pacing = &settings.pacing;
        if let Some(e) = &pacing.bad_rate {
            return Err(gst::error_msg!(gst::ResourceError::Settings, ("{}", e)));
        }
        let rate = match pacing.pace {
            Pace::Original => Rate::Original,
            Pace::Max => Rate::Max,
            Pace::Bitrate if pacing.bitrate == 0 => {
                return Err(gst::error_msg!(
                    gst::ResourceError::Settings,
                    ("pace=bitrate needs the rate: set bitrate to payload bits/s, e.g. bitrate=500000000")
                ))
            }
            Pace::Bitrate => Rate::Bits(pacing.bitrate),
        };
        let splitter = match settings.split.splitter_name() {
            None => None,
            Some(name) => Some(firehose_core::split::lookup(name).ok_or_else(|| {
                let known = firehose_core::split::names();
                gst::error_msg!(
                    gst::ResourceError::Settings,
                    (
                        "split={name} needs the '{name}' datagram splitter, which is not \
                         registered in this process (registered: {}). The crate that \
                         brings it registers it with its elements (the firehose plugin \
                         does: firehose-spead registers 'spead'); or set split=none to \
                         replay every record whole",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    )
                )
            })?),
        };
        let Some(location) = settings.location.clone() else {
            return Err(gst::error_msg!(
                gst::ResourceError::NotFound,
                ("No location set: give the capture file, e.g. location=capture.pcap")
            ));
        };
        let address = match settings.address.as_deref() {
            Some(a) => Some(a.trim_matches(['[', ']']).parse::<IpAddr>().map_err(|_| {
                gst::error_msg!(
                    gst::ResourceError::Settings,
                    ("address '{a}' is not an IP address")
                )
            })?),
            None => None,
        };
        let filter = Filter {
            port: (settings.port != 0).then_some(settings.port as u16),
            address,
        };
        let replay = Replay::open(&PathBuf::from(&location), filter).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                gst::error_msg!(
                    gst::StreamError::WrongType,
                    ("{location} is {e}: give a capture from tcpdump, Wireshark or fhrecordsink")
                )
            } else {
                gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("Cannot open {location}: {e}")
                )
            }
        })?;
        let pacer = match rate {
            Rate::Bits(b) => Pacer::new(b),
            _ => Pacer::new(0),
        };
        *lock(&self.state) = Some(State {
            settings,
            batch_size,
            rate,
            replay,
            pass: 1,
            pass_delivered: 0,
            start: Instant::now(),
            anchor: None,
            origin: None,
            pacer,
            sent: 0,
            eos: false,
            splitter: Splitter::new(splitter),
            unsplit_warned: None,
            warning: None,
        });
        self.counters.reset();
        Ok(SLOT_SIZE)
    }

    fn close(&self) {
        *lock(&self.state) = None;
    }

    fn counters(&self) -> gst::Structure {
        self.counters.structure()
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        if state.eos {
            self.sync_counts(state);
            return Err(gst::FlowError::Eos);
        }
        // Replay never drops: wait for downstream to give a slot back.
        let mut slot = rx
            .pool()?
            .acquire_blocking(rx.live.flag(), POOL_POLL)
            .ok_or(gst::FlowError::Flushing)?;
        let filled = self.fill(state, slot.as_mut_full(), rx.live.interrupt());
        self.sync_counts(state);
        if let Some(w) = state.warning.take() {
            gst::element_imp_warning!(self, gst::StreamError::Demux, ("{}", w));
        }
        let packets = filled?;
        if packets.is_empty() {
            gst::debug!(CAT, imp = self, "end of the capture");
            return Err(gst::FlowError::Eos);
        }
        let bytes: u64 = packets.iter().map(|p| u64::from(p.len)).sum();
        let n = packets.len() as u64;
        let pts = match state.rate {
            Rate::Original => state
                .anchor
                .map(|(ts0, t0)| {
                    let due = t0 + Duration::from_nanos(packets[0].rx_time_ns.saturating_sub(ts0));
                    due.saturating_duration_since(state.origin.unwrap_or(t0))
                })
                .unwrap_or_default(),
            Rate::Bits(_) => {
                if !state.pacer.wait(0, rx.live.interrupt()) {
                    return Err(gst::FlowError::Flushing);
                }
                state.pacer.time_of(state.pacer.sent())
            }
            Rate::Max => state.start.elapsed(),
        };
        state.pacer.record(bytes);
        let end = packets.last().map_or(0, |p| (p.offset + p.len) as usize);
        slot.set_len(end);
        let mut buf = gstmem::slot_into_buffer(slot);
        {
            let b = buf.get_mut().expect("a new buffer is writable");
            b.set_pts(gst::ClockTime::from_nseconds(pts.as_nanos() as u64));
            b.set_offset(state.sent);
            b.set_offset_end(state.sent + n);
            if rx.readable {
                firehose_core::meta::readable::add_batch(b, &packets, None);
            }
            PacketBatchMeta::add(b, packets);
        }
        state.sent += n;
        self.counters.packets.add(n);
        self.counters.bytes.add(bytes);
        self.counters.batches.add(1);
        Ok(buf.into())
    }
}
