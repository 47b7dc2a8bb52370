//! `fhudpchunksrc` against real sockets on loopback: SPEAD heaps sent with a plain UDP
//! socket and received straight into chunks, checked byte for byte with their presence
//! bitmaps; the stop heap and the application's EOS (what Ctrl-C in `firehose launch`
//! sends) ending the stream with every chunk delivered; a handler that cannot receive
//! into chunks; state changes under traffic; start errors. Each test binds port 0, so
//! tests run in parallel.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::stats::{field, names};
use firehose_spead::wire::{ctrl, encode, ids, packet_len, Flavour, ItemPointer};
use gst::prelude::*;
use gst_check::Harness;

const F: Flavour = Flavour::SPEAD_64_48;
/// Heap payload bytes: one slot.
const HEAP: usize = 64 << 10;
/// Payload bytes per packet: 8 packets per heap.
const PAYLOAD: usize = 8192;
/// Heaps per chunk.
const SLOTS: u64 = 4;

/// Every test's settings: heaps placed by HEAP_CNT from 1, 4 heaps of 64 KiB per chunk.
const PROPS: &[(&str, &str)] = &[
    ("address", "127.0.0.1"),
    ("port", "0"),
    ("handler", "spead"),
    ("handler-config", "spead,place-offset=1"),
    ("heaps-per-chunk", "4"),
    ("heap-size", "65536"),
    ("hugepages", "off"),
];

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

/// Heap `cnt`'s payload: a byte pattern that differs by heap and by offset, so a payload
/// in the wrong place shows.
fn heap_bytes(cnt: u64) -> Vec<u8> {
    (0..HEAP)
        .map(|i| (cnt as usize * 131 + i * 7 + i / 4096) as u8)
        .collect()
}

/// A SPEAD packet of heap `cnt` (HEAP_LENGTH `len`) carrying `payload` at `offset`, and
/// the `extra` items.
fn packet(cnt: u64, len: usize, offset: usize, payload: &[u8], extra: &[ItemPointer]) -> Vec<u8> {
    let mut items = vec![
        ItemPointer::immediate(F, ids::HEAP_CNT, cnt),
        ItemPointer::immediate(F, ids::HEAP_LENGTH, len as u64),
        ItemPointer::immediate(F, ids::PAYLOAD_OFFSET, offset as u64),
        ItemPointer::immediate(F, ids::PAYLOAD_LENGTH, payload.len() as u64),
    ];
    items.extend_from_slice(extra);
    let mut out = vec![0u8; packet_len(items.len(), payload.len())];
    encode(F, &items, payload, &mut out).unwrap();
    out
}

/// Datagrams a paced [`Sender`] may be ahead of the receiver: about 256 KiB, within the
/// smallest socket buffer a machine grants (net.core.rmem_max defaults to 208 KiB, and
/// the kernel doubles it), so a loaded machine drops nothing.
const AHEAD: u64 = 24;

/// A UDP socket that sends heaps to `port` on loopback.
struct Sender {
    sock: UdpSocket,
    port: u16,
    /// When set, the receiving element: sends wait while more than [`AHEAD`] datagrams
    /// are not yet counted in its `datagrams`.
    paced_by: Option<gst::Element>,
    /// Datagrams sent (GSO segments one by one).
    sent: std::cell::Cell<u64>,
}

impl Sender {
    fn new(port: u16) -> Self {
        Self {
            sock: UdpSocket::bind("127.0.0.1:0").unwrap(),
            port,
            paced_by: None,
            sent: std::cell::Cell::new(0),
        }
    }

    /// A sender that never gets more than [`AHEAD`] datagrams ahead of `el`.
    fn paced(port: u16, el: gst::Element) -> Self {
        Self {
            paced_by: Some(el),
            ..Self::new(port)
        }
    }

