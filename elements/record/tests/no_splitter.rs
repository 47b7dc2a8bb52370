//! fhpcapsrc without firehose-spead: record depends on core only, so `split=spead`
//! finds its splitter by name, and a process that registered none says so at start.
//! (Its own test binary: the other tests' plugin registers spead, and registration
//! lasts for the process.)

mod common;

use std::time::Duration;

use common::{classic_pcap, frame, play_to_end, TempDir};
use firehose_core::split::{DatagramSplitter, Partial};

const T0: u64 = 1_700_000_000_000_000_000;

fn run(desc: &str) -> Result<(), String> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        // The elements alone: not common::init, whose plugin registers spead.
        firehose_record::register_elements(None).unwrap();
    });
    play_to_end(
        &firehose_testkit::run::launch(desc),
        Duration::from_secs(10),
    )
}

#[test]
fn split_spead_without_its_splitter_fails_at_start_naming_the_registered_ones() {
    let dir = TempDir::new("src-no-splitter");
    let frames = vec![(T0, frame("1.1.1.1:1", "2.2.2.2:2", b"abc"))];
    let path = dir.write("x.pcap", &classic_pcap(&frames, true, false));

    let e = run(&format!(
        "fhpcapsrc location={} pace=max ! fakesink sync=false",
        path.display()
    ))
    .unwrap_err();
    assert!(
        e.contains("'spead' datagram splitter")
            && e.contains("registered: none")
            && e.contains("split=none"),
        "{e}"
    );

    // What is registered is named: a splitter of another crate.
    struct Whole;
    impl DatagramSplitter for Whole {
        fn packet(&self) -> &str {
            "whole"
        }
        fn split(&self, d: &[u8], lens: &mut Vec<u32>) -> Result<(), Partial> {
            lens.clear();
            lens.push(d.len() as u32);
            Ok(())
        }
        fn why(&self, _: &[u8]) -> String {
            "never stops short".into()
        }
    }
    static WHOLE: Whole = Whole;
    firehose_core::split::register("test-whole", &WHOLE);
    let e = run(&format!(
        "fhpcapsrc location={} pace=max ! fakesink sync=false",
        path.display()
    ))
    .unwrap_err();
    assert!(e.contains("registered: test-whole"), "{e}");

    // split=none needs no splitter.
    run(&format!(
        "fhpcapsrc location={} pace=max split=none ! fakesink sync=false",
        path.display()
    ))
    .unwrap();
}
