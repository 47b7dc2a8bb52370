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
                 slots-per-chunk=1024 slot-size=1008 {} ! appsink name=sink sync=false",
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

#[test]
fn speaddepay_attaches_the_heap_meta_unless_switched_off() {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1500).unwrap();
    let data = [7u8; 64];
    let packets = || -> Vec<gst::Buffer> {
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
    };
    for on in [None, Some(false)] {
        let bufs = run(
            &format!(
                "appsrc name=src format=bytes ! speaddepay hugepages=off {} \
                 ! appsink name=sink sync=false",
                prop(on)
            ),
            packets(),
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
