//! Every element's `stats` structure has the same keys whatever its settings and state:
//! a counter that does not apply reads 0 and a text field that is not known reads
//! `none` (docs/metrics.md), so dashboards and scripts never meet a missing key.

use std::collections::BTreeSet;
use std::time::Duration;

use firehose_core::{PacketBatchMeta, PacketInfo};
use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use firehose_testkit::run::{bound_port, wait_end, wait_until};
use gst::prelude::*;
use gst_check::Harness;

fn init() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}

fn keys(el: &gst::Element) -> BTreeSet<String> {
    let s = el.property::<gst::Structure>("stats");
    s.fields().map(|k| k.to_string()).collect()
}

/// Firehose elements with a `stats` property.
fn elements_with_stats() -> Vec<gst::ElementFactory> {
    gst::Registry::get()
        .features_by_plugin("firehose")
        .into_iter()
        .filter_map(|f| f.downcast::<gst::ElementFactory>().ok())
        .filter(|f| {
            f.create()
                .build()
                .is_ok_and(|el| el.find_property("stats").is_some())
        })
        .collect()
}

/// `"<element>: <key>"` for each `stats` field of a fresh element of each factory of
/// [`elements_with_stats`] that `picked` picks, given the element, the key and the value.
fn stats_fields_where(
    mut picked: impl FnMut(&gst::Element, &str, &gst::glib::SendValue) -> bool,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in elements_with_stats() {
        let el = f.create().build().unwrap();
        let s = el.property::<gst::Structure>("stats");
        for (k, v) in s.iter() {
            if picked(&el, k, v) {
                out.insert(format!("{}: {k}", f.name()));
            }
        }
    }
    out
}

#[test]
fn no_setting_changes_the_keys() {
    init();
    let factories = elements_with_stats();
    assert!(factories.len() >= 15, "{} elements", factories.len());
    for f in factories {
        let base = keys(&f.create().build().unwrap());
        let probe = f.create().build().unwrap();
        for p in probe.list_properties() {
            if !p.value_type().is_a(gst::glib::Type::ENUM)
                || !p.flags().contains(gst::glib::ParamFlags::WRITABLE)
            {
                continue;
            }
            let class = gst::glib::EnumClass::with_type(p.value_type()).unwrap();
            for v in class.values() {
                let el = f.create().build().unwrap();
                el.set_property_from_str(p.name(), v.nick());
                assert_eq!(
                    keys(&el),
                    base,
                    "{} with {}={}",
                    f.name(),
                    p.name(),
                    v.nick()
                );
            }
        }
    }
}

/// Batches of a small SPEAD stream (8 heaps of 256 bytes in 64-byte packets).
fn spead_batches() -> Vec<gst::Buffer> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_40, 128).unwrap();
    (1..=8u64)
        .map(|cnt| {
            let payload = vec![cnt as u8; 256];
            let items = [Item::bytes(0x1000, &payload)];
            let mut packets = cfg.heap(cnt, &items).unwrap();
            let mut data = vec![0u8; 4096];
            let mut infos = Vec::new();
            let used = packets.fill(&mut data, |off, len| {
                infos.push(PacketInfo {
                    offset: off as u32,
                    len: len as u32,
                    ..Default::default()
                })
            });
            data.truncate(used);
            let mut buf = gst::Buffer::from_mut_slice(data);
            PacketBatchMeta::add(buf.get_mut().unwrap(), infos);
            buf
        })
        .collect()
}

/// speaddepay in `mode`, fed the stream to the end: its stats keys then.
fn depay_keys_after_running(mode: &str) -> (BTreeSet<String>, gst::Structure) {
    let el = gst::ElementFactory::make("speaddepay").build().unwrap();
    for (k, v) in [
        ("mode", mode),
        ("heaps-per-chunk", "4"),
        ("heap-size", "256"),
        ("hugepages", "off"),
    ] {
        el.set_property_from_str(k, v);
    }
    let before = keys(&el);
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    h.set_src_caps(firehose_core::caps::packets_caps());
    h.play();
    for b in spead_batches() {
        h.push(b).unwrap();
    }
    h.push_event(gst::event::Eos::new());
    let s = el.property::<gst::Structure>("stats");
    let after = keys(&el);
    assert_eq!(
        after, before,
        "speaddepay mode={mode}: keys before and after running"
    );
    (after, s)
}