    /// Sends `p`, `datagrams` datagrams (more than one with GSO).
    fn send_counted(&self, p: &[u8], datagrams: u64) {
        if let Some(el) = &self.paced_by {
            let t0 = Instant::now();
            while self.sent.get() > field(&stats(el), names::DATAGRAMS) + AHEAD
                && t0.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        self.sock.send_to(p, ("127.0.0.1", self.port)).unwrap();
        self.sent.set(self.sent.get() + datagrams);
    }

    fn send(&self, p: &[u8]) {
        self.send_counted(p, 1);
    }

    /// Sends heap `cnt` as 8 packets of 8192 payload bytes.
    fn heap(&self, cnt: u64) {
        let data = heap_bytes(cnt);
        for (k, p) in data.chunks(PAYLOAD).enumerate() {
            self.send(&packet(cnt, HEAP, k * PAYLOAD, p, &[]));
        }
    }

    /// Sends heaps `cnts`, one after the other.
    fn heaps(&self, cnts: std::ops::RangeInclusive<u64>) {
        for cnt in cnts {
            self.heap(cnt);
        }
    }

    /// Sends heaps `cnts` with UDP GSO, 7 packets per send (the most that fit 64 KiB):
    /// on loopback a GRO receiver gets each send back as one coalesced message, as from
    /// a sender on the network under load.
    fn heaps_gso(&self, cnts: std::ops::RangeInclusive<u64>) {
        let mut all = Vec::new();
        let mut seg = 0;
        for cnt in cnts {
            let data = heap_bytes(cnt);
            for (k, p) in data.chunks(PAYLOAD).enumerate() {
                let p = packet(cnt, HEAP, k * PAYLOAD, p, &[]);
                seg = p.len();
                all.extend(p);
            }
        }
        let size = seg as i32;
        // SAFETY: a valid int option on our own socket.
        let r = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&size as *const i32).cast(),
                4,
            )
        };
        assert_eq!(r, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
        for run in all.chunks(7 * seg) {
            self.send_counted(run, run.len().div_ceil(seg) as u64);
        }
    }

    /// Sends the stop heap, `cnt`.
    fn stop(&self, cnt: u64) {
        let stop = [ItemPointer::immediate(F, ids::STREAM_CTRL, ctrl::STOP)];
        self.send(&packet(cnt, 1, 0, &[0], &stop));
    }
}

/// A harness around `fhudpchunksrc` with [`PROPS`] and `props`, playing, and the port
/// it bound.
fn harness(props: &[(&str, &str)]) -> (Harness, u16) {
    harness_proposing(props, None)
}

/// [`harness`], whose sink pad proposes memory from `provider` when given (as
/// fhshmsink and fhcudaupload do).
fn harness_proposing(
    props: &[(&str, &str)],
    provider: Option<Arc<dyn firehose_core::provider::MemoryProvider>>,
) -> (Harness, u16) {
    init();
    let mut h = Harness::new("fhudpchunksrc");
    if let Some(p) = provider {
        firehose_core::alloc::propose_on(&h.sinkpad().unwrap(), p);
    }
    let el = h.element().unwrap();
    for (k, v) in PROPS.iter().chain(props) {
        el.set_property_from_str(k, v);
    }
    h.play();
    let port = el.property::<i32>("port") as u16;
    assert_ne!(port, 0, "the bound port is readable after start");
    (h, port)
}

fn stats(el: &gst::Element) -> gst::Structure {
    el.property::<gst::Structure>("stats")
}

/// A chunk's description, checking on the way that every present heap holds its
/// bytes (heap `1 + chunk_id × 4 + slot`) in its slot.
fn check_chunk(buf: &gst::Buffer) -> ChunkInfo {
    let info = buf
        .meta::<ChunkMeta>()
        .expect("a chunk meta")
        .info()
        .clone();
    assert_eq!((info.slots, info.slot_size), (SLOTS as usize, HEAP));
    assert!(buf.pts().is_some(), "chunk {} has a PTS", info.chunk_id);
    let map = buf.map_readable().unwrap();
    assert_eq!(map.len(), SLOTS as usize * HEAP);
    for slot in (0..info.slots).filter(|&s| info.is_present(s)) {
        let cnt = 1 + info.chunk_id * SLOTS + slot as u64;
        assert!(
            map[info.slot_range(slot)] == heap_bytes(cnt)[..],
            "chunk {} slot {slot}: heap {cnt}'s bytes",
            info.chunk_id
        );
    }
    info
}

/// `(chunk id, missing slots)` of each chunk.
fn shape(chunks: &[ChunkInfo]) -> Vec<(u64, Vec<usize>)> {
    chunks
        .iter()
        .map(|c| (c.chunk_id, c.missing().collect()))
        .collect()
}

