//! The transport/engine seam (`firehose_core::transport`): one engine fed by two
//! transports, as one stream received over two sockets (two multicast groups, two NIC
//! queues) is. A SPEAD stream's heaps alternate between two kernel UDP receivers on
//! loopback (even heap counters to one, odd to the other); batches from both, taken in
//! turn, feed one chunk engine and one heap reassembler. Every heap must come out whole
//! and byte-exact, each chunk with every slot present.

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use firehose_chunk::{ChunkConfig, FinishedChunk};
use firehose_core::transport::{Engine, Received, Transport};
use firehose_core::PacketInfo;
use firehose_net::recv::UdpReceiver;
use firehose_spead::hostile::{Legit, MAX_PACKET};
use firehose_spead::reassembly::Heap;
use firehose_spead::wire::Flavour;

mod common;
use common::{heap_cnt_engine, intact_heaps, legit_intact, loopback, reassembler};

/// Heaps in the stream: 8 chunks of 4.
const HEAPS: u64 = 32;
const SPC: usize = 4;
const HEAP_SIZE: usize = 32 << 10;
const PACKET: usize = 1472;

fn legit() -> Legit {
    Legit::new(Flavour::SPEAD_64_40, PACKET, HEAP_SIZE).unwrap()
}

/// A receiver on 127.0.0.1 and its port.
fn transport() -> (UdpReceiver, u16) {
    // Holds the whole stream (~1 MiB of payload): nothing is lost while the test reads
    // the other socket.
    let (rx, report) = UdpReceiver::open(&loopback(16 << 20, false), PACKET, 16, 0).unwrap();
    (rx, report.local.unwrap().port())
}

/// Sends every heap, even counters to `even`, odd to `odd`, one datagram per send.
fn send(even: u16, odd: u16) -> u64 {
    let l = legit();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = vec![0u8; MAX_PACKET];
    let mut sent = 0;
    for cnt in 1..=HEAPS {
        let port = if cnt % 2 == 0 { even } else { odd };
        for k in 0..l.packets_per_heap() {
            let n = l.packet(cnt, k, &mut buf);
            tx.send_to(&buf[..n], ("127.0.0.1", port)).unwrap();
            sent += 1;
        }
    }
    sent
}

/// Takes one batch from each transport in turn into `engine` until `expected`
/// datagrams came (or 30 s passed: a hang guard), then ends the engine.
fn feed<E: Engine>(
    transports: &mut [&mut UdpReceiver],
    engine: &mut E,
    expected: u64,
) -> Vec<E::Output> {
    let mut slot = vec![0u8; transports.iter().map(|t| t.batch_bytes()).max().unwrap()];
    let mut packets: Vec<PacketInfo> = Vec::new();
    let mut out = Vec::new();
    let mut got = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    'outer: while got < expected && Instant::now() < deadline {
        for t in transports.iter_mut() {
            packets.clear();
            match t.receive(&mut slot, &mut packets, false).unwrap() {
                Received::Batch { used } => {
                    got += packets.len() as u64;
                    if !engine.feed(&slot[..used], &packets, &mut out) {
                        break 'outer;
                    }
                }
                Received::Nothing | Received::Interrupted => {}
            }
        }
    }
    assert_eq!(got, expected, "datagrams received from both transports");
    engine.finish(&mut out);
    out
}

/// Sends the stream over two transports and feeds both to `engine` ([`feed`]).
fn feed_both<E: Engine>(engine: &mut E) -> Vec<E::Output> {
    let (mut a, pa) = transport();
    let (mut b, pb) = transport();
    let sent = send(pa, pb);
    feed(&mut [&mut a, &mut b], engine, sent)
}

#[test]
fn two_transports_feed_one_chunk_engine() {
    gst::init().unwrap();
    let cfg = ChunkConfig {
        slots_per_chunk: SPC,
        slot_size: HEAP_SIZE,
        // The whole stream fits the window: the two sockets are read in turn, so one
        // runs ahead of the other by up to a batch.
        max_chunks: (HEAPS as usize).div_ceil(SPC),
        ..ChunkConfig::default()
    };
    let mut engine = heap_cnt_engine(cfg, true);
    let chunks: Vec<FinishedChunk> = feed_both(&mut engine);
    for c in &chunks {
        assert_eq!(c.info.slots, SPC, "chunk {}", c.info.chunk_id);
        let missing: Vec<usize> = c.info.missing().collect();
        assert!(missing.is_empty(), "chunk {}: {missing:?}", c.info.chunk_id);
    }
    // Present, and every byte right.
    assert_eq!(
        intact_heaps(&chunks),
        (1..=HEAPS).collect(),
        "every heap, from both transports"
    );
    assert_eq!(engine.stats().malformed, 0);
}

#[test]
fn two_transports_feed_one_heap_reassembler() {
    gst::init().unwrap();
    let heaps: Vec<Heap> = feed_both(&mut reassembler());
    let l = legit();
    let intact: BTreeSet<u64> = heaps
        .iter()
        .filter(|h| legit_intact(&l, h))
        .map(|h| h.info.heap_cnt)
        .collect();
    assert_eq!(
        intact,
        (1..=HEAPS).collect(),
        "every heap, from both transports"
    );
}

/// A transport's packet list is trusted no further than its memory: an entry past
/// the batch is counted, never read.
#[test]
fn an_entry_outside_the_batch_is_counted_not_read() {
    gst::init().unwrap();
    let mut engine = reassembler();
    let data = [0u8; 64];
    let bad = PacketInfo {
        offset: 60,
        len: 100,
        ..Default::default()
    };
    let mut out = Vec::new();
    assert!(engine.feed(&data, &[bad], &mut out));
    assert!(out.is_empty());
    assert_eq!(engine.counts().malformed, 1);
    // The engine sources' in-place path (`fhspeadsrc transport=…`) checks the same way,
    // and a flood of such entries only counts.
    let mut emitted = firehose_spead::reassembly::Emitted::default();
    engine.push_batch(&data, &vec![bad; 10_000], &mut emitted);
    assert!(emitted.heaps.is_empty());
    assert_eq!(engine.counts().malformed, 10_001);
}
