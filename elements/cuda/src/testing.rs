//! A host-memory [`Backend`] for tests: "device" blocks are host allocations, and each
//! transfer (the copies queued between two events) is done by a worker thread after a
//! delay, picked at random among those queued, so transfers complete late and out of
//! order. It checks what a real device cannot tell us: how many transfers were queued
//! at once, and whether host bytes were released while a copy still had to read them.
//!
//! Not a GPU and not a model of one's speed: nothing measured with it is a GPU figure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use firehose_core::sync::lock;

use crate::engine::{Backend, BackendError, DevicePtr, Event};

/// A queued copy: host address (as an integer, so the state is `Send`), device
/// address, length.
#[derive(Clone, Copy, Debug)]
struct Copy {
    src: usize,
    dst: DevicePtr,
    len: usize,
}

#[derive(Default)]
struct State {
    /// Device blocks: address → bytes.
    blocks: HashMap<DevicePtr, Box<[u8]>>,
    next_ptr: DevicePtr,
    /// Copies queued since the last record.
    open: Vec<Copy>,
    /// Recorded transfers not yet done: (record sequence number, event, its copies).
    queued: Vec<(u64, Event, Vec<Copy>)>,
    /// Records so far.
    records: u64,
    /// Events created and not destroyed: event → completed.
    events: HashMap<u64, bool>,
    next_event: u64,
    /// Random state (xorshift), so a run is reproducible from its seed.
    rng: u64,
    stop: bool,
}

impl State {
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Most transfers queued at once.
    high_water: AtomicUsize,
    /// Copies executed.
    copies_done: AtomicU64,
    /// Device blocks allocated so far.
    allocs: AtomicU64,
    /// Transfers completed while one recorded before them was still queued.
    out_of_order: AtomicU64,
    /// Largest delay before a transfer is done, in microseconds.
    max_delay_us: u64,
}

/// The host backend (see the module doc).
pub struct HostBackend {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for HostBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostBackend")
    }
}

