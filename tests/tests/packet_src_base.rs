//! The packet-source base class (`GstFhPacketSrc`): the properties it declares keep
//! each subclass's own defaults, bounds and blurbs, are set and read per instance, and
//! sit beside the subclass's own properties on one element.

use firehose_core::src::PacketSrc;
use gst::glib;
use gst::prelude::*;

/// The sources on the base class, with their pool-size default, batch-size maximum,
/// and one counter of their own that their `stats` blurb must name.
const SOURCES: &[(&str, u64, u32, &str)] = &[
    // 8 batches of 64 packets of 1472 bytes.
    ("fhtestsrc", 8 * 64 * 1472, 65536, "batches"),
    ("fhudpsrc", 64 << 20, 1024, "drops-kernel"),
    // 16 slots of 2 MiB.
    ("fhpcapsrc", 16 * (2 << 20), 1024, "records-split"),
    // The device's memory: 16384 UMEM frames of 4096 bytes; 8192 slots of 9728.
    ("fhxdpsrc", 16384 * 4096, 4096, "unjoined"),
    ("fhibvsrc", 8192 * 9728, 4096, "pool-in-use"),
];

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

fn spec(e: &gst::Element, name: &str) -> glib::ParamSpec {
    e.find_property(name)
        .unwrap_or_else(|| panic!("{} has no {name}", e.name()))
}

#[test]
fn each_subclass_keeps_its_own_defaults_bounds_and_blurbs() {
    init();
    for &(name, pool_bytes, batch_max, counter) in SOURCES {
        let e = gst::ElementFactory::make(name).build().unwrap();
        assert!(e.is::<PacketSrc>(), "{name} is a GstFhPacketSrc");
        let pool = spec(&e, "pool-size");
        assert_eq!(
            pool.default_value().get::<u64>().unwrap(),
            pool_bytes,
            "{name}"
        );
        assert_eq!(e.property::<u64>("pool-size"), pool_bytes, "{name}");
        let batch = spec(&e, "batch-size")
            .downcast::<glib::ParamSpecUInt>()
            .unwrap();
        assert_eq!(
            (batch.default_value(), batch.maximum()),
            (64, batch_max),
            "{name}"
        );
        let blurb = spec(&e, "stats").blurb().unwrap().to_string();
        assert!(blurb.contains(counter), "{name}: {blurb}");
        // The spec belongs to the element's own class, not to the base.
        assert_eq!(pool.owner_type(), e.type_(), "{name}");
        for p in [
            "memory",
            "output",
            "caps",
            "readable-metas",
            "stats-interval",
        ] {
            spec(&e, p);
        }
    }
}

#[test]
fn base_and_own_properties_are_set_and_read_per_instance() {
    init();
    let a = gst::ElementFactory::make("fhtestsrc").build().unwrap();
    let b = gst::ElementFactory::make("fhtestsrc").build().unwrap();
    a.set_property("batch-size", 7u32);
    a.set_property("packet-size", 100u32);
    a.set_property("stats-interval", 250u32);
    a.set_property("readable-metas", false);
    a.set_property_from_str("output", "list");
    a.set_property_from_str("memory", "system");
    a.set_property("pool-size", 12345u64);
    assert_eq!(a.property::<u32>("batch-size"), 7);
    assert_eq!(a.property::<u32>("packet-size"), 100);
    assert_eq!(a.property::<u32>("stats-interval"), 250);
    assert!(!a.property::<bool>("readable-metas"));
    assert_eq!(a.property_value("output").serialize().unwrap(), "list");
    assert_eq!(a.property_value("memory").serialize().unwrap(), "system");
    assert_eq!(a.property::<u64>("pool-size"), 12345);
    // The other instance keeps the defaults.
    assert_eq!(b.property::<u32>("batch-size"), 64);
    assert_eq!(b.property::<u32>("packet-size"), 1472);
    assert_eq!(b.property::<u32>("stats-interval"), 1000);
    assert!(b.property::<bool>("readable-metas"));
    assert_eq!(b.property_value("output").serialize().unwrap(), "auto");
    // Before a start, stats hold the element's counters at zero and an empty pool.
    let s = b.property::<gst::Structure>("stats");
    assert_eq!(s.get::<u64>("packets").unwrap(), 0);
    assert_eq!(s.get::<u64>("pool-slots").unwrap(), 0);
    // A udp source's own and base properties side by side.
    let u = gst::ElementFactory::make("fhudpsrc").build().unwrap();
    u.set_property("batch-size", 1000u32);
    u.set_property("port", 0i32);
    assert_eq!(u.property::<u32>("batch-size"), 1000);
}

#[test]
fn stats_after_the_stream_hold_the_counts_and_the_pool() {
    init();
    let pipeline = firehose_testkit::run::launch(
        "fhtestsrc name=src num-packets=100 batch-size=10 packet-size=64 ! fakesink",
    );
    let end = firehose_testkit::run::play_to_end(&pipeline, std::time::Duration::from_secs(30));
    assert_eq!(end, Ok(()), "EOS within 30 s");
    let src = pipeline.by_name("src").unwrap();
    let s = src.property::<gst::Structure>("stats");
    assert_eq!(s.get::<u64>("packets").unwrap(), 100);
    assert_eq!(s.get::<u64>("batches").unwrap(), 10);
    assert_eq!(s.get::<u64>("pool-slots").unwrap(), 8);
}

/// A device source sizes its own memory from the base's pool settings: its `stats`
/// count the slots that `pool-size` (or the deprecated count) asks for, before a start.
#[test]
fn a_device_source_counts_the_slots_the_pool_settings_ask_for() {
    init();
    let e = gst::ElementFactory::make("fhibvsrc").build().unwrap();
    e.set_property("pool-size", 100u64 * 9728);
    let slots = |e: &gst::Element| {
        e.property::<gst::Structure>("stats")
            .get::<u64>("pool-slots")
            .unwrap()
    };
    assert_eq!(slots(&e), 100);
    // The old count sets the count itself, and pool-size then reads count x slot size.
    e.set_property("slots", 7u32);
    assert_eq!(slots(&e), 7);
    assert_eq!(e.property::<u64>("pool-size"), 7 * 9728);
}
