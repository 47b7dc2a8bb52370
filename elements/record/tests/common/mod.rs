//! Shared helpers for the recording tests: element registration, temporary
//! directories, running pipelines with a deadline, external tools, reading captures.

#![allow(dead_code)] // each test file uses a different subset

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use firehose_record::read::container::{CaptureReader, ReadCounts};
use firehose_record::read::link;
use firehose_spead::heap::HeapMeta;
use firehose_testkit::run;
use gst::glib;
use gst::prelude::*;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_record::register(plugin)?;
    firehose_testkit::register(plugin)?;
    firehose_spead::register(plugin)?;
    firehose_net::register(plugin)
}

gst::plugin_define!(
    fhrecordtest,
    "Firehose recording tests",
    plugin_init,
    "0.1.0",
    "MPL",
    "firehose-record",
    "firehose-record",
    "https://example.invalid/firehose",
    "1970-01-01"
);

/// Initialises GStreamer and registers the elements the tests use, once.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        plugin_register_static().expect("registering the test plugin");
    });
}

/// A directory removed (with its contents) when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory under the system temp dir.
    pub fn new(name: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("fhrecord-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `bytes` as the file `name` in the directory; returns its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// The names of the files in the directory, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fails the test, with the install command, when `tool` is missing: a test that
/// needs it must never pass silently.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is not installed; install it with: apt-get install -y {package} \
         (or run scripts/setup test, which installs every tool the tests need)"
    );
}

/// Runs `tool args…`; panics with its output unless it exits 0.
pub fn run_tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[allow(unused_imports)] // each test file uses a different subset
pub use firehose_testkit::run::{play_to_end, wait_end};

/// Runs a pipeline description to EOS (Ok) or error (Err with its text) within
/// `timeout`; returns the pipeline (stopped) for reading element properties.
pub fn run_pipeline(desc: &str, timeout: Duration) -> (gst::Pipeline, Result<(), String>) {
    let pipeline = launch(desc);
    let result = play_to_end(&pipeline, timeout);
    (pipeline, result)
}

/// Records test packets: runs `fhtestsrc <src> ! fhrecordsink name=rec location=<location>
/// <sink>` to EOS or error (2 minutes at most); returns the pipeline (stopped) and how
/// it ended.
pub fn record_test_packets(
    src: &str,
    location: &Path,
    sink: &str,
) -> (gst::Pipeline, Result<(), String>) {
    run_pipeline(
        &format!(
            "fhtestsrc {src} ! fhrecordsink name=rec location={} {sink}",
            location.display()
        ),
        Duration::from_secs(120),
    )
}

/// The pipeline of a description, the test elements registered.
pub fn launch(desc: &str) -> gst::Pipeline {
    init();
    run::launch(desc)
}

/// A counter from an element's `stats` structure.
pub fn stat(el: &gst::Element, name: &str) -> u64 {
    let s = el.property::<gst::Structure>("stats");
    s.get::<u64>(name).unwrap_or(0)
}

/// One datagram read back from a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// Capture time, Unix ns.
    pub ts_ns: u64,
    /// Sender.
    pub src: SocketAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// UDP payload.
    pub payload: Vec<u8>,
}

/// Every UDP datagram of a capture file, and the reader's damage counts.
pub fn read_capture(path: &Path) -> (Vec<Read>, ReadCounts) {
    let f = std::fs::File::open(path).unwrap();
    let mut r = CaptureReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let d = link::datagram(rec.linktype, rec.data)
            .unwrap_or_else(|e| panic!("record {} of {}: {e:?}", out.len(), path.display()));
        out.push(Read {
            ts_ns: rec.ts_ns,
            src: d.src,
            dst: d.dst,
            payload: d.payload.to_vec(),
        });
    }
    (out, r.counts())
}

/// A batch buffer holding `payloads` back to back, from `src`, timestamped `ts`.
pub fn batch(payloads: &[Vec<u8>], src: SocketAddr, ts: u64) -> gst::Buffer {
    run::batch_with(payloads, |i, p| {
        p.rx_time_ns = ts + i as u64;
        p.src = src.into();
    })
}

