//! fhshmsink and fhshmsrc for real: in one process through Harnesses and the client
//! engine, across processes with the `fhshm-peer` binary, and under faults (a consumer
//! or a producer killed with SIGKILL, a peer that lies, another uid, 1000 connects).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use firehose_core::meta::message::{self, Message};
use firehose_core::stats::field;
use firehose_core::{PacketBatchMeta, PacketInfo};
use firehose_shm::client::{BufferView, Client, ClientError, Event};
use firehose_shm::proto::{self, Msg};
use firehose_shm::wire::{self, Address};
use firehose_testkit::run;
use gst::prelude::*;
use gst_check::Harness;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        message::register();
        for (name, t) in [
            ("fhshmsink", firehose_shm::shmsink::ShmSink::static_type()),
            ("fhshmsrc", firehose_shm::shmsrc::ShmSrc::static_type()),
            ("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type()),
        ] {
            gst::Element::register(None, name, gst::Rank::NONE, t).unwrap();
        }
        firehose_testkit::testsrc::register(None).unwrap();
    });
}

/// A fresh socket path for one test.
fn socket(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("fhshm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_string_lossy().into_owned()
}

fn sink(path: &str, props: &[(&str, &str)]) -> gst::Element {
    let mut b = gst::ElementFactory::make("fhshmsink").property("socket-path", path);
    for (k, v) in props {
        b = b.property_from_str(k, v);
    }
    b.build().unwrap()
}

/// A playing sink Harness (listening) with caps `application/x-test`.
fn sink_harness(path: &str, props: &[(&str, &str)]) -> (Harness, gst::Element) {
    init();
    let el = sink(path, props);
    let mut h = Harness::with_element(&el, Some("sink"), None);
    h.set_src_caps_str("application/x-test, n=(int)1");
    h.play();
    (h, el)
}

fn stats(el: &gst::Element) -> gst::Structure {
    el.property::<gst::Structure>("stats")
}

/// `f`'s first `Some`, asked for every few milliseconds for up to `secs` s (a hang
/// guard).
fn within<T>(what: &str, secs: u64, f: impl FnMut() -> Option<T>) -> T {
    run::poll(
        Duration::from_secs(secs),
        || format!("timed out waiting for {what}"),
        f,
    )
}

/// Waits up to 10 s for `f`.
fn wait_for(what: &str, f: impl FnMut() -> bool) {
    run::wait_until(
        Duration::from_secs(10),
        || format!("timed out waiting for {what}"),
        f,
    )
}

/// Waits until the sink `el` counts `n` consumers.
fn wait_consumers(el: &gst::Element, n: u64) {
    wait_for(&format!("{n} consumers"), || {
        field(&stats(el), "consumers") == n
    });
}

/// A pipeline from a `gst-launch-1.0` description (the elements registered).
fn launch(description: &str) -> gst::Pipeline {
    init();
    run::launch(description)
}

/// The test pattern: byte k of the stream is k mod 251.
fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|k| ((offset + k) % 251) as u8)
        .collect()
}

/// Adds a message meta: message `id` of `len` bytes, all of them received.
fn add_message(b: &mut gst::BufferRef, id: u64, complete: bool, len: u64) {
    message::add(
        b,
        &Message {
            id,
            complete,
            bytes_expected: len,
            bytes_received: len,
        },
    );
}

/// A batch meta's packet of `len` bytes at `offset`, from 192.0.2.1:7148.
fn packet(offset: u32, len: u32, rx_time_ns: u64) -> PacketInfo {
    PacketInfo {
        offset,
        len,
        rx_time_ns,
        src: "192.0.2.1:7148"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    }
}

fn buffer(offset: u64, len: usize, pts: u64) -> gst::Buffer {
    let mut b = gst::Buffer::from_mut_slice(pattern(offset, len));
    b.get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_nseconds(pts));
    b
}

/// [`connect`], then waits until the sink `el` counts the consumer.
fn connect_attached(path: &str, el: &gst::Element) -> Client {
    let c = connect(path);
    wait_consumers(el, 1);
    c
}

fn connect(path: &str) -> Client {
    connect_ring(path, true)
}

/// [`connect`], asking for rings or not (`false`: every message on the socket).
fn connect_ring(path: &str, ring: bool) -> Client {
    let mut c = Client::connect(&Address::new(path, false)).unwrap();
    c.set_ring(ring);
    wait_for("the hello", || {
        let _ = c.poll_event();
        c.hello().is_some()
    });
    c
}

/// Next buffer (skipping caps), waiting up to 20 s (a hang guard).
fn next_buffer(c: &mut Client) -> BufferView {
    within("a buffer", 20, || match c.wait_event(100) {
        Ok(Some(Event::Buffer(v))) => Some(v),
        Ok(_) => None,
        Err(e) => panic!("{e}"),
    })
}

/// The packets of `v`'s batch meta.
fn packets(v: &BufferView) -> Vec<proto::PacketMeta> {
    v.msg
        .metas
        .iter()
        .find_map(|m| match m {
            proto::WireMeta::Packets(p) => Some(p.clone()),
            _ => None,
        })
        .expect("the batch meta travels")
}

fn peer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fhshm-peer"))
}

/// Starts `fhshm-peer read PATH ARGS…` (its stdout piped for [`output`], or not) and
/// waits until the sink `el` counts it.
fn peer_reader(path: &str, args: &[&str], stdout: Stdio, el: &gst::Element) -> Child {
    let child = peer()
        .arg("read")
        .arg(path)
        .args(args)
        .stdout(stdout)
        .spawn()
        .unwrap();
    wait_consumers(el, 1);
    child
}