/// Pulls `n` chunks, checked.
fn pull_chunks(h: &mut Harness, n: usize) -> Vec<ChunkInfo> {
    (0..n)
        .map(|_| check_chunk(&h.pull().expect("a chunk within the harness timeout")))
        .collect()
}

/// A [`harness`] sent heaps `cnts`, paced, and the `n` chunks they fill, checked.
fn paced_chunks(cnts: std::ops::RangeInclusive<u64>, n: usize) -> (Harness, Vec<ChunkInfo>) {
    let (mut h, port) = harness(&[]);
    Sender::paced(port, h.element().unwrap()).heaps(cnts);
    let chunks = pull_chunks(&mut h, n);
    (h, chunks)
}

/// Waits until counter `name` reaches `n`.
fn wait_for(el: &gst::Element, name: &str, n: u64) {
    let t0 = Instant::now();
    while field(&stats(el), name) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{name} stayed at {} (want {n})",
            field(&stats(el), name)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn heaps_arrive_in_chunks_byte_for_byte() {
    let (h, chunks) = paced_chunks(1..=16, 4);
    assert_eq!(
        shape(&chunks),
        [(0, vec![]), (1, vec![]), (2, vec![]), (3, vec![])]
    );
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    let s = caps.structure(0).unwrap();
    assert_eq!(s.name(), "application/x-firehose-chunk");
    assert_eq!(
        (s.get::<i32>("slots-per-chunk"), s.get::<i32>("slot-size")),
        (Ok(4), Ok(65536))
    );
    let st = stats(&h.element().unwrap());
    assert_eq!(
        (field(&st, names::CHUNKS), field(&st, names::HEAPS)),
        (4, 16)
    );
    assert_eq!(field(&st, names::PACKETS), 128);
    assert_eq!(field(&st, names::DATAGRAMS), 128);
    assert_eq!(
        field(&st, names::PACKETS_LANDED) + field(&st, names::PACKETS_COPIED),
        128,
        "every datagram either landed or was copied: {st}"
    );
    assert!(field(&st, names::BATCHES) > 0);
    for name in [
        names::DROPS_KERNEL,
        names::DROPS_POOL,
        names::MALFORMED,
        names::TRUNCATED,
    ] {
        assert_eq!(field(&st, name), 0, "{name}: {st}");
    }
}

#[test]
fn payloads_land_in_chunks_without_a_copy_once_the_stream_is_going() {
    // The first heap shows the stream's shape; the receiver predicts from there.
    let (h, chunks) = paced_chunks(1..=32, 8);
    assert!(chunks.iter().all(ChunkInfo::is_complete), "{chunks:?}");
    let st = stats(&h.element().unwrap());
    assert_eq!(field(&st, names::PACKETS), 256);
    assert!(
        field(&st, names::PACKETS_LANDED) > 0,
        "no payload was received in place: {st}"
    );
}

#[test]
fn chunks_are_cut_from_the_memory_downstream_proposes() {
    use firehose_core::provider::SharedSegment;
    use firehose_core::MemoryKind;
    let shared = Arc::new(SharedSegment::new("fhudpchunksrc-test"));
    let (mut h, port) = harness_proposing(&[], Some(shared));
    let tx = Sender::paced(port, h.element().unwrap());
    tx.heaps(1..=16);
    for _ in 0..4 {
        let buf = h.pull().expect("a chunk");
        check_chunk(&buf);
        assert_eq!(
            firehose_core::gstmem::buffer_memory_kind(&buf),
            Some(MemoryKind::Shared)
        );
    }
    let st = stats(&h.element().unwrap());
    assert_eq!(st.get::<String>("memory").unwrap(), "shared", "{st}");
    assert!(field(&st, names::PACKETS_LANDED) > 0, "{st}");
}

/// Waits up to 10 s for `f`.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn chunks_land_in_fhshmsinks_shared_segments_without_a_copy() {
    init();
    let sock = std::env::temp_dir().join(format!("fh-chunk-shm-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let props: Vec<String> = PROPS.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let producer = gst::parse::launch(&format!(
        "fhudpchunksrc name=src {} ! fhshmsink name=sink socket-path={}",
        props.join(" "),
        sock.display()
    ))
    .unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let src = producer
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("src")
        .unwrap();
    let sink = producer
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("sink")
        .unwrap();
    let port = src.property::<i32>("port") as u16;
    // A consumer in the same process through the socket, as another process would.
    let consumer = gst::parse::launch(&format!(
        "fhshmsrc name=c socket-path={} ! fakesink sync=false",
        sock.display()
    ))
    .unwrap();
    consumer.set_state(gst::State::Playing).unwrap();
    wait_until("the consumer", || field(&stats(&sink), "consumers") == 1);
    let tx = Sender::paced(port, src.clone());
    tx.heaps(1..=16);
    let c = consumer
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("c")
        .unwrap();
    wait_until("chunks at the consumer", || {
        field(&stats(&c), "buffers") >= 2
    });
    let st = stats(&sink);
    assert!(field(&st, "buffers") >= 2, "{st}");
    assert_eq!(
        field(&st, "bytes-copied"),
        0,
        "received into the segments: {st}"
    );
    assert_eq!(stats(&src).get::<String>("memory").unwrap(), "shared");
    consumer.set_state(gst::State::Null).unwrap();
    producer.set_state(gst::State::Null).unwrap();
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn gro_coalesced_heaps_land_in_chunks_byte_for_byte() {
    let (mut h, port) = harness(&[]);
    Sender::paced(port, h.element().unwrap()).heaps_gso(1..=32);
    let chunks = pull_chunks(&mut h, 8);
    assert!(chunks.iter().all(ChunkInfo::is_complete), "{chunks:?}");
    let st = stats(&h.element().unwrap());
    assert_eq!(
        field(&st, names::DATAGRAMS),
        256,
        "GRO segments counted one by one"
    );
    assert_eq!(field(&st, names::PACKETS), 256);
    assert!(
        field(&st, names::BATCHES) < 64,
        "coalesced: fewer receives than 4-datagram batches: {st}"
    );
    assert!(
        field(&st, names::PACKETS_LANDED) >= 128,
        "most payloads received in place: {st}"
    );
}

#[test]
fn a_stop_heap_ends_the_stream_after_every_chunk() {
    let (mut h, port) = harness(&[]);
    let tx = Sender::new(port);
    tx.heaps(1..=6);
    tx.stop(7);
    // Chunk 1 holds heaps 5 and 6 only: it leaves with the stop heap, not before.
    let chunks = pull_chunks(&mut h, 2);
    assert_eq!(shape(&chunks), [(0, vec![]), (1, vec![2, 3])]);
    let eos = loop {
        let ev = h.pull_event().expect("EOS after the chunks");
        if ev.type_() == gst::EventType::Eos {
            break ev;
        }
    };
    assert_eq!(eos.type_(), gst::EventType::Eos);
    assert!(h.try_pull().is_none(), "nothing after EOS");
    let st = stats(&h.element().unwrap());
    assert_eq!(
        (field(&st, names::CHUNKS), field(&st, names::HEAPS)),
        (2, 6)
    );
}

/// A pipeline `fhudpchunksrc ! fakesink` whose chunks are checked and collected as they
/// arrive.
struct Pipeline {
    pipeline: gst::Pipeline,
    src: gst::Element,
    /// Every chunk that reached the sink, with its PTS.
    chunks: Arc<Mutex<Vec<(ChunkInfo, gst::ClockTime)>>>,
}

impl Pipeline {
    /// With `props` besides [`PROPS`], and `sink` (a `fakesink`'s properties and what
    /// goes before it).
    fn new(props: &str, sink: &str) -> Self {
        init();
        let mut all: Vec<String> = PROPS.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        all.push(props.into());
        let desc = format!(
            "fhudpchunksrc name=src {} ! {sink} name=sink signal-handoffs=true",
            all.join(" ")
        );
        let pipeline = firehose_testkit::run::launch(&desc);
        let chunks = Arc::new(Mutex::new(Vec::new()));
        let sink = pipeline.by_name("sink").unwrap();
        let c = chunks.clone();
        sink.connect("handoff", false, move |args| {
            let buf = args[1].get::<gst::Buffer>().unwrap();
            let pts = buf.pts().expect("a PTS");
            c.lock().unwrap().push((check_chunk(&buf), pts));
            None
        });
        let src = pipeline.by_name("src").unwrap();
        Self {
            pipeline,
            src,
            chunks,
        }
    }

    /// The pipeline's next EOS or error message.
    fn end(&self) -> gst::Message {
        self.pipeline
            .bus()
            .unwrap()
            .timed_pop_filtered(
                gst::ClockTime::from_seconds(10),
                &[gst::MessageType::Eos, gst::MessageType::Error],
            )
            .expect("EOS or an error within 10 s")
    }
}

#[test]
fn an_application_eos_pushes_the_open_chunks_and_what_the_socket_holds() {
    let p = Pipeline::new("", "fakesink sync=false");
    p.pipeline.set_state(gst::State::Playing).unwrap();
    let port = p.src.property::<i32>("port") as u16;
    let tx = Sender::new(port);
    // Chunk 0 whole, and heaps 5 and 6 received into the open chunk 1.
    tx.heaps(1..=6);
    wait_for(&p.src, names::PACKETS, 48);
    // A pause, so that the receiver sleeps until heap 9 opens chunk 2.
    std::thread::sleep(Duration::from_millis(200));
    let resumed = p.pipeline.current_running_time().unwrap();
    // Heap 9 opens chunk 2: the first packet after the pause.
    tx.heap(9);
    wait_for(&p.src, names::PACKETS, 56);
    // Heap 7 is only queued on the socket when EOS comes: it was received (by the
    // kernel) too.
    tx.heap(7);
    p.pipeline.send_event(gst::event::Eos::new());
    let msg = p.end();
    assert_eq!(msg.type_(), gst::MessageType::Eos, "{msg:?}");
    p.pipeline.set_state(gst::State::Null).unwrap();
    let chunks = p.chunks.lock().unwrap();
    let infos: Vec<ChunkInfo> = chunks.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(
        shape(&infos),
        [(0, vec![]), (1, vec![3]), (2, vec![1, 2, 3])]
    );
    // The running time when the chunk opened: for chunk 2, after the pause, not when
    // the receiver began to wait.
    let pts: Vec<_> = chunks.iter().map(|(_, t)| *t).collect();
    assert!(pts.windows(2).all(|w| w[0] <= w[1]), "{pts:?}");
    assert!(pts[2] >= resumed, "chunk 2 at {} < {resumed}", pts[2]);
    let st = stats(&p.src);
    assert_eq!(field(&st, names::PACKETS), 64);
    assert_eq!(field(&st, names::CHUNKS), 3);
    assert_eq!(field(&st, names::POOL_IN_USE), 0, "every chunk back: {st}");
}

#[test]
fn an_application_eos_with_nothing_received_ends_the_stream() {
    let p = Pipeline::new("", "fakesink sync=false");
    p.pipeline.set_state(gst::State::Playing).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    p.pipeline.send_event(gst::event::Eos::new());
    assert_eq!(p.end().type_(), gst::MessageType::Eos);
    p.pipeline.set_state(gst::State::Null).unwrap();
    assert!(p.chunks.lock().unwrap().is_empty());
}

#[test]
fn a_handler_that_cannot_receive_into_chunks_gets_every_packet_copied() {
    // seq: a 4-byte counter, then 1000 payload bytes; 8 packets per chunk.
    let (mut h, port) = harness(&[
        ("handler", "seq"),
        ("handler-config", "seq,offset=0,width=4,payload-offset=4"),
        ("heaps-per-chunk", "8"),
        ("heap-size", "1000"),
    ]);
    let tx = Sender::new(port);
    let payload = |n: u32| vec![(n * 3) as u8; 1000];
    for n in 0..32u32 {
        let mut p = n.to_be_bytes().to_vec();
        p.extend(payload(n));
        tx.send(&p);
    }
    for id in 0..4u64 {
        let buf = h.pull().unwrap();
        let info = buf.meta::<ChunkMeta>().unwrap().info().clone();
        assert_eq!((info.chunk_id, info.is_complete()), (id, true));
        let map = buf.map_readable().unwrap();
        for slot in 0..8 {
            let n = id as u32 * 8 + slot as u32;
            assert!(map[info.slot_range(slot)] == payload(n)[..], "packet {n}");
        }
    }
    let st = stats(&h.element().unwrap());
    assert_eq!(field(&st, names::PACKETS_LANDED), 0, "{st}");
    assert_eq!(field(&st, names::PACKETS_COPIED), 32, "{st}");
}

/// Fails the test (instead of hanging) if `f` takes longer than `limit`.
fn within(limit: Duration, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}: hang"));
}