/// A payload of `len` bytes whose content depends on `seed`.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// Pushes `buffers` into a new `fhrecordsink` configured by `props`, then EOS; returns
/// the element for its stats.
pub fn record(props: &[(&str, &str)], buffers: Vec<gst::Buffer>) -> gst::Element {
    init();
    // Configured before the harness takes it: the harness starts its element.
    let el = gst::ElementFactory::make("fhrecordsink").build().unwrap();
    // The harness wants PLAYING at once: no preroll wait.
    el.set_property("async", false);
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    let mut h = gst_check::Harness::with_element(&el, Some("sink"), None);
    h.set_src_caps(firehose_core::caps::packets_caps());
    h.play();
    for b in buffers {
        assert_eq!(h.push(b), Ok(gst::FlowSuccess::Ok));
    }
    assert!(h.push_event(gst::event::Eos::new()));
    drop(h);
    el
}

/// One datagram as `fhpcapsrc` delivered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// `rx_time_ns` of the batch meta: the capture time.
    pub ts_ns: u64,
    /// Sender.
    pub src: SocketAddr,
    /// Payload.
    pub payload: Vec<u8>,
    /// PTS of its buffer.
    pub pts: Option<gst::ClockTime>,
}

/// Runs `fhpcapsrc name=src output=batch <props> ! fakesink` to the end; returns what
/// reached the sink, the source (for its stats) and how the pipeline ended. (fakesink
/// takes anything, so without `output=batch` it would get one buffer per datagram.)
pub fn replay(props: &str, timeout: Duration) -> (Vec<Replayed>, gst::Element, Result<(), String>) {
    let pipeline = launch(&format!(
        "fhpcapsrc name=src output=batch {props} ! fakesink name=sink sync=false"
    ));
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = pipeline.by_name("sink").unwrap();
    let g = got.clone();
    sink.static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(buf) = info.buffer() {
                let pts = buf.pts();
                let mut v = g.lock().unwrap();
                firehose_core::batch::for_each_packet(buf, |p, bytes| {
                    v.push(Replayed {
                        ts_ns: p.rx_time_ns,
                        src: p.src.to_socket_addr(),
                        payload: bytes.to_vec(),
                        pts,
                    })
                })
                .expect("fhpcapsrc buffers carry a batch meta");
            }
            gst::PadProbeReturn::Ok
        });
    let result = play_to_end(&pipeline, timeout);
    let src = pipeline.by_name("src").unwrap();
    let v = got.lock().unwrap().clone();
    (v, src, result)
}

/// [`replay`] of the capture at `path` with `props`, 30 s at most.
pub fn replay_file(path: &Path, props: &str) -> (Vec<Replayed>, gst::Element, Result<(), String>) {
    replay(
        &format!("location={} {props}", path.display()),
        Duration::from_secs(30),
    )
}

/// A classic pcap file of Ethernet frames (`(ts_ns, frame)`), microsecond or
/// nanosecond, little- or big-endian.
pub fn classic_pcap(frames: &[(u64, Vec<u8>)], nanos: bool, big_endian: bool) -> Vec<u8> {
    let w32 = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    let mut f = Vec::new();
    f.extend_from_slice(&w32(magic));
    f.extend_from_slice(&w16(2));
    f.extend_from_slice(&w16(4));
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&w32(65535));
    f.extend_from_slice(&w32(1));
    for (ts, frame) in frames {
        let frac = if nanos {
            ts % 1_000_000_000
        } else {
            ts % 1_000_000_000 / 1000
        };
        f.extend_from_slice(&w32((ts / 1_000_000_000) as u32));
        f.extend_from_slice(&w32(frac as u32));
        f.extend_from_slice(&w32(frame.len() as u32));
        f.extend_from_slice(&w32(frame.len() as u32));
        f.extend_from_slice(frame);
    }
    f
}

