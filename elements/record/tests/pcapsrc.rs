//! fhpcapsrc: every container variant, filters, damage, pacing and loops.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{batch, classic_pcap, frame, payload, record, replay_file, stat, Replayed, TempDir};
use firehose_core::stats::names;
use firehose_record::pcapsrc::Pace;
use gst::prelude::*;

const T0: u64 = 1_700_000_000_000_000_000;

/// `n` frames from 1.1.1.1:1 to 2.2.2.2:2, frame `i` captured at `T0 + i * step_ns` and
/// carrying `payload(i, len)`.
fn frames(n: u64, step_ns: u64, len: usize) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let f = frame("1.1.1.1:1", "2.2.2.2:2", &payload(i, len));
            (T0 + i * step_ns, f)
        })
        .collect()
}

/// Replays `path` with `props` to a clean end; returns what came, the source and how
/// long it took (from before the pipeline exists: start-up on a loaded machine counts
/// too).
fn timed_replay(path: &Path, props: &str) -> (Vec<Replayed>, gst::Element, Duration) {
    let t = Instant::now();
    let (got, el, r) = replay_file(path, props);
    r.unwrap();
    (got, el, t.elapsed())
}

/// [`timed_replay`] of 50 datagrams of 1000 bytes (50 kB, captured 1 ns apart) in a
/// fresh directory `name`; returns the directory and the file besides.
fn timed_replay_of_50_kb(
    name: &str,
    props: &str,
) -> (TempDir, PathBuf, Vec<Replayed>, gst::Element, Duration) {
    let dir = TempDir::new(name);
    let path = dir.write("50k.pcap", &classic_pcap(&frames(50, 1, 1000), true, false));
    let (got, el, took) = timed_replay(&path, props);
    (dir, path, got, el, took)
}

/// Checks that a replay took a time in `range`.
fn assert_took(took: Duration, range: std::ops::Range<Duration>) {
    assert!(range.contains(&took), "took {took:?}, want {range:?}");
}

/// The payloads of what a replay delivered, in order.
fn payloads(got: &[Replayed]) -> Vec<Vec<u8>> {
    got.iter().map(|g| g.payload.clone()).collect()
}

#[test]
fn replays_what_fhrecordsink_wrote_in_both_formats() {
    let dir = TempDir::new("src-own");
    let src: SocketAddr = "10.9.8.7:4000".parse().unwrap();
    let src6: SocketAddr = "[2001:db8::1]:4001".parse().unwrap();
    let a: Vec<Vec<u8>> = (0..200)
        .map(|i| payload(i, 1 + (i as usize * 53) % 9000))
        .collect();
    let b: Vec<Vec<u8>> = (0..20).map(|i| payload(500 + i, 64)).collect();
    for format in ["pcap", "pcapng"] {
        let path = dir.join(&format!("own.{format}"));
        record(
            &[
                ("location", path.to_str().unwrap()),
                ("format", format),
                ("destination", "10.0.0.1:7148"),
                ("when-full", "block"),
            ],
            vec![batch(&a, src, T0), batch(&b, src6, T0 + 1_000_000)],
        );
        let (got, el, r) = replay_file(&path, "pace=max");
        r.unwrap();
        assert_eq!(got.len(), 220, "{format}");
        for (i, g) in got.iter().enumerate() {
            let (want, from, ts) = if i < 200 {
                (&a[i], src, T0 + i as u64)
            } else {
                (&b[i - 200], src6, T0 + 1_000_000 + (i - 200) as u64)
            };
            assert_eq!(&g.payload, want, "{format} datagram {i}");
            assert_eq!(g.src, from);
            assert_eq!(g.ts_ns, ts, "{format}: nanosecond times survive");
        }
        assert_eq!(stat(&el, names::PACKETS), 220);
        assert_eq!(stat(&el, names::MALFORMED), 0);
    }
}

#[test]
fn reads_microsecond_and_nanosecond_pcap_in_both_byte_orders() {
    let dir = TempDir::new("src-variants");
    let frames: Vec<(u64, Vec<u8>)> = (0..10u64)
        .map(|i| {
            (
                T0 + i * 1_000_123_000,
                frame(
                    "192.168.1.2:999",
                    "192.168.1.3:7148",
                    &payload(i, 100 + i as usize),
                ),
            )
        })
        .collect();
    for nanos in [false, true] {
        for big in [false, true] {
            let path = dir.write(
                &format!("v-{nanos}-{big}.pcap"),
                &classic_pcap(&frames, nanos, big),
            );
            let (got, _, r) = replay_file(&path, "pace=max");
            r.unwrap();
            assert_eq!(got.len(), 10, "nanos={nanos} big={big}");
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g.payload, payload(i as u64, 100 + i));
                assert_eq!(g.ts_ns, frames[i].0, "nanos={nanos} big={big}");
                assert_eq!(g.src, "192.168.1.2:999".parse().unwrap());
            }
        }
    }
}