#[test]
fn state_changes_under_traffic_never_hang_and_return_every_chunk() {
    within(Duration::from_secs(60), "state cycling", || {
        for (props, sink) in [
            ("", "fakesink sync=false"),
            // Downstream holds the pool's every chunk: the engine waits for one, and the
            // state change must cut that wait short.
            (
                // 5 chunks of 4 × 64 KiB.
                "when-full=block pool-size=1310720 max-chunks=4",
                "queue max-size-buffers=1 ! fakesink sync=true",
            ),
        ] {
            let p = Pipeline::new(props, sink);
            p.pipeline.set_state(gst::State::Playing).unwrap();
            let port = p.src.property::<i32>("port") as u16;
            let stop = Arc::new(AtomicBool::new(false));
            let blast = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let tx = Sender::new(port);
                    let mut cnt = 1;
                    while !stop.load(Ordering::Relaxed) {
                        tx.heap(cnt);
                        cnt += 1;
                    }
                })
            };
            for round in 0..4 {
                std::thread::sleep(Duration::from_millis(100));
                p.pipeline.set_state(gst::State::Paused).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                p.pipeline.set_state(gst::State::Playing).unwrap();
                if round % 2 == 1 {
                    p.pipeline.set_state(gst::State::Ready).unwrap();
                    p.pipeline.set_state(gst::State::Playing).unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(100));
            let received = field(&stats(&p.src), names::DATAGRAMS);
            p.pipeline.set_state(gst::State::Null).unwrap();
            stop.store(true, Ordering::Relaxed);
            blast.join().unwrap();
            let st = stats(&p.src);
            assert!(received > 0, "{props}: received nothing: {st}");
            assert_eq!(field(&st, names::POOL_IN_USE), 0, "{props}: {st}");
        }
    });
}

