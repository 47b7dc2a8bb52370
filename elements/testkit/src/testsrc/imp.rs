//! `fhtestsrc` implementation: a [`PacketSrc`](firehose_core::src::PacketSrc) whose
//! transport is the [`Generator`]. The base owns batch-size, the pool, output, caps,
//! readable metas, stats and live control; this file holds only what is the test
//! source's own: its five properties (declared once, with `property_group!`) and how one
//! batch is made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use firehose_core::batch::{batch_buffer, unix_ns};
use firehose_core::gstmem;
use firehose_core::src::prelude::*;
use firehose_core::src::{Batch, BatchSize, Open, PacketSrcImpl, PoolProps, PoolSize, Receive};
use firehose_core::sync::lock;

use crate::generate::{Counters, Generator, GeneratorConfig, MAX_PACKET_SIZE};
use crate::pattern;

firehose_core::debug_category!(CAT, "fhtestsrc", "Firehose test packet source");

/// Batches in flight at once: enough for a queue downstream to smooth over hiccups,
/// few enough that the pool stays small.
const POOL_SLOTS: u64 = 8;
/// The pool properties: 8 batches unless `pool-size` says otherwise.
const POOL: PoolProps = PoolProps {
    what: "packet pool",
    size_blurb: "Bytes of preallocated packet pool, in slots of batch-size x packet-size \
                 bytes (default: 8 batches)",
    default: PoolSize::Count(POOL_SLOTS),
    default_slot_bytes: GeneratorConfig::DEFAULT.packet_size as u64 * BatchSize::DEFAULT as u64,
    memory: true,
    hugepages_alias: false,
    count_alias: None,
};
/// How often a pool wait re-checks the unlock flag if a wake-up were ever missed.
const POOL_POLL: Duration = Duration::from_millis(100);

/// The `fhtestsrc` element.
#[derive(Default)]
pub struct FhTestSrc {
    settings: Mutex<GeneratorConfig>,
    /// Between start and stop; kept after stop so that `stats` still reads the counts.
    generator: Mutex<Option<Generator>>,
    /// The generator's counters, readable while the streaming thread holds it.
    counters: Mutex<Arc<Counters>>,
}

// The test source's own properties; the base appends batch-size, output, the pool and
// stats after them.
firehose_core::property_group! {
    GeneratorConfig as _s {
        packet_size => glib::ParamSpecUInt::builder("packet-size")
            .nick("Packet size")
            .blurb("Bytes per test packet (header included)")
            .minimum(pattern::MIN_LEN as u32)
            .maximum(MAX_PACKET_SIZE)
            .default_value(GeneratorConfig::DEFAULT.packet_size)
            .mutable_ready()
            .build();
        rate => glib::ParamSpecUInt64::builder("rate")
            .nick("Rate")
            .blurb("Packet bytes per second, in bits/s (0 = as fast as possible)")
            .mutable_ready()
            .build();
        num_packets => glib::ParamSpecUInt64::builder("num-packets")
            .nick("Number of packets")
            .blurb("Packets to send before EOS (0 = unlimited)")
            .mutable_ready()
            .build();
        first_seq => glib::ParamSpecUInt64::builder("first-seq")
            .nick("First sequence number")
            .blurb("Sequence number of the first packet")
            .mutable_ready()
            .build();
        fill_payload => glib::ParamSpecBoolean::builder("fill-payload")
            .nick("Fill payload")
            .blurb(
                "Write every packet's payload pattern (false: only each packet's 16-byte \
                 header; the payload keeps what the slot held and fails fhcheck: for \
                 benchmarks of what carries the packets)",
            )
            .default_value(true)
            .mutable_ready()
            .build();
    }
}

firehose_core::packet_src! {
    FhTestSrc = "GstFhTestSrc", own properties settings = GeneratorConfig::DEFAULT;
    "Firehose test source", "Source/Network",
    "Produces batches of numbered, verifiable test packets (check them with fhcheck)";
}

impl PacketSrcImpl for FhTestSrc {
    // Not live: it paces itself.
    const LIVE: bool = false;
    const BATCH_SIZE: BatchSize = BatchSize::up_to(65536, "Packets per buffer");
    const POOL: &'static PoolProps = &POOL;
    const STATS: &'static [&'static [&'static str]] = &[Counters::NAMES];

    fn slot_bytes(&self, batch_size: u32) -> u64 {
        u64::from(lock(&self.settings).packet_size) * u64::from(batch_size)
    }

    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage> {
        let batch_size = open.batch_size;
        let config = *lock(&self.settings);
        let g = Generator::new(config, batch_size)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{e}")))?;
        let slot = g.slot_bytes();
        *lock(&self.counters) = g.counters();
        *lock(&self.generator) = Some(g);
        gst::debug!(
            CAT,
            imp = self,
            "started with {config:?}, batch-size {batch_size}"
        );
        Ok(slot)
    }

    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError> {
        let mut guard = lock(&self.generator);
        let g = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        if g.next_len() == 0 {
            gst::debug!(CAT, imp = self, "sent every packet asked for");
            return Err(gst::FlowError::Eos);
        }
        if !g.wait(rx.live.interrupt()) {
            return Err(gst::FlowError::Flushing);
        }
        // A test source never drops: wait for downstream to give a slot back.
        let mut slot = rx
            .pool()?
            .acquire_blocking(rx.live.flag(), POOL_POLL)
            .ok_or(gst::FlowError::Flushing)?;
        let mut packets = Vec::with_capacity(g.next_len() as usize);
        let batch = g.fill(slot.as_mut_full(), unix_ns(), &mut packets);
        slot.set_len(batch.bytes);
        let mut buf = batch_buffer(gstmem::slot_into_memory(slot), packets, None, rx.readable);
        let b = buf.get_mut().expect("a new buffer is writable");
        let ns = |d: Duration| gst::ClockTime::from_nseconds(d.as_nanos() as u64);
        b.set_pts(ns(batch.pts));
        b.set_duration(batch.duration.map(ns));
        // Offsets count packets, like samples in audio.
        b.set_offset(batch.first);
        b.set_offset_end(batch.first + batch.packets);
        Ok(buf.into())
    }

    fn counters(&self) -> gst::Structure {
        lock(&self.counters).structure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_properties_round_trip() {
        gst::init().unwrap();
        let mut s = GeneratorConfig::DEFAULT;
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!(s.packet_size, GeneratorConfig::DEFAULT.packet_size + 1);
        assert!(!s.fill_payload);
    }
}
