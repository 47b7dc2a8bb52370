//! `fhshmsrc` hands a producer's packet batches on as batches only to an element that
//! reads them; any other gets one buffer per datagram, as a packet source does with
//! `output=auto`.

use std::sync::Once;
use std::time::{Duration, Instant};

use firehose_core::stats::field;
use firehose_core::{PacketBatchMeta, PacketInfo};
use gst::prelude::*;
use gst_check::Harness;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        for (name, t) in [
            ("fhshmsink", firehose_shm::shmsink::ShmSink::static_type()),
            ("fhshmsrc", firehose_shm::shmsrc::ShmSrc::static_type()),
        ] {
            gst::Element::register(None, name, gst::Rank::NONE, t).unwrap();
        }
    });
}

/// A batch of three datagrams in slots of 16 bytes, the rest of each slot unused.
fn batch() -> gst::Buffer {
    let mut data = vec![b'_'; 48];
    data[..4].copy_from_slice(b"aaaa");
    data[16..22].copy_from_slice(b"bbbbbb");
    data[32..34].copy_from_slice(b"cc");
    let mut b = gst::Buffer::from_mut_slice(data);
    let info = |offset, len, src: &str| PacketInfo {
        offset,
        len,
        src: src.parse::<std::net::SocketAddr>().unwrap().into(),
        ..Default::default()
    };
    PacketBatchMeta::add(
        b.get_mut().unwrap(),
        vec![
            info(0, 4, "10.0.0.1:7000"),
            info(16, 6, "[fd00::2]:7001"),
            info(32, 2, "0.0.0.0:0"), // a sender the producer did not know
        ],
    );
    b
}

/// Serves one batch through fhshmsink to an fhshmsrc whose harness sink has
/// `sink_caps` (None: ANY, as filesink); returns what the consumer pulled and its caps.
fn serve(name: &str, sink_caps: Option<gst::Caps>, n: usize) -> (Vec<gst::Buffer>, gst::Caps) {
    serve_to(name, sink_caps, n, |_| {})
}

/// [`serve`], with `prepare` given the fhshmsrc before it starts.
fn serve_to(
    name: &str,
    sink_caps: Option<gst::Caps>,
    n: usize,
    prepare: impl FnOnce(&gst::Element),
) -> (Vec<gst::Buffer>, gst::Caps) {
    init();
    let dir = std::env::temp_dir().join(format!("fhshm-batches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name).to_string_lossy().into_owned();
    let sink = gst::ElementFactory::make("fhshmsink")
        .property("socket-path", &path)
        .build()
        .unwrap();
    let mut h = Harness::with_element(&sink, Some("sink"), None);
    h.set_src_caps(firehose_core::caps::packets_caps());
    h.play();
    let src = gst::ElementFactory::make("fhshmsrc")
        .property("socket-path", &path)
        .build()
        .unwrap();
    prepare(&src);
    let mut hs = Harness::with_element(&src, None, Some("src"));
    if let Some(c) = sink_caps {
        hs.set_sink_caps(c);
    }
    hs.play();
    let start = Instant::now();
    while field(&sink.property::<gst::Structure>("stats"), "consumers") < 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "no consumer");
        std::thread::sleep(Duration::from_millis(5));
    }
    h.push(batch()).unwrap();
    let got: Vec<gst::Buffer> = (0..n).map(|_| hs.pull().unwrap()).collect();
    let caps = src.static_pad("src").unwrap().current_caps().unwrap();
    (got, caps)
}

#[test]
fn a_stock_consumer_gets_the_datagrams_one_per_buffer() {
    let (got, caps) = serve("stock", None, 3);
    assert_eq!(
        caps.structure(0).unwrap().name(),
        "application/octet-stream"
    );
    let bytes: Vec<Vec<u8>> = got
        .iter()
        .map(|b| b.map_readable().unwrap().to_vec())
        .collect();
    assert_eq!(
        bytes,
        [b"aaaa".to_vec(), b"bbbbbb".to_vec(), b"cc".to_vec()]
    );
    // Each with its sender, as udpsrc's buffers (GstNetAddressMeta), where known.
    let senders: Vec<Option<std::net::SocketAddr>> = got
        .iter()
        .map(|b| {
            let a = b.meta::<gst_net::NetAddressMeta>()?.addr();
            Some(
                a.downcast::<gst_net::gio::InetSocketAddress>()
                    .unwrap()
                    .into(),
            )
        })
        .collect();
    assert_eq!(
        senders,
        [
            Some("10.0.0.1:7000".parse().unwrap()),
            Some("[fd00::2]:7001".parse().unwrap()),
            None
        ]
    );
}

#[test]
fn a_consumer_that_asks_for_batches_gets_them() {
    init();
    let (got, caps) = serve("batch", Some(firehose_core::caps::packets_caps()), 1);
    assert_eq!(
        caps.structure(0).unwrap().name(),
        firehose_core::caps::PACKETS
    );
    assert_eq!(got[0].meta::<PacketBatchMeta>().unwrap().packets().len(), 3);
    // The readable batch meta is made again on this side: Python and C read it.
    let readable = firehose_core::meta::readable::batch(&got[0]).expect("FirehoseBatchMeta");
    assert_eq!(readable.get::<u64>("packets"), Ok(3));
}

/// A consumer that reads only the Rust metas (every Firehose consumer says so in the
/// allocation query; a probe says it here) gets the batch without the readable meta.
#[test]
fn a_firehose_consumer_gets_no_readable_meta() {
    init();
    let declare = |src: &gst::Element| {
        src.static_pad("src")
            .unwrap()
            .add_probe(gst::PadProbeType::QUERY_DOWNSTREAM, |_, info| {
                if let Some(gst::PadProbeData::Query(q)) = info.data.as_mut() {
                    if let gst::QueryViewMut::Allocation(a) = q.view_mut() {
                        firehose_core::meta::readable::declare_rust_only(a);
                        return gst::PadProbeReturn::Handled;
                    }
                }
                gst::PadProbeReturn::Ok
            });
    };
    let (got, _) = serve_to(
        "rust-only",
        Some(firehose_core::caps::packets_caps()),
        1,
        declare,
    );
    assert_eq!(got[0].meta::<PacketBatchMeta>().unwrap().packets().len(), 3);
    assert!(firehose_core::meta::readable::batch(&got[0]).is_none());
}
