//! fhcudaupload over the host backend (no GPU here): caps, metas, ordering, the pinned
//! proposal and its fallback, EOS and state changes under traffic. The element's
//! GStreamer side is what runs for real; the device is the test backend of
//! `firehose_cuda::testing`, whose transfers complete late and out of order.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use firehose_core::alloc::{proposed_provider, Proposal};
use firehose_core::meta::message::{self, Message};
use firehose_core::provider::{Anonymous, Registered};
use firehose_core::stats::field;
use firehose_core::{
    HugepagePolicy, MemoryKind, PacketBatchMeta, PacketInfo, PoolConfig, SlotPool,
};
use firehose_cuda::devmem;
use firehose_cuda::engine::Backend;
use firehose_cuda::testing::{HostBackend, HostRegistrar};
use firehose_cuda::upload::Opened;
use gst::prelude::*;
use gst_check::Harness;

/// The backend and registrar every element of a test gets, set by [`rig`].
static CURRENT: Mutex<Option<(Arc<HostBackend>, Arc<HostRegistrar>)>> = Mutex::new(None);
/// The element's backend is process-wide: tests take turns.
static TURN: Mutex<()> = Mutex::new(());

fn current(_device: i32) -> Result<Opened, String> {
    let c = CURRENT.lock().unwrap();
    let (b, r) = c.as_ref().expect("a test backend set");
    Ok((b.clone(), r.clone()))
}

struct Rig {
    _turn: MutexGuard<'static, ()>,
    backend: Arc<HostBackend>,
    registrar: Arc<HostRegistrar>,
}

fn rig(max_delay_us: u64, refuse_pinning: bool) -> Rig {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        gst::init().unwrap();
        firehose_cuda::register_elements(None).unwrap();
        firehose_testkit::testsrc::register(None).unwrap();
        message::register();
    });
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let backend = HostBackend::new(max_delay_us, 42);
    let registrar = Arc::new(HostRegistrar {
        refuse: refuse_pinning,
        ..Default::default()
    });
    *CURRENT.lock().unwrap() = Some((backend.clone(), registrar.clone()));
    firehose_cuda::set_backend_for_tests(Some(current));
    Rig {
        _turn: turn,
        backend,
        registrar,
    }
}

/// A harness around an `fhcudaupload` configured with `props` before it starts.
fn harness(props: &[(&str, &str)]) -> Harness {
    let el = gst::ElementFactory::make("fhcudaupload").build().unwrap();
    firehose_testkit::run::set_properties(&el, props);
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    h.set_src_caps(gst::Caps::new_empty_simple("application/x-spead-heap"));
    h
}

fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 7 + k) as u8).collect()
}

/// Pushes inputs `inputs` (each `len` bytes) as plain (unpinned) buffers.
fn push_plain(h: &mut Harness, inputs: std::ops::Range<usize>, len: usize) {
    for i in inputs {
        h.push(gst::Buffer::from_slice(pattern(i, len))).unwrap();
    }
}

/// `bytes` as the `u32`s that `from` reads from each 4 of them.
fn u32s(bytes: &[u8], from: fn([u8; 4]) -> u32) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| from(c.try_into().unwrap()))
        .collect()
}

fn device_bytes(backend: &HostBackend, buf: &gst::BufferRef) -> Vec<u8> {
    let view = devmem::buffer_device_memory(buf).expect("device memory");
    backend.read(view.ptr, view.size).expect("a device block")
}

#[test]
fn buffers_come_out_in_order_in_device_memory_with_their_metas() {
    let r = rig(400, false);
    let mut h = harness(&[("max-in-flight", "3")]);
    for i in 0..40usize {
        let mut b = gst::Buffer::from_slice(pattern(i, 1000 + i));
        let bm = b.get_mut().unwrap();
        bm.set_pts(gst::ClockTime::from_mseconds(i as u64));
        message::add(
            bm,
            &Message {
                id: i as u64,
                complete: i % 3 != 0,
                bytes_expected: 2000,
                bytes_received: 1000 + i as u64,
            },
        );
        assert_eq!(h.push(b), Ok(gst::FlowSuccess::Ok));
    }
    assert!(h.push_event(gst::event::Eos::new()));
    for i in 0..40usize {
        let out = h.pull().unwrap();
        assert_eq!(out.pts(), Some(gst::ClockTime::from_mseconds(i as u64)));
        assert_eq!(device_bytes(&r.backend, &out), pattern(i, 1000 + i));
        let m = message::read(&out).expect("the message meta travels");
        assert_eq!((m.id, m.complete), (i as u64, i % 3 != 0));
        let (view, table) = devmem::read_meta(&out).expect("the device meta");
        assert_eq!(Some(view), devmem::buffer_device_memory(&out));
        assert_eq!(view.stream, r.backend.stream_handle());
        assert!(table.is_none());
        assert!(out.map_readable().is_err(), "device memory is not mappable");
    }
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(
        caps.structure(0).unwrap().name(),
        "application/x-spead-heap"
    );
    assert!(caps.features(0).unwrap().contains(devmem::CAPS_FEATURE));
    let s = h.element().unwrap().property::<gst::Structure>("stats");
    assert_eq!(field(&s, "transfers"), 40);
    assert_eq!(
        field(&s, "bounce-copies"),
        40,
        "plain buffers are not pinned"
    );
    assert!(field(&s, "in-flight-high-water") <= 3);
    assert!(r.backend.high_water() <= 3);
}