#[test]
fn speaddepay_has_the_same_keys_in_both_modes() {
    init();
    let (heaps, hs) = depay_keys_after_running("heaps");
    let (chunks, cs) = depay_keys_after_running("chunks");
    assert_eq!(heaps, chunks);
    // The counters did count: each mode's own, the other's reading 0.
    assert_eq!(hs.get::<u64>("heaps").unwrap(), 8, "{hs}");
    assert_eq!(hs.get::<u64>("chunks").unwrap(), 0, "{hs}");
    assert!(cs.get::<u64>("chunks").unwrap() >= 2, "{cs}");
    assert_eq!(cs.get::<u64>("heaps").unwrap(), 8, "{cs}");
    assert_eq!(cs.get::<u64>("too-large").unwrap(), 0, "{cs}");
    assert_eq!(cs.get::<u64>("descriptors").unwrap(), 0, "{cs}");
}

#[test]
fn live_sources_keep_their_keys_once_started_in_every_landing_mode() {
    init();
    for (factory, props) in [
        ("fhspeadsrc", "landing=auto max-heap-size=8388608"),
        ("fhspeadsrc", "landing=on"),
        ("fhspeadsrc", "landing=off"),
        (
            "fhudpchunksrc",
            "handler=spead landing=auto heaps-per-chunk=2 heap-size=2097152 max-chunks=2",
        ),
        ("fhudpchunksrc", "handler=spead landing=off"),
        ("fhudpsrc", "output=batch"),
        ("fhudpsrc", "output=list"),
    ] {
        let pipeline = firehose_testkit::run::launch(&format!(
            "{factory} name=src address=127.0.0.1 port=0 hugepages=off {props} ! fakesink async=false"
        ));
        let src = pipeline.by_name("src").unwrap();
        let before = keys(&src);
        assert_eq!(
            src.property::<gst::Structure>("stats")
                .get::<String>("memory")
                .unwrap(),
            "none",
            "{factory}: not known before start"
        );
        pipeline.set_state(gst::State::Playing).unwrap();
        let (r, _, _) = pipeline.state(gst::ClockTime::from_seconds(10));
        r.unwrap();
        let running = keys(&src);
        let memory = src
            .property::<gst::Structure>("stats")
            .get::<String>("memory")
            .unwrap();
        assert_ne!(memory, "none", "{factory} {props}: started");
        pipeline.set_state(gst::State::Null).unwrap();
        assert_eq!(running, before, "{factory} {props} running");
        assert!(
            factory == "fhudpsrc" || running.contains("packets-landed"),
            "{factory} {props}"
        );
    }
}

