//! The properties of `fhrecordsink` (all read at start, READY → PAUSED).

use firehose_core::props::{self, WhenFull};
use gst::glib;
use gst::prelude::*;

use super::{Format, Fsync};

/// The element's property specs.
pub fn specs() -> Vec<glib::ParamSpec> {
    let [memory, hugepages] = props::memory_properties("staging blocks");
    let mut v = vec![
        glib::ParamSpecString::builder("location")
            .nick("Location")
            .blurb("File name template: %d (e.g. %05d) is the file number, strftime's %Y %y %m %H %M %S %j %s %F %T the time the file opens; required")
            .mutable_ready()
            .build(),
        glib::ParamSpecEnum::builder::<Format>("format")
            .nick("Format")
            .blurb("pcap (nanosecond), pcapng, or raw payloads plus a <file>.idx index")
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("snaplen")
            .nick("Snap length")
            .blurb("Most bytes of each frame (headers included) kept in pcap/pcapng")
            .minimum(64)
            .maximum(1 << 20)
            .default_value(crate::format::pcap::DEFAULT_SNAPLEN)
            .mutable_ready()
            .build(),
        glib::ParamSpecString::builder("destination")
            .nick("Destination")
            .blurb("address:port written as the destination of datagrams whose source did not say where each was sent (default: the upstream source's address and port, else 127.0.0.1:7148)")
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("block-size")
            .nick("Block size")
            .blurb("Bytes per disk write (rounded up to 4096)")
            .minimum(4096)
            .maximum(1 << 30)
            .default_value(4 << 20)
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt64::builder("queue-size")
            .nick("Queue size")
            .blurb("Bytes of preallocated staging blocks between the streaming thread and the writer (at least 3 blocks): how long a disk stall is absorbed")
            .minimum(4096)
            .default_value(64 << 20)
            .mutable_ready()
            .build(),
        glib::ParamSpecBoolean::builder("direct")
            .nick("Direct I/O")
            .blurb("Write with O_DIRECT (falls back to buffered writes, with a warning, where the filesystem refuses it)")
            .default_value(true)
            .mutable_ready()
            .build(),
        glib::ParamSpecBoolean::builder("overwrite")
            .nick("Overwrite")
            .blurb("Replace files that exist. false: a location without %d that exists is an error at start, and numbered files continue after those present. Symbolic links are never followed either way")
            .default_value(false)
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("io-depth")
            .nick("I/O depth")
            .blurb("Most blocks one direct write carries when several are waiting (the disk fell behind): they go in one vectored write, that many blocks' requests in the device at once. Writes are one at a time and in file order, so a file only ever holds data that reached it (1 = one block per write)")
            .minimum(1)
            .maximum(64)
            .default_value(4)
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt64::builder("preallocate")
            .nick("Preallocate")
            .blurb("Bytes of disk reserved ahead of the write position with fallocate (file size unchanged; unused space released at close; 0 = none)")
            .default_value(256 << 20)
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt64::builder("max-size")
            .nick("Maximum file size")
            .blurb("Start a new file before one would exceed this many bytes (0 = no limit)")
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt64::builder("max-duration")
            .nick("Maximum file duration")
            .blurb("Start a new file after this many nanoseconds of wall-clock time (0 = no limit)")
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("max-files")
            .nick("Maximum files")
            .blurb("Keep only the newest N files written by this recording, deleting the oldest (0 = keep all)")
            .mutable_ready()
            .build(),
        glib::ParamSpecEnum::builder::<Fsync>("fsync")
            .nick("Fsync")
            .blurb("When to flush to the device: none, on-rotate (each file close), bytes (every fsync-bytes and on close)")
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt64::builder("fsync-bytes")
            .nick("Fsync bytes")
            .blurb("With fsync=bytes: bytes written between flushes")
            .minimum(1)
            .default_value(256 << 20)
            .mutable_ready()
            .build(),
        glib::ParamSpecEnum::builder::<WhenFull>("when-full")
            .nick("When full")
            .blurb("When the disk falls behind and the queue is full: drop whole buffers (counted as drops-disk) or block the streaming thread; auto blocks when upstream is not live (a replay, a file: nothing is lost) and drops when it is (a live capture must not stall its source)")
            .mutable_ready()
            .build(),
        memory,
        hugepages,
        glib::ParamSpecString::builder("stats-source")
            .nick("Statistics source")
            .blurb("Element whose drops-kernel/drops-pool go into pcapng interface statistics (default: the nearest upstream Firehose element)")
            .mutable_ready()
            .build(),
    ];
    v.extend(firehose_core::stats::properties(
        "packets, bytes, batches, bytes-written, files, drops-disk, truncated, write-latency-max-us, pool-*",
    ));
    v
}
