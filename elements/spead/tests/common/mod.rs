//! Shared by the integration tests (`mod common;`): pipelines from a launch line and
//! what their bus says, packet-batch buffers and element harnesses, loopback sockets,
//! descriptors, and the engines (heap reassembler, chunk engine with the `spead`
//! handler) as the elements set them up, with what came out of them intact.
//!
//! The hand-made SPEAD packets are in `common/spead.rs`, which the unit tests share too.
//! (`firehose_testkit::run` has pipeline helpers like the first ones here; this crate
//! does not depend on firehose-testkit.)

#![allow(dead_code)] // each test file uses a different subset

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_chunk::{ChunkAssembler, ChunkConfig, FinishedChunk};
use firehose_core::batch::{PacketBatchMeta, PacketInfo};
use firehose_core::provider::MemoryProvider;
use firehose_core::{HugepagePolicy, SlotPool};
use firehose_net::recv::SocketConfig;
use firehose_spead::chunk::{SpeadChunkConfig, SpeadChunkHandler};
use firehose_spead::descriptor::Descriptor;
use firehose_spead::hostile::{self, Legit, LEGIT_ITEM};
use firehose_spead::reassembly::{Config, Heap, Reassembler};
use firehose_spead::wire::ids;
use gst::prelude::*;
use gst_check::Harness;

/// A pipeline from a `gst-launch-1.0` description.
pub fn launch(description: &str) -> gst::Pipeline {
    gst::parse::launch(description)
        .unwrap_or_else(|e| panic!("{description}: {e}"))
        .downcast::<gst::Pipeline>()
        .unwrap()
}

/// Runs `pipeline` until EOS or error or `timeout`, handing every other message to
/// `seen`; returns the error text, if any.
pub fn run_to_eos_seeing(
    pipeline: &gst::Pipeline,
    timeout: Duration,
    mut seen: impl FnMut(&gst::Message),
) -> Result<(), String> {
    let bus = pipeline.bus().expect("pipeline bus");
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no EOS within {timeout:?}"));
        }
        let Some(msg) = bus.timed_pop(gst::ClockTime::from_nseconds(left.as_nanos() as u64)) else {
            continue;
        };
        match msg.view() {
            gst::MessageView::Eos(_) => return Ok(()),
            gst::MessageView::Error(e) => {
                return Err(format!("{} ({:?})", e.error(), e.debug()));
            }
            _ => seen(&msg),
        }
    }
}

/// Runs `pipeline` until EOS or error or `timeout`; returns the error text, if any.
pub fn run_to_eos(pipeline: &gst::Pipeline, timeout: Duration) -> Result<(), String> {
    run_to_eos_seeing(pipeline, timeout, |_| {})
}

/// The text of the error posted on `bus` (within 5 s): what a failed start says.
pub fn error_text(bus: &gst::Bus) -> String {
    let msg = bus
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .expect("an error message");
    let gst::MessageView::Error(e) = msg.view() else {
        unreachable!()
    };
    e.error().to_string()
}

/// The texts of the warnings waiting on `bus`.
pub fn warnings(bus: &gst::Bus) -> Vec<String> {
    std::iter::from_fn(|| bus.pop_filtered(&[gst::MessageType::Warning]))
        .map(|m| match m.view() {
            gst::MessageView::Warning(w) => w.error().to_string(),
            _ => unreachable!(),
        })
        .collect()
}

/// A kernel UDP socket on 127.0.0.1, any free port, with an SO_RCVBUF of `buffer_size`
/// bytes (SO_RCVBUFFORCE as root, as CI runs) and UDP GRO when `gro`.
pub fn loopback(buffer_size: usize, gro: bool) -> SocketConfig {
    SocketConfig {
        buffer_size,
        gro,
        ..SocketConfig::one("127.0.0.1:0".parse().unwrap())
    }
}

/// The descriptor of item 0x1000, `name`: `len` bytes (u8), as `description` says.
pub fn bytes_descriptor(name: &str, description: &str, len: u64) -> Descriptor {
    Descriptor {
        id: 0x1000,
        name: name.into(),
        description: description.into(),
        shape: vec![Some(len)],
        format: vec![(b'u', 8)],
        dtype: None,
    }
}