#[test]
fn filters_by_destination_port_and_address_and_counts_the_rest() {
    let dir = TempDir::new("src-filter");
    let mut frames = Vec::new();
    for i in 0..30u64 {
        let dst = match i % 3 {
            0 => "10.0.0.1:7148",
            1 => "10.0.0.1:7149",
            _ => "10.0.0.2:7148",
        };
        frames.push((T0 + i, frame("10.0.0.9:1", dst, &payload(i, 50))));
    }
    let mut arp = frame("10.0.0.9:1", "10.0.0.1:7148", b"x");
    arp[12] = 0x08;
    arp[13] = 0x06;
    frames.push((T0 + 99, arp));
    let path = dir.write("f.pcap", &classic_pcap(&frames, true, false));
    let (got, el, r) = replay_file(&path, "pace=max port=7148 address=10.0.0.1");
    r.unwrap();
    let want: Vec<Vec<u8>> = (0..30u64)
        .filter(|i| i % 3 == 0)
        .map(|i| payload(i, 50))
        .collect();
    assert_eq!(payloads(&got), want);
    assert_eq!(
        stat(&el, names::FILTERED),
        21,
        "20 other datagrams and the ARP frame"
    );
    let (got, _, _) = replay_file(&path, "pace=max port=7149");
    assert_eq!(got.len(), 10);
}

#[test]
fn damaged_frames_are_counted_and_skipped_and_a_cut_last_record_is_an_error() {
    let dir = TempDir::new("src-damage");
    let mut frames = frames(5, 1, 80);
    frames[1].1[14] = 0x43; // IHL 3: shorter than an IPv4 header
    frames[2].1[38] = 0xff; // UDP length beyond the IP datagram
    let whole = classic_pcap(&frames[..4], false, false);
    let full = classic_pcap(&frames[4..], false, false);
    let want = vec![payload(0, 80), payload(3, 80)];
    // Whole records, two of them damaged frames: counted and skipped, a clean end.
    let path = dir.write("frames.pcap", &whole);
    let (got, el, r) = replay_file(&path, "pace=max");
    r.unwrap();
    assert_eq!(payloads(&got), want);
    assert_eq!(stat(&el, names::MALFORMED), 2);
    // Then a last record cut short: what came before is sent, then an error that
    // names the file and where the damage is (not a silent end).
    let mut bytes = whole.clone();
    bytes.extend_from_slice(&full[24..24 + 16 + 30]);
    let path = dir.write("cut.pcap", &bytes);
    let (got, el, r) = replay_file(&path, "pace=max");
    let e = r.unwrap_err();
    assert!(
        e.contains("cut.pcap") && e.contains(&format!("damaged at byte {}", whole.len())),
        "{e}"
    );
    assert!(
        e.contains("a record cut short by the end of the file (46 of"),
        "{e}"
    );
    assert_eq!(payloads(&got), want);
    assert_eq!(stat(&el, names::TRUNCATED), 1);
}

#[test]
fn a_record_longer_than_the_snaplen_or_a_cut_file_header_is_an_error() {
    let dir = TempDir::new("src-snaplen");
    // Frame 0 of 80 bytes, frame 1 of 200.
    let frames = [frames(1, 1, 80), frames(2, 1, 200).split_off(1)].concat();
    let mut f = classic_pcap(&frames, false, false);
    // snaplen 150: the second record (242 bytes) is longer than any record may be.
    f[16..20].copy_from_slice(&150u32.to_le_bytes());
    let second = 24 + 16 + frames[0].1.len();
    let path = dir.write("snap.pcap", &f);
    let (got, _, r) = replay_file(&path, "pace=max");
    let e = r.unwrap_err();
    assert!(e.contains("snap.pcap"), "{e}");
    assert!(
        e.contains(&format!("damaged at byte {second}"))
            && e.contains("longer than the file's snaplen (150)"),
        "{e}"
    );
    assert_eq!(got.len(), 1);
    // An absurd length (no framing left to trust).
    f[16..20].copy_from_slice(&0u32.to_le_bytes());
    f[second + 8..second + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &f).unwrap();
    let (_, _, r) = replay_file(&path, "pace=max");
    let e = r.unwrap_err();
    assert!(
        e.contains(&format!("damaged at byte {second}: a record claims")),
        "{e}"
    );
    // A file header cut short.
    let path = dir.write("head.pcap", &f[..20]);
    let (_, _, r) = replay_file(&path, "pace=max");
    let e = r.unwrap_err();
    assert!(
        e.contains("head.pcap") && e.contains("cut short in its file header (20 of 24 bytes)"),
        "{e}"
    );
}

