//! The receive engine end to end with a fake device: the fake keeps the posted receive
//! WRs in order, like a receive queue, and "receives" canned Ethernet frames by writing
//! them into the posted slots of the real `MemoryRegion`, then completes them. After
//! every operation the fake's posted set must equal the ring's `Nic` hand, which is how
//! "a slot held downstream is never posted" is checked.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;

use firehose_core::batch::for_each_packet;
use firehose_core::frame::accept::UdpFilter as Filter;
use firehose_core::meta::dest::{frame_headers, PacketDestMeta};
use firehose_core::ring::SlotOwner;
use firehose_core::sync::lock;
use firehose_core::{HugepagePolicy, MemoryRegion, PacketBatchMeta};
use firehose_ibverbs::engine::{
    Completion, CompletionStatus, DeviceError, EngineConfig, EngineError, PostError, PostSlot,
    RxCounters, RxDevice, RxEngine, Step,
};

const SLOT: u32 = 2048;
const PORT: u16 = 7148;
const GROUP: [u8; 4] = [239, 1, 2, 3];
/// Ethernet + IPv4 + UDP headers.
const HDR: usize = 14 + 20 + 8;

/// What arrives on the wire next.
enum Arrival {
    Frame(Vec<u8>),
    /// A completion with this error status (no data).
    Error(u32),
}

#[derive(Default)]
struct Wire {
    arrivals: VecDeque<Arrival>,
    /// Posted receive WRs, in post order (a receive queue completes in that order).
    posted: VecDeque<PostSlot>,
    /// Every chain posted, as slot lists.
    chains: Vec<Vec<u32>>,
    polls: usize,
    /// Slots completed by the latest poll (the engine may not have handled all yet).
    last_poll: Vec<u32>,
    /// Accept only this many WRs of the next chain, then fail with ENOMEM.
    fail_next_post_after: Option<usize>,
    dropped: bool,
}

struct FakeDevice {
    wire: Rc<RefCell<Wire>>,
    region: Arc<MemoryRegion>,
}

impl RxDevice for FakeDevice {
    fn post(&mut self, slots: &[PostSlot]) -> Result<(), PostError> {
        let mut w = self.wire.borrow_mut();
        let accept = w.fail_next_post_after.take().unwrap_or(slots.len());
        for s in &slots[..accept.min(slots.len())] {
            assert!(
                w.posted.iter().all(|p| p.slot != s.slot),
                "slot {} posted twice",
                s.slot
            );
            let base = self.region.as_ptr() as u64;
            assert_eq!(s.addr, base + u64::from(s.slot) * u64::from(SLOT));
            assert_eq!(s.len, SLOT);
            w.posted.push_back(*s);
        }
        w.chains.push(
            slots[..accept.min(slots.len())]
                .iter()
                .map(|s| s.slot)
                .collect(),
        );
        if accept < slots.len() {
            return Err(PostError {
                posted: accept,
                error: DeviceError {
                    call: "ibv_post_recv",
                    errno: libc::ENOMEM,
                },
            });
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, DeviceError> {
        let mut w = self.wire.borrow_mut();
        w.polls += 1;
        w.last_poll.clear();
        let mut n = 0;
        while n < out.len() && !w.arrivals.is_empty() && !w.posted.is_empty() {
            let wr = w.posted.pop_front().unwrap();
            out[n] = match w.arrivals.pop_front().unwrap() {
                Arrival::Error(code) => Completion {
                    slot: wr.slot,
                    status: CompletionStatus::Error(code),
                    byte_len: 0,
                },
                Arrival::Frame(f) if f.len() > wr.len as usize => Completion {
                    slot: wr.slot,
                    status: CompletionStatus::TooLong,
                    byte_len: wr.len,
                },
                Arrival::Frame(f) => {
                    let off = (wr.addr - self.region.as_ptr() as u64) as usize;
                    assert!(off + f.len() <= self.region.len());
                    // SAFETY: the slot is posted (the device owns it), inside the
                    // region, and nothing else writes or reads it until completed.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            f.as_ptr(),
                            self.region.as_ptr().add(off),
                            f.len(),
                        )
                    };
                    Completion {
                        slot: wr.slot,
                        status: CompletionStatus::Success,
                        byte_len: f.len() as u32,
                    }
                }
            };
            w.last_poll.push(out[n].slot);
            n += 1;
        }
        Ok(n)
    }
}

