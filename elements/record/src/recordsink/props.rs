//! The properties of `fhrecordsink` (all read at start, READY → PAUSED), declared once.

use firehose_core::property::OrDefault;
use firehose_core::props::{self, Memory, WhenFull};
use firehose_core::stats::StatsInterval;
use gst::glib;
use gst::prelude::*;

use super::{Format, Fsync};
use crate::format::pcap::DEFAULT_SNAPLEN;

/// Bytes per disk write.
const DEFAULT_BLOCK_SIZE: u32 = 4 << 20;
const DEFAULT_QUEUE_SIZE: u64 = 64 << 20;
const DEFAULT_FSYNC_BYTES: u64 = 256 << 20;
/// Most blocks one write carries when the disk is behind: four blocks' requests in the
/// device at once, as fio's `--iodepth=4` keeps (see `crate::disk::writer`).
const DEFAULT_IO_DEPTH: u32 = 4;
/// Disk space reserved ahead of the write position: extents laid out before the data
/// arrives make `O_DIRECT` writes about 10 % faster on ext4.
const DEFAULT_PREALLOCATE: u64 = 256 << 20;

/// The element's settings: its properties but `stats`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub location: Option<String>,
    pub format: Format,
    pub snaplen: u32,
    pub destination: Option<String>,
    pub block_size: u32,
    pub queue_size: u64,
    pub direct: bool,
    pub overwrite: bool,
    pub io_depth: u32,
    pub preallocate: u64,
    pub max_size: u64,
    pub max_duration: u64,
    pub max_files: u32,
    pub fsync: Fsync,
    pub fsync_bytes: u64,
    pub when_full: WhenFull,
    pub memory: Memory,
    pub stats_source: Option<String>,
    pub stats_interval: StatsInterval,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            location: None,
            format: Format::Pcap,
            snaplen: DEFAULT_SNAPLEN,
            destination: None,
            block_size: DEFAULT_BLOCK_SIZE,
            queue_size: DEFAULT_QUEUE_SIZE,
            direct: true,
            overwrite: false,
            io_depth: DEFAULT_IO_DEPTH,
            preallocate: DEFAULT_PREALLOCATE,
            max_size: 0,
            max_duration: 0,
            max_files: 0,
            fsync: Fsync::None,
            fsync_bytes: DEFAULT_FSYNC_BYTES,
            when_full: WhenFull::Auto,
            memory: Memory::Auto,
            stats_source: None,
            stats_interval: StatsInterval::default(),
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        location: OrDefault => glib::ParamSpecString::builder("location")
            .nick("Location")
            .blurb("File name template: %d (e.g. %05d) is the file number, strftime's %Y %y %m %H %M %S %j %s %F %T the time the file opens; required")
            .mutable_ready()
            .build();
        format => glib::ParamSpecEnum::builder::<Format>("format")
            .nick("Format")
            .blurb("pcap (nanosecond), pcapng, or raw payloads plus a <file>.idx index")
            .mutable_ready()
            .build();
        snaplen => glib::ParamSpecUInt::builder("snaplen")
            .nick("Snap length")
            .blurb("Most bytes of each frame (headers included) kept in pcap/pcapng")
            .minimum(64)
            .maximum(1 << 20)
            .default_value(DEFAULT_SNAPLEN)
            .mutable_ready()
            .build();
        destination: OrDefault => glib::ParamSpecString::builder("destination")
            .nick("Destination")
            .blurb("address:port written as the destination of datagrams whose source did not say where each was sent (default: the upstream source's address and port, else 127.0.0.1:7148)")
            .mutable_ready()
            .build();
        block_size => glib::ParamSpecUInt::builder("block-size")
            .nick("Block size")
            .blurb("Bytes per disk write (rounded up to 4096)")
            .minimum(4096)
            .maximum(1 << 30)
            .default_value(DEFAULT_BLOCK_SIZE)
            .mutable_ready()
            .build();
        queue_size => glib::ParamSpecUInt64::builder("queue-size")
            .nick("Queue size")
            .blurb("Bytes of preallocated staging blocks between the streaming thread and the writer (at least 3 blocks): how long a disk stall is absorbed")
            .minimum(4096)
            .default_value(DEFAULT_QUEUE_SIZE)
            .mutable_ready()
            .build();
        direct => glib::ParamSpecBoolean::builder("direct")
            .nick("Direct I/O")
            .blurb("Write with O_DIRECT (falls back to buffered writes, with a warning, where the filesystem refuses it)")
            .default_value(true)
            .mutable_ready()
            .build();
        overwrite => glib::ParamSpecBoolean::builder("overwrite")
            .nick("Overwrite")
            .blurb("Replace files that exist. false: a location without %d that exists is an error at start, and numbered files continue after those present. Symbolic links are never followed either way")
            .default_value(false)
            .mutable_ready()
            .build();
        io_depth => glib::ParamSpecUInt::builder("io-depth")
            .nick("I/O depth")
            .blurb("Most blocks one direct write carries when several are waiting (the disk fell behind): they go in one vectored write, that many blocks' requests in the device at once. Writes are one at a time and in file order, so a file only ever holds data that reached it (1 = one block per write)")
            .minimum(1)
            .maximum(64)
            .default_value(DEFAULT_IO_DEPTH)
            .mutable_ready()
            .build();
        preallocate => glib::ParamSpecUInt64::builder("preallocate")
            .nick("Preallocate")
            .blurb("Bytes of disk reserved ahead of the write position with fallocate (file size unchanged; unused space released at close; 0 = none)")
            .default_value(DEFAULT_PREALLOCATE)
            .mutable_ready()
            .build();
        max_size => glib::ParamSpecUInt64::builder("max-size")
            .nick("Maximum file size")
            .blurb("Start a new file before one would exceed this many bytes (0 = no limit)")
            .mutable_ready()
            .build();
        max_duration => glib::ParamSpecUInt64::builder("max-duration")
            .nick("Maximum file duration")
            .blurb("Start a new file after this many nanoseconds of wall-clock time (0 = no limit)")
            .mutable_ready()
            .build();
        max_files => glib::ParamSpecUInt::builder("max-files")
            .nick("Maximum files")
            .blurb("Keep only the newest N files written by this recording, deleting the oldest (0 = keep all)")
            .mutable_ready()
            .build();
        fsync => glib::ParamSpecEnum::builder::<Fsync>("fsync")
            .nick("Fsync")
            .blurb("When to flush to the device: none, on-rotate (each file close), bytes (every fsync-bytes and on close)")
            .mutable_ready()
            .build();
        fsync_bytes => glib::ParamSpecUInt64::builder("fsync-bytes")
            .nick("Fsync bytes")
            .blurb("With fsync=bytes: bytes written between flushes")
            .minimum(1)
            .default_value(DEFAULT_FSYNC_BYTES)
            .mutable_ready()
            .build();
        when_full => glib::ParamSpecEnum::builder::<WhenFull>("when-full")
            .nick("When full")
            .blurb("When the disk falls behind and the queue is full: drop whole buffers (counted as drops-disk) or block the streaming thread; auto blocks when upstream is not live (a replay, a file: nothing is lost) and drops when it is (a live capture must not stall its source)")
            .mutable_ready()
            .build();
        memory => props::memory_spec("staging blocks");
        deprecated("memory") memory: props::HugepagesAlias => props::hugepages_spec();
        stats_source: OrDefault => glib::ParamSpecString::builder("stats-source")
            .nick("Statistics source")
            .blurb("Element whose drops-kernel/drops-pool go into pcapng interface statistics (default: the nearest upstream Firehose element)")
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

#[cfg(test)]
#[test]
fn every_property_round_trips_and_hugepages_sets_memory() {
    use firehose_core::property::{assert_round_trips, PropertyGroup};
    use firehose_core::props::Hugepages;
    let mut s = Settings::default();
    assert_round_trips(&mut s);
    assert_eq!(s.location.as_deref(), Some("value-test"));
    assert_eq!(s.stats_interval.0, Settings::default().stats_interval.0 + 1);
    // Empty strings are unset, as leaving the property alone is.
    assert!(s.set_named("destination", &"".to_value()));
    assert_eq!(s.destination, None);
    // The deprecated alias sets the new field, both ways.
    assert!(s.set_named("hugepages", &Hugepages::Off.to_value()));
    assert_eq!(s.memory, Memory::System);
    assert!(s.set_named("memory", &Memory::Hugepages.to_value()));
    let h = s
        .get_named("hugepages")
        .unwrap()
        .get::<Hugepages>()
        .unwrap();
    assert_eq!(h, Hugepages::Require);
}