/// A pinned pool, as a source that took fhcudaupload's proposal has.
fn pinned_pool(registrar: Arc<HostRegistrar>, slots: usize) -> SlotPool {
    SlotPool::with_provider(
        &PoolConfig {
            slot_size: 4096,
            slots,
            hugepages: HugepagePolicy::Off,
        },
        &Registered::new(Arc::new(Anonymous(HugepagePolicy::Off)), registrar),
    )
    .unwrap()
}

/// A rig whose copies take up to `max_delay_us`, a pinned pool of 8 slots for its
/// inputs, and a harness whose element has `max-in-flight` set.
fn pinned_rig(max_delay_us: u64, max_in_flight: &str) -> (Rig, SlotPool, Harness) {
    let r = rig(max_delay_us, false);
    let pool = pinned_pool(r.registrar.clone(), 8);
    let h = harness(&[("max-in-flight", max_in_flight)]);
    (r, pool, h)
}

/// Pushes inputs `inputs` (each `len` bytes) from the pinned `pool`.
fn push_pinned(h: &mut Harness, pool: &SlotPool, inputs: std::ops::Range<usize>, len: usize) {
    for i in inputs {
        h.push(pinned_buffer(pool, i, len)).unwrap();
    }
}

fn pinned_buffer(pool: &SlotPool, i: usize, len: usize) -> gst::Buffer {
    let mut slot = pool.try_acquire().unwrap();
    slot.as_mut_full()[..len].copy_from_slice(&pattern(i, len));
    slot.set_len(len);
    firehose_core::gstmem::slot_into_buffer(slot)
}

#[test]
fn pinned_input_is_copied_directly_and_held_until_its_copy_completes() {
    let (r, pool, mut h) = pinned_rig(3000, "8");
    push_pinned(&mut h, &pool, 0..6, 3000);
    // Held by the element while their copies may run (the backend takes up to 3 ms).
    assert!(pool.stats().in_use > 0);
    h.push_event(gst::event::Eos::new());
    assert_eq!(pool.stats().in_use, 0, "all back once drained");
    for i in 0..6 {
        assert_eq!(
            device_bytes(&r.backend, &h.pull().unwrap()),
            pattern(i, 3000)
        );
    }
    let s = h.element().unwrap().property::<gst::Structure>("stats");
    assert_eq!(field(&s, "bounce-copies"), 0);
    assert_eq!(field(&s, "bytes"), 6 * 3000);
}