#[test]
fn a_trickle_is_taken_in_few_receives_and_loses_nothing() {
    // One seq packet (a counter, then 100 bytes) every 200 µs, 8 per receive: with 2 ms
    // naps (10 packets' worth) most receives come full; waking for each packet would
    // take about one receive per packet. Each receive is full or waited its 2 ms, so a
    // sender that took `span` allows at most 200/8 + span/2 ms + 2 receives. A loaded
    // machine stretches the sender's naps; where that leaves the bound too loose to tell
    // (over 3/4 of the packets), the trickle is sent again to a fresh source.
    let mut tries = Vec::new();
    for _ in 0..4 {
        let (mut h, port) = harness(&[
            ("handler", "seq"),
            ("handler-config", "seq,offset=0,width=4,payload-offset=4"),
            ("heaps-per-chunk", "8"),
            ("heap-size", "100"),
            ("gro", "false"),
            ("batch-size", "8"),
            ("coalesce-us", "2000"),
        ]);
        let sender = std::thread::spawn(move || {
            let tx = Sender::new(port);
            let t0 = Instant::now();
            for n in 0..200u32 {
                let mut p = n.to_be_bytes().to_vec();
                p.extend([n as u8; 100]);
                tx.send(&p);
                std::thread::sleep(Duration::from_micros(200));
            }
            t0.elapsed()
        });
        for id in 0..25u64 {
            let buf = h.pull().unwrap();
            let info = buf.meta::<ChunkMeta>().unwrap().info().clone();
            assert_eq!((info.chunk_id, info.is_complete()), (id, true));
        }
        let span = sender.join().unwrap();
        let st = stats(&h.element().unwrap());
        assert_eq!(field(&st, names::PACKETS), 200);
        let receives = field(&st, names::BATCHES);
        let bound = 200 / 8 + (span.as_micros() / 2000) as u64 + 2;
        tries.push((receives, bound));
        if bound < 200 * 3 / 4 {
            assert!(
                receives <= bound,
                "{receives} receives for 200 packets sent over {span:?}"
            );
            return;
        }
    }
    panic!("the sender never trickled at its pace (receives, bound): {tries:?}");
}