fn output(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kv(out: &str, key: &str) -> String {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {out:?}"))
        .to_string()
}

#[test]
fn a_consumer_gets_bytes_caps_times_and_metas_and_releases_return_the_slot() {
    let path = socket("basic");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut c = connect_attached(&path, &el);
    let mut b = buffer(0, 3000, 42);
    {
        let bm = b.get_mut().unwrap();
        add_message(bm, 7, true, 3000);
        PacketBatchMeta::add(bm, vec![packet(1000, 2000, 5)]);
    }
    h.push(b).unwrap();
    let caps = within("the caps", 5, || match c.wait_event(100).unwrap() {
        Some(Event::Caps(c)) => Some(c),
        None => None,
        Some(other) => panic!("{other:?} before the caps"),
    });
    assert_eq!(caps, "application/x-test, n=(int)1");
    let v = next_buffer(&mut c);
    assert_eq!(v.as_ref(), &pattern(0, 3000)[..]);
    assert_eq!(v.msg.pts, 42);
    assert_eq!(v.msg.dts, proto::NONE_TIME);
    assert_eq!(v.msg.metas.len(), 2, "{:?}", v.msg.metas);
    let s = stats(&el);
    assert_eq!(
        field(&s, "bytes-copied"),
        3000,
        "harness memory is not shared"
    );
    assert_eq!(field(&s, "pool-in-use"), 1, "held by the consumer");
    drop(v);
    // Releases travel in batches, sent by the consumer's next poll.
    wait_for("the release", || {
        let _ = c.wait_event(1);
        field(&stats(&el), "pool-in-use") == 0
    });
    // The sink reuses its message and meta lists: the next buffers carry their own
    // metas, and none left from the one before.
    let mut again = buffer(3000, 100, 43);
    PacketBatchMeta::add(again.get_mut().unwrap(), vec![packet(0, 50, 1); 2]);
    h.push(again).unwrap();
    h.push(buffer(3100, 100, 44)).unwrap();
    let v = next_buffer(&mut c);
    assert_eq!(v.msg.pts, 43);
    match &v.msg.metas[..] {
        [proto::WireMeta::Packets(p)] => assert_eq!(p.len(), 2),
        other => panic!("{other:?}"),
    }
    let w = next_buffer(&mut c);
    assert_eq!(w.msg.pts, 44);
    assert!(w.msg.metas.is_empty(), "{:?}", w.msg.metas);
    drop(h);
}

#[test]
fn fhshmsrc_restores_caps_timestamps_flags_and_metas_without_a_copy() {
    let path = socket("src");
    let (mut h, _el) = sink_harness(&path, &[]);
    let src = gst::ElementFactory::make("fhshmsrc")
        .property("socket-path", &path)
        .build()
        .unwrap();
    let mut hs = Harness::with_element(&src, None, Some("src"));
    hs.play();
    wait_consumers(&_el, 1);
    for i in 0..10u64 {
        let mut b = buffer(i * 1000, 1000, i * 10);
        {
            let bm = b.get_mut().unwrap();
            bm.set_duration(gst::ClockTime::from_nseconds(10));
            if i == 3 {
                bm.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
            add_message(bm, i, i % 2 == 0, 1000);
        }
        h.push(b).unwrap();
    }
    let mut out = Vec::new();
    for i in 0..10u64 {
        let b = hs.pull().unwrap();
        assert_eq!(
            b.map_readable().unwrap().as_slice(),
            &pattern(i * 1000, 1000)[..]
        );
        assert_eq!(b.pts(), Some(gst::ClockTime::from_nseconds(i * 10)));
        assert_eq!(b.duration(), Some(gst::ClockTime::from_nseconds(10)));
        assert_eq!(b.flags().contains(gst::BufferFlags::DELTA_UNIT), i == 3);
        let m = message::read(&b).unwrap();
        assert_eq!((m.id, m.complete), (i, i % 2 == 0));
        let mem = b.peek_memory(0);
        assert!(
            mem.flags().contains(gst::MemoryFlags::READONLY),
            "a read-only view of the segment"
        );
        out.push(b);
    }
    let caps = src.static_pad("src").unwrap().current_caps().unwrap();
    assert_eq!(caps.to_string(), "application/x-test, n=(int)1");
    let src_stats = src.property::<gst::Structure>("stats");
    assert_eq!(field(&src_stats, "buffers"), 10);
    assert_eq!(field(&src_stats, "bytes"), 10_000);
    assert_eq!(field(&stats(&_el), "pool-in-use"), 10);
    drop(out);
    wait_for("releases", || field(&stats(&_el), "pool-in-use") == 0);
    // EOS travels.
    h.push_event(gst::event::Eos::new());
    within("the EOS", 5, || {
        (hs.pull_event().unwrap().type_() == gst::EventType::Eos).then_some(())
    });
}

#[test]
fn fhudpsrc_receives_straight_into_the_shared_segments() {
    let path = socket("udp");
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let pipeline = launch(&format!(
        "fhudpsrc address=127.0.0.1 port={port} ! fhshmsink name=sink socket-path={path}"
    ));
    let el = pipeline.by_name("sink").unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut c = connect_attached(&path, &el);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (n, size) = (200usize, 1400usize);
    let mut got = 0u64;
    let mut datagrams = 0usize;
    for i in 0..n {
        tx.send_to(&pattern(i as u64, size), ("127.0.0.1", port))
            .unwrap();
        if i % 20 == 19 {
            // Keep within the socket's buffer; read what arrived.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let start = Instant::now();
    while datagrams < n && start.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(Event::Buffer(v))) = c.wait_event(100) {
            let packets = packets(&v);
            for p in &packets {
                let d = &v.as_ref()[p.offset as usize..(p.offset + p.len) as usize];
                assert_eq!(d.len(), size);
                assert_eq!(d[1], (u64::from(d[0]) + 1) as u8 % 251);
                assert!(p.v4);
                assert_eq!(p.ip[12..], [127, 0, 0, 1]);
            }
            datagrams += packets.len();
            got += v.msg.len;
        }
    }
    assert_eq!(datagrams, n, "every datagram arrived");
    assert!(got >= (n * size) as u64);
    let s = stats(&el);
    assert_eq!(
        field(&s, "bytes-copied"),
        0,
        "fhudpsrc received into the proposed segments: {s}"
    );
    pipeline.set_state(gst::State::Null).unwrap();
}

/// A producer that writes into the pool `fhshmsink` proposes: `fhtestsrc` cuts its pool
/// from the proposed segments and generates each batch in place, and the consumer is told
/// where those very bytes are. Proof of no copy: for every buffer, the address at which
/// the producer wrote it less the offset the consumer is sent is one constant (the
/// segment's base), and `bytes-copied` stays 0. A copy into the sink's own segments would
/// put the buffers at other offsets (and count them).
#[test]
fn buffers_generated_into_the_proposed_pool_travel_without_a_copy() {
    let path = socket("pool");
    let (batches, batch, packet) = (40u64, 4u64, 4096u64);
    let pipeline = launch(&format!(
        "fhtestsrc name=src num-packets={} batch-size={batch} packet-size={packet} \
         output=batch ! fhshmsink name=sink socket-path={path} wait-for-connection=true",
        batches * batch
    ));
    let el = pipeline.by_name("sink").unwrap();
    let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let w = written.clone();
    el.static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(b) = info.buffer() {
                let m = b.peek_memory(0).map_readable().unwrap();
                w.lock().unwrap().push(m.as_ptr() as u64);
            }
            gst::PadProbeReturn::Ok
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut c = connect(&path);
    let mut seen = Vec::new();
    let mut seq = 0u64;
    while (seen.len() as u64) < batches {
        let v = next_buffer(&mut c);
        let packets = packets(&v);
        assert_eq!(packets.len() as u64, batch);
        for p in &packets {
            let d = &v.as_ref()[p.offset as usize..(p.offset + p.len) as usize];
            assert_eq!(
                firehose_testkit::pattern::verify(d),
                Ok(seq),
                "packet {seq}"
            );
            seq += 1;
        }
        seen.push((v.msg.segment, v.msg.offset));
    }
    let s = stats(&el);
    assert_eq!(field(&s, "bytes-copied"), 0, "{s}");
    let src = pipeline.by_name("src").unwrap();
    let ss = src.property::<gst::Structure>("stats");
    assert_eq!(ss.get::<String>("memory").unwrap(), "shared", "{ss}");
    pipeline.set_state(gst::State::Null).unwrap();
    let written = written.lock().unwrap();
    assert_eq!(written.len(), seen.len());
    let base = written[0].wrapping_sub(seen[0].1);
    for (i, (&ptr, &(seg, off))) in written.iter().zip(&seen).enumerate() {
        assert_eq!(
            seg, seen[0].0,
            "buffer {i}: one segment, the producer's pool"
        );
        assert_eq!(
            ptr.wrapping_sub(off),
            base,
            "buffer {i}: the consumer reads where the producer wrote"
        );
    }
    let distinct: std::collections::BTreeSet<_> = seen.iter().map(|s| s.1).collect();
    assert!(
        distinct.len() > 1,
        "the pool's slots take turns: {distinct:?}"
    );
}

/// A stock source with no pool of its own (`GstBaseSrc`'s default: one allocation per
/// buffer from the allocator the sink proposes) reuses a few segments instead of making
/// one per buffer, and nothing is copied.
#[test]
fn a_source_without_a_pool_reuses_a_bounded_set_of_segments() {
    let path = socket("nopool");
    let n = 300usize;
    let pipeline = launch(&format!(
        "audiotestsrc num-buffers={n} samplesperbuffer=1024 ! fhshmsink name=sink \
         socket-path={path} wait-for-connection=true max-held=8"
    ));
    let el = pipeline.by_name("sink").unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut c = connect(&path);
    let mut segments = std::collections::BTreeSet::new();
    for _ in 0..n {
        let v = next_buffer(&mut c);
        assert_eq!(v.as_ref().len(), 1024 * 2, "S16LE mono");
        segments.insert(v.msg.segment);
    }
    let s = stats(&el);
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(field(&s, "bytes-copied"), 0, "{s}");
    // Before the allocator kept freed regions, each buffer was a new memfd segment
    // (300 here); now as many as are in flight at once: the consumer's max-held and
    // the one the sink waits with.
    assert!(
        segments.len() <= 12,
        "{} segments for {n} buffers",
        segments.len()
    );
}

/// A consumer with rings reads its buffers from the ring and writes its releases into
/// its release ring: while it is busy (buffers wait for it), no socket packet and no
/// release message per buffer.
#[test]
fn a_ring_consumer_makes_no_system_call_per_buffer_while_busy() {
    let path = socket("ringbusy");
    let (mut h, el) = sink_harness(&path, &[("max-held", "256"), ("copy-slots", "64")]);
    let mut c = connect_attached(&path, &el);
    wait_for("the rings", || {
        let _ = c.poll_event();
        c.ring_packets().1
    });
    let (socket_before, _) = c.packet_counts();
    let (ring_before, _) = c.ring_packets();
    let rounds = 50u64;
    let n = rounds * 40;
    let s = read_and_release(&mut h, &el, &mut c, n);
    let from_ring = c.ring_packets().0 - ring_before;
    let from_socket = c.packet_counts().0 - socket_before - from_ring;
    assert_eq!(from_ring, n, "every buffer from the ring");
    // At most a wake-up per round (the consumer may have slept between them).
    assert!(
        from_socket <= rounds,
        "{from_socket} socket packets for {n} buffers"
    );
    assert_eq!(field(&s, "release-messages"), 0, "{s}");
    assert_eq!(c.releaser().counts(), (0, 0));
    let (ring_released, wakes) = c.releaser().ring_counts();
    assert_eq!(ring_released, n);
    // Wake-ups to the producer: at most one per batch's worth of unread releases (16
    // here), plus one per round for a producer that announced it sleeps.
    assert!(
        wakes <= n / 16 + rounds,
        "{wakes} wake-ups for {n} releases"
    );
    assert_eq!(field(&s, "pool-in-use"), 0);
}

#[test]
fn a_consumer_in_another_process_reads_every_byte() {
    let path = socket("twoproc");
    let (mut h, el) = sink_harness(&path, &[]);
    let child = peer_reader(&path, &["--check"], Stdio::piped(), &el);
    let (n, size) = (500u64, 65536usize);
    for i in 0..n {
        h.push(buffer(i * size as u64, size, i)).unwrap();
    }
    h.push_event(gst::event::Eos::new());
    let out = output(child);
    assert_eq!(kv(&out, "bytes"), (n * size as u64).to_string(), "{out}");
    assert_eq!(kv(&out, "end"), "eos");
    assert_eq!(kv(&out, "missed"), "0");
    wait_consumers(&el, 0);
    assert_eq!(field(&stats(&el), "consumers-lost"), 0, "it finished");
}

/// Pushes `lists` buffer lists of `per` buffers of `size` bytes (the stream's byte
/// pattern, pts = buffer number), then EOS.
fn push_lists(h: &mut Harness, lists: u64, per: u64, size: usize) {
    for l in 0..lists {
        let mut list = gst::BufferList::new_sized(per as usize);
        for j in 0..per {
            let i = l * per + j;
            list.get_mut()
                .unwrap()
                .add(buffer(i * size as u64, size, i));
        }
        h.srcpad().unwrap().push_list(list).unwrap();
    }
    h.push_event(gst::event::Eos::new());
}

#[test]
fn a_burst_pushed_as_lists_reaches_another_process_complete_and_in_order_in_batches() {
    // Room for a whole list (max-held, copy slots): each list goes in one packet; and
    // the defaults (64 held, 16 copy slots): the sink sends what it queued before it
    // waits for a slot, so the lists go in several packets, and nothing is lost.
    for (name, props) in [
        (
            "burstbig",
            &[("max-held", "256"), ("copy-slots", "256")][..],
        ),
        ("burstsmall", &[][..]),
    ] {
        let path = socket(name);
        let (mut h, el) = sink_harness(&path, props);
        let child = peer_reader(&path, &["--check"], Stdio::piped(), &el);
        let (lists, per, size) = (20u64, 100u64, 4000usize);
        push_lists(&mut h, lists, per, size);
        let out = output(child);
        let n = lists * per;
        assert_eq!(kv(&out, "buffers"), n.to_string(), "{name}: {out}");
        assert_eq!(
            kv(&out, "bytes"),
            (n * size as u64).to_string(),
            "{name}: {out}"
        );
        assert_eq!(kv(&out, "missed"), "0", "{name}: {out}");
        assert_eq!(kv(&out, "end"), "eos", "{name}: {out}");
        let packets: u64 = kv(&out, "packets").parse().unwrap();
        let batches: u64 = kv(&out, "batches").parse().unwrap();
        let s = stats(&el);
        assert_eq!(field(&s, "batches"), batches, "{name}: {out}");
        assert!(batches >= lists, "{name}: every list batched: {out}");
        assert!(
            packets < n / 4,
            "{name}: {packets} packets for {n} buffers: {out}"
        );
        if name == "burstbig" {
            // A list splits only where the sink waits (a consumer at max-held, slots
            // all taken); the consumer releases as it goes, so the lists go in few
            // packets each. How few depends on how fast the consumer process runs: 26 to
            // 55 for the 20 lists in five runs here, 64 once in a CI run. Unbatched
            // would be one per buffer (2000).
            assert!(
                packets <= 5 * lists,
                "{name}: a few packets per list: {out}"
            );
        }
        wait_consumers(&el, 0);
    }
}

#[test]
fn single_buffers_go_one_per_packet_at_once() {
    // No list, a consumer that keeps up: each buffer is sent as it comes, never held
    // back for a batch.
    let path = socket("single");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut c = connect_attached(&path, &el);
    for i in 0..20u64 {
        h.push(buffer(i * 300, 300, i)).unwrap();
        let v = next_buffer(&mut c);
        assert_eq!(v.msg.pts, i);
        assert_eq!(v.as_ref(), &pattern(i * 300, 300)[..]);
    }
    assert_eq!(field(&stats(&el), "batches"), 0);
}

#[test]
fn a_killed_consumer_is_counted_and_its_buffers_come_back() {
    let path = socket("killc");
    let (mut h, el) = sink_harness(&path, &[("max-held", "4"), ("copy-slots", "8")]);
    // Holds each buffer for a long time: the block-mode producer waits on it.
    let mut child = peer_reader(&path, &["--hold-ms", "60000"], Stdio::null(), &el);
    h.push(buffer(0, 1000, 0)).unwrap();
    wait_for("held", || field(&stats(&el), "pool-in-use") == 1);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for("the loss", || field(&stats(&el), "consumers-lost") == 1);
    let s = stats(&el);
    assert_eq!(field(&s, "consumers"), 0);
    assert_eq!(
        field(&s, "pool-in-use"),
        0,
        "its references were dropped: {s}"
    );
    // The producer goes on, and a new consumer gets the next buffer.
    let mut c = connect_attached(&path, &el);
    for i in 0..20 {
        h.push(buffer(i, 1000, i)).unwrap();
        drop(next_buffer(&mut c));
    }
}

#[test]
fn a_block_mode_consumer_that_holds_its_limit_holds_the_producer_until_it_dies() {
    let path = socket("block");
    let (mut h, el) = sink_harness(&path, &[("max-held", "2")]);
    let mut child = peer_reader(&path, &["--hold-ms", "60000"], Stdio::null(), &el);
    // The child reads one buffer and sleeps holding it; the second is queued in its
    // socket (held too, from the producer's view): the third push waits.
    h.push(buffer(0, 100, 0)).unwrap();
    h.push(buffer(0, 100, 1)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pusher = std::thread::spawn(move || {
        h.push(buffer(0, 100, 2)).unwrap();
        tx.send(()).unwrap();
        h
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "the producer waits for the consumer"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the consumer's death frees the producer");
    drop(pusher.join().unwrap());
}

#[test]
fn in_drop_mode_a_stuck_consumer_misses_buffers_and_nobody_waits() {
    let path = socket("drop");
    let (mut h, el) = sink_harness(&path, &[("on-full", "drop"), ("max-held", "4")]);
    let mut fast = connect(&path);
    let mut stuck = connect(&path);
    wait_consumers(&el, 2);
    let n = 100u64;
    let mut kept = Vec::new();
    let start = Instant::now();
    for i in 0..n {
        h.push(buffer(i, 1000, i)).unwrap();
        drop(next_buffer(&mut fast));
        // Wait until the fast one's release is in, so that only the stuck one (which
        // never releases) is ever at its limit.
        wait_for("the release", || field(&stats(&el), "released") == i + 1);
        // The stuck one reads what reaches it but never releases.
        while let Ok(Some(Event::Buffer(v))) = stuck.poll_event() {
            kept.push(v);
        }
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    while let Ok(Some(ev)) = stuck.wait_event(100) {
        if let Event::Buffer(v) = ev {
            kept.push(v);
        }
    }
    assert_eq!(kept.len(), 4, "it got its limit");
    let s = stats(&el);
    assert_eq!(field(&s, "drops-held"), n - 4, "{s}");
    assert_eq!(field(&s, "messages"), n + 4);
    // Once it releases, its next buffer says how many it missed.
    drop(kept);
    wait_for("its releases", || field(&stats(&el), "pool-in-use") == 0);
    h.push(buffer(0, 1000, n)).unwrap();
    let v = next_buffer(&mut stuck);
    assert_eq!(v.msg.missed, n - 4);
}

#[test]
fn a_consumer_that_asks_for_drop_never_holds_a_blocking_producer() {
    let path = socket("subscribe");
    let (mut h, el) = sink_harness(&path, &[("max-held", "4")]);
    let mut fast = connect(&path);
    let mut stuck =
        Client::subscribe(&Address::new(&path, false), Some((proto::OnFull::Drop, 2))).unwrap();
    wait_consumers(&el, 2);
    wait_for("its subscribe", || {
        field(&stats(&el), "consumers-drop") == 1
    });
    let mut kept = Vec::new();
    let n = 50u64;
    for i in 0..n {
        h.push(buffer(i, 100, i)).unwrap();
        drop(next_buffer(&mut fast));
        wait_for("the release", || field(&stats(&el), "released") == i + 1);
        while let Ok(Some(ev)) = stuck.poll_event() {
            if let Event::Buffer(v) = ev {
                kept.push(v);
            }
        }
    }
    while let Ok(Some(ev)) = stuck.wait_event(100) {
        if let Event::Buffer(v) = ev {
            kept.push(v);
        }
    }
    assert_eq!(kept.len(), 2, "its own limit");
    assert_eq!(field(&stats(&el), "drops-held"), n - 2);
}

#[test]
fn wait_for_connection_holds_the_first_buffer_until_a_consumer_comes() {
    let path = socket("waitconn");
    let (h, el) = sink_harness(&path, &[("wait-for-connection", "true")]);
    let (tx, rx) = std::sync::mpsc::channel();
    let pusher = std::thread::spawn(move || {
        let mut h = h;
        h.push(buffer(0, 100, 0)).unwrap();
        tx.send(()).unwrap();
        h
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "it waits"
    );
    let mut c = connect(&path);
    rx.recv_timeout(Duration::from_secs(20))
        .expect("a consumer came");
    assert_eq!(next_buffer(&mut c).as_ref(), &pattern(0, 100)[..]);
    assert_eq!(field(&stats(&el), "buffers"), 1);
    drop(pusher.join().unwrap());
}

/// Caps and buffers (by their pts) as a consumer reads them, until `n` buffers came.
fn read_events(c: &mut Client, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let start = Instant::now();
    while out
        .iter()
        .filter(|e: &&String| e.starts_with("buffer"))
        .count()
        < n
    {
        match c.wait_event(100).unwrap() {
            Some(Event::Caps(caps)) => out.push(caps),
            Some(Event::Buffer(v)) => out.push(format!("buffer {}", v.msg.pts)),
            Some(other) => panic!("{other:?}"),
            None => assert!(start.elapsed() < Duration::from_secs(5), "{out:?}"),
        }
    }
    out
}

#[test]
fn a_late_joiner_gets_the_current_caps_then_the_next_buffer_and_caps_changes_reach_all() {
    let path = socket("late");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut early = connect_attached(&path, &el);
    for i in 0..3 {
        h.push(buffer(i, 10, i)).unwrap();
    }
    assert_eq!(
        read_events(&mut early, 3),
        [
            "application/x-test, n=(int)1",
            "buffer 0",
            "buffer 1",
            "buffer 2"
        ]
    );
    let mut late = connect(&path);
    wait_consumers(&el, 2);
    h.push(buffer(3, 10, 3)).unwrap();
    assert_eq!(
        read_events(&mut late, 1),
        ["application/x-test, n=(int)1", "buffer 3"]
    );
    h.set_src_caps_str("application/x-test, n=(int)2");
    h.push(buffer(4, 10, 4)).unwrap();
    assert_eq!(
        read_events(&mut early, 2),
        ["buffer 3", "application/x-test, n=(int)2", "buffer 4"]
    );
    assert_eq!(
        read_events(&mut late, 1),
        ["application/x-test, n=(int)2", "buffer 4"]
    );
}

#[test]
fn a_killed_producer_ends_the_consumer_with_an_error_not_a_hang() {
    let path = socket("killp");
    let mut producer = peer()
        .args(["serve", &path, "4096", "0"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the socket", || std::path::Path::new(&path).exists());
    let pipeline = launch(&format!(
        "fhshmsrc name=src socket-path={path} ! fakesink name=out sync=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let src = pipeline.by_name("src").unwrap();
    wait_for("buffers", || {
        field(&src.property::<gst::Structure>("stats"), "buffers") > 100
    });
    producer.kill().unwrap();
    producer.wait().unwrap();
    let killed = Instant::now();
    let e = run::wait_end(&pipeline.bus().unwrap(), Duration::from_secs(30))
        .expect_err("an error, not EOS");
    // Seen from the hang-up, not from a timer: well within the guard above.
    assert!(killed.elapsed() < Duration::from_secs(10));
    assert!(e.contains("without end-of-stream"), "{e}");
    pipeline.set_state(gst::State::Null).unwrap();
}

#[test]
fn a_consumer_that_lies_is_dropped_and_the_others_lose_nothing() {
    let path = socket("liar");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut good = connect_attached(&path, &el);
    let liars: Vec<Vec<u8>> = vec![
        vec![0xee, 1, 2], // no such message
        {
            let mut o = Vec::new();
            proto::encode(&Msg::Eos, &mut o).unwrap();
            o
        }, // a producer's message
        vec![16, 5, 0, 1], // release cut short
    ];
    for (i, lie) in liars.iter().enumerate() {
        let fd = wire::connect(&Address::new(&path, false)).unwrap();
        wait_consumers(&el, 2);
        wire::send(fd.as_fd(), lie, None).unwrap();
        wait_for("the disconnect", || {
            field(&stats(&el), "consumers-malformed") == i as u64 + 1
        });
        h.push(buffer(i as u64, 500, i as u64)).unwrap();
        let v = next_buffer(&mut good);
        assert_eq!(v.as_ref(), &pattern(i as u64, 500)[..]);
    }
    assert_eq!(field(&stats(&el), "consumers"), 1);
}

#[test]
fn a_producer_that_lies_gets_a_clear_error() {
    init();
    let (path, listener) = fake_producer("lyingproducer");
    let src = gst::ElementFactory::make("fhshmsrc")
        .property("socket-path", &path)
        .build()
        .unwrap();
    let pipeline = gst::Pipeline::new();
    let fakesink = gst::ElementFactory::make("fakesink").build().unwrap();
    pipeline.add_many([&src, &fakesink]).unwrap();
    src.link(&fakesink).unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let conn = accept(&listener);
    wire::send(conn.as_fd(), &hello_bytes(proto::VERSION), None).unwrap();
    // A buffer in a segment that was never announced.
    let mut o = Vec::new();
    proto::encode(
        &Msg::Buffer(proto::BufferMsg {
            segment: 9,
            len: 10,
            ..Default::default()
        }),
        &mut o,
    )
    .unwrap();
    wire::send(conn.as_fd(), &o, None).unwrap();
    let e = run::wait_end(&pipeline.bus().unwrap(), Duration::from_secs(5)).expect_err("an error");
    assert!(e.contains("segment 9, never announced"), "{e}");
    pipeline.set_state(gst::State::Null).unwrap();
}

/// A socket path for a fake producer, and its listener.
fn fake_producer(name: &str) -> (String, std::os::fd::OwnedFd) {
    let path = socket(name);
    let listener = wire::listen(&Address::new(&path, false), 0o600).unwrap();
    (path, listener)
}

/// The fake producer's end of the next connection to `listener`.
fn accept(listener: &std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    let mut conn = None;
    wait_for("the connect", || {
        conn = wire::accept(listener.as_fd()).unwrap();
        conn.is_some()
    });
    conn.unwrap()
}

/// A producer's hello, saying protocol `version`.
fn hello_bytes(version: u16) -> Vec<u8> {
    let mut o = Vec::new();
    proto::encode(
        &Msg::Hello {
            version: proto::VERSION,
            consumer: 1,
            on_full: proto::OnFull::Block,
            max_held: 4,
        },
        &mut o,
    )
    .unwrap();
    o[5..7].copy_from_slice(&version.to_le_bytes());
    o
}

/// A batch of two end-of-stream messages whose count says `count`.
fn batch_bytes(count: u16) -> Vec<u8> {
    let mut b = proto::Batch::default();
    let mut o = Vec::new();
    proto::encode(&Msg::Caps("a/b".into()), &mut o).unwrap();
    b.push(&o);
    proto::encode(&Msg::Eos, &mut o).unwrap();
    b.push(&o);
    let mut p = b.packet().to_vec();
    p[1..3].copy_from_slice(&count.to_le_bytes());
    p
}

#[test]
fn consumers_refuse_a_lying_batch_and_another_protocol_version_with_a_clear_error() {
    let script = "\
        try:\n    item = c.next()\n    print('caps=%s end=%s' % (c.caps, item))\nexcept ProtocolError as e:\n    print('refused:', e)\n";
    for (name, packets, rust, python) in [
        (
            "batchok",
            vec![hello_bytes(proto::VERSION), batch_bytes(2)],
            "eos",
            "caps=a/b end=None",
        ),
        (
            "batchlie",
            vec![hello_bytes(proto::VERSION), batch_bytes(3)],
            "batch message length",
            "refused: a batch cut short",
        ),
        (
            "batchzero",
            vec![hello_bytes(proto::VERSION), batch_bytes(0)],
            "an empty batch",
            "refused: a batch of 0 messages",
        ),
        (
            "version1",
            vec![hello_bytes(1)],
            "protocol version 1, this side speaks 2 to 3",
            "refused: not a Firehose shared-memory producer of protocol version 2 or 3 (it speaks 1)",
        ),
    ] {
        // The Rust client.
        let (path, listener) = fake_producer(name);
        let mut c = Client::connect(&Address::new(&path, false)).unwrap();
        let conn = accept(&listener);
        for p in &packets {
            wire::send(conn.as_fd(), p, None).unwrap();
        }
        let got = within(name, 5, || match c.wait_event(100) {
            Ok(Some(Event::Eos)) => Some("eos".to_string()),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        });
        assert!(got.contains(rust), "{name}: {got}");
        // The Python consumer.
        if !python_path().exists() {
            continue;
        }
        let (path, listener) = fake_producer(&format!("py{name}"));
        let child = consumer_script(5, script, &path).spawn().unwrap();
        let conn = accept(&listener);
        for p in &packets {
            wire::send(conn.as_fd(), p, None).unwrap();
        }
        let out = output(child);
        assert!(out.contains(python), "{name}: {out}");
    }
}

/// A memfd of `len` bytes with `seals` (0: made without `MFD_ALLOW_SEALING`).
fn memfd(len: u64, seals: libc::c_int) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd};
    let flags = libc::MFD_CLOEXEC
        | if seals != 0 {
            libc::MFD_ALLOW_SEALING
        } else {
            0
        };
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"fhshm-test".as_ptr(), flags) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizes and seals our own descriptor; no pointers.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
        }
    }
    fd
}

/// A fake producer at a fresh socket that says hello and announces one segment of
/// `size` bytes with `fd`; the connection, kept open until dropped.
fn fake_producer_announcing(
    listener: &std::os::fd::OwnedFd,
    fd: std::os::fd::BorrowedFd<'_>,
    size: u64,
) -> std::os::fd::OwnedFd {
    let conn = accept(listener);
    wire::send(conn.as_fd(), &hello_bytes(proto::VERSION), None).unwrap();
    let mut o = Vec::new();
    proto::encode(&Msg::Segment { id: 1, size }, &mut o).unwrap();
    wire::send(conn.as_fd(), &o, Some(fd)).unwrap();
    conn
}

/// What a client says of a segment announced with `fd` as `size` bytes.
fn client_error_for_segment(name: &str, fd: std::os::fd::BorrowedFd<'_>, size: u64) -> String {
    let (path, listener) = fake_producer(name);
    let mut c = Client::connect(&Address::new(&path, false)).unwrap();
    let _conn = fake_producer_announcing(&listener, fd, size);
    let e = within("an error", 5, || c.wait_event(100).err());
    assert!(matches!(e, ClientError::Protocol(_)), "{e}");
    assert_eq!(c.segments(), 0, "nothing mapped");
    e.to_string()
}

#[test]
fn a_segment_size_that_the_descriptor_does_not_back_is_refused() {
    let fd = memfd(4096, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
    let e = client_error_for_segment("shortseg", fd.as_fd(), 8192);
    assert!(e.contains("whose file has"), "{e}");
}

#[test]
fn a_segment_not_sealed_against_shrinking_is_refused() {
    // A memfd that could be cut under the consumer's mapping (SIGBUS on access).
    let unsealed = memfd(4096, 0);
    let e = client_error_for_segment("unsealed", unsealed.as_fd(), 4096);
    assert!(e.contains("not sealed against shrinking"), "{e}");
    // Sealed, but only against growing.
    let grow_only = memfd(4096, libc::F_SEAL_GROW);
    let e = client_error_for_segment("growonly", grow_only.as_fd(), 4096);
    assert!(e.contains("F_SEAL_SHRINK missing"), "{e}");
    // Not a memfd at all: a regular file cannot be sealed.
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    let e = client_error_for_segment("notmemfd", file.as_fd(), 4096);
    assert!(e.contains("cannot be sealed"), "{e}");
    // Sealed against shrinking: mapped.
    let (path, listener) = fake_producer("sealedok");
    let mut c = Client::connect(&Address::new(&path, false)).unwrap();
    let sealed = memfd(4096, libc::F_SEAL_SHRINK);
    let _conn = fake_producer_announcing(&listener, sealed.as_fd(), 4096);
    wait_for("the segment", || {
        c.poll_event().unwrap();
        c.segments() == 1
    });
}

#[test]
fn the_sinks_segments_are_sealed() {
    let path = socket("sealedsink");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut c = connect_attached(&path, &el);
    h.push(buffer(0, 1000, 0)).unwrap();
    // The client maps only sealed segments: a buffer arriving proves the seal.
    let v = next_buffer(&mut c);
    assert_eq!(v.as_ref(), &pattern(0, 1000)[..]);
    // And the seals are all three: no size change, no seal added by a consumer.
    let mut raw = Vec::new();
    let fd = wire::connect(&Address::new(&path, false)).unwrap();
    let mut buf = vec![0u8; proto::MAX_MESSAGE];
    wait_for("the segment", || {
        let _ = wire::recv(fd.as_fd(), &mut buf, &mut raw).unwrap();
        !raw.is_empty()
    });
    assert_eq!(
        wire::seals(raw[0].as_fd()).unwrap(),
        firehose_core::provider::SEGMENT_SEALS
    );
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn map_count() -> usize {
    let mut s = String::new();
    std::fs::File::open("/proc/self/maps")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    s.lines().count()
}

#[test]
fn a_thousand_connects_leak_no_descriptor_and_no_mapping() {
    let path = socket("thousand");
    let (mut h, el) = sink_harness(&path, &[("on-full", "drop")]);
    // A first buffer to a consumer makes the copy pool's segment.
    let mut first = connect_attached(&path, &el);
    h.push(buffer(0, 100, 0)).unwrap();
    drop(next_buffer(&mut first));
    drop(first);
    // Warm up (first connects allocate lazily-made things), then measure.
    for _ in 0..4 {
        drop(connect(&path));
    }
    wait_consumers(&el, 0);
    let (fds, maps) = (fd_count(), map_count());
    for i in 0..1000u64 {
        let mut c = connect(&path);
        wait_for("the segment", || {
            let _ = c.poll_event();
            c.segments() == 1
        });
        if i % 100 == 0 {
            // It has its hello, so it is attached or being attached under the hub's
            // lock, which the push takes: once the count is not 0, it gets the buffer.
            wait_for("attach", || field(&stats(&el), "consumers") >= 1);
            h.push(buffer(i, 100, i)).unwrap();
            drop(next_buffer(&mut c));
        }
    }
    wait_consumers(&el, 0);
    // Some of the quickly closed ones may be gone before their set-up finished.
    assert!(field(&stats(&el), "consumers-total") > 900);
    // Counted for the whole process, where other tests run at the same time: a few
    // come and go; a leak per connect would show a thousand.
    let (fds2, maps2) = (fd_count(), map_count());
    assert!(fds2 <= fds + 50, "descriptors: {fds} before, {fds2} after");
    assert!(maps2 <= maps + 50, "mappings: {maps} before, {maps2} after");
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python_path() -> PathBuf {
    repo_root().join(".venv/bin/python3")
}

/// The repository venv's `python3 ARGS…` (which must be there), with the repository's
/// `python/` on its path and its stdout piped for [`output`].
fn python<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Command {
    let py = python_path();
    assert!(
        py.exists(),
        "{} is missing: python3 -m venv .venv && .venv/bin/pip install numpy (or: scripts/setup test)",
        py.display()
    );
    let mut cmd = Command::new(py);
    cmd.args(args)
        .env("PYTHONPATH", repo_root().join("python"))
        .stdout(Stdio::piped());
    cmd
}

/// [`python`] running `script` after `import sys`, an import of `Consumer` and
/// `ProtocolError` from firehose_shm, and `c = Consumer(path, timeout=...)`.
fn consumer_script(timeout_s: u32, script: &str, path: &str) -> Command {
    let script = format!(
        "import sys\nfrom firehose_shm import Consumer, ProtocolError\n\
         c = Consumer(sys.argv[1], timeout={timeout_s})\n{script}"
    );
    python(["-c", &script, path])
}

/// What `fhshm-peer read ADDRESS --max 1` prints, run as nobody from a copy of the
/// binary in the temporary directory (named after `tag`).
fn read_as_nobody(tag: &str, address: &str) -> String {
    use std::os::unix::process::CommandExt;
    let bin = std::env::temp_dir().join(format!("fhshm-{tag}-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_fhshm-peer"), &bin).unwrap();
    let out = Command::new(&bin)
        .args(["read", address, "--max", "1"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn another_uid_is_refused() {
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test runs the consumer as nobody, which needs root (CI runs as root)");
    }
    let name = format!("fhshm-uid-{}", std::process::id());
    let (_h, el) = sink_harness(&name, &[("abstract", "true")]);
    // An abstract socket has no permissions: only SO_PEERCRED stands in the way.
    let out = read_as_nobody("peer", &format!("@{name}"));
    assert!(out.contains("refused: uid Some(65534)"), "{out}");
    assert_eq!(field(&stats(&el), "consumers-refused"), 1);
    assert_eq!(field(&stats(&el), "consumers-total"), 0);
    // A socket file with mode 0600 keeps it from even connecting.
    let path = socket("uidfile");
    let (_h2, _) = sink_harness(&path, &[]);
    let dir = std::path::Path::new(&path).parent().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = read_as_nobody("peer2", &path);
    assert!(out.contains("Permission denied"), "{out}");
}

/// Runs examples/shm_consumer.py against a block-mode sink whose consumer may hold
/// `max_held` buffers: more buffers than that only get through if the consumer releases
/// them (`release`: `with` blocks, or the arrays being collected).
fn python_consumer(name: &str, release: &str, max_held: &str) {
    let path = socket(name);
    let (mut h, el) = sink_harness(&path, &[("max-held", max_held)]);
    let child = python([repo_root().join("examples/shm_consumer.py")])
        .args(["--socket", &path, "--check", "--release", release])
        .args(["--timeout", "10"])
        .spawn()
        .unwrap();
    wait_consumers(&el, 1);
    let (n, size) = (300u64, 100_000usize);
    for i in 0..n {
        let mut b = buffer(i * size as u64, size, i);
        add_message(b.get_mut().unwrap(), i, true, size as u64);
        h.push(b).unwrap();
    }
    h.push_event(gst::event::Eos::new());
    let out = output(child);
    assert_eq!(kv(&out, "bytes"), (n * size as u64).to_string(), "{out}");
    assert_eq!(kv(&out, "buffers"), n.to_string(), "{out}");
    assert_eq!(kv(&out, "messages"), n.to_string(), "message metas: {out}");
    assert_eq!(kv(&out, "end"), "eos", "{out}");
    wait_for("releases", || field(&stats(&el), "pool-in-use") == 0);
}

#[test]
fn the_python_consumer_reads_every_byte_without_gstreamer() {
    python_consumer("python", "with", "64");
}

#[test]
fn the_python_consumer_releases_an_item_when_its_array_is_collected() {
    python_consumer("pythongc", "gc", "4");
}

#[test]
fn the_python_consumer_refuses_a_segment_not_sealed_against_shrinking() {
    for (name, seals, expect) in [
        ("pyunsealed", 0, "not sealed against shrinking"),
        ("pysealed", libc::F_SEAL_SHRINK, "segments=1"),
    ] {
        let (path, listener) = fake_producer(name);
        let script = "\
            try:\n    c.next()\nexcept ProtocolError as e:\n    print('refused:', e)\n\
            except TimeoutError:\n    print('segments=%d' % len(c.segments))\n";
        let child = consumer_script(1, script, &path).spawn().unwrap();
        let fd = memfd(4096, seals);
        let _conn = fake_producer_announcing(&listener, fd.as_fd(), 4096);
        let out = output(child);
        assert!(out.contains(expect), "{name}: {out}");
    }
}

/// Reads `n` buffers, dropping each at once (as a consumer that keeps up does), then
/// waits until the sink has every release back; the sink's stats.
fn read_and_release(h: &mut Harness, el: &gst::Element, c: &mut Client, n: u64) -> gst::Structure {
    let (mut got, before) = (0u64, field(&stats(el), "released"));
    for round in 0..n / 40 {
        for i in 0..40 {
            let k = round * 40 + i;
            h.push(buffer(k * 100, 100, k)).unwrap();
        }
        for _ in 0..40 {
            let v = next_buffer(c);
            assert_eq!(v.as_ref(), &pattern(got * 100, 100)[..]);
            assert_eq!(v.msg.pts, got);
            got += 1;
        }
    }
    wait_for("every release", || {
        let _ = c.wait_event(5);
        field(&stats(el), "released") == before + n
    });
    stats(el)
}

#[test]
fn releases_travel_in_batches_and_the_producer_takes_both() {
    let path = socket("batch");
    let (mut h, el) = sink_harness(&path, &[("max-held", "256"), ("copy-slots", "64")]);
    // Release messages are the socket's way: no rings here (see
    // `a_ring_consumer_makes_no_system_call_per_buffer_while_busy` for those).
    let mut c = connect_ring(&path, false);
    assert_eq!(
        c.releaser().batch(),
        16,
        "an eighth of max-held 256, at most 16"
    );
    wait_consumers(&el, 1);
    let s = read_and_release(&mut h, &el, &mut c, 200);
    let messages = field(&s, "release-messages");
    let (sent, named) = c.releaser().counts();
    assert_eq!((sent, named), (messages, 200));
    // 40 buffers waiting at a time: a few messages per 40, not one per buffer.
    assert!(
        messages <= 50,
        "{messages} release messages for 200 buffers"
    );
    assert!(messages >= 200 / 16, "batches of at most 16: {messages}");
    assert_eq!(field(&s, "releases-unknown"), 0);
    assert_eq!(field(&s, "pool-in-use"), 0);
    // A batch of 1 is a message per buffer, as before batching; the producer takes both.
    let mut one = connect_ring(&path, false);
    one.set_release_batch(1);
    drop(c);
    wait_consumers(&el, 1);
    let before = field(&stats(&el), "release-messages");
    let s = read_and_release(&mut h, &el, &mut one, 200);
    assert_eq!(field(&s, "release-messages") - before, 200);
    assert_eq!(one.releaser().counts(), (200, 200));
}

#[test]
fn a_consumer_that_releases_what_it_does_not_hold_is_counted_and_ignored() {
    let path = socket("liarrelease");
    let (mut h, el) = sink_harness(&path, &[]);
    let mut good = connect(&path);
    let liar = wire::connect(&Address::new(&path, false)).unwrap();
    wait_consumers(&el, 2);
    h.push(buffer(0, 500, 0)).unwrap();
    // The liar reads its buffer message (after hello, segment, caps).
    let (mut buf, mut fds) = (vec![0u8; proto::MAX_MESSAGE], Vec::new());
    let mut seq = None;
    wait_for("the liar's buffer", || {
        if let Ok(wire::Received::Message(n)) = wire::recv(liar.as_fd(), &mut buf, &mut fds) {
            if let Ok(Msg::Buffer(b)) = proto::decode(&buf[..n]) {
                seq = Some(b.seq);
            }
        }
        seq.is_some()
    });
    let seq = seq.unwrap();
    // Releases it twice in one message, then again, plus numbers never sent.
    for lie in [vec![seq, seq, 999_999], vec![seq], vec![u64::MAX, 7]] {
        let mut o = Vec::new();
        proto::encode(&Msg::Release(lie), &mut o).unwrap();
        wire::send(liar.as_fd(), &o, None).unwrap();
    }
    wait_for("the lies read", || {
        field(&stats(&el), "releases-unknown") == 5
    });
    let s = stats(&el);
    assert_eq!(field(&s, "consumers-malformed"), 0);
    assert_eq!(field(&s, "consumers"), 2, "the liar stays attached");
    // The good consumer still holds its buffer: the liar's extra releases freed nothing.
    let v = next_buffer(&mut good);
    assert_eq!(field(&stats(&el), "pool-in-use"), 1);
    drop(v);
    wait_for("the real release", || {
        let _ = good.wait_event(5);
        field(&stats(&el), "pool-in-use") == 0
    });
    h.push(buffer(500, 500, 1)).unwrap();
    assert_eq!(next_buffer(&mut good).as_ref(), &pattern(500, 500)[..]);
}

#[test]
fn the_python_consumer_reads_a_burst_of_lists_complete_and_in_order() {
    let path = socket("pyburst");
    let (mut h, el) = sink_harness(&path, &[("max-held", "256"), ("copy-slots", "256")]);
    let script = "\
        n = ok = 0\n\
        for item in c:\n    with item:\n        ok += int(item.pts == n and item.data[0] == (n * 1000) % 251 and item.data.nbytes == 1000)\n        n += 1\n\
        print('items=%d ok=%d packets=%d batches=%d' % (n, ok, c.packets, c.batches))\n";
    let child = consumer_script(10, script, &path).spawn().unwrap();
    wait_consumers(&el, 1);
    push_lists(&mut h, 10, 100, 1000);
    let out = output(child);
    assert_eq!(kv(&out, "items"), "1000", "{out}");
    assert_eq!(
        kv(&out, "ok"),
        "1000",
        "in order, every byte where it belongs: {out}"
    );
    let batches: u64 = kv(&out, "batches").parse().unwrap();
    assert_eq!(field(&stats(&el), "batches"), batches, "{out}");
    assert!(batches >= 10, "{out}");
    wait_for("every slot back", || field(&stats(&el), "pool-in-use") == 0);
}

#[test]
fn the_python_consumer_batches_its_releases_when_behind() {
    let path = socket("pybatch");
    let (mut h, el) = sink_harness(&path, &[("max-held", "64"), ("copy-slots", "64")]);
    // It reads nothing until told (a line on stdin, once all 40 and the EOS are pushed),
    // so that every buffer waits in its socket however slow the machine.
    let script = "\
        sys.stdin.readline()\n\
        n = 0\n\
        for item in c:\n    with item:\n        n += int(item.data[0] == n % 251)\n\
        c.flush_releases()\n\
        print('items=%d batch=%d messages=%d released=%d' % ((n, c._release.batch) + c.release_counts))\n";
    let mut child = consumer_script(10, script, &path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_consumers(&el, 1);
    for i in 0..40u64 {
        h.push(buffer(i, 100, i)).unwrap();
    }
    h.push_event(gst::event::Eos::new());
    let mut go = child.stdin.take().unwrap();
    go.write_all(b"read\n").unwrap();
    drop(go);
    let out = output(child);
    assert_eq!(kv(&out, "items"), "40", "{out}");
    assert_eq!(kv(&out, "batch"), "8", "an eighth of max-held 64: {out}");
    assert_eq!(kv(&out, "released"), "40", "{out}");
    wait_for("every release", || field(&stats(&el), "released") == 40);
    let messages = field(&stats(&el), "release-messages");
    assert_eq!(kv(&out, "messages"), messages.to_string(), "{out}");
    assert!(
        (5..=20).contains(&messages),
        "{messages} messages for 40: {out}"
    );
}
