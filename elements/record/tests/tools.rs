//! Recorded pcap and pcapng files are read by tcpdump and tshark with exactly the
//! packets and bytes sent, and by our own reader with the same payloads.

mod common;

use std::net::SocketAddr;

use common::{
    batch, isb_counters, payload, read_capture, record, require_tool, run_tool, stat, TempDir,
};
use firehose_core::stats::names;

/// 100 IPv4 datagrams of 1..=8999 bytes, 50 IPv6 ones, and one plain buffer: the
/// payloads in order, and the buffers.
fn traffic() -> (Vec<Vec<u8>>, Vec<gst::Buffer>) {
    common::init();
    let v4: Vec<Vec<u8>> = (0..100u64)
        .map(|i| payload(i, (i as usize * 977) % 8999 + 1))
        .collect();
    let v6: Vec<Vec<u8>> = (0..50u64)
        .map(|i| payload(1000 + i, (i as usize * 131) % 1500 + 1))
        .collect();
    let plain = payload(7, 300);
    let src4: SocketAddr = "10.1.2.3:5000".parse().unwrap();
    let src6: SocketAddr = "[fe80::5]:6000".parse().unwrap();
    let buffers = vec![
        batch(&v4[..60], src4, 1_700_000_000_000_000_000),
        batch(&v6, src6, 1_700_000_001_000_000_000),
        gst::Buffer::from_mut_slice(plain.clone()),
        batch(&v4[60..], src4, 1_700_000_002_000_000_000),
    ];
    let mut all = v4[..60].to_vec();
    all.extend(v6);
    all.push(plain);
    all.extend_from_slice(&v4[60..]);
    (all, buffers)
}

fn tcpdump_counts(path: &str) -> (usize, u64) {
    let out = run_tool("tcpdump", &["-r", path, "-nn", "-q"]);
    let mut n = 0;
    let mut bytes = 0;
    for line in out.lines() {
        let len: u64 = line
            .rsplit("length ")
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected tcpdump line: {line}"));
        assert!(line.contains(" > ") && line.contains("UDP"), "{line}");
        n += 1;
        bytes += len;
    }
    (n, bytes)
}

fn tshark_counts(path: &str) -> (usize, u64) {
    let out = run_tool(
        "tshark",
        &[
            "-r",
            path,
            "-T",
            "fields",
            "-e",
            "udp.length",
            "-e",
            "frame.len",
        ],
    );
    let mut n = 0;
    let mut bytes = 0;
    for line in out.lines() {
        let udp_len: u64 = line.split('\t').next().unwrap().parse().unwrap();
        n += 1;
        bytes += udp_len - 8;
    }
    let bad = run_tool(
        "tshark",
        &[
            "-r",
            path,
            "-Y",
            "_ws.malformed || _ws.expert.severity >= \"error\"",
        ],
    );
    assert!(bad.trim().is_empty(), "tshark flags packets:\n{bad}");
    (n, bytes)
}

fn check_file(path: &std::path::Path, all: &[Vec<u8>]) {
    let p = path.to_str().unwrap();
    let total: u64 = all.iter().map(|p| p.len() as u64).sum();
    assert_eq!(tcpdump_counts(p), (all.len(), total), "tcpdump on {p}");
    assert_eq!(tshark_counts(p), (all.len(), total), "tshark on {p}");
    let (read, counts) = read_capture(path);
    assert_eq!(counts, Default::default());
    let payloads: Vec<Vec<u8>> = read.iter().map(|r| r.payload.clone()).collect();
    assert_eq!(payloads, all);
    assert_eq!(read[0].src, "10.1.2.3:5000".parse().unwrap());
    assert_eq!(read[0].dst, "10.0.0.2:7148".parse().unwrap());
    assert_eq!(read[0].ts_ns, 1_700_000_000_000_000_000);
    assert_eq!(read[60].src, "[fe80::5]:6000".parse().unwrap());
}

/// Records [`traffic`] into `name` in a fresh directory (which the caller keeps while
/// it reads the file) with `props` besides the location, destination and when-full;
/// returns the directory, the file, the payloads in order and the sink.
fn record_traffic(
    name: &str,
    props: &[(&str, &str)],
) -> (TempDir, std::path::PathBuf, Vec<Vec<u8>>, gst::Element) {
    require_tool("tcpdump", "tcpdump");
    require_tool("tshark", "tshark");
    let dir = TempDir::new(&format!("tools-{name}"));
    let (all, buffers) = traffic();
    let path = dir.join(name);
    let location = path.to_str().unwrap().to_owned();
    let mut all_props = vec![
        ("location", location.as_str()),
        ("destination", "10.0.0.2:7148"),
        ("when-full", "block"),
    ];
    all_props.extend_from_slice(props);
    let el = record(&all_props, buffers);
    (dir, path, all, el)
}

#[test]
fn pcap_is_read_by_tcpdump_and_tshark_with_every_packet_and_byte() {
    let (_dir, path, all, el) = record_traffic("t.pcap", &[("block-size", "65536")]);
    assert_eq!(stat(&el, names::PACKETS), all.len() as u64);
    assert_eq!(stat(&el, names::FILES), 1);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        stat(&el, names::BYTES_WRITTEN),
        size,
        "bytes-written is the file size"
    );
    check_file(&path, &all);
}

#[test]
fn pcapng_is_read_by_tcpdump_and_tshark_and_ends_with_statistics() {
    let (_dir, path, all, _) = record_traffic("t.pcapng", &[("format", "pcapng")]);
    check_file(&path, &all);
    let n = all.len() as u64;
    assert_eq!(isb_counters(&path), (n, 0, 0, n));
    // tshark sees the resolution and the statistics block as well-formed.
    let info = run_tool("capinfos", &["-M", path.to_str().unwrap()]);
    assert!(
        info.contains(&format!("Number of packets:   {n}")),
        "{info}"
    );
    assert!(info.contains("nanoseconds"), "{info}");
}

#[test]
fn snaplen_cuts_frames_but_keeps_their_wire_length() {
    require_tool("tshark", "tshark");
    let dir = TempDir::new("tools-snap");
    let path = dir.join("s.pcap");
    let src: SocketAddr = "10.0.0.9:1".parse().unwrap();
    record(
        &[
            ("location", path.to_str().unwrap()),
            ("snaplen", "100"),
            ("when-full", "block"),
        ],
        vec![batch(&[payload(1, 1000), payload(2, 20)], src, 1)],
    );
    let out = run_tool(
        "tshark",
        &[
            "-r",
            path.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.cap_len",
            "-e",
            "frame.len",
        ],
    );
    assert_eq!(out.trim(), "100\t1042\n62\t62");
}