impl Drop for FakeDevice {
    fn drop(&mut self) {
        let mut w = self.wire.borrow_mut();
        w.dropped = true;
        // Like destroying the QP: the posted WRs are gone.
        w.posted.clear();
    }
}

/// Ethernet + IPv4 + UDP to `dst:port` from 10.0.0.1:1234.
fn frame(dst: [u8; 4], port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x01,
        0x00,
        0x5e,
        dst[1] & 0x7f,
        dst[2],
        dst[3],
        2,
        0,
        0,
        0,
        0,
        1,
    ];
    let udp_len = (8 + payload.len()) as u16;
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&(20 + udp_len).to_be_bytes());
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn good(i: usize) -> Arrival {
    Arrival::Frame(frame(GROUP, PORT, format!("payload-{i}").as_bytes()))
}

struct Rig {
    engine: RxEngine<FakeDevice>,
    wire: Rc<RefCell<Wire>>,
    counters: Arc<RxCounters>,
}

fn rig(slots: u32, batch: u32, reserve: u32) -> Rig {
    rig_with(
        slots,
        batch,
        reserve,
        Filter::port(PORT, Some(Ipv4Addr::from(GROUP).into())),
    )
}

/// [`rig`] keeping what `filter` keeps.
fn rig_with(slots: u32, batch: u32, reserve: u32, filter: Filter) -> Rig {
    gst::init().unwrap();
    let region =
        Arc::new(MemoryRegion::allocate((slots * SLOT) as usize, HugepagePolicy::Off).unwrap());
    let wire = Rc::new(RefCell::new(Wire::default()));
    let dev = FakeDevice {
        wire: wire.clone(),
        region: region.clone(),
    };
    let counters = Arc::new(RxCounters::default());
    let base = region.as_ptr() as u64;
    let engine = RxEngine::new(
        dev,
        region,
        base,
        EngineConfig {
            slots,
            slot_size: SLOT,
            batch,
            reserve,
            filter,
        },
        counters.clone(),
    )
    .unwrap();
    Rig {
        engine,
        wire,
        counters,
    }
}

impl Rig {
    fn send(&self, a: impl IntoIterator<Item = Arrival>) {
        self.wire.borrow_mut().arrivals.extend(a);
    }

    /// Every WR the device holds is a slot the ring has in the `Nic` hand (so a free
    /// or held slot is never posted), and the ring's `Nic` slots the device no longer
    /// holds are completions of the latest poll the engine has not handled yet.
    fn check(&self) {
        let ring = lock(self.engine.ring());
        let nic: BTreeSet<u32> = (0..ring.len() as u32)
            .filter(|&s| ring.owner(s) == Some(SlotOwner::Nic))
            .collect();
        let w = self.wire.borrow();
        let posted: BTreeSet<u32> = w.posted.iter().map(|p| p.slot).collect();
        assert!(
            posted.is_subset(&nic),
            "device holds WRs for slots the ring does not give it: {:?}",
            posted.difference(&nic).collect::<Vec<_>>()
        );
        for s in nic.difference(&posted) {
            assert!(
                w.last_poll.contains(s),
                "slot {s} lost: Nic in the ring, not in the device"
            );
        }
    }

    fn fill(&mut self) -> usize {
        let n = self.engine.fill().unwrap();
        self.check();
        n
    }

    fn step(&mut self) -> Step {
        let s = self.engine.step(1_000).unwrap();
        self.check();
        s
    }