#[test]
fn original_rate_reproduces_the_capture_timing() {
    let dir = TempDir::new("src-timing");
    let path = dir.write(
        "t.pcap",
        &classic_pcap(&frames(5, 150_000_000, 10), true, false),
    );
    let (got, _, took) = timed_replay(&path, "");
    assert_eq!(got.len(), 5);
    assert_took(took, Duration::from_millis(600)..Duration::from_secs(4));
    for (i, g) in got.iter().enumerate() {
        // Each datagram is its own batch here, PTS on the capture's schedule.
        let pts = g.pts.unwrap().nseconds();
        let want = i as u64 * 150_000_000;
        assert!(
            pts.abs_diff(want) < 1_000_000,
            "datagram {i}: pts {pts}, want {want}"
        );
    }
    // As fast as possible: no waiting. Frames 5 s apart (a 20 s schedule) tell waiting
    // from a slow start on a loaded machine.
    let far = dir.write(
        "far.pcap",
        &classic_pcap(&frames(5, 5_000_000_000, 10), true, false),
    );
    let (got, _, took) = timed_replay(&far, "pace=max");
    assert_eq!(got.len(), 5);
    // Not the 20 s of the capture.
    assert_took(took, Duration::ZERO..Duration::from_secs(10));
}

#[test]
fn bit_rate_paces_and_loop_repeats() {
    // 3 loops x 50 kB at 4 Mbit/s (0.5 MB/s): about 0.3 s.
    let (_dir, _, got, el, took) =
        timed_replay_of_50_kb("src-rate", "rate=4M loop=3 batch-size=10");
    assert_eq!(got.len(), 150);
    assert_eq!(
        got[100].payload,
        payload(0, 1000),
        "the third pass starts over"
    );
    assert_eq!(stat(&el, names::BATCHES), 15);
    assert_took(took, Duration::from_millis(250)..Duration::from_secs(3));
}

#[test]
fn missing_and_foreign_files_fail_at_start_with_the_reason() {
    let dir = TempDir::new("src-errors");
    let (_, _, r) = replay_file(&dir.join("nope.pcap"), "");
    let e = r.unwrap_err();
    assert!(e.contains("Cannot open") && e.contains("nope.pcap"), "{e}");
    let text = dir.write("text.pcap", b"hello, this is not a capture");
    let (_, _, r) = replay_file(&text, "");
    let e = r.unwrap_err();
    assert!(e.contains("not a pcap or pcapng file"), "{e}");
}

#[test]
fn a_capture_of_an_unsupported_link_type_is_an_error_that_names_it() {
    let dir = TempDir::new("src-link");
    let mut f = classic_pcap(&frames(1, 1, 1), false, false);
    // Link type 105 (IEEE 802.11): the last field of the file header.
    f[20..24].copy_from_slice(&105u32.to_le_bytes());
    let path = dir.write("wifi.pcap", &f);
    let (got, _, r) = replay_file(&path, "");
    let e = r.unwrap_err();
    assert!(e.contains("link type 105 is not supported"), "{e}");
    assert!(got.is_empty());
}

#[test]
fn a_bad_rate_fails_at_start_and_an_empty_match_never_spins() {
    let dir = TempDir::new("src-rate-errors");
    let path = dir.write("x.pcap", &classic_pcap(&frames(1, 1, 3), true, false));
    let (_, _, r) = replay_file(&path, "rate=fast");
    let e = r.unwrap_err();
    assert!(e.contains("rate 'fast'"), "{e}");
    // loop=0 (forever) on a file where nothing matches: EOS, not a busy loop.
    let (got, el, r) = replay_file(&path, "port=9 loop=0 pace=max");
    r.unwrap();
    assert!(got.is_empty());
    assert_eq!(stat(&el, names::FILTERED), 1);
}

