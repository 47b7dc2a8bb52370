//! `appsrc ! speadpay ! fhudpsink` → spead2 4.5.1's receiver (`tests/spead2/recv.py`:
//! `spead2.recv.Stream` + `add_udp_reader` + `ItemGroup.update`): every heap arrives,
//! every item value and descriptor decodes as sent, and the stop heap ends spead2's
//! stream.

mod common;
mod interop_common;

use std::time::Duration;

use common::{error_text, launch, run_to_eos};
use gst::prelude::*;
use interop_common::{collect, init, raise_rmem_max, spead2_receiver, temp_dir, Received, Script};

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed * 77) >> 11) as u8)
        .collect()
}

/// Runs `appsrc ! speadpay <pay_props> ! fhudpsink` into recv.py (its arrays under
/// a temporary directory for test `name`): `feed` pushes into the appsrc, then
/// end-of-stream. Returns recv.py's report, speadpay's stats, and recv.py (for its
/// transcript).
fn send_to_spead2(
    name: &str,
    pay_props: &str,
    feed: impl FnOnce(&gst::Element),
) -> (Received, gst::Structure, Script) {
    raise_rmem_max();
    let out = temp_dir(name);
    let (mut rx, port) = spead2_receiver(&out, 60);
    init();
    let pipeline = launch(&format!(
        "appsrc name=src format=bytes is-live=false block=true max-bytes=8388608 \
         caps=application/octet-stream \
         ! speadpay name=pay {pay_props} \
         ! fhudpsink host=127.0.0.1 port={port} rate=2000000000"
    ));
    let src = pipeline.by_name("src").unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    feed(&src);
    let _ = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    let eos = run_to_eos(&pipeline, Duration::from_secs(60));
    let st = stats(&pipeline.by_name("pay").unwrap());
    pipeline.set_state(gst::State::Null).unwrap();
    eos.unwrap();
    let r = collect(&mut rx, Duration::from_secs(60));
    // recv.py's arrays are read: its files can go.
    let _ = std::fs::remove_dir_all(&out);
    (r, st, rx)
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
    // 512 KiB heaps: 59 packets each; the shape comes from the first buffer.
    let data: Vec<Vec<u8>> = (0..6).map(|k| pattern(512 << 10, k)).collect();
    let (r, st, mut rx) = send_to_spead2(
        "plain",
        "flavour=64-48 packet-size=8972 item-name=samples \
         item-description=\"two pols\" item-dtype=<i2 \
         immediates=sync_time:0x1027=1700000000,0x1600=42 descriptors-every=3 \
         timestamp-id=0x1601 timestamp-step=2048",
        |src| data.iter().for_each(|d| push(src, d.clone())),
    );
    assert_eq!(st.get::<u64>("heaps").unwrap(), 6, "{st}");
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
}

#[test]
fn buffer_lists_of_small_heaps_reach_spead2_in_64_40() {
    // Sizes from 1 byte to a few packets, many heaps per list: they share slabs.
    let data: Vec<Vec<u8>> = (0..60)
        .map(|k| pattern(1 + (k * 997) % 5000, k as u64))
        .collect();
    let (r, st, mut rx) = send_to_spead2(
        "lists",
        "packet-size=1472 heap-cnt-start=5 heap-cnt-step=2 item-id=0x2000 item-name=bytes",
        |src| {
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
        },
    );
    assert_eq!(st.get::<u64>("heaps").unwrap(), 60, "{st}");
    assert!(
        st.get::<u64>("batches").unwrap() < 60,
        "small heaps of a list share batches: {st}"
    );
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
}

#[test]
fn bad_properties_fail_at_start_with_the_fix() {
    init();
    for (props, needle) in [
        ("flavour=32-16", "64-40"),
        ("item-dtype=x9", "numpy type"),
        ("immediates=nonsense", "ID=VALUE"),
    ] {
        let pipeline = launch(&format!("appsrc ! speadpay {props} ! fakesink"));
        assert!(pipeline.set_state(gst::State::Paused).is_err(), "{props}");
        let text = error_text(&pipeline.bus().unwrap());
        assert!(text.contains(needle), "{props}: {text}");
        pipeline.set_state(gst::State::Null).unwrap();
    }
}

#[test]
fn descriptors_separate_go_in_heaps_of_their_own() {
    let data: Vec<Vec<u8>> = (0..4).map(|k| pattern(20_000, k)).collect();
    let (r, _, mut rx) = send_to_spead2(
        "separate",
        "packet-size=8972 descriptors-separate=true descriptors-every=2 \
         timestamp-id=0x1600 timestamp-step=100",
        |src| data.iter().for_each(|d| push(src, d.clone())),
    );
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
}
