//! The recorder never loses a file already on disk and never writes through a
//! symbolic link: an existing capture is an error at start unless `overwrite=true`,
//! numbered files continue after those present, and a link where a capture would go is
//! refused whatever `overwrite` says.

mod common;

use common::{read_capture, record_test_packets, TempDir};

const OLD: &[u8] = b"an earlier capture that must survive";

/// `fhtestsrc` (100 packets) into `fhrecordsink location=<loc> <props>`.
fn record(loc: &std::path::Path, props: &str) -> Result<(), String> {
    record_test_packets("num-packets=100 packet-size=200", loc, props).1
}

#[test]
fn an_existing_file_is_an_error_at_start_and_stays_as_it_was() {
    let dir = TempDir::new("files-exists");
    let path = dir.join("cap.pcap");
    std::fs::write(&path, OLD).unwrap();
    let e = record(&path, "").unwrap_err();
    assert!(
        e.contains("exists") && e.contains("overwrite=true"),
        "the error says what to do: {e}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), OLD);
}

#[test]
fn overwrite_true_replaces_it() {
    let dir = TempDir::new("files-overwrite");
    let path = dir.join("cap.pcap");
    std::fs::write(&path, OLD).unwrap();
    record(&path, "overwrite=true").unwrap();
    assert_eq!(read_capture(&path).0.len(), 100);
}

#[test]
fn numbered_files_continue_after_those_present() {
    let dir = TempDir::new("files-numbered");
    for n in 0..2 {
        std::fs::write(dir.join(&format!("cap-{n:03}.pcap")), OLD).unwrap();
    }
    record(&dir.join("cap-%03d.pcap"), "").unwrap();
    for n in 0..2 {
        assert_eq!(
            std::fs::read(dir.join(&format!("cap-{n:03}.pcap"))).unwrap(),
            OLD
        );
    }
    assert_eq!(read_capture(&dir.join("cap-002.pcap")).0.len(), 100);
    assert_eq!(dir.files().len(), 3, "{:?}", dir.files());
}

/// A kill between a raw file's index and its data file leaves the index alone: the
/// next recording's numbers go past it and it stays as it was.
#[test]
fn numbered_raw_files_go_past_an_index_left_alone() {
    let dir = TempDir::new("files-orphan-idx");
    std::fs::write(dir.join("cap-000.raw.idx"), OLD).unwrap();
    record(&dir.join("cap-%03d.raw"), "format=raw").unwrap();
    assert_eq!(std::fs::read(dir.join("cap-000.raw.idx")).unwrap(), OLD);
    assert!(!dir.join("cap-000.raw").exists());
    assert!(dir.join("cap-001.raw").exists() && dir.join("cap-001.raw.idx").exists());
}

#[test]
fn a_symbolic_link_is_never_written_through() {
    let dir = TempDir::new("files-link");
    let target = dir.join("precious");
    std::fs::write(&target, OLD).unwrap();
    let link = dir.join("cap.pcap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = record(&link, "").unwrap_err();
    assert!(e.contains("exists"), "{e}");
    let e = record(&link, "overwrite=true").unwrap_err();
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), OLD);
    // A dangling link too: it would create the file it points at.
    let gone = dir.join("gone");
    let dangling = dir.join("dangling.pcap");
    std::os::unix::fs::symlink(&gone, &dangling).unwrap();
    for props in ["", "overwrite=true"] {
        assert!(record(&dangling, props).is_err(), "{props}");
    }
    assert!(!gone.exists(), "nothing created through the link");
}
