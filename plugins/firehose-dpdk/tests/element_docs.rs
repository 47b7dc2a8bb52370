//! docs/elements.md must describe every property of the DPDK plugin's elements as the
//! code defines them (a separate generated section: the plugin is built only where
//! libdpdk is). Regenerate with:
//! `FIREHOSE_BLESS=1 cargo test -p gstfirehosedpdk --test element_docs`.

#[test]
fn dpdk_element_reference_matches_the_code() {
    gst::init().unwrap();
    gstfirehosedpdk::register_static().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/elements.md");
    firehose_testkit::elementdoc::check_or_bless(
        path.as_ref(),
        "element reference (DPDK plugin)",
        &firehose_testkit::elementdoc::reference("firehosedpdk"),
        "FIREHOSE_BLESS=1 cargo test -p gstfirehosedpdk --test element_docs",
    )
    .unwrap();
}
