//! The whole delivery path of issue 19: a live SPEAD capture (`fhspeadsrc`) served by
//! `fhshmsink`, read by a Python process (`examples/shm_consumer.py`, numpy views of the
//! shared segments, no GStreamer) — with the payloads received by the kernel straight
//! into the shared memory (`bytes-copied` 0 at the sink: no copy of the payload
//! anywhere in this process).

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use firehose_core::stats::field;
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use firehose_tests::repo_root;
use gst::prelude::*;

const HEAPS: u64 = 40;
const ITEM: usize = 256 << 10;

/// A pipeline ending in `fhshmsink name=sink socket-path=<sock>` (the `{sock}` in
/// `desc`), playing, with `examples/shm_consumer.py` attached to it: the pipeline, the
/// UDP port of its `src`, and the Python process.
fn serve_to_python(tag: &str, desc: &str) -> (gst::Pipeline, u16, std::process::Child, PathBuf) {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    let sock = std::env::temp_dir().join(format!("fh-{tag}-py-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let pipeline =
        firehose_testkit::run::launch(&desc.replace("{sock}", &sock.display().to_string()));
    pipeline.set_state(gst::State::Playing).unwrap();
    let port = pipeline.by_name("src").unwrap().property::<i32>("port") as u16;
    let sink = pipeline.by_name("sink").unwrap();
    let python = repo_root().join(".venv/bin/python3");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup test",
        python.display()
    );
    let child = Command::new(&python)
        .arg(repo_root().join("examples/shm_consumer.py"))
        .args(["--socket", sock.to_str().unwrap(), "--timeout", "20"])
        .env("PYTHONPATH", repo_root().join("python"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while field(&sink.property::<gst::Structure>("stats"), "consumers") == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the consumer never attached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    (pipeline, port, child, sock)
}

/// Waits for the Python consumer to end, stops the pipeline and returns what the
/// consumer printed, the stats of `sink` and those of element `name`, once it is clear
/// that the consumer succeeded.
fn finish(
    pipeline: gst::Pipeline,
    child: std::process::Child,
    sock: PathBuf,
    name: &str,
) -> (String, gst::Structure, gst::Structure) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stats_of = |name: &str| {
        pipeline
            .by_name(name)
            .unwrap()
            .property::<gst::Structure>("stats")
    };
    let (sink, other) = (stats_of("sink"), stats_of(name));
    pipeline.set_state(gst::State::Null).unwrap();
    let _ = std::fs::remove_file(&sock);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, sink, other)
}

/// Sends heap `cnt` of `items` to `port` on loopback, packet by packet.
fn send_heap(tx: &UdpSocket, cfg: &PacketConfig, cnt: u64, items: &[Item<'_>], port: u16) {
    let mut scratch = vec![0u8; 9216];
    let mut heap = cfg.heap(cnt, items).unwrap();
    while let Some(n) = heap.write_next(&mut scratch) {
        tx.send_to(&scratch[..n], ("127.0.0.1", port)).unwrap();
    }
}

#[test]
fn a_python_process_reads_a_live_spead_capture_from_shared_memory_without_a_copy() {
    let (pipeline, port, child, sock) = serve_to_python(
        "spead",
        "fhspeadsrc name=src address=127.0.0.1 port=0 max-heap-size=1048576 hugepages=off \
         ! fhshmsink name=sink socket-path={sock}",
    );

    // Heaps of one 256 KiB item in 8972-byte packets (landed straight into heap memory),
    // then the stop heap, which ends the stream with EOS.
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 8972 + 8).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let data: Vec<Vec<u8>> = (0..HEAPS)
        .map(|h| (0..ITEM).map(|i| (h as usize * 7 + i) as u8).collect())
        .collect();
    for (cnt, bytes) in (1..).zip(&data) {
        let items = [Item::bytes(0x1000, bytes)];
        send_heap(&tx, &cfg, cnt, &items, port);
        std::thread::sleep(Duration::from_millis(3));
    }
    let stop = [Item::stop()];
    send_heap(&tx, &cfg, HEAPS + 1, &stop, port);

    let (stdout, stats, src_stats) = finish(pipeline, child, sock, "src");
    assert!(
        stdout.contains(&format!("messages={HEAPS}")) && stdout.contains("incomplete=0"),
        "every heap, complete: {stdout}\nsource: {src_stats}"
    );
    assert!(stdout.contains("end=eos"), "{stdout}");
    assert_eq!(field(&stats, "bytes-copied"), 0, "no copy: {stats}");
    assert!(field(&src_stats, "packets-landed") > 0, "{src_stats}");
}

#[test]
fn a_python_process_reads_speaddepay_chunks_built_in_shared_memory() {
    // Chunk mode cuts its chunks from the segments fhshmsink proposes: the payload is
    // copied once, from the receive batch into the chunk, and never again.
    let (pipeline, port, child, sock) = serve_to_python(
        "depay",
        &format!(
            "fhudpsrc name=src address=127.0.0.1 port=0 hugepages=off ! speaddepay name=depay \
             mode=chunks heaps-per-chunk=4 heap-size={ITEM} ! fhshmsink name=sink \
             socket-path={{sock}}"
        ),
    );
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1472).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for cnt in 0..16u64 {
        let bytes: Vec<u8> = (0..ITEM).map(|i| (cnt as usize * 7 + i) as u8).collect();
        let items = [Item::bytes(0x1000, &bytes)];
        send_heap(&tx, &cfg, cnt, &items, port);
        std::thread::sleep(Duration::from_millis(5));
    }
    let stop = [Item::stop()];
    send_heap(&tx, &cfg, 16, &stop, port);
    let (stdout, stats, depay) = finish(pipeline, child, sock, "depay");
    assert!(stdout.contains("end=eos"), "{stdout}");
    assert!(
        stdout.contains("buffers=4 "),
        "4 chunks of 4 heaps: {stdout}\n{depay}"
    );
    assert_eq!(depay.get::<String>("memory").unwrap(), "shared", "{depay}");
    assert_eq!(
        field(&stats, "bytes-copied"),
        0,
        "no copy at the sink: {stats}"
    );
    assert!(field(&stats, "buffers") >= 4, "{stats}");
}
