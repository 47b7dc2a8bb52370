//! The transport of `fhtestsrc`: a generator of numbered test packets ([`crate::pattern`])
//! in batches, paced to a rate. No GStreamer types, so it is tested alone; the element
//! ([`crate::testsrc`]) is a `PacketSrc` subclass that hands it pool slots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::pace::{Interrupt, Pacer};
use firehose_core::stats::names;
use firehose_core::PacketInfo;

use crate::pattern;

/// The largest UDP payload over IPv4, so every test packet fits one datagram.
pub const MAX_PACKET_SIZE: u32 = 65507;
/// Largest batch, so a typo in `batch-size` cannot reserve gigabytes.
pub const MAX_SLOT_BYTES: usize = 32 << 20;

/// What to generate (the element's properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// Bytes per packet, header included (at least [`pattern::MIN_LEN`]).
    pub packet_size: u32,
    /// Packet bytes per second, in bits/s (0 = as fast as possible).
    pub rate: u64,
    /// Packets before the end (0 = unlimited).
    pub num_packets: u64,
    /// Sequence number of the first packet.
    pub first_seq: u64,
    /// Write every packet's payload pattern (false: only each packet's header).
    pub fill_payload: bool,
}

impl GeneratorConfig {
    /// The element's defaults: 1472-byte packets (one Ethernet MTU of UDP payload), as
    /// fast as possible, for ever, from 0, payloads written.
    pub const DEFAULT: Self = Self {
        packet_size: 1472,
        rate: 0,
        num_packets: 0,
        first_seq: 0,
        fill_payload: true,
    };
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

firehose_core::counters! {
    /// What the generator counts, read from any thread.
    pub struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        batches: names::BATCHES,
    }
}

/// One generated batch: how many packets, and when it was due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Packets sent before this batch (its first packet's offset in the stream).
    pub first: u64,
    /// Packets in it.
    pub packets: u64,
    /// Bytes of them, back to back from the start of the slot.
    pub bytes: usize,
    /// Its nominal send time from the start of the stream when paced, else the time
    /// since the first batch.
    pub pts: Duration,
    /// Its nominal length when paced.
    pub duration: Option<Duration>,
}

/// Generates batches of `batch_size` packets into slots handed to it.
#[derive(Debug)]
pub struct Generator {
    config: GeneratorConfig,
    batch_size: u32,
    /// Packets generated so far (the next one is `first_seq + sent`).
    sent: u64,
    /// The schedule: counts the packet bytes produced so far, and gives each batch its
    /// send time and its PTS.
    pacer: Pacer,
    /// When the batch being made was due to leave (set by [`Generator::wait`]).
    due: Option<Instant>,
    counters: Arc<Counters>,
}

impl Generator {
    /// A generator of `config` in batches of `batch_size`; an error names what to
    /// lower when one batch would exceed [`MAX_SLOT_BYTES`].
    pub fn new(config: GeneratorConfig, batch_size: u32) -> Result<Self, String> {
        let slot = config.packet_size as usize * batch_size as usize;
        if slot > MAX_SLOT_BYTES {
            return Err(format!(
                "batch-size {batch_size} x packet-size {} = {slot} bytes exceeds the {} MiB \
                 batch limit; lower batch-size",
                config.packet_size,
                MAX_SLOT_BYTES >> 20
            ));
        }
        if (config.packet_size as usize) < pattern::MIN_LEN {
            return Err(format!(
                "packet-size {} is shorter than the {}-byte test packet header",
                config.packet_size,
                pattern::MIN_LEN
            ));
        }
        Ok(Self {
            config,
            batch_size,
            sent: 0,
            // No burst and no lag limit: the schedule never moves, so timestamps taken
            // from it are exact and evenly spaced even after a stall downstream.
            pacer: Pacer::new(config.rate),
            due: None,
            counters: Arc::default(),
        })
    }

    /// Bytes of one full batch: the pool's slot size.
    pub fn slot_bytes(&self) -> usize {
        self.config.packet_size as usize * self.batch_size as usize
    }

    /// Its counters (shared: they stay readable while the generator is busy).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Packets in the next batch: `batch_size`, fewer for the last, 0 at the end.
    pub fn next_len(&self) -> u64 {
        let batch = u64::from(self.batch_size);
        match self.config.num_packets {
            0 => batch,
            total => batch.min(total - self.sent),
        }
    }

    /// Waits until the next batch is due: it leaves at the start of its slot, once the
    /// bytes before it have had their time. False if `interrupt` cut the wait short.
    pub fn wait(&mut self, interrupt: &Interrupt) -> bool {
        if !self.pacer.wait(0, interrupt) {
            return false;
        }
        self.due = Some(Instant::now());
        true
    }

