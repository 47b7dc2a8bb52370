//! What the readable metas cost per buffer: a batch buffer of 64 datagrams built as the
//! sources build it (`batch_buffer`), with and without the `FirehoseBatchMeta`, and as
//! the sources that know each datagram's destination build it
//! (`batch_buffer_with_dests`: the destination meta, and destinations in the readable
//! meta); and
//! the chunk meta of a 64-slot chunk alone; and the per-datagram output (a list of 64
//! buffers, `datagram_list_from`) without and with the `GstNetAddressMeta` naming each
//! sender (`retrieve-sender-address`), from one sender, 64 in turn (each address from
//! the sender cache), and, for comparison, 64 in turn with a new address made per
//! datagram (what `udpsrc` does for every datagram). Prints the median over several runs of
//! nanoseconds per buffer, and per datagram for batches (docs/python.md quotes them).
//!
//! Run with `cargo bench -p firehose-core --bench readable_metas`. Without `--bench`
//! (`cargo test --benches`) every measurement runs once, small, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use firehose_core::batch::{batch_buffer, batch_buffer_with_dests};
use firehose_core::meta::chunk::ChunkInfo;
use firehose_core::meta::dest::PacketDest;
use firehose_core::meta::readable;
use firehose_core::src::output::{datagram_list_from, SenderCache};
use firehose_core::PacketInfo;

const RUNS: usize = 7;
const BATCH: usize = 64;

fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut t: Vec<Duration> = (0..runs).map(|_| f()).collect();
    t.sort();
    t[t.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    gst::init().unwrap();
    let (iters, runs) = if full { (100_000, RUNS) } else { (10, 1) };
    let packets: Vec<PacketInfo> = (0..BATCH)
        .map(|i| PacketInfo {
            offset: (i * 1472) as u32,
            len: 1472,
            rx_time_ns: 1_700_000_000_000_000_000 + i as u64,
            src: "10.0.0.1:7148"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        })
        .collect();
    let memory = gst::Memory::with_size(BATCH * 1472);
    for readable in [false, true] {
        let t = median_of(runs, || {
            let t0 = Instant::now();
            for _ in 0..iters {
                let b = batch_buffer(memory.clone(), packets.clone(), None, readable);
                black_box(b);
            }
            t0.elapsed()
        });
        let ns = t.as_nanos() as f64 / iters as f64;
        println!(
            "batch buffer of {BATCH} datagrams, readable-metas={readable}: {ns:.0} ns per buffer, {:.1} ns per datagram",
            ns / BATCH as f64
        );
    }
    let dests = vec![
        PacketDest {
            dst: "10.211.0.1:7148"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
            header_len: 0,
        };
        BATCH
    ];
    for readable in [false, true] {
        let t = median_of(runs, || {
            let t0 = Instant::now();
            for _ in 0..iters {
                let b = batch_buffer_with_dests(
                    memory.clone(),
                    packets.clone(),
                    dests.clone(),
                    None,
                    readable,
                );
                black_box(b);
            }
            t0.elapsed()
        });
        let ns = t.as_nanos() as f64 / iters as f64;
        println!(
            "batch buffer of {BATCH} datagrams with destinations, readable-metas={readable}: {ns:.0} ns per buffer, {:.1} ns per datagram",
            ns / BATCH as f64
        );
    }
    let info = ChunkInfo {
        chunk_id: 7,
        slots: 64,
        slot_size: 8192,
        present: vec![u64::MAX],
        slots_present: 64,
        packets_per_slot: 0,
        packet_present: vec![],
        packets: 64,
        bytes: 64 * 8192,
    };
    let bytes = vec![8192u64; 64];
    let t = median_of(runs, || {
        let t0 = Instant::now();
        for _ in 0..iters {
            let mut b = gst::Buffer::new();
            readable::add_chunk(b.get_mut().unwrap(), &info, &bytes);
            black_box(b);
        }
        t0.elapsed()
    });
    println!(
        "FirehoseChunkInfoMeta of a 64-slot chunk: {:.0} ns per chunk (buffer included)",
        t.as_nanos() as f64 / iters as f64
    );

    // One buffer per datagram, as sources push to stock elements.
    let list_iters = iters / 4;
    for (senders, fresh, label) in [
        (0, false, "no sender meta"),
        (1, false, "1 sender"),
        (64, false, "64 senders in turn"),
        (64, true, "64 senders, an address made per datagram"),
    ] {
        let mut pk = packets.clone();
        for (i, p) in pk.iter_mut().enumerate() {
            let n = senders.max(1);
            p.src = std::net::SocketAddr::from((
                [10, 0, (i % n / 256) as u8, (i % n) as u8],
                7000 + (i % n) as u16,
            ))
            .into();
        }
        let mut cache = SenderCache::default();
        let t = median_of(runs, || {
            let t0 = Instant::now();
            for _ in 0..list_iters {
                if fresh {
                    cache = SenderCache::default();
                }
                let c = (senders > 0).then_some(&mut cache);
                black_box(datagram_list_from(&memory, &pk, None, c));
            }
            t0.elapsed()
        });
        let ns = t.as_nanos() as f64 / list_iters as f64;
        println!(
            "datagram list of {BATCH} buffers, {label}: {ns:.0} ns per list, {:.1} ns per datagram",
            ns / BATCH as f64
        );
    }
}
