//! `appsrc ! speadpay ! fhudpsink` → spead2 4.5.1's receiver (`tests/spead2/recv.py`:
//! `spead2.recv.Stream` + `add_udp_reader` + `ItemGroup.update`): every heap arrives,
//! every item value and descriptor decodes as sent, and the stop heap ends spead2's
//! stream.

mod interop_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gst::prelude::*;
use interop_common::{init, raise_rmem_max, run_to_eos, Script};

/// `%xx` decoding of recv.py's quoted fields.
fn unquote(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("%xx"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("utf-8")
}

/// What recv.py reported.
#[derive(Debug, Default)]
struct Received {
    /// Heap cnts, in arrival order.
    heaps: Vec<u64>,
    /// (cnt, id) → integer value.
    ints: BTreeMap<(u64, u64), u64>,
    /// (cnt, id) → bytes.
    arrays: BTreeMap<(u64, u64), Vec<u8>>,
    /// id → (name, description, shape, dtype, format).
    descriptors: BTreeMap<u64, [String; 5]>,
    /// The last line: "end …" or "timeout …".
    last: String,
}

fn hex_id(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex id")
}

/// Starts recv.py; returns it and the port it bound.
fn spead2_receiver(out_dir: &Path, timeout_s: u32) -> (Script, u16) {
    let mut rx = Script::spawn(
        "recv.py",
        &[
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--timeout",
            &timeout_s.to_string(),
        ],
    );
    let ready = rx.expect("ready", Duration::from_secs(60));
    let port = ready["port"].parse().expect("port");
    (rx, port)
}

/// Reads recv.py's report up to its last line.
fn collect(rx: &mut Script, timeout: Duration) -> Received {
    let mut r = Received::default();
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(line) = rx.line(left) else {
            panic!("recv.py stopped early\n{}", rx.transcript());
        };
        let kv = interop_common::kv(&line);
        match line.split_whitespace().next() {
            Some("heap") => r.heaps.push(kv["cnt"].parse().unwrap()),
            Some("item") => {
                let key = (kv["cnt"].parse().unwrap(), hex_id(&kv["id"]));
                if let Some(v) = kv.get("value") {
                    r.ints.insert(key, v.parse().unwrap());
                } else {
                    let path = unquote(&kv["file"]);
                    r.arrays
                        .insert(key, std::fs::read(&path).expect("recv.py's file"));
                }
            }
            Some("desc") => {
                let f = |k: &str| unquote(&kv[k]);
                r.descriptors.insert(
                    hex_id(&kv["id"]),
                    [
                        f("name"),
                        f("description"),
                        f("shape"),
                        f("dtype"),
                        f("format"),
                    ],
                );
            }
            Some("end" | "timeout") => {
                r.last = line;
                return r;
            }
            _ => {}
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("firehose-interop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed * 77) >> 11) as u8)
        .collect()
}

/// Builds `appsrc ! speadpay <props> ! fhudpsink` to `port`.
fn sender(port: u16, pay_props: &str) -> (gst::Pipeline, gst::Element) {
    init();
    let desc = format!(
        "appsrc name=src format=bytes is-live=false block=true max-bytes=8388608 \
         caps=application/octet-stream \
         ! speadpay name=pay {pay_props} \
         ! fhudpsink host=127.0.0.1 port={port} rate=2000000000"
    );
    let pipeline = gst::parse::launch(&desc)
        .expect("pipeline parses")
        .downcast::<gst::Pipeline>()
        .unwrap();
    let src = pipeline.by_name("src").unwrap();
    (pipeline, src)
}

fn push(src: &gst::Element, data: Vec<u8>) {
    let ret = src.emit_by_name::<gst::FlowReturn>("push-buffer", &[&gst::Buffer::from_slice(data)]);
    assert_eq!(ret, gst::FlowReturn::Ok);
}

fn stats(pay: &gst::Element) -> gst::Structure {
    pay.property::<gst::Structure>("stats")
}

#[test]
fn plain_buffers_with_dtype_and_immediates_reach_spead2() {
    raise_rmem_max();
    let out = temp_dir("plain");
    let (mut rx, port) = spead2_receiver(&out, 60);
    let (pipeline, src) = sender(
        port,
        "flavour=64-48 packet-size=8972 item-name=samples \
         item-description=\"two pols\" item-dtype=<i2 \
         immediates=sync_time:0x1027=1700000000,0x1600=42 descriptors-every=3 \
         timestamp-id=0x1601 timestamp-step=2048",
    );
    pipeline.set_state(gst::State::Playing).unwrap();
    // 512 KiB heaps: 59 packets each; the shape comes from the first buffer.
    let data: Vec<Vec<u8>> = (0..6).map(|k| pattern(512 << 10, k)).collect();
    for d in &data {
        push(&src, d.clone());
    }
    let _ = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    let eos = run_to_eos(&pipeline, Duration::from_secs(60));
    let pay = pipeline.by_name("pay").unwrap();
    let st = stats(&pay);
    pipeline.set_state(gst::State::Null).unwrap();
    eos.unwrap();
    assert_eq!(st.get::<u64>("heaps").unwrap(), 6, "{st}");
    let r = collect(&mut rx, Duration::from_secs(60));
    assert!(
        r.last.starts_with("end heaps="),
        "stop heap ended spead2's stream: {r:?}"
    );
    assert_eq!(r.heaps, vec![1, 2, 3, 4, 5, 6], "{}", rx.transcript());
    for (k, d) in data.iter().enumerate() {
        let cnt = k as u64 + 1;
        assert_eq!(
            r.ints.get(&(cnt, 0x1027)),
            Some(&1_700_000_000),
            "heap {cnt}"
        );
        assert_eq!(r.ints.get(&(cnt, 0x1600)), Some(&42), "heap {cnt}");
        assert_eq!(
            r.ints.get(&(cnt, 0x1601)),
            Some(&(k as u64 * 2048)),
            "heap {cnt}"
        );
        assert!(
            r.arrays.get(&(cnt, 0x1000)) == Some(d),
            "heap {cnt}: samples differ"
        );
    }
    let samples = &r.descriptors[&0x1000];
    assert_eq!(samples[0], "samples");
    assert_eq!(samples[1], "two pols");
    assert_eq!(samples[2], format!("({},)", (512 << 10) / 2));
    assert_eq!(samples[3], "<i2");
    assert_eq!(r.descriptors[&0x1027][0], "sync_time");
    assert_eq!(r.descriptors[&0x1027][4], "[('u', 48)]");
    assert_eq!(r.descriptors[&0x1600][0], "item_0x1600");
    assert_eq!(r.descriptors[&0x1601][0], "timestamp");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn buffer_lists_of_small_heaps_reach_spead2_in_64_40() {
    raise_rmem_max();
    let out = temp_dir("lists");
    let (mut rx, port) = spead2_receiver(&out, 60);
    let (pipeline, src) = sender(
        port,
        "packet-size=1472 heap-cnt-start=5 heap-cnt-step=2 item-id=0x2000 item-name=bytes",
    );
    pipeline.set_state(gst::State::Playing).unwrap();
    // Sizes from 1 byte to a few packets, many heaps per list: they share slabs.
    let data: Vec<Vec<u8>> = (0..60)
        .map(|k| pattern(1 + (k * 997) % 5000, k as u64))
        .collect();
    for chunk in data.chunks(20) {
        let mut list = gst::BufferList::new();
        for d in chunk {
            list.get_mut()
                .unwrap()
                .add(gst::Buffer::from_slice(d.clone()));
        }
        let ret = src.emit_by_name::<gst::FlowReturn>("push-buffer-list", &[&list]);
        assert_eq!(ret, gst::FlowReturn::Ok);
    }
    let _ = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    let eos = run_to_eos(&pipeline, Duration::from_secs(60));
    let pay = pipeline.by_name("pay").unwrap();
    let st = stats(&pay);
    pipeline.set_state(gst::State::Null).unwrap();
    eos.unwrap();
    assert_eq!(st.get::<u64>("heaps").unwrap(), 60, "{st}");
    assert!(
        st.get::<u64>("batches").unwrap() < 60,
        "small heaps of a list share batches: {st}"
    );
    let r = collect(&mut rx, Duration::from_secs(60));
    assert!(
        r.last.starts_with("end heaps=60"),
        "{r:?}\n{}",
        rx.transcript()
    );
    let want: Vec<u64> = (0..60).map(|k| 5 + 2 * k).collect();
    assert_eq!(r.heaps, want);
    for (k, d) in data.iter().enumerate() {
        let got = r.arrays.get(&(5 + 2 * k as u64, 0x2000));
        assert!(got == Some(d), "heap {k}: {} bytes differ", d.len());
    }
    let d = &r.descriptors[&0x2000];
    assert_eq!((d[0].as_str(), d[2].as_str()), ("bytes", "(None,)"));
    assert_eq!(d[4], "[('u', 8)]");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_properties_fail_at_start_with_the_fix() {
    init();
    for (props, needle) in [
        ("flavour=32-16", "64-40"),
        ("item-dtype=x9", "numpy type"),
        ("immediates=nonsense", "ID=VALUE"),
    ] {
        let pipeline = gst::parse::launch(&format!("appsrc ! speadpay {props} ! fakesink"))
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap();
        assert!(pipeline.set_state(gst::State::Paused).is_err(), "{props}");
        let bus = pipeline.bus().unwrap();
        let msg = bus
            .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
            .expect("an error message");
        let gst::MessageView::Error(e) = msg.view() else {
            unreachable!()
        };
        let text = e.error().to_string();
        assert!(text.contains(needle), "{props}: {text}");
        pipeline.set_state(gst::State::Null).unwrap();
    }
}

#[test]
fn descriptors_separate_go_in_heaps_of_their_own() {
    raise_rmem_max();
    let out = temp_dir("separate");
    let (mut rx, port) = spead2_receiver(&out, 60);
    let (pipeline, src) = sender(
        port,
        "packet-size=8972 descriptors-separate=true descriptors-every=2 \
         timestamp-id=0x1600 timestamp-step=100",
    );
    pipeline.set_state(gst::State::Playing).unwrap();
    let data: Vec<Vec<u8>> = (0..4).map(|k| pattern(20_000, k)).collect();
    for d in &data {
        push(&src, d.clone());
    }
    let _ = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    let eos = run_to_eos(&pipeline, Duration::from_secs(60));
    pipeline.set_state(gst::State::Null).unwrap();
    eos.unwrap();
    let r = collect(&mut rx, Duration::from_secs(60));
    assert!(r.last.starts_with("end heaps="), "{r:?}");
    // Heap cnts: descriptors (1), data (2), data (3), descriptors (4), data (5), data (6).
    assert_eq!(r.heaps, vec![1, 2, 3, 4, 5, 6], "{}", rx.transcript());
    let data_cnts = [2u64, 3, 5, 6];
    for (k, (cnt, d)) in data_cnts.iter().zip(&data).enumerate() {
        assert!(r.arrays.get(&(*cnt, 0x1000)) == Some(d), "heap {cnt}");
        assert_eq!(r.ints.get(&(*cnt, 0x1600)), Some(&(k as u64 * 100)));
    }
    for cnt in [1u64, 4] {
        assert!(
            !r.arrays.keys().chain(r.ints.keys()).any(|(c, _)| *c == cnt),
            "heap {cnt} carries descriptors only: {r:?}"
        );
    }
    assert_eq!(r.descriptors[&0x1600][0], "timestamp");
    assert_eq!(r.descriptors[&0x1000][0], "data");
    let _ = std::fs::remove_dir_all(&out);
}
