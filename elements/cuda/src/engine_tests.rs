//! Engine tests on the host backend, whose transfers complete late and out of order.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use firehose_core::provider::{Anonymous, Registered, Registrar};
use firehose_core::{HugepagePolicy, MemoryKind, PoolConfig, Slot, SlotPool};

use crate::engine::{Engine, EngineConfig, HostBytes, Layout, PayloadTable, Uploaded};
use crate::testing::HostBackend;

/// Counts registrations, so the bounce pool is "pinned" memory as the engine expects.
#[derive(Debug, Default)]
struct CountingRegistrar(AtomicUsize);

impl Registrar for CountingRegistrar {
    fn register(&self, _ptr: *mut u8, _len: usize) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn unregister(&self, _ptr: *mut u8, _len: usize) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An input: a pool slot that, when dropped, checks that no queued copy still reads it.
struct Input {
    slot: Slot,
    pinned: bool,
    backend: Arc<HostBackend>,
    early: Arc<AtomicUsize>,
}

// SAFETY: a slot's bytes do not move and only this value reaches them.
unsafe impl HostBytes for Input {
    fn bytes(&self) -> &[u8] {
        self.slot.as_ref()
    }
    fn pinned(&self) -> bool {
        self.pinned
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        let b = self.slot.as_ref();
        if self.backend.reads_pending(b.as_ptr(), b.len()) {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Rig {
    backend: Arc<HostBackend>,
    pool: SlotPool,
    early: Arc<AtomicUsize>,
    registrar: Arc<CountingRegistrar>,
    engine: Engine<Input, u32>,
}

impl Rig {
    fn new(max_in_flight: usize, max_delay_us: u64, seed: u64) -> Self {
        let backend = HostBackend::new(max_delay_us, seed);
        let registrar = Arc::new(CountingRegistrar::default());
        let engine = Engine::new(
            backend.clone(),
            &EngineConfig {
                max_in_flight,
                bounce_provider: Arc::new(Registered::new(
                    Arc::new(Anonymous(HugepagePolicy::Off)),
                    registrar.clone(),
                )),
                stats: Arc::default(),
            },
        )
        .unwrap();
        Self {
            backend,
            pool: SlotPool::new(&PoolConfig {
                slot_size: 8192,
                slots: 64,
                hugepages: HugepagePolicy::Off,
            })
            .unwrap(),
            early: Arc::default(),
            registrar,
            engine,
        }
    }

    /// Input `i`: `len` bytes of a pattern that names it.
    fn input(&self, i: u32, len: usize, pinned: bool) -> Input {
        let mut slot = self.pool.try_acquire().expect("a free input slot");
        for (k, b) in slot.as_mut_full()[..len].iter_mut().enumerate() {
            *b = (i as usize * 31 + k) as u8;
        }
        slot.set_len(len);
        Input {
            slot,
            pinned,
            backend: self.backend.clone(),
            early: self.early.clone(),
        }
    }

    fn expected(i: u32, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
    }

    fn device_bytes(&self, u: &Uploaded<u32>) -> Vec<u8> {
        self.backend.read(u.block.ptr(), u.size).unwrap()
    }

    /// Submits input `i` (`len` bytes) whole, tagged `i`.
    fn submit(&mut self, i: u32, len: usize, pinned: bool) {
        let input = self.input(i, len, pinned);
        self.engine.submit(input, Layout::Whole, i).unwrap();
    }

    /// Submits pinned inputs `inputs`, each `len` bytes, without taking outputs.
    fn submit_pinned(&mut self, inputs: Range<u32>, len: usize) {
        for i in inputs {
            self.submit(i, len, true);
        }
    }

    /// Every output ready now, in order.
    fn ready(&mut self) -> Vec<Uploaded<u32>> {
        std::iter::from_fn(|| self.engine.pop_ready().unwrap()).collect()
    }

    /// Submits `n` inputs (input `i` is `100 + i % 50` bytes), taking outputs as they
    /// become ready; then drains. Returns the outputs in the order they came out.
    fn run(&mut self, n: u32, pinned: bool) -> Vec<Uploaded<u32>> {
        let mut out = Vec::new();
        for i in 0..n {
            self.submit(i, 100 + i as usize % 50, pinned);
            out.extend(self.ready());
        }
        self.engine.drain().unwrap();
        out.extend(self.ready());
        out
    }

    /// Checks that no input went back to its pool while a copy still read it.
    fn assert_none_released_early(&self) {
        assert_eq!(
            self.early.load(Ordering::Relaxed),
            0,
            "no input released early"
        );
    }
}

/// The tags of `out`, in order.
fn tags(out: &[Uploaded<u32>]) -> Vec<u32> {
    out.iter().map(|u| u.tag).collect()
}

#[test]
fn outputs_keep_input_order_and_bytes_though_transfers_complete_out_of_order() {
    let mut rig = Rig::new(8, 300, 7);
    let out = rig.run(300, true);
    assert_eq!(tags(&out), (0..300).collect::<Vec<_>>());
    for u in &out {
        assert_eq!(
            rig.device_bytes(u),
            Rig::expected(u.tag, 100 + u.tag as usize % 50)
        );
    }
    assert!(
        rig.backend.out_of_order() > 0,
        "the backend completed transfers out of order (else this test proves little)"
    );
    let s = rig.engine.stats();
    assert_eq!(s.transfers.get(), 300);
    assert_eq!(s.bounce_copies.get(), 0, "pinned input is copied directly");
    rig.assert_none_released_early();
}

#[test]
fn the_ring_never_holds_more_than_max_in_flight_and_a_full_ring_stalls() {
    let mut rig = Rig::new(3, 2000, 11);
    // Submit without taking outputs: every submit after the third waits for a place.
    for i in 0..20 {
        rig.submit(i, 64, true);
        assert!(rig.engine.in_flight() <= 3);
        assert!(rig.backend.queued() <= 3);
    }
    assert!(
        rig.backend.high_water() <= 3,
        "{}",
        rig.backend.high_water()
    );
    let s = rig.engine.stats();
    assert_eq!(s.in_flight_high_water.get(), 3);
    assert!(s.stall_ns.get() > 0, "waiting for a place is counted");
    // Inputs held: those still in flight, no more (the waited ones were released).
    assert!(rig.pool.stats().in_use <= 3, "{:?}", rig.pool.stats());
    rig.engine.drain().unwrap();
    let out = rig.ready();
    assert_eq!(tags(&out), (0..20).collect::<Vec<_>>());
    assert_eq!(rig.pool.stats().in_use, 0);
    rig.assert_none_released_early();
}

#[test]
fn pinned_input_goes_back_to_its_pool_only_after_its_event() {
    let mut rig = Rig::new(4, 3000, 3);
    rig.submit_pinned(0..4, 4000);
    // All four are held while their copies may still read them.
    assert_eq!(rig.pool.stats().in_use, 4);
    let mut seen = 0;
    while seen < 4 {
        if let Some(u) = rig.engine.pop_ready().unwrap() {
            assert_eq!(u.tag, seen);
            seen += 1;
            // Popped means completed and released: at most the others still held.
            assert!(rig.pool.stats().in_use <= (4 - seen) as usize);
        } else {
            std::thread::yield_now();
        }
    }
    assert_eq!(rig.pool.stats().in_use, 0);
    rig.assert_none_released_early();
}

#[test]
fn unpinned_input_goes_through_a_counted_pinned_bounce_slot_and_is_released_at_once() {
    let mut rig = Rig::new(4, 2000, 5);
    rig.submit(9, 3000, false);
    assert_eq!(rig.pool.stats().in_use, 0, "the input was copied, not held");
    let bounce = rig.engine.bounce_pool().expect("a bounce pool").clone();
    assert_eq!(bounce.kind(), MemoryKind::Pinned);
    assert!(rig.registrar.0.load(Ordering::Relaxed) > 0);
    assert_eq!(
        bounce.stats().in_use,
        1,
        "the bounce slot is held in flight"
    );
    rig.engine.drain().unwrap();
    let u = rig.engine.pop_ready().unwrap().unwrap();
    assert_eq!(bounce.stats().in_use, 0);
    assert_eq!(rig.device_bytes(&u), Rig::expected(9, 3000));
    assert_eq!(rig.engine.stats().bounce_copies.get(), 1);
    let out = rig.run(50, false);
    assert_eq!(out.len(), 50);
    assert_eq!(rig.engine.stats().bounce_copies.get(), 51);
}

#[test]
fn payloads_are_gathered_back_to_back_with_their_offsets_table() {
    let mut rig = Rig::new(2, 500, 13);
    let input = rig.input(1, 1000, true);
    let all = Rig::expected(1, 1000);
    let ranges: Vec<Range<usize>> = vec![8..108, 200..203, 500..500, 990..1000, 995..2000];
    rig.engine
        .submit(input, Layout::Payloads(&ranges), 1)
        .unwrap();
    rig.engine.drain().unwrap();
    let u = rig.engine.pop_ready().unwrap().unwrap();
    let t = u.payloads.expect("a table");
    assert_eq!(
        t,
        PayloadTable {
            packets: 4,
            payload_bytes: 113,
            table_offset: 128,
        }
    );
    let dev = rig.device_bytes(&u);
    assert_eq!(u.size, 128 + 5 * 4);
    let mut want = Vec::new();
    for r in &ranges[..4] {
        want.extend_from_slice(&all[r.clone()]);
    }
    assert_eq!(&dev[..113], &want[..]);
    let table: Vec<u32> = dev[128..]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(table, vec![0, 100, 103, 103, 113]);
    let s = rig.engine.stats();
    assert_eq!(s.malformed.get(), 1, "the range past the buffer is counted");
    assert_eq!(s.bounce_copies.get(), 1);
}

#[test]
fn discard_waits_for_the_copies_and_drops_their_results() {
    let mut rig = Rig::new(6, 3000, 17);
    rig.submit_pinned(0..6, 500);
    rig.engine.discard().unwrap();
    assert!(rig.engine.pop_ready().unwrap().is_none());
    assert_eq!(rig.pool.stats().in_use, 0);
    assert_eq!(rig.backend.queued(), 0);
    rig.assert_none_released_early();
    // The stream goes on after a flush.
    let out = rig.run(10, true);
    assert_eq!(tags(&out), (0..10).collect::<Vec<_>>());
}

#[test]
fn dropping_the_engine_mid_transfer_leaks_nothing() {
    let rig = Rig::new(5, 5000, 19);
    let Rig {
        backend,
        pool,
        early,
        mut engine,
        ..
    } = rig;
    let make = |i: u32, pinned: bool| {
        let mut slot = pool.try_acquire().unwrap();
        slot.set_len(2048);
        let _ = i;
        Input {
            slot,
            pinned,
            backend: backend.clone(),
            early: early.clone(),
        }
    };
    for i in 0..5 {
        engine
            .submit(make(i, i % 2 == 0), Layout::Whole, i)
            .unwrap();
    }
    // One output taken out and still held downstream when the engine goes.
    engine.drain().unwrap();
    let held = engine.pop_ready().unwrap().unwrap();
    for i in 5..10 {
        engine.submit(make(i, true), Layout::Whole, i).unwrap();
    }
    assert!(backend.live_events() > 0);
    drop(engine);
    assert_eq!(
        early.load(Ordering::Relaxed),
        0,
        "nothing released under a copy"
    );
    assert_eq!(pool.stats().in_use, 0, "every input back in its pool");
    assert_eq!(backend.live_events(), 0, "every event destroyed");
    assert_eq!(backend.live_blocks(), 1, "only the block downstream holds");
    drop(held);
    assert_eq!(
        backend.live_blocks(),
        0,
        "and it is freed when downstream lets go"
    );
}

#[test]
fn device_blocks_are_reused_not_allocated_per_buffer() {
    let mut rig = Rig::new(4, 100, 23);
    for i in 0..100 {
        rig.submit(i, 1000, true);
        // Downstream takes each result and lets it go.
        drop(rig.ready());
    }
    assert!(
        rig.backend.allocs() <= 5,
        "{} allocations",
        rig.backend.allocs()
    );
    assert_eq!(
        rig.engine.stats().transfers.get() + rig.engine.in_flight() as u64,
        100
    );
}

/// A block source over the host backend: every other block is its own (an owner that
/// frees it when dropped), the rest come from the engine's pool (`None`).
struct Source {
    backend: Arc<HostBackend>,
    given: AtomicUsize,
    /// Blocks given this much less than asked for (0: as asked).
    short: usize,
}

struct Owned {
    backend: Arc<HostBackend>,
    ptr: crate::engine::DevicePtr,
    len: usize,
}

impl Drop for Owned {
    fn drop(&mut self) {
        use crate::engine::Backend;
        self.backend.free(self.ptr, self.len);
    }
}

impl crate::engine::BlockSource for Source {
    fn block(
        &self,
        len: usize,
    ) -> Result<Option<crate::engine::DeviceBlock>, crate::engine::BackendError> {
        use crate::engine::Backend;
        if self.given.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            return Ok(None);
        }
        let cap = len - self.short.min(len);
        let ptr = self.backend.alloc(cap.max(1))?;
        let owner = Owned {
            backend: self.backend.clone(),
            ptr,
            len: cap.max(1),
        };
        Ok(Some(crate::engine::DeviceBlock::external(
            ptr,
            cap,
            Box::new(owner),
        )))
    }
}

#[test]
fn a_block_source_gives_the_copy_targets_and_its_owners_outlive_the_engine() {
    let mut rig = Rig::new(4, 300, 5);
    let source = Arc::new(Source {
        backend: rig.backend.clone(),
        given: AtomicUsize::new(0),
        short: 0,
    });
    rig.engine.set_block_source(Some(source.clone()));
    let out = rig.run(40, true);
    assert_eq!(out.len(), 40);
    let mut external = 0;
    for u in &out {
        assert_eq!(
            rig.device_bytes(u),
            Rig::expected(u.tag, 100 + u.tag as usize % 50),
            "transfer {} landed in its block",
            u.tag
        );
        if u.block.is_external() {
            external += 1;
            assert_eq!(u.block.stream_handle(), 0x5eed, "the engine's stream");
        }
    }
    assert_eq!(external, 20, "every other block from the source");
    let owners: Vec<_> = out
        .into_iter()
        .filter_map(|u| u.block.take_owner())
        .collect();
    assert_eq!(owners.len(), 20);
    drop(rig.engine);
    assert_eq!(
        rig.backend.live_blocks(),
        20,
        "the engine's blocks are freed with it, the source's live with their owners"
    );
    drop(owners);
    assert_eq!(rig.backend.live_blocks(), 0);
    assert_eq!(rig.early.load(Ordering::Relaxed), 0);
}

#[test]
fn a_block_smaller_than_the_transfer_is_refused() {
    let mut rig = Rig::new(2, 10, 9);
    rig.engine.set_block_source(Some(Arc::new(Source {
        backend: rig.backend.clone(),
        given: AtomicUsize::new(0),
        short: 1,
    })));
    let input = rig.input(0, 100, true);
    let e = rig.engine.submit(input, Layout::Whole, 0).unwrap_err();
    assert!(e.to_string().contains("99 bytes was given for 100"), "{e}");
}