#[test]
fn sources_and_recorders_keep_their_keys_once_running() {
    init();
    let dir = firehose_tests::temp_dir("stats-keys");
    let mut sets = Vec::new();
    for format in ["pcap", "pcapng", "raw"] {
        let path = dir.join(format!("t.{format}"));
        let pipeline = firehose_testkit::run::launch(&format!(
            "fhtestsrc name=src num-packets=100 ! fhrecordsink name=rec format={format} location={}",
            path.display()
        ));
        let src = pipeline.by_name("src").unwrap();
        let rec = pipeline.by_name("rec").unwrap();
        let (src_before, rec_before) = (keys(&src), keys(&rec));
        pipeline.set_state(gst::State::Playing).unwrap();
        wait_end(&pipeline.bus().unwrap(), Duration::from_secs(20)).expect("EOS");
        assert_eq!(keys(&src), src_before, "fhtestsrc running");
        assert_eq!(
            keys(&rec),
            rec_before,
            "fhrecordsink format={format} running"
        );
        assert_eq!(
            rec.property::<gst::Structure>("stats")
                .get::<u64>("packets")
                .unwrap(),
            100
        );
        sets.push(keys(&rec));
        pipeline.set_state(gst::State::Null).unwrap();
        assert_eq!(
            keys(&rec),
            rec_before,
            "fhrecordsink format={format} stopped"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        sets.windows(2).all(|w| w[0] == w[1]),
        "same keys in every format"
    );
}

/// The case the issue reported: `fhspeadsrc landing=auto` receiving heaps over 2 MiB
/// (which auto does not land) still lists `packets-landed`, reading 0.
#[test]
fn fhspeadsrc_lists_packets_landed_when_auto_does_not_land() {
    init();
    let pipeline = firehose_testkit::run::launch(
        "fhspeadsrc name=src address=127.0.0.1 port=0 landing=auto max-heap-size=8388608 \
         memory=system ! fakesink name=sink async=false",
    );
    let src = pipeline.by_name("src").unwrap();
    let before = keys(&src);
    pipeline.set_state(gst::State::Playing).unwrap();
    let port = bound_port(&src, Duration::from_secs(10));
    // Two heaps of 3 MiB, paced.
    let cfg = PacketConfig::new(Flavour::SPEAD_64_40, 8192).unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let payload = vec![7u8; 3 << 20];
    for cnt in 1..=2u64 {
        let items = [Item::bytes(0x1000, &payload)];
        let mut packets = cfg.heap(cnt, &items).unwrap();
        let mut buf = vec![0u8; 8192];
        let mut k = 0;
        while let Some(len) = packets.write_next(&mut buf) {
            tx.send_to(&buf[..len], ("127.0.0.1", port)).unwrap();
            k += 1;
            if k % 32 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let stats = || src.property::<gst::Structure>("stats");
    wait_until(
        Duration::from_secs(10),
        || format!("no heap: {}", stats()),
        || stats().get::<u64>("heaps").unwrap() >= 1,
    );
    let s = stats();
    let running = keys(&src);
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(running, before, "{s}");
    assert_eq!(s.get::<u64>("packets-landed").unwrap(), 0, "{s}");
    assert!(s.get::<u64>("packets-copied").unwrap() > 0, "{s}");
}

/// The `stats` blurb lists every key the structure holds (`pool-*` standing for the
/// pool's): the blurb is generated from the same definitions as the structure, so a
/// counter added to an engine shows up in `gst-inspect-1.0` and docs/elements.md.
#[test]
fn the_stats_blurb_names_every_key() {
    init();
    let missing = stats_fields_where(|el, k, _| {
        let stats = el.find_property("stats").unwrap();
        let blurb = stats.blurb().unwrap_or("");
        let listed: BTreeSet<&str> = blurb
            .split([',', ':', ';', '(', ')'])
            .map(str::trim)
            .collect();
        let pooled = k.starts_with("pool-") && listed.contains("pool-*");
        !pooled && !listed.contains(k)
    });
    assert!(
        missing.is_empty(),
        "keys not in the stats blurb: {missing:?}"
    );
}

/// Every numeric `stats` field of every element is declared in the one catalogue of
/// statistics (`firehose_core::stats::CATALOGUE`), so that the metrics endpoint gives it
/// its type and help and docs/metrics.md lists it: a counter an element adds without
/// declaring it fails here, not as a help-less series in a dashboard.
#[test]
fn every_numeric_stats_field_is_in_the_catalogue() {
    init();
    let missing = stats_fields_where(|_, k, v| {
        let numeric = v.get::<u64>().is_ok() || v.get::<u32>().is_ok() || v.get::<i64>().is_ok();
        numeric && firehose_core::stats::stat(k).is_none()
    });
    assert!(
        missing.is_empty(),
        "stats fields not in firehose_core::stats::CATALOGUE: {missing:?}"
    );
}
