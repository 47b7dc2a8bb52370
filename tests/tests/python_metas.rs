//! Issue 17, readable metas: a Python process (PyGObject and numpy, no Rust) reads
//! every field of the heap, chunk and batch metas from live captures on loopback
//! (`fhudpsrc ! speaddepay ! appsink`, the same in `mode=chunks`, and
//! `fhudpsrc output=batch ! appsink`), and the sender of each per-datagram buffer of
//! `fhudpsrc ! appsink` (its `GstNetAddressMeta`, as `udpsrc`'s), with the functions of
//! examples/read_metas.py
//! (driven by tests/python/read_metas_live.py), and this test compares what it printed
//! with what was sent.
//!
//! Python loads the plugin the way users do: `libgstfirehose.so`, built beside this
//! test binary (a dependency of this crate), on GST_PLUGIN_PATH, with a fresh registry.

use std::io::Read;
use std::net::UdpSocket;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use firehose_spead::descriptor::{self, Descriptor};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::{ctrl, ids, Flavour};
use firehose_tests::{first_line, spawn_system_python, stderr_of};

/// Heaps sent (HEAP_CNT 1..=HEAPS), then a stop heap.
const HEAPS: u64 = 6;
/// Datagrams sent to the batch capture.
const DATAGRAMS: usize = 20;
/// `heap-size` of the chunk capture: every heap fits.
const HEAP_SIZE: usize = 4096;
const DATA_ID: u64 = 0x1000;
const TIME_ID: u64 = 0x1600;

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn data_of(cnt: u64) -> Vec<u8> {
    (0..32)
        .map(|i| (cnt as u8).wrapping_mul(31) ^ i as u8)
        .collect()
}

fn descriptors() -> Vec<Descriptor> {
    vec![
        Descriptor {
            id: DATA_ID,
            name: "data".into(),
            description: "payload bytes".into(),
            shape: vec![Some(32)],
            format: vec![(b'u', 8)],
            dtype: None,
        },
        Descriptor {
            id: TIME_ID,
            name: "timestamp".into(),
            description: "a counter".into(),
            shape: vec![None],
            format: vec![(b'u', 48)],
            dtype: Some("{'descr': '>u8', 'fortran_order': False, 'shape': ()}".into()),
        },
    ]
}

/// What the Python side prints for a descriptor.
fn descriptor_text(d: &Descriptor) -> String {
    let format: Vec<String> = d
        .format
        .iter()
        .map(|&(c, b)| format!("{}{b}", c as char))
        .collect();
    let shape: Vec<String> = d
        .shape
        .iter()
        .map(|s| s.map_or(-1, |n| n as i64).to_string())
        .collect();
    format!(
        "{}/{}/{}/{}/{}/{}",
        d.id,
        d.name,
        d.description,
        format.join(","),
        d.dtype.as_deref().unwrap_or(""),
        shape.join(",")
    )
}

