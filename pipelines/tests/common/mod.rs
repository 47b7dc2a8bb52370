//! Running the built `firehose` binary from tests, with deadlines so a hang fails the
//! test instead of stalling the suite.

#![allow(dead_code)] // each test file uses a different subset

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A finished run.
#[derive(Debug)]
pub struct Output {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// Wall time from spawn to exit.
    pub took: Duration,
}

impl Output {
    /// Both streams, for assertion messages.
    pub fn all(&self) -> String {
        format!(
            "exit {:?} after {:.2} s\n--- stdout\n{}--- stderr\n{}",
            self.code,
            self.took.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }

    /// Asserts the exit code, with both streams in the message.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{}", self.all());
        self
    }

    /// Asserts that stdout holds every one of `needles`.
    #[track_caller]
    pub fn assert_stdout(&self, needles: &[&str]) -> &Self {
        self.assert_holds("stdout", &self.stdout, needles)
    }

    /// Asserts that stderr holds every one of `needles`.
    #[track_caller]
    pub fn assert_stderr(&self, needles: &[&str]) -> &Self {
        self.assert_holds("stderr", &self.stderr, needles)
    }

    #[track_caller]
    fn assert_holds(&self, name: &str, text: &str, needles: &[&str]) -> &Self {
        for needle in needles {
            assert!(
                text.contains(needle),
                "{name} lacks {needle:?}\n{}",
                self.all()
            );
        }
        self
    }
}

/// A running `firehose` process whose output is collected as it comes.
pub struct Running {
    child: Child,
    started: Instant,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

/// Starts `firehose args…` from the workspace root (where `pipelines/*.pipeline` lie).
pub fn spawn(args: &[&str]) -> Running {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_firehose"))
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the firehose binary runs");
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let readers = vec![
        collect(child.stdout.take().unwrap(), stdout.clone()),
        collect(child.stderr.take().unwrap(), stderr.clone()),
    ];
    Running {
        child,
        started: Instant::now(),
        stdout,
        stderr,
        readers,
    }
}

/// Runs `firehose args…` to the end; panics (after killing it) past `timeout`.
pub fn run(args: &[&str], timeout: Duration) -> Output {
    spawn(args).finish(timeout)
}

/// Runs `firehose args…` to the end and asserts that it exited with `code`.
#[track_caller]
pub fn run_code(args: &[&str], timeout: Duration, code: i32) -> Output {
    let out = run(args, timeout);
    out.assert_code(code);
    out
}

/// Each `(args, needles)`: `firehose args…` is a usage error (exit 2, within 30 s) whose
/// stderr holds every one of `needles`.
#[track_caller]
pub fn usage_errors(cases: &[(&[&str], &[&str])]) {
    for (args, needles) in cases {
        run_code(args, Duration::from_secs(30), 2).assert_stderr(needles);
    }
}

/// Asserts that `text` holds every one of `needles`, naming the one missing.
#[track_caller]
pub fn assert_contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
}

/// The trimmed cells of the table rows of `text` that start with `prefix` (the empty
/// text before the first `|` is cell 0).
pub fn table_rows(text: &str, prefix: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// Runs `firehose args… --out MD`, asserts that it exited 0 (`hint` says what a failure
/// may need) and printed the report it wrote to `md`, and returns the run and the report.
#[track_caller]
pub fn run_report(
    args: &[&str],
    md: &std::path::Path,
    timeout: Duration,
    hint: &str,
) -> (Output, String) {
    let mut all = args.to_vec();
    all.extend(["--out", md.to_str().unwrap()]);
    let out = run(&all, timeout);
    assert_eq!(out.code, Some(0), "{hint}\n{}", out.all());
    let report = std::fs::read_to_string(md).expect("--out file written");
    assert!(
        out.stdout.contains(report.trim()),
        "stdout and --out differ\n{}",
        out.all()
    );
    (out, report)
}

impl Running {
    /// Waits until stderr contains `needle`; false on timeout or exit.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stderr.lock().unwrap().contains(needle) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.stderr.lock().unwrap().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Everything written to stderr so far.
    pub fn stderr_now(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill() on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Waits for exit; kills the process and panics with its output if it has not
    /// exited `timeout` after this call (counted from here, not from the start: a test
    /// that worked a while with the process running, slowly on a loaded machine, still
    /// gives it the whole `timeout` to stop).
    pub fn finish(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait works") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "firehose did not exit within {:.0} s\n--- stdout\n{}--- stderr\n{}",
                    timeout.as_secs_f64(),
                    self.stdout.lock().unwrap(),
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = self.started.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stdout = self.stdout.lock().unwrap().clone();
        let stderr = self.stderr.lock().unwrap().clone();
        Output {
            code: status.code(),
            stdout,
            stderr,
            took,
        }
    }
}

/// A path in the temp directory unique to this process and `name`.
pub fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("firehose-cli-test-{}-{name}", std::process::id()))
}

/// `firehose bench KIND --quick --cpu-limit 1 --out MD`, checked as [`run_report`] does,
/// and with the set-up lines every such report has: the command, the plain sender and
/// the budget of one core per receiver (as root, so the cgroup path is exercised).
#[track_caller]
pub fn quick_one_core_report(
    kind: &str,
    md: &std::path::Path,
    timeout: Duration,
    hint: &str,
) -> String {
    let args = ["bench", kind, "--quick", "--cpu-limit", "1"];
    let (_, report) = run_report(&args, md, timeout, hint);
    assert_contains_all(
        &report,
        &[
            "- command: `",
            &format!("bench {kind} --quick --cpu-limit 1 --out"),
            "plain sender: one datagram per send",
            "- CPU budget: 1 of one core per receiver process",
        ],
    );
    report
}