#[test]
fn pace_and_bitrate_replace_rate_which_still_works() {
    // 2 loops x 50 kB at 4 Mbit/s in batches of 10 kB: the last batch waits until
    // 90 kB are due, 0.18 s.
    let (_dir, path, got, _, took) = timed_replay_of_50_kb(
        "src-pace",
        "pace=bitrate bitrate=4000000 loop=2 batch-size=10",
    );
    assert_eq!(got.len(), 100);
    assert_took(took, Duration::from_millis(150)..Duration::from_secs(3));
    // The deprecated alias sets both and reads back from them.
    common::init();
    let el = gst::ElementFactory::make("fhpcapsrc").build().unwrap();
    el.set_property_from_str("rate", "2G");
    assert_eq!(el.property::<u64>("bitrate"), 2_000_000_000);
    assert_eq!(el.property::<Pace>("pace"), Pace::Bitrate);
    assert_eq!(el.property::<String>("rate"), "2000000000");
    el.set_property_from_str("pace", "max");
    assert_eq!(el.property::<String>("rate"), "max");
    el.set_property_from_str("rate", "original");
    assert_eq!(el.property::<String>("rate"), "original");
    assert_eq!(
        el.property::<u64>("bitrate"),
        2_000_000_000,
        "kept for pace=bitrate"
    );
    // pace=bitrate with no bitrate says what to set.
    let (_, _, r) = replay_file(&path, "pace=bitrate");
    let e = r.unwrap_err();
    assert!(e.contains("set bitrate"), "{e}");
}

/// A SPEAD packet of heap `cnt` carrying `payload` (HEAP_CNT, PAYLOAD_OFFSET,
/// PAYLOAD_LENGTH, HEAP_LENGTH).
fn spead_packet(cnt: u64, payload: &[u8]) -> Vec<u8> {
    use firehose_spead::wire::{encode, ids, packet_len, Flavour, ItemPointer};
    let f = Flavour::SPEAD_64_40;
    let items = [
        ItemPointer::immediate(f, ids::HEAP_CNT, cnt),
        ItemPointer::immediate(f, ids::HEAP_LENGTH, payload.len() as u64),
        ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
        ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, payload.len() as u64),
    ];
    let mut out = vec![0u8; packet_len(items.len(), payload.len())];
    encode(f, &items, payload, &mut out).unwrap();
    out
}

#[test]
fn coalesced_records_are_cut_into_their_packets_and_damage_is_said() {
    let dir = TempDir::new("src-coalesced");
    let p: Vec<Vec<u8>> = (0..8u64)
        .map(|i| spead_packet(i + 1, &payload(i, 100 + 37 * i as usize)))
        .collect();
    let garbage = b"these bytes are not a SPEAD packet".to_vec();
    let records: Vec<Vec<u8>> = vec![
        p[..3].concat(),                                        // a GSO send of three packets
        p[3].clone(),                                           // one packet
        [p[4].clone(), p[5].clone(), garbage.clone()].concat(), // damaged inside
        b"plain datagram".to_vec(),                             // not SPEAD: left alone
        p[6..8].concat(),                                       // two more
    ];
    let frames: Vec<(u64, Vec<u8>)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (T0 + i as u64, frame("10.0.0.1:5", "10.0.0.2:7148", r)))
        .collect();
    let path = dir.write("gso.pcap", &classic_pcap(&frames, true, false));

    let (got, el, r) = replay_file(&path, "pace=max batch-size=4");
    r.unwrap();
    let want: Vec<Vec<u8>> = [
        &p[..6],
        &[garbage.clone(), b"plain datagram".to_vec()][..],
        &p[6..],
    ]
    .concat();
    assert_eq!(payloads(&got), want);
    assert!(got.iter().all(|g| g.src == "10.0.0.1:5".parse().unwrap()));
    assert_eq!(got[1].ts_ns, T0, "pieces keep their record's time");
    assert_eq!(stat(&el, "records-split"), 2);
    assert_eq!(stat(&el, "records-unsplit"), 1);
    assert_eq!(stat(&el, names::PACKETS), 10);

    // split=none: one datagram per record, as before.
    let (got, el, r) = replay_file(&path, "pace=max split=none");
    r.unwrap();
    assert_eq!(got.len(), records.len());
    assert_eq!(stat(&el, "records-split"), 0);

    // The damaged record is said on the bus, with the reason and the offset.
    let pipeline = common::launch(&format!(
        "fhpcapsrc location={} pace=max ! fakesink sync=false",
        path.display()
    ));
    let (r, warnings) = common::play_collecting_warnings(&pipeline, Duration::from_secs(30));
    r.unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let at = p[4].len() + p[5].len();
    assert!(
        warnings[0].contains(&format!("offset {at}"))
            && warnings[0].contains("bad magic")
            && warnings[0].contains("records-unsplit"),
        "{}",
        warnings[0]
    );
}

