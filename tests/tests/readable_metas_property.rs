//! `readable-metas` on each kind of element that attaches the readable metas: a source
//! of batches (`fhtestsrc`, through the shared pool properties), a chunk element
//! (`fhdepay`, through the chunk settings) and `speaddepay` in heaps mode. On by
//! default; off, the buffers carry the Rust metas only.

use firehose_core::batch::PacketBatchMeta;
use firehose_core::meta::chunk::ChunkMeta;
use firehose_core::meta::readable;
use firehose_spead::heap::HeapMeta;
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use gst::prelude::*;

/// Runs `launch` (ending in `appsink name=sink`; an `appsrc name=src` in it is fed
/// `input`) to EOS and returns its buffers.
fn run(launch: &str, input: Vec<gst::Buffer>) -> Vec<gst::Buffer> {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    let pipeline = gst::parse::launch(launch)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let sink = pipeline.by_name("sink").unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    if let Some(src) = pipeline.by_name("src") {
        for b in input {
            let flow = src.emit_by_name::<gst::FlowReturn>("push-buffer", &[&b]);
            assert_eq!(flow, gst::FlowReturn::Ok);
        }
        let flow = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
        assert_eq!(flow, gst::FlowReturn::Ok);
    }
    let mut out = Vec::new();
    let timeout = 5 * gst::ClockTime::SECOND;
    while let Some(sample) =
        sink.emit_by_name::<Option<gst::Sample>>("try-pull-sample", &[&timeout])
    {
        out.push(sample.buffer_owned().unwrap());
    }
    pipeline.set_state(gst::State::Null).unwrap();
    out
}

/// `readable-metas=…` as a launch fragment (`None`: left at its default).
fn prop(on: Option<bool>) -> String {
    on.map_or(String::new(), |v| format!("readable-metas={v}"))
}

#[test]
fn batch_sources_attach_the_batch_meta_unless_switched_off() {
    for on in [None, Some(true), Some(false)] {
        let bufs = run(
            &format!(
                "fhtestsrc rate=0 packet-size=256 num-packets=128 batch-size=64 {} \
                 ! appsink name=sink sync=false caps=application/x-firehose-packets",
                prop(on)
            ),
            vec![],
        );
        assert_eq!(bufs.len(), 2, "{on:?}");
        for b in &bufs {
            assert!(b.meta::<PacketBatchMeta>().is_some());
            let r = readable::batch(b);
            assert_eq!(r.is_some(), on != Some(false), "{on:?}");
            if let Some(s) = r {
                assert_eq!(s.get::<u64>("packets"), Ok(64));
            }
        }
    }
}

#[test]
fn chunk_elements_attach_the_chunk_meta_unless_switched_off() {
    for on in [None, Some(false)] {
        let bufs = run(
            &format!(
                "fhtestsrc rate=0 packet-size=1024 num-packets=2048 readable-metas=false \
                 ! fhdepay handler=seq handler-config=\"seq,offset=8,width=8,payload-offset=16\" \
                 heaps-per-chunk=1024 heap-size=1008 {} ! appsink name=sink sync=false",
                prop(on)
            ),
            vec![],
        );
        assert_eq!(bufs.len(), 2, "{on:?}");
        for b in &bufs {
            assert!(b.meta::<ChunkMeta>().is_some());
            let r = readable::chunk(b);
            assert_eq!(r.is_some(), on.is_none(), "{on:?}");
            if let Some(s) = r {
                assert_eq!(s.get::<u64>("slots-present"), Ok(1024));
            }
        }
    }
}

/// Three SPEAD heaps (HEAP_CNT 1 to 3: an immediate and 64 bytes), one buffer per packet.
fn spead_packets() -> Vec<gst::Buffer> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1500).unwrap();
    let data = [7u8; 64];
    let mut out = Vec::new();
    for cnt in 1..=3 {
        let items = [Item::immediate(0x1600, cnt), Item::bytes(0x1000, &data)];
        let mut heap = cfg.heap(cnt, &items).unwrap();
        let mut scratch = vec![0u8; 1500];
        while let Some(n) = heap.write_next(&mut scratch) {
            out.push(gst::Buffer::from_slice(scratch[..n].to_vec()));
        }
    }
    out
}

#[test]
fn speaddepay_attaches_the_heap_meta_unless_switched_off() {
    for on in [None, Some(false)] {
        let bufs = run(
            &format!(
                "appsrc name=src format=bytes ! speaddepay hugepages=off {} \
                 ! appsink name=sink sync=false",
                prop(on)
            ),
            spead_packets(),
        );
        assert_eq!(bufs.len(), 3, "{on:?}");
        for (cnt, b) in (1u64..).zip(&bufs) {
            assert!(b.meta::<HeapMeta>().is_some());
            let r = firehose_spead::readable::get(b);
            assert_eq!(r.is_some(), on.is_none(), "{on:?}");
            if let Some(s) = r {
                assert_eq!(s.get::<u64>("heap-cnt"), Ok(cnt));
                assert_eq!(s.get::<u64>("items"), Ok(2));
            }
        }
    }
}