#[test]
fn payload_layout_gathers_a_batch_and_rebases_its_meta() {
    let r = rig(200, false);
    let mut h = harness(&[("layout", "payloads")]);
    h.set_src_caps(firehose_core::caps::packets_caps());
    let bytes = pattern(1, 600);
    let mut b = gst::Buffer::from_slice(bytes.clone());
    let info = |offset, len| PacketInfo {
        offset,
        len,
        ..Default::default()
    };
    // Three datagrams with 8-byte headers in 200-byte slots, and one lying past the end.
    let infos = vec![info(8, 100), info(208, 50), info(408, 192), info(590, 100)];
    firehose_core::meta::readable::add_batch(b.get_mut().unwrap(), &infos, None);
    PacketBatchMeta::add(b.get_mut().unwrap(), infos);
    h.push(b).unwrap();
    h.push_event(gst::event::Eos::new());
    let out = h.pull().unwrap();
    let dev = device_bytes(&r.backend, &out);
    let mut want = bytes[8..108].to_vec();
    want.extend_from_slice(&bytes[208..258]);
    want.extend_from_slice(&bytes[408..600]);
    assert_eq!(&dev[..342], &want[..]);
    let (_, table) = devmem::read_meta(&out).unwrap();
    let t = table.expect("a table under layout=payloads");
    assert_eq!((t.packets, t.payload_bytes, t.table_offset), (3, 342, 352));
    let offsets = u32s(&dev[352..368], u32::from_le_bytes);
    assert_eq!(offsets, vec![0, 100, 150, 342]);
    let m = out.meta::<PacketBatchMeta>().unwrap();
    let got: Vec<(u32, u32)> = m.packets().iter().map(|p| (p.offset, p.len)).collect();
    assert_eq!(got, vec![(0, 100), (100, 50), (150, 192)]);
    // The readable batch meta follows the gathered offsets too (one of it, not two).
    let r = firehose_core::meta::readable::batch(&out).unwrap();
    let offsets = u32s(
        &r.get::<gst::glib::Bytes>("offsets").unwrap(),
        u32::from_ne_bytes,
    );
    assert_eq!(offsets, vec![0, 100, 150]);
    let n = out
        .iter_meta::<gst::Meta>()
        .filter(|m| m.api() == firehose_core::meta::readable::batch_api())
        .count();
    assert_eq!(n, 1);
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    assert_eq!(
        caps.structure(0).unwrap().get::<&str>("layout"),
        Ok("payloads")
    );
    let s = h.element().unwrap().property::<gst::Structure>("stats");
    assert_eq!(field(&s, "malformed"), 1);
}

fn allocation_proposal(h: &Harness) -> Proposal {
    let caps = gst::Caps::new_empty_simple("application/x-spead-heap");
    let mut q = gst::query::Allocation::new(Some(&caps), true);
    let sink = h.element().unwrap().static_pad("sink").unwrap();
    assert!(sink.query(&mut q), "the allocation query is answered");
    proposed_provider(&q)
}

#[test]
fn upstream_is_offered_pinned_memory() {
    let r = rig(0, false);
    let h = harness(&[]);
    let Proposal::Provider(p) = allocation_proposal(&h) else {
        panic!("a provider is proposed")
    };
    assert_eq!(p.kind(), MemoryKind::Pinned);
    let pool = SlotPool::with_provider(
        &PoolConfig {
            slot_size: 65536,
            slots: 4,
            hugepages: HugepagePolicy::Off,
        },
        &*p,
    )
    .unwrap();
    assert_eq!(pool.kind(), MemoryKind::Pinned);
    assert!(r.registrar.live.load(Ordering::Relaxed) >= 1);
    drop(pool);
}

#[test]
fn pinning_refused_is_an_error_unless_pinned_fallback() {
    let _r = rig(0, true);
    let config = PoolConfig {
        slot_size: 65536,
        slots: 4,
        hugepages: HugepagePolicy::Off,
    };
    let h = harness(&[]);
    let Proposal::Provider(p) = allocation_proposal(&h) else {
        panic!("a provider is proposed")
    };
    let e = SlotPool::with_provider(&config, &*p).unwrap_err();
    assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
    drop(h);

    let mut h = harness(&[("pinned-fallback", "true")]);
    let Proposal::Provider(p) = allocation_proposal(&h) else {
        panic!("a provider is proposed")
    };
    let pool = SlotPool::with_provider(&config, &*p).expect("unpinned memory instead");
    assert_ne!(pool.kind(), MemoryKind::Pinned);
    // The next buffer brings the warning; the fallback is counted.
    let bus = gst::Bus::new();
    h.element().unwrap().set_bus(Some(&bus));
    h.push(gst::Buffer::from_slice(vec![1u8; 10])).unwrap();
    let s = h.element().unwrap().property::<gst::Structure>("stats");
    assert_eq!(
        field(&s, "pinned-fallbacks"),
        2,
        "the pool and the bounce pool"
    );
    let warning = bus.pop_filtered(&[gst::MessageType::Warning]);
    let text = match warning.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Warning(w)) => w.error().to_string(),
        other => panic!("a warning, not {other:?}"),
    };
    assert!(text.contains("pinned-fallback=true"), "{text}");
}

#[test]
fn stopping_mid_transfer_waits_for_the_copies_and_leaks_nothing() {
    let (r, pool, mut h) = pinned_rig(20_000, "6");
    push_pinned(&mut h, &pool, 0..6, 2048);
    assert!(
        r.backend.queued() > 0,
        "copies still queued (they take up to 20 ms)"
    );
    let el = h.element().unwrap();
    el.set_state(gst::State::Null).unwrap();
    assert_eq!(r.backend.queued(), 0, "stopping waited for every copy");
    assert_eq!(pool.stats().in_use, 0, "every input back in its pool");
    assert_eq!(r.backend.live_events(), 0);
    // What came out before the stop is still downstream's; nothing else is held.
    let mut outs = Vec::new();
    while let Some(b) = h.try_pull() {
        outs.push(b);
    }
    assert_eq!(r.backend.live_blocks(), outs.len());
    drop(outs);
    assert_eq!(r.backend.live_blocks(), 0);
}

