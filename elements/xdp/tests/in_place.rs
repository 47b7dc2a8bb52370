//! Engines over AF_XDP without an element between them: the GStreamer-free receive loop
//! (`engine::receive::XdpReceiver`) hands each batch, where the kernel wrote it in the
//! UMEM, to the SPEAD heap reassembler or the chunk engine
//! (`Engine::feed` inside `InPlaceTransport::receive_in_place`), which copies each payload once, into its
//! heap or chunk; the frames go straight back to the kernel. A SPEAD stream is sent from
//! a namespace over a veth pair; every heap must come out whole and byte-exact, and
//! every frame must be back in the fill ring at the end. Needs root (namespaces, BPF,
//! AF_XDP), as `xdpsrc.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_chunk::{ChunkAssembler, ChunkConfig, FinishedChunk};
use firehose_core::memory::HugepagePolicy;
use firehose_core::pool::SlotPool;
use firehose_core::sync::lock;
use firehose_core::transport::{Engine, InPlaceTransport, Received};
use firehose_core::wake::Waker;
use firehose_spead::chunk::{SpeadChunkConfig, SpeadChunkHandler};
use firehose_spead::hostile::{self, Legit, LEGIT_ITEM, MAX_PACKET};
use firehose_spead::reassembly::{Config, Heap, Reassembler};
use firehose_spead::wire::{ids, Flavour};
use firehose_testkit::netns::VethPair;
use firehose_xdp::engine::receive::{Wait, XdpReceiver};
use firehose_xdp::engine::{self, AttachMode, BindMode};

const HEAPS: u64 = 32;
const SPC: usize = 4;
const HEAP_SIZE: usize = 32 << 10;
const PACKET: usize = 1472;
const PORT: u16 = 7420;
const FRAMES: u32 = 4096;

fn legit() -> Legit {
    Legit::new(Flavour::SPEAD_64_40, PACKET, HEAP_SIZE).unwrap()
}

/// An AF_XDP receive loop on the host end of `pair` for UDP port [`PORT`].
fn receiver(pair: &VethPair) -> XdpReceiver {
    let cfg = engine::Config {
        interface: pair.host_if.clone(),
        queue: 0,
        endpoints: vec![firehose_core::endpoint::Endpoint {
            addr: std::net::Ipv4Addr::UNSPECIFIED.into(),
            port: PORT,
            sources: vec![],
        }],
        attach: AttachMode::Generic,
        bind: BindMode::Auto,
        busy_poll: 0,
        busy_poll_budget: 64,
        frames: FRAMES,
        frame_size: 4096,
        batch_size: 64,
        hugepages: HugepagePolicy::Off,
    };
    let cap = engine::open(&cfg, &mut |_| {}).expect("needs root and AF_XDP");
    let waker = Arc::new(Waker::new().unwrap());
    XdpReceiver::new(
        cap,
        &pair.host_if,
        FRAMES,
        4096,
        64,
        Wait::Nap(Duration::from_micros(100)),
        waker,
    )
}

