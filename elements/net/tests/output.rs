//! What `fhudpsrc` negotiates with what is downstream (`output=auto`): stock elements
//! that take any bytes get exactly the datagrams, one per buffer; an element that asks
//! for `application/x-firehose-packets` gets batches; an explicit `output` wins.
//! Loopback only, port 0.

use std::net::UdpSocket;
use std::time::Duration;

use firehose_core::stats::field;
use firehose_core::PacketBatchMeta;
use firehose_testkit::run;
use gst::prelude::*;

fn init() {
    firehose_core::testing::register_elements(&[(
        "fhudpsrc",
        firehose_net::udpsrc::UdpSrc::static_type(),
    )]);
}

/// Datagrams of varied sizes (1 to 1400 bytes), each byte telling which one it is.
fn datagrams(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = 1 + (i * 97) % 1400;
            (0..len).map(|j| (i * 7 + j) as u8).collect()
        })
        .collect()
}

/// Plays `desc` (its source named `src`), sends `data` to the bound port, waits until
/// the source counted every datagram, then EOS; returns the pipeline at EOS (the
/// caller sets it to NULL).
fn run(desc: &str, data: &[Vec<u8>]) -> gst::Pipeline {
    run_from(desc, data, &[UdpSocket::bind("127.0.0.1:0").unwrap()])
}