/// Runs `launch` (a finite source) to EOS and returns, for the sink pad of the element
/// named `at`, how many buffers arrived with and without `readable(buffer)`.
fn readable_at(
    launch: &str,
    at: &str,
    input: Vec<gst::Buffer>,
    readable: fn(&gst::BufferRef) -> bool,
) -> (u64, u64) {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    let pipeline = gst::parse::launch(launch)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let counts = std::sync::Arc::new(std::sync::Mutex::new((0u64, 0u64)));
    let c2 = counts.clone();
    pipeline
        .by_name(at)
        .unwrap()
        .static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(gst::PadProbeData::Buffer(b)) = &info.data {
                let mut c = c2.lock().unwrap();
                if readable(b) {
                    c.0 += 1;
                } else {
                    c.1 += 1;
                }
            }
            gst::PadProbeReturn::Ok
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    if let Some(src) = pipeline.by_name("src") {
        for b in input {
            let _ = src.emit_by_name::<gst::FlowReturn>("push-buffer", &[&b]);
        }
        let _ = src.emit_by_name::<gst::FlowReturn>("end-of-stream", &[]);
    }
    let end = pipeline.bus().unwrap().timed_pop_filtered(
        gst::ClockTime::from_seconds(10),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(
        end.map(|m| m.type_()),
        Some(gst::MessageType::Eos),
        "{launch}"
    );
    let c = *counts.lock().unwrap();
    c
}

/// With the default `readable-metas=true`, the readable metas are left out only when
/// every consumer downstream is a Firehose element that reads only the Rust ones (they
/// say so in the allocation query); an appsink or a stock element anywhere behind the
/// pad, including on one branch of a `tee`, keeps them on.
#[test]
fn readable_metas_are_left_out_only_when_every_consumer_reads_only_rust_metas() {
    let batch = |b: &gst::BufferRef| readable::batch(b).is_some();
    let src = "fhtestsrc rate=0 packet-size=256 num-packets=512 batch-size=64 output=batch";
    for (tail, want_readable) in [
        ("identity ! fhcheck name=at", false),
        ("queue ! fhrecordsink name=at location=/dev/null overwrite=true", false),
        (
            "tee name=t ! queue ! fhcheck name=at t. ! queue ! fhcheck",
            false,
        ),
        (
            "tee name=t ! queue ! fhcheck name=at t. ! queue ! appsink sync=false drop=true max-buffers=1 wait-on-eos=false",
            true,
        ),
        (
            "tee name=t ! queue ! fhcheck name=at t. ! queue ! fakesink",
            true,
        ),
        ("identity name=at ! fakesink", true),
    ] {
        let launch = format!("{src} ! {tail}");
        let (on, off) = readable_at(&launch, "at", vec![], batch);
        assert_eq!(on + off, 8, "{launch}");
        if want_readable {
            assert_eq!(off, 0, "{launch}: every batch keeps its readable meta");
        } else {
            assert_eq!(on, 0, "{launch}: no batch carries the readable meta");
        }
    }
    // Switched off, a stock consumer gets none either.
    let (on, _) = readable_at(
        &format!("{src} readable-metas=false ! identity name=at ! fakesink"),
        "at",
        vec![],
        batch,
    );
    assert_eq!(on, 0);
}

/// The same for heaps: speaddepay into a Firehose consumer leaves the heap meta out,
/// into an appsink keeps it; and speaddepay itself declares, so its input batches come
/// without the batch meta.
#[test]
fn heaps_and_batches_into_speaddepay_follow_their_consumers() {
    let heap = |b: &gst::BufferRef| firehose_spead::readable::get(b).is_some();
    for (tail, want_readable) in [
        ("fhcheck name=at", false),
        (
            "queue ! appsink name=at sync=false drop=true max-buffers=1 wait-on-eos=false",
            true,
        ),
    ] {
        let launch = format!(
            "appsrc name=src format=bytes caps=application/x-firehose-packets \
             ! speaddepay hugepages=off ! {tail}"
        );
        let (on, off) = readable_at(&launch, "at", spead_packets(), heap);
        assert_eq!(on + off, 3, "{launch}");
        assert_eq!(on, if want_readable { 3 } else { 0 }, "{launch}");
    }
    let (on, off) = readable_at(
        "fhtestsrc rate=0 packet-size=256 num-packets=256 batch-size=64 \
         ! identity name=at ! speaddepay hugepages=off ! fakesink",
        "at",
        vec![],
        |b| readable::batch(b).is_some(),
    );
    assert_eq!(
        (on, off),
        (0, 4),
        "speaddepay reads only the Rust batch meta"
    );
}