/// Starts `fhudpchunksrc` with [`PROPS`] and `props` in a pipeline and returns the
/// error it posts.
fn start_error(props: &[(&str, &str)]) -> String {
    init();
    let src = gst::ElementFactory::make("fhudpchunksrc").build().unwrap();
    for (k, v) in PROPS.iter().chain(props) {
        src.set_property_from_str(k, v);
    }
    firehose_testkit::starterror::source_start_error(&src)
}

#[test]
fn bad_settings_are_start_errors_that_say_what_to_fix() {
    let e = start_error(&[("handler", ""), ("handler-config", "")]);
    assert!(e.contains("set handler"), "{e}");
    let e = start_error(&[("handler", "nosuch"), ("handler-config", "")]);
    assert!(e.contains("no packet handler named 'nosuch'"), "{e}");
    let e = start_error(&[("handler-config", "spead,place-step=0")]);
    assert!(e.contains("place-step must be at least 1"), "{e}");
    // 4 chunks of 4 × 64 KiB: no more than the window.
    let e = start_error(&[("pool-size", "1048576")]);
    assert!(e.contains("more chunks (4) than max-chunks (4)"), "{e}");
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let e = start_error(&[("port", &port)]);
    assert!(e.contains("in use") && e.contains(&port), "{e}");
}