/// [`run`], datagram `i` sent from `senders[i % senders.len()]`.
fn run_from(desc: &str, data: &[Vec<u8>], senders: &[UdpSocket]) -> gst::Pipeline {
    init();
    let p = run::launch(desc);
    p.set_state(gst::State::Playing).unwrap();
    let src = p.by_name("src").unwrap();
    let port = src.property::<i32>("port") as u16;
    for (i, d) in data.iter().enumerate() {
        senders[i % senders.len()]
            .send_to(d, ("127.0.0.1", port))
            .unwrap();
        // Paced so that loopback's socket buffer never overflows.
        std::thread::sleep(Duration::from_micros(20));
    }
    run::wait_until(
        Duration::from_secs(10),
        || format!("{desc}: not every datagram arrived"),
        || field(&src.property::<gst::Structure>("stats"), "packets") >= data.len() as u64,
    );
    run::end_stream(&p, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{desc}: {e}"));
    p
}

fn filesink_writes_exactly_the_datagrams(between: &str) {
    let dir = std::env::temp_dir().join(format!(
        "fh-output-{}-{}",
        std::process::id(),
        between.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.bin");
    let data = datagrams(500);
    run(
        &format!(
            "fhudpsrc name=src address=127.0.0.1 port=0 {between} filesink location={}",
            path.display()
        ),
        &data,
    )
    .set_state(gst::State::Null)
    .unwrap();
    let written = std::fs::read(&path).unwrap();
    let sent = data.concat();
    assert_eq!(written.len(), sent.len(), "bytes written vs bytes sent");
    assert!(written == sent, "the file holds the datagrams, in order");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn filesink_gets_exactly_the_datagram_bytes() {
    filesink_writes_exactly_the_datagrams("!");
}

/// What `output=auto` exists for: a batch spans unused receive slots, so a batch
/// written as bytes is not the datagrams.
#[test]
#[should_panic(expected = "bytes written vs bytes sent")]
fn batches_into_filesink_are_not_the_datagrams() {
    filesink_writes_exactly_the_datagrams("output=batch !");
}

#[test]
fn queue_passes_the_choice_through_to_filesink() {
    filesink_writes_exactly_the_datagrams("! queue !");
}

/// The buffers an appsink after `fhudpsrc <props>` and `between` received, and the
/// caps it saw.
fn appsink_buffers(props: &str, between: &str, data: &[Vec<u8>]) -> (Vec<gst::Buffer>, gst::Caps) {
    appsink_buffers_from(
        props,
        between,
        data,
        &[UdpSocket::bind("127.0.0.1:0").unwrap()],
    )
}

/// [`appsink_buffers`], datagram `i` sent from `senders[i % senders.len()]`.
fn appsink_buffers_from(
    props: &str,
    between: &str,
    data: &[Vec<u8>],
    senders: &[UdpSocket],
) -> (Vec<gst::Buffer>, gst::Caps) {
    let p = run_from(
        &format!(
            "fhudpsrc name=src address=127.0.0.1 port=0 {props} {between} \
             appsink name=sink sync=false wait-on-eos=false max-buffers=0"
        ),
        data,
        senders,
    );
    let sink = p.by_name("sink").unwrap();
    let mut bufs = Vec::new();
    let mut caps = None;
    // Without buffer-list=true, appsink makes one sample of each buffer of a list.
    while let Some(s) = sink.emit_by_name::<Option<gst::Sample>>("try-pull-sample", &[&0u64]) {
        caps = s.caps_owned();
        bufs.push(s.buffer_owned().unwrap());
    }
    let _ = p.set_state(gst::State::Null);
    (bufs, caps.expect("at least one sample"))
}

#[test]
fn appsink_without_caps_gets_one_datagram_per_buffer() {
    let data = datagrams(200);
    let (bufs, caps) = appsink_buffers("", "!", &data);
    assert_eq!(caps_name(&caps), "application/octet-stream");
    let got: Vec<Vec<u8>> = bufs
        .iter()
        .map(|b| b.map_readable().unwrap().to_vec())
        .collect();
    assert_eq!(got, data);
    assert!(bufs.iter().all(|b| b.meta::<PacketBatchMeta>().is_none()));
}

/// The name of the first structure of `caps`.
fn caps_name(caps: &gst::Caps) -> &str {
    caps.structure(0).unwrap().name().as_str()
}

/// The sender in a buffer's `GstNetAddressMeta`, as `udpsrc` attaches it.
fn sender_of(b: &gst::Buffer) -> Option<std::net::SocketAddr> {
    let addr = b.meta::<gst_net::NetAddressMeta>()?.addr();
    Some(
        addr.downcast::<gst_net::gio::InetSocketAddress>()
            .expect("an inet address")
            .into(),
    )
}

#[test]
fn each_datagram_buffer_names_its_sender_as_udpsrc_does() {
    let data = datagrams(300);
    let senders: Vec<UdpSocket> = (0..3)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let (bufs, _) = appsink_buffers_from("", "!", &data, &senders[..1]);
    let from = senders[0].local_addr().unwrap();
    assert_eq!(bufs.len(), data.len());
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(sender_of(b), Some(from), "datagram {i}");
    }
    // Three senders in turn: each datagram names its own.
    let (bufs, _) = appsink_buffers_from("", "! queue !", &data, &senders);
    let got: Vec<Vec<u8>> = bufs
        .iter()
        .map(|b| b.map_readable().unwrap().to_vec())
        .collect();
    assert_eq!(got, data);
    for (i, b) in bufs.iter().enumerate() {
        let want = senders[i % senders.len()].local_addr().unwrap();
        assert_eq!(sender_of(b), Some(want), "datagram {i}");
    }
}

#[test]
fn retrieve_sender_address_false_adds_no_address() {
    let data = datagrams(50);
    let (bufs, _) = appsink_buffers("retrieve-sender-address=false", "!", &data);
    assert_eq!(bufs.len(), data.len());
    assert!(bufs.iter().all(|b| sender_of(b).is_none()));
}

#[test]
fn user_caps_label_the_datagrams() {
    let data = datagrams(20);
    let (bufs, caps) = appsink_buffers("caps=application/x-rtp,media=video", "!", &data);
    assert_eq!(caps_name(&caps), "application/x-rtp");
    assert_eq!(bufs.len(), data.len());
}

/// The datagrams inside batch buffers, checked to be batches.
fn from_batches(bufs: &[gst::Buffer]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for b in bufs {
        firehose_core::batch::for_each_packet(b, |_, d| out.push(d.to_vec()))
            .expect("a batch buffer");
    }
    out
}

#[test]
fn a_peer_that_asks_for_packets_gets_batches() {
    let data = datagrams(200);
    let (bufs, caps) = appsink_buffers(
        "",
        "! capsfilter caps=application/x-firehose-packets !",
        &data,
    );
    assert_eq!(caps_name(&caps), "application/x-firehose-packets");
    assert!(
        bufs.len() < data.len(),
        "batches, not one buffer per datagram"
    );
    assert_eq!(from_batches(&bufs), data);
}

#[test]
fn explicit_output_wins() {
    let data = datagrams(100);
    // Batches into an appsink that would have got datagrams.
    let (bufs, caps) = appsink_buffers("output=batch", "!", &data);
    assert_eq!(caps_name(&caps), "application/x-firehose-packets");
    assert_eq!(from_batches(&bufs), data);
    // Datagrams into an appsink that asks for anything including packets.
    let (bufs, _) = appsink_buffers(
        "output=list",
        "! capsfilter caps=\"application/x-firehose-packets; application/octet-stream\" !",
        &data,
    );
    assert_eq!(bufs.len(), data.len());
}

#[test]
fn a_peer_that_refuses_what_was_chosen_is_an_error_that_says_what_to_set() {
    init();
    let p = run::launch("fhudpsrc address=127.0.0.1 port=0 ! capsfilter name=f ! fakesink");
    // Set after linking: neither batches nor octet-stream datagrams pass.
    p.by_name("f")
        .unwrap()
        .set_property("caps", gst::Caps::new_empty_simple("application/x-rtp"));
    let text = run::play_to_end(&p, Duration::from_secs(10)).expect_err("an error");
    assert!(text.contains("set caps="), "{text}");
}

#[test]
fn the_src_template_is_not_any() {
    init();
    let f = gst::ElementFactory::find("fhudpsrc").unwrap();
    for t in f.static_pad_templates() {
        assert!(!t.caps().is_any(), "{}", t.name_template());
    }
}