/// Sends the stream from the namespace, one datagram per send, paced so that the
/// UMEM (4096 frames) never fills while a debug build feeds the engine.
fn send(pair: &VethPair) -> u64 {
    let l = legit();
    let tx = firehose_testkit::run::peer_socket(pair);
    let mut buf = vec![0u8; MAX_PACKET];
    let mut sent = 0u64;
    for cnt in 1..=HEAPS {
        for k in 0..l.packets_per_heap() {
            let n = l.packet(cnt, k, &mut buf);
            tx.send_to(&buf[..n], (pair.host_ip, PORT)).unwrap();
            sent += 1;
            if sent.is_multiple_of(32) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    sent
}

/// A fresh veth pair (`tag`) with an AF_XDP receive loop on its host end, and the
/// stream sent to it: the pair (which must outlive the loop), the loop, and how many
/// datagrams were sent.
fn stream_sent(tag: &str) -> (VethPair, XdpReceiver, u64) {
    let pair = VethPair::create(tag).expect("needs root and iproute2");
    pair.pin_host_neighbour().unwrap();
    let rx = receiver(&pair);
    let sent = send(&pair);
    (pair, rx, sent)
}

/// One batch of `rx` fed to `engine` where the kernel put it; true once the engine
/// ended the stream.
fn feed_in_place<E: Engine>(
    rx: &mut XdpReceiver,
    engine: &mut E,
    stop: &AtomicBool,
    out: &mut Vec<E::Output>,
) -> std::io::Result<(Received, bool)> {
    let mut more = true;
    let r = rx.receive_in_place(stop, true, &mut |data, packets| {
        more = engine.feed(data, packets, out);
    })?;
    Ok((r, !more))
}

/// Feeds `engine` from `rx` in place until `expected` datagrams came (or 30 s: a hang
/// guard), then ends it; checks that every frame went back to the kernel.
fn feed<E: Engine>(rx: &mut XdpReceiver, engine: &mut E, expected: u64) -> Vec<E::Output> {
    let stop = AtomicBool::new(false);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rx.tally().packets < expected && Instant::now() < deadline {
        let (r, ended) = feed_in_place(rx, engine, &stop, &mut out).unwrap();
        assert!(matches!(r, Received::Batch { .. }), "{r:?}");
        if ended {
            break;
        }
    }
    let t = rx.tally();
    assert_eq!(t.packets, expected, "datagrams received: {t:?}");
    assert_eq!(t.malformed + t.truncated + t.filtered, 0, "{t:?}");
    engine.finish(&mut out);
    let held = lock(&rx.capture().ring).counts().held;
    assert_eq!(
        held, 0,
        "every frame back to the kernel after its batch was fed"
    );
    out
}

#[test]
fn the_heap_reassembler_takes_batches_where_af_xdp_put_them() {
    let (_pair, mut rx, sent) = stream_sent("ip");
    let mut engine = Reassembler::new(&Config {
        hugepages: HugepagePolicy::Off,
        ..Config::default()
    })
    .unwrap();
    let heaps: Vec<Heap> = feed(&mut rx, &mut engine, sent);
    let l = legit();
    let intact: BTreeSet<u64> = heaps
        .iter()
        .filter(|h| {
            h.info.complete
                && h.info.item(LEGIT_ITEM).is_some()
                && l.check(h.info.heap_cnt, &h.payload.map_readable().unwrap())
        })
        .map(|h| h.info.heap_cnt)
        .collect();
    assert_eq!(intact, (1..=HEAPS).collect(), "every heap, whole");
    assert_eq!(engine.counts().malformed, 0);
    rx.close();
}

#[test]
fn the_chunk_engine_takes_batches_where_af_xdp_put_them() {
    gst::init().unwrap();
    let (_pair, mut rx, sent) = stream_sent("ic");
    let cfg = ChunkConfig {
        slots_per_chunk: SPC,
        slot_size: HEAP_SIZE,
        max_chunks: 4,
        ..ChunkConfig::default()
    };
    let pool = SlotPool::new(&cfg.pool_config(4 * cfg.max_chunks, HugepagePolicy::Off)).unwrap();
    let handler = SpeadChunkHandler::new(SpeadChunkConfig {
        place_item: ids::HEAP_CNT,
        step: 1,
        offset: 1,
        slots_per_chunk: SPC as u64,
        stop: true,
    });
    let mut engine = ChunkAssembler::new(cfg, Box::new(handler), pool).unwrap();
    let mut intact = BTreeSet::new();
    // The chunks go back to the pool as they are checked, as downstream would free them.
    let chunks: Vec<FinishedChunk> = feed(&mut rx, &mut engine, sent);
    for c in &chunks {
        for i in 0..c.info.slots {
            let cnt = c.info.chunk_id * SPC as u64 + i as u64 + 1;
            if c.info.is_present(i)
                && hostile::check_bytes(cnt, &c.slot.as_ref()[c.info.slot_range(i)])
            {
                intact.insert(cnt);
            }
        }
    }
    assert_eq!(intact, (1..=HEAPS).collect(), "every heap in its slot");
    assert_eq!(engine.stats().malformed, 0);
    rx.close();
}
