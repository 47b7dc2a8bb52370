//! Shared by the spead2 interop tests: finding the venv's Python with spead2, running
//! the helper scripts under `tests/spead2/` with deadlines, reading their line
//! protocol (and recv.py's whole report), and registering the elements a pipeline
//! needs. Running a pipeline to its end is `common::run_to_eos`.
//!
//! Chunk mode is compared with spead2's own chunk stream in `interop_chunks.rs`
//! (`chunk_recv.py`, which also needs numba and scipy: [`require_chunk_modules`]).

#![allow(dead_code)] // each test file uses a different subset

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gst::prelude::*;

/// The command that creates the venv these tests need (what `scripts/setup test` runs).
pub const INSTALL: &str =
    "python3 -m venv .venv && .venv/bin/pip install spead2==4.5.1 numpy   (or: scripts/setup test)";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<repo>/.venv/bin/python3`, checked to import spead2 4.5.1. Panics (fails the test)
/// with the install command when it cannot: these tests never pass without their peer.
pub fn python() -> PathBuf {
    let py = repo_root().join(".venv/bin/python3");
    assert!(
        py.exists(),
        "{} is missing: the spead2 interop tests need it. From the repository root run:\n  {INSTALL}",
        py.display()
    );
    let out = run_with_timeout(
        Command::new(&py).args(["-c", "import spead2, numpy; print(spead2.__version__)"]),
        None,
        Duration::from_secs(60),
    );
    assert!(
        out.status == Some(0) && out.stdout.trim() == "4.5.1",
        "{} cannot import spead2 4.5.1 and numpy (got: {} {}). Run:\n  {INSTALL}",
        py.display(),
        out.stdout.trim(),
        out.stderr.trim()
    );
    py
}

/// The command that adds what `chunk_recv.py` needs (spead2's chunk stream takes its
/// place callback as a `scipy.LowLevelCallable` from a numba `cfunc`).
pub const INSTALL_CHUNKS: &str =
    ".venv/bin/pip install numba==0.68.1 scipy==1.17.1   (or: scripts/setup test)";

/// [`python`], checked to import numba and scipy too (for `chunk_recv.py`). Panics with
/// the install command when it cannot.
pub fn require_chunk_modules() -> PathBuf {
    let py = python();
    let out = run_with_timeout(
        Command::new(&py).args(["-c", "import numba, scipy; print(numba.__version__)"]),
        None,
        Duration::from_secs(120),
    );
    assert!(
        out.status == Some(0),
        "{} cannot import numba and scipy ({}). Run:\n  {INSTALL_CHUNKS}",
        py.display(),
        out.stderr.trim()
    );
    py
}

/// A helper script's path.
pub fn script(name: &str) -> PathBuf {
    repo_root().join("tests/spead2").join(name)
}

/// What a finished process printed.
#[derive(Debug)]
pub struct Output {
    /// Exit code (`None`: killed or by a signal).
    pub status: Option<i32>,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
}

fn reader(mut r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// Runs `cmd` with `stdin`, killing it past `timeout` (the test then fails on it).
pub fn run_with_timeout(cmd: &mut Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let out = reader(child.stdout.take().expect("piped"));
    let err = reader(child.stderr.take().expect("piped"));
    if let Some(mut w) = child.stdin.take() {
        // A child that dies early closes the pipe: its exit status and stderr tell why.
        let _ = w.write_all(stdin.unwrap_or_default());
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait works") {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let get =
        |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    Output {
        status,
        stdout: get(out),
        stderr: get(err),
    }
}

/// A helper script running in the background, read line by line.
pub struct Script {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Everything read so far, for failure messages.
    pub seen: Vec<String>,
    stderr: mpsc::Receiver<String>,
}

impl Script {
    /// Starts `tests/spead2/<name> args…` with the venv's Python.
    pub fn spawn(name: &str, args: &[&str]) -> Self {
        let py = python();
        let mut child = Command::new(py)
            .arg(script(name))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout: ChildStdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = reader(child.stderr.take().expect("piped"));
        Self {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The next line, or `None` at EOF or past `timeout`.
    pub fn line(&mut self, timeout: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// Waits for a line starting with `word`; returns its `key=value` pairs. Panics with
    /// everything the script said when it does not come within `timeout`.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> BTreeMap<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.line(left) {
                Some(l) if l.split_whitespace().next() == Some(word) => return kv(&l),
                Some(_) => {}
                None => panic!("no '{word}' line within {timeout:?}\n{}", self.transcript()),
            }
        }
    }

    /// Writes a line to the script's stdin.
    pub fn say(&mut self, line: &str) {
        if let Some(w) = self.child.stdin.as_mut() {
            let _ = writeln!(w, "{line}");
            let _ = w.flush();
        }
    }

    /// Waits for the script to exit (killing it past `timeout`); returns its exit code.
    pub fn finish(&mut self, timeout: Duration) -> Option<i32> {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait works") {
                // Drain what is left.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(l);
                }
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// stdout lines seen and stderr (after exit), for assertion messages.
    pub fn transcript(&mut self) -> String {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let err = self
            .stderr
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_default();
        format!(
            "--- script stdout\n{}\n--- script stderr\n{err}",
            self.seen.join("\n")
        )
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses the `key=value` words of a line.
pub fn kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Initialises GStreamer and registers the elements the tests use, one by one (the
/// plugin crate depends on this one, so it cannot be used here).
pub fn init() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        let reg = |name: &str, t: gst::glib::Type| {
            gst::Element::register(None, name, gst::Rank::NONE, t)
                .unwrap_or_else(|e| panic!("register {name}: {e}"));
        };
        reg("fhudpsrc", firehose_net::udpsrc::UdpSrc::static_type());
        reg("fhudpsink", firehose_net::udpsink::UdpSink::static_type());
        reg("speadpay", firehose_spead::pay::SpeadPay::static_type());
    });
}

/// [`init`], and `speaddepay` registered too.
pub fn register_depay() {
    init();
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        firehose_core::testing::register_elements(&[(
            "speaddepay",
            firehose_spead::depay::SpeadDepay::static_type(),
        )]);
    });
}

/// A fresh, empty temporary directory for test `name`.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("firehose-interop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `%xx` decoding of the scripts' quoted fields.
pub fn unquote(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("%xx"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("utf-8")
}

/// An item id as the scripts write it (`0x…`).
pub fn hex_id(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex id")
}

/// What recv.py reported.
#[derive(Debug, Default)]
pub struct Received {
    /// Heap cnts, in arrival order.
    pub heaps: Vec<u64>,
    /// (cnt, id) → integer value.
    pub ints: BTreeMap<(u64, u64), u64>,
    /// (cnt, id) → bytes.
    pub arrays: BTreeMap<(u64, u64), Vec<u8>>,
    /// id → (name, description, shape, dtype, format).
    pub descriptors: BTreeMap<u64, [String; 5]>,
    /// The last line: "end …" or "timeout …".
    pub last: String,
}

/// Starts recv.py, writing its arrays under `out_dir`; returns it and the port it bound.
pub fn spead2_receiver(out_dir: &Path, timeout_s: u32) -> (Script, u16) {
    let mut rx = Script::spawn(
        "recv.py",
        &[
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--timeout",
            &timeout_s.to_string(),
        ],
    );
    let ready = rx.expect("ready", Duration::from_secs(60));
    let port = ready["port"].parse().expect("port");
    (rx, port)
}

/// Reads recv.py's report up to its last line (reading the arrays it wrote).
pub fn collect(rx: &mut Script, timeout: Duration) -> Received {
    let mut r = Received::default();
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(line) = rx.line(left) else {
            panic!("recv.py stopped early\n{}", rx.transcript());
        };
        let kv = kv(&line);
        match line.split_whitespace().next() {
            Some("heap") => r.heaps.push(kv["cnt"].parse().unwrap()),
            Some("item") => {
                let key = (kv["cnt"].parse().unwrap(), hex_id(&kv["id"]));
                if let Some(v) = kv.get("value") {
                    r.ints.insert(key, v.parse().unwrap());
                } else {
                    let path = unquote(&kv["file"]);
                    r.arrays
                        .insert(key, std::fs::read(&path).expect("recv.py's file"));
                }
            }
            Some("desc") => {
                let f = |k: &str| unquote(&kv[k]);
                r.descriptors.insert(
                    hex_id(&kv["id"]),
                    [
                        f("name"),
                        f("description"),
                        f("shape"),
                        f("dtype"),
                        f("format"),
                    ],
                );
            }
            Some("end" | "timeout") => {
                r.last = line;
                return r;
            }
            _ => {}
        }
    }
}

/// Raises `net.core.rmem_max` so a receiver can get a large socket buffer (root only;
/// without it the tests still run, with a rate low enough for default buffers).
pub fn raise_rmem_max() {
    let path = "/proc/sys/net/core/rmem_max";
    let cur: u64 = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if cur < 64 << 20 {
        let _ = std::fs::write(path, (64u64 << 20).to_string());
    }
}

/// Hex of `b` (for readable failure messages).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes from hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}