/// One batch buffer holding `packets`, with their offsets in a packet-batch meta, at
/// `pts_ms`.
pub fn batch(packets: &[Vec<u8>], pts_ms: u64) -> gst::Buffer {
    let mut data = Vec::new();
    let mut infos = Vec::new();
    for p in packets {
        // Odd gaps between packets: the element must use the meta, not assume packing.
        data.extend_from_slice(&[0xaa; 3]);
        infos.push(PacketInfo {
            offset: data.len() as u32,
            len: p.len() as u32,
            ..Default::default()
        });
        data.extend_from_slice(p);
    }
    let mut buf = gst::Buffer::from_mut_slice(data);
    let b = buf.get_mut().unwrap();
    b.set_pts(gst::ClockTime::from_mseconds(pts_ms));
    PacketBatchMeta::add(b, infos);
    buf
}

/// A playing harness around a `factory` element (normal pages, then `props`: set before
/// the harness starts it, as they apply at start), fed `caps`. Its sink pad proposes
/// memory from `provider` when given (as fhshmsink and fhcudaupload do).
pub fn harness(
    factory: &str,
    props: &[(&str, &str)],
    caps: gst::Caps,
    provider: Option<Arc<dyn MemoryProvider>>,
) -> Harness {
    let el = gst::ElementFactory::make(factory).build().unwrap();
    el.set_property_from_str("hugepages", "off");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    if let Some(p) = provider {
        firehose_core::alloc::propose_on(&h.sinkpad().unwrap(), p);
    }
    h.set_src_caps(caps);
    h.play();
    h
}

/// Every buffer waiting at the harness's sink.
pub fn pull_all(h: &mut Harness) -> Vec<gst::Buffer> {
    std::iter::from_fn(|| h.try_pull()).collect()
}

/// The harnessed element's stats.
pub fn stats(h: &Harness) -> gst::Structure {
    h.element().unwrap().property::<gst::Structure>("stats")
}

/// The heap reassembler at the elements' defaults, on normal pages.
pub fn reassembler() -> Reassembler {
    Reassembler::new(&Config {
        hugepages: HugepagePolicy::Off,
        ..Config::default()
    })
    .unwrap()
}

/// Whether `h` is `legit`'s heap, complete and byte-exact.
pub fn legit_intact(legit: &Legit, h: &Heap) -> bool {
    h.info.complete
        && h.info.item(LEGIT_ITEM).is_some()
        && legit.check(h.info.heap_cnt, &h.payload.map_readable().unwrap())
}

/// The chunk engine with the `spead` handler placing heaps by HEAP_CNT, heap 1 in slot 0
/// of chunk 0 (`stop`: a stop heap ends the stream), its pool two chunks per chunk of
/// the window, on normal pages.
pub fn heap_cnt_engine(cfg: ChunkConfig, stop: bool) -> ChunkAssembler {
    let pool = SlotPool::new(&cfg.pool_config(2 * cfg.max_chunks, HugepagePolicy::Off)).unwrap();
    let handler = SpeadChunkHandler::new(SpeadChunkConfig {
        place_item: ids::HEAP_CNT,
        step: 1,
        offset: 1,
        slots_per_chunk: cfg.slots_per_chunk as u64,
        stop,
    });
    ChunkAssembler::new(cfg, Box::new(handler), pool).unwrap()
}

/// The heap counters in present slots of `chunks` (from [`heap_cnt_engine`]) whose bytes
/// are the hostile suite's legitimate heap's ([`hostile::check_bytes`]).
pub fn intact_heaps(chunks: &[FinishedChunk]) -> BTreeSet<u64> {
    let mut intact = BTreeSet::new();
    for c in chunks {
        let spc = c.info.slots as u64;
        for i in (0..c.info.slots).filter(|&i| c.info.is_present(i)) {
            let cnt = c.info.chunk_id * spc + i as u64 + 1;
            if hostile::check_bytes(cnt, &c.slot.as_ref()[c.info.slot_range(i)]) {
                intact.insert(cnt);
            }
        }
    }
    intact
}
