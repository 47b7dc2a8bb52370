//! A SPEAD stream on loopback, received live by `fhudpsrc ! speaddepay` while tcpdump
//! captures it; the capture replayed by `fhpcapsrc ! speaddepay` gives the same heaps,
//! also when the sender used UDP GSO (tcpdump on the sending host then records each
//! send as one datagram holding several SPEAD packets, which `fhpcapsrc` cuts again).

mod common;

use std::time::{Duration, Instant};

use common::{collect_heaps, launch, require_tool, TempDir};
use firehose_record::read::container::count_whole_records;
use firehose_testkit::run;
use gst::prelude::*;

#[test]
fn replayed_capture_gives_the_same_heaps_as_the_live_receiver() {
    let (path, port, _dir) = capture_and_compare(false);
    // Nothing coalesced in a capture of plain sends.
    let replay = launch(&format!(
        "fhpcapsrc name=src location={} port={port} pace=max ! fakesink sync=false",
        path.display()
    ));
    common::play_to_end(&replay, Duration::from_secs(30)).unwrap();
    let src = replay.by_name("src").unwrap();
    assert_eq!(common::stat(&src, "records-split"), 0);
    assert_eq!(common::stat(&src, "records-unsplit"), 0);
}

#[test]
fn gso_capture_replays_as_its_heaps() {
    let (path, port, _dir) = capture_and_compare(true);
    // The capture does hold coalesced records: whole, they give far fewer heaps.
    let replay = launch(&format!(
        "fhpcapsrc name=src location={} port={port} pace=max split=none ! speaddepay ! \
         fakesink name=sink sync=false",
        path.display()
    ));
    let whole = collect_heaps(&replay);
    common::play_to_end(&replay, Duration::from_secs(30)).unwrap();
    let complete = whole.lock().unwrap().iter().filter(|h| h.1).count();
    assert!(
        complete < 40,
        "split=none still gave {complete} complete heaps"
    );
}

/// Sends 40 heaps (UDP GSO or not) to a live receiver while tcpdump records them, replays
/// the capture through `fhpcapsrc ! speaddepay` and checks every heap against the live
/// receiver's. Returns the capture, the port and its directory.
fn capture_and_compare(gso: bool) -> (std::path::PathBuf, u16, TempDir) {
    require_tool("tcpdump", "tcpdump");
    common::init();
    let dir = TempDir::new(if gso { "spead-live-gso" } else { "spead-live" });
    let path = dir.join("spead.pcap");

    let rx = launch(
        "fhudpsrc name=udp address=127.0.0.1 port=0 ! speaddepay ! fakesink name=sink sync=false",
    );
    let live = collect_heaps(&rx);
    rx.set_state(gst::State::Paused).unwrap();
    let port = run::bound_port(&rx.by_name("udp").unwrap(), Duration::from_secs(10));
    let dump = run::Tcpdump::udp_port("lo", port, &path);
    rx.set_state(gst::State::Playing).unwrap();

    // 40 heaps of 100 kB, paced so that nothing is lost on the way. With UDP GSO, on
    // the sending host tcpdump sees each send as one large datagram (the kernel cuts it
    // after the capture point); fhpcapsrc cuts it by the SPEAD packets' own lengths.
    let (_, r) = common::run_pipeline(
        &format!(
            "fakesrc num-buffers=40 sizetype=fixed sizemax=100000 filltype=pattern-span ! \
             speadpay ! fhudpsink host=127.0.0.1 port={port} rate=100000000 gso={gso}"
        ),
        Duration::from_secs(60),
    );
    r.unwrap();
    // The stop heap ends the live receiver.
    let r = common::wait_end(&rx.bus().unwrap(), Duration::from_secs(20));
    rx.set_state(gst::State::Null).unwrap();
    r.unwrap();
    // tcpdump writes each packet as it comes (-U), but how many records a GSO send makes
    // is the kernel's business: stop it once its file has stopped growing for a second
    // (what is still in its ring at the interrupt would be lost), not after a fixed while
    // that a loaded machine can outlast.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut last, mut since) = (0, Instant::now());
    while Instant::now() < deadline {
        let n = count_whole_records(&path);
        if n != last {
            (last, since) = (n, Instant::now());
        } else if n > 0 && since.elapsed() >= Duration::from_secs(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = dump.stop();
    assert!(
        said.contains("\n0 packets dropped by kernel"),
        "tcpdump lost packets: {said}"
    );

    let replay = launch(&format!(
        "fhpcapsrc name=src location={} port={port} pace=max ! speaddepay ! \
         fakesink name=sink sync=false",
        path.display()
    ));
    let replayed = collect_heaps(&replay);
    common::play_to_end(&replay, Duration::from_secs(30)).unwrap();
    let src = replay.by_name("src").unwrap();
    if gso {
        assert!(
            common::stat(&src, "records-split") > 0,
            "a GSO capture holds coalesced records"
        );
    }
    assert_eq!(common::stat(&src, "records-unsplit"), 0);

    let live = live.lock().unwrap();
    let replayed = replayed.lock().unwrap();
    // Heaps 1..=40, all complete (the first also carries the descriptors).
    let counters: Vec<(u64, bool)> = live.iter().map(|h| (h.0, h.1)).collect();
    assert_eq!(counters, (1..=40).map(|c| (c, true)).collect::<Vec<_>>());
    assert_eq!(replayed.len(), live.len());
    for (i, (a, b)) in live.iter().zip(replayed.iter()).enumerate() {
        assert_eq!((a.0, a.1), (b.0, b.1), "heap {i}");
        assert!(a.2 == b.2, "heap {i}: payloads differ");
    }
    (path, port, dir)
}