#[test]
fn python_reads_every_field_of_the_heap_chunk_and_batch_metas() {
    let plugins = firehose_tests::plugin_dir("py-metas");
    let mut child = spawn_system_python(
        &plugins,
        "tests/python/read_metas_live.py",
        &[&DATAGRAMS.to_string(), &HEAP_SIZE.to_string(), "30"],
    );
    let (mut stdout, first) = first_line(&mut child);
    let mut port = |name: &str| -> u16 {
        first
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no {name} port in {first:?}: {}", stderr_of(&mut child)))
    };
    let (heap_port, chunk_port, batch_port, single_port) =
        (port("heap"), port("chunk"), port("batch"), port("datagram"));

    // The SPEAD stream, to both SPEAD captures: heap 1 carries the descriptors; every
    // heap an immediate and a 32-byte item; heap 6 also STREAM_CTRL (descriptors
    // updated); then the stop heap.
    let flavour = Flavour::SPEAD_64_48;
    let cfg = PacketConfig::new(flavour, 9000).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let descs = descriptors();
    let encoded: Vec<Vec<u8>> = descs
        .iter()
        .map(|d| descriptor::encode(d, flavour))
        .collect();
    let mut scratch = vec![0u8; 9000];
    let mut send_heap = |cnt: u64, items: &[Item<'_>]| -> u64 {
        let mut len = 0;
        for port in [heap_port, chunk_port] {
            let mut heap = cfg.heap(cnt, items).unwrap();
            len = heap.heap_length();
            while let Some(n) = heap.write_next(&mut scratch) {
                tx.send_to(&scratch[..n], ("127.0.0.1", port)).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
        len
    };
    let mut want_heaps = Vec::new();
    let mut lengths = vec![0u64];
    for cnt in 1..=HEAPS {
        let data = data_of(cnt);
        let mut items = Vec::new();
        let mut text = Vec::new();
        if cnt == 1 {
            for e in &encoded {
                items.push(Item::descriptor(e));
                text.push(format!("{}:{}", ids::DESCRIPTOR, hex(e)));
            }
        }
        items.push(Item::immediate(TIME_ID, cnt * 1000));
        text.push(format!("{TIME_ID}:imm:{}", cnt * 1000));
        items.push(Item::bytes(DATA_ID, &data));
        text.push(format!("{DATA_ID}:{}", hex(&data)));
        let ctrl_text = if cnt == HEAPS {
            items.push(Item::immediate(ids::STREAM_CTRL, ctrl::DESCRIPTOR_UPDATE));
            text.push(format!(
                "{}:imm:{}",
                ids::STREAM_CTRL,
                ctrl::DESCRIPTOR_UPDATE
            ));
            ctrl::DESCRIPTOR_UPDATE.to_string()
        } else {
            "-".into()
        };
        let len = send_heap(cnt, &items);
        lengths.push(len);
        // A heap lists the descriptors it carried (spead2's Heap.get_descriptors()).
        let descs_text: Vec<String> = if cnt == 1 {
            descs.iter().map(descriptor_text).collect()
        } else {
            Vec::new()
        };
        want_heaps.push(format!(
            "HEAP cnt={cnt} complete=1 expected={len} received={len} abits=48 size={len} \
             ranges=0-{len} ctrl={ctrl_text} items={} descs={}",
            text.join(" "),
            descs_text.join(";")
        ));
    }

    // The datagrams, to the batch capture.
    let t0 = unix_ns();
    let sender = tx.local_addr().unwrap().port();
    let payloads: Vec<Vec<u8>> = (0..DATAGRAMS)
        .map(|i| (0..100 + i).map(|k| (i * 7 + k) as u8).collect())
        .collect();
    for p in &payloads {
        tx.send_to(p, ("127.0.0.1", batch_port)).unwrap();
        tx.send_to(p, ("127.0.0.1", single_port)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    send_heap(HEAPS + 1, &[Item::stop()]);

    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let t1 = unix_ns();
    let _ = std::fs::remove_dir_all(&plugins);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed:\n{rest}\n{stderr}");
    let lines: Vec<&str> = rest.lines().collect();
    assert!(
        rest.contains("END ended=chunk,heap datagrams=20 single=20"),
        "both SPEAD captures ended, every datagram read:\n{rest}\n{stderr}"
    );

    // Heaps: every field, in order.
    let heaps: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("HEAP "))
        .collect();
    assert_eq!(heaps, want_heaps, "\n{rest}");

    // Chunks of 4 heaps, placed by HEAP_CNT: chunk 0 holds 1..=3, chunk 1 holds 4..=7.
    // The `spead` handler places no control or descriptor heap (docs/spead.md): heap 1
    // (descriptors) and heap 6 (STREAM_CTRL) leave their slots empty, like slot 0 (never
    // sent) and slot 7 (the stop heap's).
    let mut chunks: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("CHUNK "))
        .collect();
    chunks.sort();
    let l = &lengths;
    let want_chunks = [
        format!(
            "CHUNK id=0 slots=4 slot-size={HEAP_SIZE} slots-present=2 packets=2 bytes={} \
             present=0011 bytes-present=0,0,{},{} pps=0 packet-present=0",
            l[2] + l[3],
            l[2],
            l[3]
        ),
        format!(
            "CHUNK id=1 slots=4 slot-size={HEAP_SIZE} slots-present=2 packets=2 bytes={} \
             present=1100 bytes-present={},{},0,0 pps=0 packet-present=0",
            l[4] + l[5],
            l[4],
            l[5]
        ),
    ];
    assert_eq!(chunks, want_chunks, "\n{rest}");

    // Datagrams: offsets and lengths cut exactly the bytes sent, from our socket, at a
    // receive time between the first send and now (the kernel's: the script sets
    // timestamps=true).
    let pkts: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("PKT "))
        .collect();
    assert_eq!(pkts.len(), DATAGRAMS, "\n{rest}");
    for (line, p) in pkts.iter().zip(&payloads) {
        let ts: u64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ts="))
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(
            (t0..=t1).contains(&ts),
            "receive time {ts} outside [{t0}, {t1}]: {line}"
        );
        let without_ts: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !w.starts_with("ts="))
            .collect();
        assert_eq!(
            without_ts.join(" "),
            format!(
                "PKT len={} addr=127.0.0.1 port={sender} dst=127.0.0.1:{batch_port} data={}",
                p.len(),
                hex(p)
            )
        );
    }

    // One datagram per buffer: the bytes sent, each naming our socket as its sender.
    let singles: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("DGRAM "))
        .collect();
    let want: Vec<String> = payloads
        .iter()
        .map(|p| {
            format!(
                "DGRAM len={} from=127.0.0.1:{sender} data={}",
                p.len(),
                hex(p)
            )
        })
        .collect();
    assert_eq!(singles, want, "\n{rest}");
}