impl HostBackend {
    /// A backend whose transfers complete after up to `max_delay_us` µs each, in an
    /// order drawn from `seed`.
    pub fn new(max_delay_us: u64, seed: u64) -> Arc<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_ptr: 0x1000,
                rng: seed | 1,
                ..State::default()
            }),
            changed: Condvar::new(),
            high_water: AtomicUsize::new(0),
            copies_done: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            max_delay_us,
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("fake-device".into())
            .spawn(move || run(&s))
            .expect("spawn the fake device thread");
        Arc::new(Self {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The bytes of device block `ptr` (its first `len`), or `None` if no block starts
    /// there.
    pub fn read(&self, ptr: DevicePtr, len: usize) -> Option<Vec<u8>> {
        let st = lock(&self.shared.state);
        st.blocks
            .get(&ptr)
            .and_then(|b| b.get(..len))
            .map(<[u8]>::to_vec)
    }

    /// Whether a queued copy still has to read any byte of `ptr..ptr + len`.
    pub fn reads_pending(&self, ptr: *const u8, len: usize) -> bool {
        let (a, b) = (ptr as usize, ptr as usize + len);
        let st = lock(&self.shared.state);
        st.open
            .iter()
            .chain(st.queued.iter().flat_map(|(_, _, c)| c.iter()))
            .any(|c| c.src < b && a < c.src + c.len)
    }

    /// Device blocks allocated and not freed.
    pub fn live_blocks(&self) -> usize {
        lock(&self.shared.state).blocks.len()
    }

    /// Events created and not destroyed.
    pub fn live_events(&self) -> usize {
        lock(&self.shared.state).events.len()
    }

    /// Most transfers queued at once so far.
    pub fn high_water(&self) -> usize {
        self.shared.high_water.load(Ordering::Relaxed)
    }

    /// Transfers that completed before one recorded earlier.
    pub fn out_of_order(&self) -> u64 {
        self.shared.out_of_order.load(Ordering::Relaxed)
    }

    /// Device blocks allocated so far.
    pub fn allocs(&self) -> u64 {
        self.shared.allocs.load(Ordering::Relaxed)
    }

    /// Copies done so far.
    pub fn copies_done(&self) -> u64 {
        self.shared.copies_done.load(Ordering::Relaxed)
    }

    /// Transfers queued now.
    pub fn queued(&self) -> usize {
        lock(&self.shared.state).queued.len()
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.changed.notify_all();
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
    }
}

/// The worker: picks a random queued transfer, sleeps, does its copies, completes its
/// event.
fn run(shared: &Shared) {
    loop {
        let (seq, event, copies, delay) = {
            let mut st = lock(&shared.state);
            while st.queued.is_empty() && !st.stop {
                st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.queued.is_empty() {
                return;
            }
            let i = (st.random() % st.queued.len() as u64) as usize;
            let (seq, event, copies) = st.queued[i].clone();
            let delay = st.random() % (shared.max_delay_us + 1);
            (seq, event, copies, delay)
        };
        std::thread::sleep(Duration::from_micros(delay));
        let mut st = lock(&shared.state);
        for c in &copies {
            // SAFETY: the engine promised (Backend::copy_to_device) that the source
            // stays readable until this transfer's event completes, which is below.
            let src = unsafe { std::slice::from_raw_parts(c.src as *const u8, c.len) };
            let (base, off) = st
                .blocks
                .iter()
                .find(|(p, b)| **p <= c.dst && c.dst + c.len as u64 <= **p + b.len() as u64)
                .map(|(p, _)| (*p, (c.dst - *p) as usize))
                .expect("copy into an allocated block");
            st.blocks.get_mut(&base).expect("found")[off..off + c.len].copy_from_slice(src);
            shared.copies_done.fetch_add(1, Ordering::Relaxed);
        }
        // Still queued until now, so reads_pending saw its sources.
        st.queued.retain(|(s, _, _)| *s != seq);
        if st.queued.iter().any(|(s, _, _)| *s < seq) {
            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(done) = st.events.get_mut(&event.0) {
            *done = true;
        }
        drop(st);
        shared.changed.notify_all();
    }
}

impl Backend for HostBackend {
    fn alloc(&self, len: usize) -> Result<DevicePtr, BackendError> {
        self.shared.allocs.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.shared.state);
        let ptr = st.next_ptr;
        st.next_ptr += (len as u64).next_multiple_of(4096) + 4096;
        st.blocks.insert(ptr, vec![0u8; len].into_boxed_slice());
        Ok(ptr)
    }

    fn free(&self, ptr: DevicePtr, _len: usize) {
        let mut st = lock(&self.shared.state);
        assert!(
            st.blocks.remove(&ptr).is_some(),
            "free of a block not allocated"
        );
    }

    unsafe fn copy_to_device(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError> {
        if len == 0 {
            return Ok(());
        }
        lock(&self.shared.state).open.push(Copy {
            src: src as usize,
            dst,
            len,
        });
        Ok(())
    }

    fn create_event(&self) -> Result<Event, BackendError> {
        let mut st = lock(&self.shared.state);
        st.next_event += 1;
        let id = st.next_event;
        st.events.insert(id, true);
        Ok(Event(id))
    }

    fn destroy_event(&self, event: Event) {
        lock(&self.shared.state).events.remove(&event.0);
    }

    fn record(&self, event: Event) -> Result<(), BackendError> {
        let mut st = lock(&self.shared.state);
        match st.events.get_mut(&event.0) {
            Some(done) => *done = false,
            None => return Err(BackendError(format!("record of unknown event {}", event.0))),
        }
        let copies = std::mem::take(&mut st.open);
        st.records += 1;
        let seq = st.records;
        st.queued.push((seq, event, copies));
        let n = st.queued.len();
        self.shared.high_water.fetch_max(n, Ordering::Relaxed);
        drop(st);
        self.shared.changed.notify_all();
        Ok(())
    }

    fn is_complete(&self, event: Event) -> Result<bool, BackendError> {
        lock(&self.shared.state)
            .events
            .get(&event.0)
            .copied()
            .ok_or_else(|| BackendError(format!("query of unknown event {}", event.0)))
    }

    fn wait(&self, event: Event) -> Result<(), BackendError> {
        let mut st = lock(&self.shared.state);
        loop {
            match st.events.get(&event.0) {
                Some(true) => return Ok(()),
                Some(false) => {}
                None => return Err(BackendError(format!("wait on unknown event {}", event.0))),
            }
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stream_handle(&self) -> u64 {
        0x5eed
    }
}

/// A [`firehose_core::provider::Registrar`] for the host backend: registers nothing
/// (there is no driver), or refuses every registration with the message a real
/// `RLIMIT_MEMLOCK` refusal gives, to test the fallback.
#[derive(Debug, Default)]
pub struct HostRegistrar {
    /// Refuse every registration.
    pub refuse: bool,
    /// Registrations made and not undone.
    pub live: AtomicUsize,
}

impl firehose_core::provider::Registrar for HostRegistrar {
    fn register(&self, _ptr: *mut u8, _len: usize) -> Result<(), String> {
        if self.refuse {
            return Err("cuMemHostRegister failed: CUDA_ERROR_OUT_OF_MEMORY (test registrar: RLIMIT_MEMLOCK)".into());
        }
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn unregister(&self, _ptr: *mut u8, _len: usize) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}
