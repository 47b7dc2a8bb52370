//! `readable-metas` on each kind of element that attaches the readable metas: a source
//! of batches (`fhtestsrc`, through the shared pool properties), a chunk element
//! (`fhdepay`, through the chunk settings) and `speaddepay` in heaps mode. On by
//! default; off, the buffers carry the Rust metas only.

use std::time::Duration;

use firehose_core::batch::PacketBatchMeta;
use firehose_core::meta::chunk::ChunkMeta;
use firehose_core::meta::readable;
use firehose_spead::heap::HeapMeta;
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use gst::prelude::*;

/// The pipeline of `launch`, with GStreamer initialised and the plugin registered.
fn pipeline(launch: &str) -> gst::Pipeline {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
    firehose_testkit::run::launch(launch)
}

/// Sets `pipeline` playing and feeds `input`, then the end of the stream, to its
/// `appsrc name=src` if it has one; returns what each of those returned.
fn play(pipeline: &gst::Pipeline, input: Vec<gst::Buffer>) -> Vec<gst::FlowReturn> {
    pipeline.set_state(gst::State::Playing).unwrap();
    let Some(src) = pipeline.by_name("src") else {
        return Vec::new();
    };
    let mut flows: Vec<gst::FlowReturn> = input
        .iter()
        .map(|b| src.emit_by_name("push-buffer", &[b]))
        .collect();
    flows.push(src.emit_by_name("end-of-stream", &[]));
    flows
}

/// Runs `launch` (ending in `appsink name=sink`; an `appsrc name=src` in it is fed
/// `input`) to EOS and returns its buffers.
fn run(launch: &str, input: Vec<gst::Buffer>) -> Vec<gst::Buffer> {
    let pipeline = pipeline(launch);
    let sink = pipeline.by_name("sink").unwrap();
    for flow in play(&pipeline, input) {
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

/// The buffers of one kind of element, run with each `readable-metas` setting.
struct Attaches {
    /// The pipeline; `{on}` stands for the setting (see [`run`]).
    launch: &'static str,
    /// What an `appsrc name=src` in it is fed.
    input: fn() -> Vec<gst::Buffer>,
    /// Buffers that come out.
    buffers: usize,
    /// Whether a buffer carries the element's Rust meta.
    rust_meta: fn(&gst::BufferRef) -> bool,
    /// The readable meta of a buffer.
    readable: fn(&gst::BufferRef) -> Option<&gst::StructureRef>,
    /// Checks the readable meta of buffer `i`.
    fields: fn(usize, &gst::StructureRef),
}

impl Attaches {
    /// With each of `settings`: every buffer carries the Rust meta, and the readable one
    /// unless the setting switched it off.
    fn check(&self, settings: &[Option<bool>]) {
        for &on in settings {
            let bufs = run(&self.launch.replace("{on}", &prop(on)), (self.input)());
            assert_eq!(bufs.len(), self.buffers, "{on:?}");
            for (i, b) in bufs.iter().enumerate() {
                assert!((self.rust_meta)(b), "{on:?}");
                let r = (self.readable)(b);
                assert_eq!(r.is_some(), on != Some(false), "{on:?}");
                if let Some(s) = r {
                    (self.fields)(i, s);
                }
            }
        }
    }
}

#[test]
fn batch_sources_attach_the_batch_meta_unless_switched_off() {
    Attaches {
        launch: "fhtestsrc rate=0 packet-size=256 num-packets=128 batch-size=64 {on} \
                 ! appsink name=sink sync=false caps=application/x-firehose-packets",
        input: Vec::new,
        buffers: 2,
        rust_meta: |b| b.meta::<PacketBatchMeta>().is_some(),
        readable: readable::batch,
        fields: |_, s| assert_eq!(s.get::<u64>("packets"), Ok(64)),
    }
    .check(&[None, Some(true), Some(false)]);
}

#[test]
fn chunk_elements_attach_the_chunk_meta_unless_switched_off() {
    Attaches {
        launch: "fhtestsrc rate=0 packet-size=1024 num-packets=2048 readable-metas=false \
                 ! fhdepay handler=seq handler-config=\"seq,offset=8,width=8,payload-offset=16\" \
                 heaps-per-chunk=1024 heap-size=1008 {on} ! appsink name=sink sync=false",
        input: Vec::new,
        buffers: 2,
        rust_meta: |b| b.meta::<ChunkMeta>().is_some(),
        readable: readable::chunk,
        fields: |_, s| assert_eq!(s.get::<u64>("slots-present"), Ok(1024)),
    }
    .check(&[None, Some(false)]);
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
    Attaches {
        launch: "appsrc name=src format=bytes ! speaddepay hugepages=off {on} \
                 ! appsink name=sink sync=false",
        input: spead_packets,
        buffers: 3,
        rust_meta: |b| b.meta::<HeapMeta>().is_some(),
        readable: firehose_spead::readable::get,
        fields: |i, s| {
            assert_eq!(s.get::<u64>("heap-cnt"), Ok(i as u64 + 1));
            assert_eq!(s.get::<u64>("items"), Ok(2));
        },
    }
    .check(&[None, Some(false)]);
}

/// Runs `launch` (a finite source) to EOS and returns, for the sink pad of the element
/// named `at`, how many buffers arrived with and without `readable(buffer)`.
fn readable_at(
    launch: &str,
    at: &str,
    input: Vec<gst::Buffer>,
    readable: fn(&gst::BufferRef) -> bool,
) -> (u64, u64) {
    let pipeline = pipeline(launch);
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
    // What the pushes return is not checked here: the end of the stream below is.
    play(&pipeline, input);
    let end = firehose_testkit::run::wait_end(&pipeline.bus().unwrap(), Duration::from_secs(10));
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(end, Ok(()), "{launch}");
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