/// `cpu=`: the thread that receives and pushes the chunks (the streaming thread, where
/// a pad probe runs) is pinned to that CPU; a CPU the process may not use is refused
/// at start, here and on `fhspeadsrc`, which shares the landing input.
#[test]
fn the_receive_thread_runs_on_the_cpu_asked_for() {
    use firehose_core::thread::Placement;
    let allowed = Placement::allowed_cpus().unwrap();
    let cpu = *allowed.last().unwrap();
    let (mut h, port) = harness(&[("cpu", &cpu.to_string())]);
    let el = h.element().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    el.static_pad("src")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            s.lock().unwrap().push(Placement::current_cpus().unwrap());
            gst::PadProbeReturn::Ok
        });
    Sender::paced(port, el).heaps(1..=8);
    pull_chunks(&mut h, 2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![vec![cpu]; 2]);

    let outside = (cpu + 1).to_string();
    for factory in ["fhudpchunksrc", "fhspeadsrc"] {
        let props = [("handler", "spead"), ("cpu", &outside)];
        let props = if factory == "fhspeadsrc" {
            &props[1..]
        } else {
            &props[..]
        };
        let e = firehose_testkit::run::start_error(factory, props);
        assert!(
            e.contains(&format!("cpu {outside} cannot be used")),
            "{factory}: {e}"
        );
    }
}

#[test]
fn an_endpoint_list_lands_its_own_datagrams_and_filters_the_rest() {
    // Two endpoints on one port: the socket binds the wildcard and reads each
    // datagram's destination. Heap packets sent to an address not listed must not be
    // placed, wherever the kernel put their bytes.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let list = format!("127.0.0.1:{port},127.0.0.2:{port}");
    let (mut h, bound) = harness(&[
        ("address", "0.0.0.0"),
        ("port", &port.to_string()),
        ("endpoints", &list),
    ]);
    assert_eq!(bound, port);
    let stray = UdpSocket::bind("127.0.0.1:0").unwrap();
    let data = heap_bytes(99);
    for (k, p) in data.chunks(PAYLOAD).enumerate() {
        stray
            .send_to(&packet(2, HEAP, k * PAYLOAD, p, &[]), ("127.0.0.3", port))
            .unwrap();
    }
    let el = h.element().unwrap();
    wait_for(&el, names::FILTERED, (HEAP / PAYLOAD) as u64);
    Sender::paced(port, el.clone()).heaps(1..=8);
    let chunks = pull_chunks(&mut h, 2);
    assert_eq!(shape(&chunks), [(0, vec![]), (1, vec![])]);
    let st = stats(&el);
    assert_eq!(field(&st, names::FILTERED), (HEAP / PAYLOAD) as u64, "{st}");
    assert_eq!(field(&st, names::PACKETS), 64, "{st}");
    let per = firehose_core::endpoint::read_stats(&st).expect("the endpoints field");
    assert_eq!(per.len(), 2, "{st}");
    assert_eq!((per[0].1, per[1].1), (64, 0), "{st}");
    assert_eq!(per[0].0, format!("127.0.0.1:{port}"));
}
