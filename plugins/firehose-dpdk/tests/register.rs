//! The plugin registers both elements, and registering touches no DPDK state: the EAL
//! starts only when an element starts (so gst-inspect and plugin scans stay cheap).

use gst::prelude::*;

#[test]
fn registers_both_elements_without_starting_dpdk() {
    gst::init().unwrap();
    gstfirehosedpdk::register_static().unwrap();
    for name in ["fhdpdksrc", "fhdpdksink"] {
        let f = gst::ElementFactory::find(name).unwrap_or_else(|| panic!("{name} registered"));
        let el = f.create().build().unwrap();
        assert!(el.find_property("eal-args").is_some());
        assert!(el.find_property("stats").is_some());
        // Src pads name what they produce (packet batches or plain datagrams).
        for t in f.static_pad_templates() {
            if t.direction() == gst::PadDirection::Src {
                assert!(!t.caps().is_any(), "{name}: src template is ANY");
            }
        }
        for pad in el.src_pads() {
            assert!(!pad.query_caps(None).is_any(), "{name}: src caps ANY");
        }
    }
    // No EAL thread was started by registering or creating elements.
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .collect();
    assert!(
        !threads
            .iter()
            .any(|t| t.starts_with("fh-dpdk-eal") || t.starts_with("eal-intr")),
        "{threads:?}"
    );
}
