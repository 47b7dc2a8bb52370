//! format=raw indexes messages (SPEAD heaps) by the id and completeness of their message
//! meta, and chunks by chunk id with one entry per slot saying whether it arrived.

mod common;

use common::{payload, record, TempDir};
use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::meta::message::{self, Message};
use firehose_record::index::{self, Kind, NO_PTS};

fn heap(cnt: u64, complete: bool, bytes: &[u8]) -> gst::Buffer {
    common::init();
    let mut b = gst::Buffer::from_mut_slice(bytes.to_vec());
    b.get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_nseconds(cnt * 10));
    // What speaddepay attaches beside its heap meta, and all the recorder reads.
    message::add(
        b.get_mut().unwrap(),
        &Message {
            id: cnt,
            complete,
            bytes_expected: bytes.len() as u64,
            bytes_received: bytes.len() as u64,
        },
    );
    b
}

fn chunk(id: u64, slots: usize, slot_size: usize, present: u64) -> gst::Buffer {
    common::init();
    let mut b = gst::Buffer::from_mut_slice(payload(id, slots * slot_size));
    ChunkMeta::add(
        b.get_mut().unwrap(),
        ChunkInfo {
            chunk_id: id,
            slots,
            slot_size,
            present: vec![present],
            slots_present: present.count_ones() as usize,
            packets_per_slot: 0,
            packet_present: Vec::new(),
            packets: 0,
            bytes: 0,
        },
    );
    b
}

fn entries(path: &std::path::Path) -> (Vec<u8>, Vec<index::Entry>) {
    let data = std::fs::read(path).unwrap();
    let mut idx = path.as_os_str().to_owned();
    idx.push(".idx");
    let e = index::read(std::path::Path::new(&idx), data.len() as u64).unwrap();
    (data, e)
}

#[test]
fn heaps_are_indexed_by_heap_counter_and_completeness() {
    let dir = TempDir::new("raw-heaps");
    let path = dir.join("heaps.raw");
    let bodies: Vec<Vec<u8>> = (0..5)
        .map(|i| payload(i, 1000 + i as usize * 100_000))
        .collect();
    let buffers = (0..5)
        .map(|i| heap(100 + i as u64, i != 3, &bodies[i]))
        .collect();
    record(
        &[
            ("location", path.to_str().unwrap()),
            ("format", "raw"),
            ("when-full", "block"),
        ],
        buffers,
    );
    let (data, e) = entries(&path);
    assert_eq!(e.len(), 5);
    for (i, e) in e.iter().enumerate() {
        assert_eq!(e.kind, Some(Kind::Heap));
        assert_eq!(e.id, 100 + i as u64);
        assert_eq!(e.complete, i != 3);
        assert_eq!(e.pts_ns, (100 + i as u64) * 10);
        assert_eq!(
            &data[e.range().start as usize..e.range().end as usize],
            &bodies[i][..]
        );
    }
}

#[test]
fn chunks_are_indexed_with_their_slots_presence() {
    let dir = TempDir::new("raw-chunks");
    let path = dir.join("chunks.raw");
    record(
        &[
            ("location", path.to_str().unwrap()),
            ("format", "raw"),
            ("when-full", "block"),
        ],
        vec![chunk(7, 4, 4096, 0b1111), chunk(8, 4, 4096, 0b1011)],
    );
    let (data, e) = entries(&path);
    assert_eq!(data.len(), 2 * 4 * 4096);
    assert_eq!(e.len(), 10, "a chunk entry and 4 slot entries per chunk");
    assert_eq!(
        (e[0].kind, e[0].id, e[0].complete),
        (Some(Kind::Chunk), 7, true)
    );
    assert_eq!(
        (e[5].kind, e[5].id, e[5].complete),
        (Some(Kind::Chunk), 8, false)
    );
    assert_eq!(e[5].offset, 4 * 4096);
    let present: Vec<bool> = e[6..].iter().map(|s| s.complete).collect();
    assert_eq!(present, vec![true, true, false, true]);
    assert_eq!(e[8].kind, Some(Kind::Slot));
    assert_eq!(
        (e[8].id, e[8].offset, e[8].len),
        (2, 4 * 4096 + 2 * 4096, 4096)
    );
    assert_eq!(e[1].pts_ns, NO_PTS);
    assert_eq!(
        &data[e[9].range().start as usize..e[9].range().end as usize],
        &payload(8, 4 * 4096)[3 * 4096..]
    );
}