#[test]
fn coalesced_heaps_replay_through_speaddepay() {
    use firehose_spead::send::{Item, PacketConfig};
    use firehose_spead::wire::Flavour;
    let dir = TempDir::new("src-coalesced-heaps");
    // 12 heaps of 20 kB in 1472-byte packets, each heap's packets in GSO-like records
    // of up to 8 (the last one shorter), as a GSO sender's sends look on loopback.
    let cfg = PacketConfig::new(Flavour::SPEAD_64_40, 1472).unwrap();
    let heaps: Vec<Vec<u8>> = (0..12u64).map(|i| payload(i, 20_000)).collect();
    let mut frames = Vec::new();
    let mut ts = T0;
    for (i, h) in heaps.iter().enumerate() {
        let items = [Item::bytes(0x1000, h)];
        let mut packets = cfg.heap(i as u64 + 1, &items).unwrap();
        let mut record = Vec::new();
        let mut n = 0;
        let mut buf = vec![0u8; 1472];
        while let Some(len) = packets.write_next(&mut buf) {
            record.extend_from_slice(&buf[..len]);
            n += 1;
            if n == 8 {
                frames.push((ts, frame("10.0.0.1:5", "10.0.0.2:7148", &record)));
                record.clear();
                n = 0;
                ts += 1000;
            }
        }
        if !record.is_empty() {
            frames.push((ts, frame("10.0.0.1:5", "10.0.0.2:7148", &record)));
            ts += 1000;
        }
    }
    let path = dir.write("heaps.pcap", &classic_pcap(&frames, true, false));

    let pipeline = common::launch(&format!(
        "fhpcapsrc name=src location={} pace=max ! speaddepay ! fakesink name=sink sync=false",
        path.display()
    ));
    let got = common::collect_heaps(&pipeline);
    common::play_to_end(&pipeline, Duration::from_secs(30)).unwrap();
    let src = pipeline.by_name("src").unwrap();
    assert!(
        stat(&src, "records-split") >= 24,
        "every heap came in coalesced records"
    );
    let got = got.lock().unwrap();
    assert_eq!(got.len(), heaps.len());
    for (i, (cnt, complete, data)) in got.iter().enumerate() {
        assert_eq!((*cnt, *complete), (i as u64 + 1, true), "heap {i}");
        assert!(*data == heaps[i], "heap {i}: payload differs");
    }
}

/// Downstream proposes shared segments (as `fhshmsink` does): the replay pool is cut
/// from them, so each batch is read from the file straight into that memory (no copy).
#[test]
fn batches_are_replayed_into_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    use firehose_core::{caps, gstmem, MemoryKind, PacketBatchMeta};
    use gst_check::Harness;
    let dir = TempDir::new("src-proposed");
    let frames: Vec<(u64, Vec<u8>)> = (0..40u64)
        .map(|i| {
            let p = payload(i, 200);
            (T0 + i, frame("192.168.1.2:999", "192.168.1.3:7148", &p))
        })
        .collect();
    let path = dir.write("proposed.pcap", &classic_pcap(&frames, true, false));
    common::init();
    let src = gst::ElementFactory::make("fhpcapsrc")
        .property("location", path.to_str().unwrap())
        .property("batch-size", 8u32)
        .property_from_str("pace", "max")
        .build()
        .unwrap();
    let mut h = Harness::with_element(&src, None, Some("src"));
    let provider = std::sync::Arc::new(SharedSegment::new("fhpcapsrc-test"));
    firehose_core::alloc::propose_on(&h.sinkpad().unwrap(), provider);
    h.set_sink_caps(caps::packets_caps());
    h.play();
    let mut seen = 0u64;
    while let Some(buf) = h.pull_until_eos().unwrap() {
        assert_eq!(gstmem::buffer_memory_kind(&buf), Some(MemoryKind::Shared));
        let meta = buf.meta::<PacketBatchMeta>().unwrap();
        let map = buf.map_readable().unwrap();
        for p in meta.packets() {
            assert_eq!(&map[p.range()], &payload(seen, 200)[..]);
            seen += 1;
        }
    }
    assert_eq!(seen, 40);
    let s = src.property::<gst::Structure>("stats");
    assert_eq!(s.get::<&str>("memory").unwrap(), "shared");
    assert!(!s.has_field("bytes-copied"), "no copy to count: {s}");
}