#[test]
fn flush_drops_what_is_in_flight_and_the_stream_goes_on() {
    let r = rig(5000, false);
    let mut h = harness(&[("max-in-flight", "8")]);
    push_plain(&mut h, 0..5, 100);
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert!(h.push_event(gst::event::FlushStop::new(true)));
    assert_eq!(r.backend.queued(), 0, "the flush waited for the copies");
    // What was pushed before the flush, if anything, came out before it.
    let before = std::iter::from_fn(|| h.try_pull()).count();
    assert!(before < 5, "some buffers were flushed");
    // A reset flush ends the segment: a new one comes first, as from upstream.
    h.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
        gst::ClockTime,
    >::new()));
    h.push(gst::Buffer::from_slice(pattern(9, 100))).unwrap();
    h.push_event(gst::event::Eos::new());
    let after: Vec<_> = std::iter::from_fn(|| h.try_pull()).collect();
    assert_eq!(after.len(), 1, "only the buffer after the flush");
    assert_eq!(device_bytes(&r.backend, &after[0]), pattern(9, 100));
}

#[test]
fn results_go_out_when_their_copies_complete_without_waiting_for_more_input() {
    let r = rig(2000, false);
    let mut h = harness(&[("max-in-flight", "8")]);
    push_plain(&mut h, 0..3, 500);
    // A live stream that pauses: no more buffers, no EOS. The copies complete and the
    // results go downstream anyway.
    let mut got = Vec::new();
    firehose_testkit::run::wait_until(
        Duration::from_secs(5),
        || "not every result pushed without more input".into(),
        || {
            got.extend(h.try_pull());
            got.len() >= 3
        },
    );
    assert_eq!(got.len(), 3, "every result pushed once");
    for (i, b) in got.iter().enumerate() {
        assert_eq!(device_bytes(&r.backend, b), pattern(i, 500));
    }
}

#[test]
fn caps_queries_move_the_memory_feature_across_the_element() {
    let _r = rig(100, false);
    let run = |downstream: &str| {
        let p = firehose_testkit::run::launch(&format!(
            "fhtestsrc num-packets=64 ! fhcudaupload name=up ! capsfilter caps=\"{downstream}\" \
             ! fakesink"
        ));
        let sink = p.by_name("up").unwrap().static_pad("sink").unwrap();
        let upstream_view = sink.query_caps(None);
        let end = firehose_testkit::run::play_to_end(&p, Duration::from_secs(5));
        (upstream_view, end)
    };
    let (view, end) = run("application/x-firehose-packets(memory:CUDAMemory)");
    end.unwrap();
    assert_eq!(
        view.to_string(),
        "application/x-firehose-packets",
        "upstream sees host memory"
    );
    // Downstream wants heaps, or packets in host memory: fhtestsrc's packets in device
    // memory cannot go there, and linking says so.
    for refused in [
        "application/x-spead-heap(memory:CUDAMemory)",
        "application/x-firehose-packets",
    ] {
        let e = gst::parse::launch(&format!(
            "fhtestsrc ! fhcudaupload ! capsfilter caps=\"{refused}\" ! fakesink"
        ))
        .expect_err("no link");
        assert!(e.to_string().contains("could not link"), "{e}");
    }
}

#[test]
fn restarts_under_traffic_leak_nothing() {
    let (r, pool, mut h) = pinned_rig(3000, "4");
    let el = h.element().unwrap();
    for round in 0..5 {
        h.set_src_caps(gst::Caps::new_empty_simple("application/x-spead-heap"));
        push_pinned(&mut h, &pool, round * 10..round * 10 + 6, 1500);
        // Stopped with copies in flight, then started again.
        el.set_state(gst::State::Ready).unwrap();
        assert_eq!(r.backend.queued(), 0, "round {round}: stopping waited");
        assert_eq!(pool.stats().in_use, 0, "round {round}: inputs back");
        assert_eq!(
            r.backend.live_events(),
            0,
            "round {round}: events destroyed"
        );
        while h.try_pull().is_some() {}
        assert_eq!(r.backend.live_blocks(), 0, "round {round}: blocks freed");
        h.play();
    }
}