    /// Writes the next batch into `slot` (at least [`Generator::slot_bytes`] long),
    /// describes each packet in `packets` (received at `rx_time_ns`), counts it and
    /// returns its times. Call [`Generator::wait`] first.
    pub fn fill(
        &mut self,
        slot: &mut [u8],
        rx_time_ns: u64,
        packets: &mut Vec<PacketInfo>,
    ) -> Batch {
        let n = self.next_len();
        let size = self.config.packet_size as usize;
        let seq = self.config.first_seq.wrapping_add(self.sent);
        for (i, pkt) in slot.chunks_exact_mut(size).take(n as usize).enumerate() {
            if self.config.fill_payload {
                pattern::fill(seq.wrapping_add(i as u64), pkt);
            } else {
                pattern::write_header(seq.wrapping_add(i as u64), pkt);
            }
            packets.push(PacketInfo {
                offset: (i * size) as u32,
                len: size as u32,
                rx_time_ns,
                src: Default::default(),
            });
        }
        let bytes = n * u64::from(self.config.packet_size);
        let (pts, duration) = if self.pacer.is_paced() {
            // The nominal send time, so timestamps are exact and evenly spaced.
            let before = self.pacer.sent();
            let pts = self.pacer.time_of(before);
            (pts, Some(self.pacer.time_of(before + bytes) - pts))
        } else {
            let now = self.due.unwrap_or_else(Instant::now);
            let origin = self.pacer.origin().unwrap_or(now);
            (now.saturating_duration_since(origin), None)
        };
        let batch = Batch {
            first: self.sent,
            packets: n,
            bytes: bytes as usize,
            pts,
            duration,
        };
        self.sent += n;
        self.pacer.record(bytes);
        self.counters.packets.add(n);
        self.counters.bytes.add(bytes);
        self.counters.batches.add(1);
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(packet_size: u32, num_packets: u64) -> GeneratorConfig {
        GeneratorConfig {
            packet_size,
            num_packets,
            first_seq: 100,
            ..Default::default()
        }
    }

    /// Runs `g` to its end (at most `limit` batches), verifying every packet.
    fn drain(g: &mut Generator, limit: usize) -> Vec<Batch> {
        let never = Interrupt::default();
        let mut slot = vec![0u8; g.slot_bytes()];
        let mut out = vec![];
        let mut expect = 100u64;
        while g.next_len() > 0 && out.len() < limit {
            assert!(g.wait(&never));
            let mut packets = vec![];
            let b = g.fill(&mut slot, 7, &mut packets);
            assert_eq!(packets.len() as u64, b.packets);
            for p in &packets {
                assert_eq!(p.rx_time_ns, 7);
                assert_eq!(pattern::verify(&slot[p.range()]), Ok(expect));
                expect += 1;
            }
            out.push(b);
        }
        out
    }

    #[test]
    fn it_ends_after_num_packets_with_a_short_last_batch() {
        let mut g = Generator::new(config(64, 10), 4).unwrap();
        let batches = drain(&mut g, 100);
        let lens: Vec<u64> = batches.iter().map(|b| b.packets).collect();
        assert_eq!(lens, [4, 4, 2]);
        assert_eq!(batches[2].first, 8);
        let c = g.counters();
        assert_eq!(
            (c.packets.get(), c.bytes.get(), c.batches.get()),
            (10, 640, 3)
        );
        assert_eq!(g.next_len(), 0);
    }

    #[test]
    fn unlimited_runs_on_and_counts() {
        let mut g = Generator::new(config(32, 0), 8).unwrap();
        assert_eq!(drain(&mut g, 5).len(), 5);
        assert_eq!(g.counters().packets.get(), 40);
        assert_eq!(g.next_len(), 8);
    }

    #[test]
    fn paced_batches_carry_their_nominal_times() {
        // 8 packets of 125 bytes at 8 Mbit/s: one batch is 1 ms of the schedule.
        let cfg = GeneratorConfig {
            rate: 8_000_000,
            ..config(125, 24)
        };
        let mut g = Generator::new(cfg, 8).unwrap();
        let b = drain(&mut g, 10);
        assert_eq!(b.len(), 3);
        for (i, batch) in b.iter().enumerate() {
            assert_eq!(batch.pts, Duration::from_millis(i as u64));
            assert_eq!(batch.duration, Some(Duration::from_millis(1)));
        }
    }

    #[test]
    fn an_interrupt_ends_a_pacing_wait() {
        // 1 bit/s: the second batch would be due in hours.
        let cfg = GeneratorConfig {
            rate: 1,
            ..config(64, 0)
        };
        let mut g = Generator::new(cfg, 1).unwrap();
        drain(&mut g, 1);
        let stop = Interrupt::default();
        stop.raise();
        let t = Instant::now();
        assert!(!g.wait(&stop));
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn header_only_leaves_the_payload_as_it_was() {
        let cfg = GeneratorConfig {
            fill_payload: false,
            ..config(64, 1)
        };
        let mut g = Generator::new(cfg, 1).unwrap();
        let mut slot = vec![0xAAu8; 64];
        assert!(g.wait(&Interrupt::default()));
        g.fill(&mut slot, 0, &mut vec![]);
        assert!(slot[pattern::MIN_LEN..].iter().all(|&b| b == 0xAA));
        assert!(pattern::verify(&slot).is_err());
    }

    #[test]
    fn oversized_batches_and_short_packets_are_refused_with_the_fix() {
        let e = Generator::new(config(65507, 0), 65536).unwrap_err();
        assert!(e.contains("lower batch-size"), "{e}");
        let e = Generator::new(config(4, 0), 1).unwrap_err();
        assert!(e.contains("packet-size 4"), "{e}");
    }
}