/// An Ethernet/IP/UDP frame carrying `payload` from `src` to `dst`.
pub fn frame(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    use firehose_record::format::net::{write_headers, Destination, MAX_HEADERS};
    let mut h = [0u8; MAX_HEADERS];
    let n = write_headers(
        &mut h,
        src.parse().unwrap(),
        &Destination::new(dst.parse().unwrap()),
        payload,
        1,
    );
    let mut f = h[..n].to_vec();
    f.extend_from_slice(payload);
    f
}

/// A filesystem mounted by the test, unmounted (and its mount point removed) when
/// dropped, also when the test fails.
pub struct Mount {
    /// The mount point.
    pub dir: PathBuf,
}

impl Mount {
    /// Mounts a `fstype` (tmpfs, ramfs) with `options` on a fresh directory in /tmp.
    pub fn new(fstype: &str, options: &str, name: &str) -> Self {
        let dir = PathBuf::from(format!("/tmp/fhrecord-mnt-{name}-{}", std::process::id()));
        let _ = Command::new("umount").arg(&dir).output();
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", fstype, "-o", options, fstype])
            .arg(&dir)
            .output()
            .expect("mount runs");
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            panic!(
                "mounting a {fstype} on {} failed (the test needs root): {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Self { dir }
    }

    /// A path on the mounted filesystem.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds a file open: detach now, freed when it closes.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Plays `pipeline` to EOS or error, collecting warning texts on the way.
pub fn play_collecting_warnings(
    pipeline: &gst::Pipeline,
    timeout: Duration,
) -> (Result<(), String>, Vec<String>) {
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut warnings = Vec::new();
    let result = run::wait_end_with(&pipeline.bus().unwrap(), timeout, |msg| {
        if let gst::MessageView::Warning(w) = msg.view() {
            warnings.push(w.error().to_string());
        }
    });
    pipeline.set_state(gst::State::Null).unwrap();
    (result, warnings)
}

/// (heap counter, complete, payload) of every heap reaching the `sink` element.
pub type Heaps = Arc<Mutex<Vec<(u64, bool, Vec<u8>)>>>;

/// Collects every heap (a buffer with a heap meta, alone or in a list) that reaches the
/// element named `sink` in `pipeline`.
pub fn collect_heaps(pipeline: &gst::Pipeline) -> Heaps {
    let heaps: Heaps = Arc::default();
    let h = heaps.clone();
    let pad = pipeline
        .by_name("sink")
        .unwrap()
        .static_pad("sink")
        .unwrap();
    pad.add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST,
        move |_, info| {
            let mut v = h.lock().unwrap();
            let mut take = |b: &gst::BufferRef| {
                if let Some(m) = b.meta::<HeapMeta>() {
                    let data = b.map_readable().unwrap().to_vec();
                    v.push((m.info().heap_cnt, m.info().complete, data));
                }
            };
            if let Some(b) = info.buffer() {
                take(b);
            } else if let Some(list) = info.buffer_list() {
                list.iter().for_each(take);
            }
            gst::PadProbeReturn::Ok
        },
    );
    heaps
}

/// The counters of the Interface Statistics Block at the end of a pcapng file:
/// (ifrecv, ifdrop, osdrop, usrdeliv).
pub fn isb_counters(path: &std::path::Path) -> (u64, u64, u64, u64) {
    let b = std::fs::read(path).unwrap();
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let mut at = 0;
    let mut found = None;
    while at + 12 <= b.len() {
        let (t, len) = (u32_at(at), u32_at(at + 4) as usize);
        if t == 5 {
            let mut o = at + 8 + 12;
            let mut v = [0u64; 9];
            while o + 4 <= at + len - 4 {
                let code = u16::from_le_bytes([b[o], b[o + 1]]) as usize;
                let olen = u16::from_le_bytes([b[o + 2], b[o + 3]]) as usize;
                if code == 0 {
                    break;
                }
                if olen == 8 && code < 9 {
                    v[code] = u64::from_le_bytes(b[o + 4..o + 12].try_into().unwrap());
                }
                o += 4 + olen.next_multiple_of(4);
            }
            found = Some((v[4], v[5], v[7], v[8]));
        }
        at += len;
    }
    found.expect("an interface statistics block")
}
