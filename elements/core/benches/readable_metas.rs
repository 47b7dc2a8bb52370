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

/// Nanoseconds per call of `f`: the median of `runs` runs of `iters` calls each, after
/// one run to warm up.
fn ns_per_call(runs: usize, iters: u32, mut f: impl FnMut()) -> f64 {
    let mut run = || {
        let t0 = Instant::now();
        for _ in 0..iters {
            f();
        }
        t0.elapsed()
    };
    run();
    let mut t: Vec<Duration> = (0..runs).map(|_| run()).collect();
    t.sort();
    t[t.len() / 2].as_nanos() as f64 / f64::from(iters)
}

fn main() {
    // With `--bench` many calls and runs, else each measurement once, small.
    let (iters, runs) = if std::env::args().any(|a| a == "--bench") {
        (100_000, RUNS)
    } else {
        (10, 1)
    };
    gst::init().unwrap();
    let addr = |a: &str| a.parse::<std::net::SocketAddr>().unwrap().into();
    let packets: Vec<PacketInfo> = (0..BATCH)
        .map(|i| PacketInfo {
            offset: (i * 1472) as u32,
            len: 1472,
            rx_time_ns: 1_700_000_000_000_000_000 + i as u64,
            src: addr("10.0.0.1:7148"),
        })
        .collect();
    let memory = gst::Memory::with_size(BATCH * 1472);
    for readable in [false, true] {
        let ns = ns_per_call(runs, iters, || {
            black_box(batch_buffer(
                memory.clone(),
                packets.clone(),
                None,
                readable,
            ));
        });
        println!(
            "batch buffer of {BATCH} datagrams, readable-metas={readable}: {ns:.0} ns per buffer, {:.1} ns per datagram",
            ns / BATCH as f64
        );
    }
    let dests = vec![
        PacketDest {
            dst: addr("10.211.0.1:7148"),
            header_len: 0,
        };
        BATCH
    ];
    for readable in [false, true] {
        let ns = ns_per_call(runs, iters, || {
            black_box(batch_buffer_with_dests(
                memory.clone(),
                packets.clone(),
                dests.clone(),
                None,
                readable,
            ));
        });
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
    let ns = ns_per_call(runs, iters, || {
        let mut b = gst::Buffer::new();
        readable::add_chunk(b.get_mut().unwrap(), &info, &bytes);
        black_box(b);
    });
    println!("FirehoseChunkInfoMeta of a 64-slot chunk: {ns:.0} ns per chunk (buffer included)");

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
        let ns = ns_per_call(runs, list_iters, || {
            if fresh {
                cache = SenderCache::default();
            }
            let c = (senders > 0).then_some(&mut cache);
            black_box(datagram_list_from(&memory, &pk, None, c));
        });
        println!(
            "datagram list of {BATCH} buffers, {label}: {ns:.0} ns per list, {:.1} ns per datagram",
            ns / BATCH as f64
        );
    }
}