    fn batch(&mut self) -> gst::Buffer {
        match self.step() {
            Step::Batch(b) => b.into_buffer(None, true),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    fn owner(&self, slot: u32) -> SlotOwner {
        lock(self.engine.ring()).owner(slot).unwrap()
    }
}

/// Payloads of a batch buffer, checked against the meta.
fn payloads(buf: &gst::Buffer) -> Vec<String> {
    let mut v = vec![];
    for_each_packet(buf, |_, bytes| {
        v.push(String::from_utf8(bytes.to_vec()).unwrap())
    })
    .expect("batch meta");
    v
}

#[test]
fn a_batch_of_frames_is_one_buffer_with_one_memory_and_payload_offsets() {
    let mut r = rig(16, 8, 4);
    assert_eq!(r.fill(), 16, "two chains of 8 at start");
    assert_eq!(r.wire.borrow().chains.len(), 2);
    r.send((0..5).map(good));
    let buf = r.batch();
    assert_eq!(buf.n_memory(), 1);
    assert_eq!(
        buf.size(),
        5 * SLOT as usize,
        "the memory covers exactly its slots"
    );
    let meta = buf.meta::<PacketBatchMeta>().unwrap();
    let dests = buf
        .meta::<PacketDestMeta>()
        .expect("where each datagram went");
    let map = buf.map_readable().unwrap();
    for (i, (p, d)) in meta.packets().iter().zip(dests.dests()).enumerate() {
        // The frame's own headers, for a recorder to write as they were.
        let h = frame_headers(&map, p.offset as usize, p.len as usize, d.header_len);
        assert_eq!(
            h,
            Some(&map[i * SLOT as usize..p.offset as usize]),
            "frame {i}"
        );
        assert_eq!(d.dst.to_socket_addr(), "239.1.2.3:7148".parse().unwrap());
        assert_eq!(p.offset as usize, i * SLOT as usize + HDR);
        assert_eq!(p.len as usize, format!("payload-{i}").len());
        assert_eq!(p.rx_time_ns, 1_000);
        assert_eq!(p.src.to_socket_addr(), "10.0.0.1:1234".parse().unwrap());
    }
    drop(map);
    assert_eq!(
        payloads(&buf),
        (0..5).map(|i| format!("payload-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(r.counters.packets.get(), 5);
    assert_eq!(r.counters.batches.get(), 1);
    assert_eq!(r.counters.bytes.get(), 5 * 9);
    assert!(matches!(r.step(), Step::Idle));
    for s in 0..5 {
        assert_eq!(r.owner(s), SlotOwner::Downstream);
    }
    drop(buf);
    for s in 0..5 {
        assert_eq!(r.owner(s), SlotOwner::Free);
    }
}

#[test]
fn rejected_completions_are_counted_and_their_slots_reposted() {
    let mut r = rig(12, 4, 1);
    r.fill();
    let mut arp = frame(GROUP, PORT, b"x");
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let mut cut = frame(GROUP, PORT, &[7u8; 100]);
    cut.truncate(HDR + 10); // IP total length says more than arrived
    r.send([
        good(0),                                          // slot 0
        Arrival::Frame(arp),                              // 1: malformed
        good(2),                                          // 2
        Arrival::Frame(frame(GROUP, PORT + 1, b"other")), // 3: filtered
        Arrival::Frame(frame(GROUP, PORT, &[0u8; 3000])), // 4: too long for a slot
        Arrival::Error(5),                                // 5: error status
        Arrival::Frame(cut),                              // 6: truncated
        good(7),                                          // 7
    ]);
    // A rejected frame ends a run: its slot is free, the memory must not span it.
    let a = r.batch();
    assert_eq!(
        (payloads(&a), a.size()),
        (vec!["payload-0".into()], SLOT as usize)
    );
    let b = r.batch();
    assert_eq!(payloads(&b), vec!["payload-2".to_string()]);
    let c = r.batch();
    assert_eq!(payloads(&c), vec!["payload-7".to_string()]);
    let k = &r.counters;
    assert_eq!(
        (
            k.malformed.get(),
            k.filtered.get(),
            k.truncated.get(),
            k.completion_errors.get(),
            k.packets.get()
        ),
        (1, 1, 2, 1, 3)
    );
    for s in [1, 3, 4, 5, 6] {
        assert_eq!(r.owner(s), SlotOwner::Free, "slot {s} back at once");
    }
    // Five free: one chain of a batch (4) is re-posted, oldest release first.
    assert_eq!(r.fill(), 4);
    assert_eq!(r.wire.borrow().chains.last().unwrap(), &vec![1, 3, 4, 5]);
    for s in [0, 2, 7] {
        assert_eq!(r.owner(s), SlotOwner::Downstream);
    }
}

#[test]
fn a_slot_held_downstream_is_never_reposted_until_its_buffer_is_dropped() {
    let mut r = rig(16, 4, 4);
    r.fill();
    r.send((0..4).map(good));
    let a = r.batch(); // slots 0..4
    r.send((4..8).map(good));
    let b = r.batch(); // slots 4..8
    assert_eq!(r.fill(), 0, "nothing free while both are held");
    assert_eq!(r.wire.borrow().posted.len(), 8);
    drop(a);
    assert_eq!(r.fill(), 4);
    assert_eq!(r.wire.borrow().chains.last().unwrap(), &vec![0, 1, 2, 3]);
    // New frames land in 8..16, then would go to the re-posted 0..4; `b` is untouched.
    r.send((100..108).map(good));
    let c = r.batch();
    let d = r.batch();
    assert_eq!(payloads(&c).len() + payloads(&d).len(), 8);
    assert_eq!(
        payloads(&b),
        (4..8).map(|i| format!("payload-{i}")).collect::<Vec<_>>()
    );
    for s in 4..8 {
        assert_eq!(r.owner(s), SlotOwner::Downstream);
    }
    drop((b, c, d));
    assert_eq!(lock(r.engine.ring()).counts().held, 0);
}

#[test]
fn the_nic_never_starves_and_pool_drops_are_counted() {
    let mut r = rig(12, 4, 4);
    r.fill();
    r.send((0..8).map(good));
    let a = r.batch();
    let b = r.batch();
    // Lending the next run would leave the NIC nothing: it is dropped and counted.
    r.send((8..12).map(good));
    assert!(matches!(r.step(), Step::Busy));
    assert_eq!(r.counters.drops_pool.get(), 4);
    assert_eq!(
        r.fill(),
        4,
        "the dropped run's slots go straight back to the NIC"
    );
    r.send((12..16).map(good));
    assert!(matches!(r.step(), Step::Busy));
    assert_eq!(r.counters.drops_pool.get(), 8);
    assert_eq!(r.fill(), 4);
    assert_eq!(
        r.wire.borrow().posted.len(),
        4,
        "never fewer than the reserve"
    );
    // Once downstream lets go, delivery resumes.
    drop(a);
    r.fill();
    r.send((16..20).map(good));
    let c = r.batch();
    assert_eq!(payloads(&c).len(), 4);
    assert_eq!(r.counters.packets.get(), 12);
    assert_eq!(
        r.counters.packets.get() + r.counters.drops_pool.get(),
        20,
        "every frame delivered or counted"
    );
    drop((b, c));
}

#[test]
fn a_run_ends_at_a_non_adjacent_slot() {
    let mut r = rig(8, 4, 1);
    r.fill();
    r.send((0..4).map(good));
    drop(r.batch()); // slots 0..4 back, re-posted behind 4..8
    assert_eq!(r.fill(), 4);
    r.send((4..6).map(good));
    let b = r.batch(); // 4, 5
                       // One poll completes 6, 7, 0, 1: the wrap splits it into two buffers.
    r.send((6..10).map(good));
    let polls = r.wire.borrow().polls;
    let c = r.batch();
    let d = r.batch();
    assert_eq!(r.wire.borrow().polls, polls + 1, "both from one poll");
    assert_eq!(payloads(&c), vec!["payload-6", "payload-7"]);
    assert_eq!(payloads(&d), vec!["payload-8", "payload-9"]);
    assert_eq!((c.size(), d.size()), (2 * SLOT as usize, 2 * SLOT as usize));
    drop((b, c, d));
}

#[test]
fn every_slot_is_back_after_stop() {
    let mut r = rig(12, 4, 1);
    r.fill();
    r.send([good(0), good(1), Arrival::Error(5), good(3), good(4)]);
    // One poll completes 0..4; slot 2's error ends the run, so slot 3 is polled
    // but not handled when the engine stops.
    let held = r.batch();
    assert_eq!(payloads(&held).len(), 2);
    let ring = r.engine.ring().clone();
    assert_eq!(lock(&ring).owner(3), Some(SlotOwner::Nic));
    let Rig { engine, wire, .. } = r;
    drop(engine);
    assert!(wire.borrow().dropped, "the device is destroyed first");
    let c = lock(&ring).counts();
    assert_eq!((c.posted, c.held, c.free), (0, 2, 10));
    assert_eq!(
        payloads(&held).len(),
        2,
        "held buffers stay readable after stop"
    );
    drop(held);
    assert_eq!(lock(&ring).counts().free, 12);
}

#[test]
fn a_refused_post_returns_the_rest_of_the_chain() {
    let mut r = rig(8, 4, 1);
    r.wire.borrow_mut().fail_next_post_after = Some(2);
    let e = r.engine.fill().unwrap_err();
    assert_eq!(
        e,
        EngineError::Device(DeviceError {
            call: "ibv_post_recv",
            errno: libc::ENOMEM
        })
    );
    assert!(
        e.to_string()
            .contains("ibv_post_recv failed: Cannot allocate memory"),
        "{e}"
    );
    r.check();
    assert_eq!(lock(r.engine.ring()).counts().posted, 2);
    assert_eq!(r.wire.borrow().chains[0], vec![0, 1]);
    // The refused slots are retried first; 6 and 7 wait for a full batch.
    assert_eq!(r.fill(), 4);
    assert_eq!(r.wire.borrow().chains[1], vec![2, 3, 4, 5]);
}

#[test]
fn a_region_too_small_for_the_ring_is_refused() {
    gst::init().unwrap();
    let region = Arc::new(MemoryRegion::allocate(4096, HugepagePolicy::Off).unwrap());
    let dev = FakeDevice {
        wire: Default::default(),
        region: region.clone(),
    };
    let cfg = EngineConfig {
        slots: 64,
        slot_size: SLOT,
        batch: 8,
        reserve: 8,
        filter: Filter::port(PORT, None),
    };
    let e = RxEngine::new(dev, region, 0, cfg, Default::default())
        .err()
        .unwrap();
    assert!(matches!(e, EngineError::Config(_)));
    assert_eq!(EngineConfig::default_reserve(8192, 64), 1024);
    assert_eq!(EngineConfig::default_reserve(16, 64), 8);
    assert_eq!(EngineConfig::default_reserve(64, 16), 16);
}

/// An endpoint-list filter: each delivered datagram is counted to its endpoint (in the
/// list's order) and its destination kept; one to no endpoint is filtered.
#[test]
fn each_endpoint_of_a_list_counts_what_it_delivered() {
    use firehose_core::endpoint::{parse_list, EndpointCounters};
    let list = parse_list("239.1.2.3:7148,10.0.0.2:7148,239.1.2.3:7149", 0, &[]).unwrap();
    let per = Arc::new(EndpointCounters::new(&list));
    let Rig {
        engine,
        wire,
        counters,
    } = rig_with(16, 8, 4, Filter::endpoints(&list));
    let mut engine = engine.with_endpoints(per.clone());
    engine.fill().unwrap();
    let sends = [
        (GROUP, 7148, "a0"),
        (GROUP, 7149, "c00"),
        ([10, 0, 0, 2], 7148, "b000"),
        (GROUP, 7148, "a1"),
        (GROUP, 7149, "c11"),
    ];
    wire.borrow_mut().arrivals.extend(
        sends
            .iter()
            .map(|(ip, port, p)| Arrival::Frame(frame(*ip, *port, p.as_bytes()))),
    );
    let buf = match engine.step(1).unwrap() {
        Step::Batch(b) => b.into_buffer(None, true),
        other => panic!("expected a batch, got {other:?}"),
    };
    let dests: Vec<String> = buf
        .meta::<PacketDestMeta>()
        .unwrap()
        .dests()
        .iter()
        .map(|d| d.dst.to_socket_addr().to_string())
        .collect();
    assert_eq!(
        dests,
        [
            "239.1.2.3:7148",
            "239.1.2.3:7149",
            "10.0.0.2:7148",
            "239.1.2.3:7148",
            "239.1.2.3:7149"
        ]
    );
    assert_eq!(
        per.snapshot(),
        [
            ("239.1.2.3:7148", 2, 4),
            ("10.0.0.2:7148", 1, 4),
            ("239.1.2.3:7149", 2, 6)
        ]
    );
    // Unlisted: a listed group on another port, a listed port at another address.
    wire.borrow_mut().arrivals.extend([
        Arrival::Frame(frame(GROUP, 7150, b"x")),
        Arrival::Frame(frame([10, 0, 0, 3], 7148, b"y")),
    ]);
    assert!(matches!(engine.step(2).unwrap(), Step::Busy));
    assert_eq!(counters.filtered.get(), 2);
    assert_eq!(counters.packets.get(), 5);
    assert_eq!(per.snapshot().iter().map(|e| e.1).sum::<u64>(), 5);
    drop(buf);
}
