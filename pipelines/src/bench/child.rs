//! A benchmark receiver in a child process, so that its CPU time is its own, and the
//! line protocol both sides speak.
//!
//! On the child's stdout, one line each:
//! - `ready port=P` once its socket is bound;
//! - after the parent writes `go` (the sender is about to start) the child takes its
//!   CPU clock; after `stop` (or EOF: the parent went away) it waits until its count
//!   stops moving (datagrams still queued in the socket buffer are not lost), takes the
//!   CPU clock again and prints `result key=value …` with `cpu_s` covering exactly that
//!   window: every receiver is measured over the same steady window, from the sender's
//!   start to its own last datagram, and its set-up and tear-down are left out;
//! - `error <text>` (lines joined with ` | `) at any point instead.
//!
//! `tests/spead2/bench_recv.py` speaks the same protocol for spead2.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpulimit::CpuLimit;

/// Splits `key=value key=value …` into a map.
pub fn parse_kv(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A number from a `result` line; 0 when absent or unreadable.
pub fn num<T: std::str::FromStr + Default>(kv: &BTreeMap<String, String>, key: &str) -> T {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_default()
}

/// The `firehose` executable itself, to run the hidden receiver subcommand.
pub fn self_command() -> Result<Command, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the firehose executable to run receivers: {e}"))?;
    Ok(Command::new(exe))
}

/// The parent's handle on a receiver child, between `ready` and `result`.
pub struct ReceiverProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The UDP port it bound.
    pub port: u16,
}

impl ReceiverProcess {
    /// Starts `cmd` (`what` names it in errors), moves it into `limit`'s CPU budget if
    /// given (before it binds or receives anything), and waits for its `ready` line.
    pub fn spawn(mut cmd: Command, what: &str, limit: Option<&CpuLimit>) -> Result<Self, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the {what} receiver: {e}"))?;
        if let Some(limit) = limit {
            if let Err(e) = limit.add(child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut r = Self {
            child,
            stdin,
            stdout,
            port: 0,
        };
        let kv = r.read_line("ready")?;
        r.port = kv
            .get("port")
            .and_then(|p| p.parse().ok())
            .ok_or("receiver said ready without a port")?;
        Ok(r)
    }

    fn say(&mut self, word: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(format!("{word}\n").as_bytes());
            let _ = stdin.flush();
        }
    }

    /// Opens the measured window: the sender starts right after this.
    pub fn go(&mut self) {
        self.say("go");
    }

    /// Reads the next protocol line, which must start with `word`.
    fn read_line(&mut self, word: &str) -> Result<BTreeMap<String, String>, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("receiver process exited without a word (see its messages above)".into()),
            Err(e) => Err(format!("cannot read from the receiver process: {e}")),
            Ok(_) => {
                let line = line.trim_end();
                if let Some(rest) = line.strip_prefix("error ") {
                    return Err(rest.replace(" | ", "\n"));
                }
                match line.strip_prefix(word) {
                    Some(rest) => Ok(parse_kv(rest)),
                    None => Err(format!("unexpected line from the receiver: {line}")),
                }
            }
        }
    }

    /// Closes the window and returns the fields of the `result` line.
    pub fn finish(mut self) -> Result<BTreeMap<String, String>, String> {
        self.say("stop");
        let kv = self.read_line("result");
        let _ = self.child.wait();
        kv
    }
}

impl Drop for ReceiverProcess {
    fn drop(&mut self) {
        // Only reached with the child still running on an error path.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where the parent has got to, as seen by the child.
const WAITING: u8 = 0;
const GO: u8 = 1;
const STOP: u8 = 2;

/// The child's side of the protocol: reads `go` and `stop` from stdin on a thread of
/// its own, so the receiver's loop only looks at an atomic.
pub struct ChildSide {
    phase: Arc<AtomicU8>,
    started: Instant,
    timeout: Duration,
}

impl ChildSide {
    /// Says `ready port=P` and starts listening for the parent. After `timeout` the
    /// child stops on its own, in case the parent vanished without closing stdin.
    pub fn ready(port: u16, timeout: Duration) -> Self {
        // The parent decides when we stop; a terminal Ctrl-C reaches us too, so ignore it.
        let _ = crate::signals::ignore_interrupt();
        let phase = Arc::new(AtomicU8::new(WAITING));
        {
            let phase = phase.clone();
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                let mut lines = stdin.lock().lines();
                while let Some(Ok(line)) = lines.next() {
                    if line.trim() == "go" {
                        phase.store(GO, Ordering::SeqCst);
                    } else {
                        break;
                    }
                }
                // `stop`, anything else, or EOF: the parent is done with us.
                phase.store(STOP, Ordering::SeqCst);
            });
        }
        println!("ready port={port}");
        let _ = std::io::stdout().flush();
        Self {
            phase,
            started: Instant::now(),
            timeout,
        }
    }

    /// Calls `idle` (which should block for a few milliseconds: poll a bus, sleep) until
    /// the parent says `go`; `idle` returning an error ends the wait with it.
    pub fn wait_go(&self, mut idle: impl FnMut() -> Result<(), String>) -> Result<(), String> {
        while self.phase.load(Ordering::SeqCst) == WAITING && !self.timed_out() {
            idle()?;
        }
        Ok(())
    }

    /// Like [`Self::wait_go`], until the parent says `stop`.
    pub fn wait_stop(&self, mut idle: impl FnMut() -> Result<(), String>) -> Result<(), String> {
        while !self.stopping() {
            idle()?;
        }
        Ok(())
    }

    /// True once the parent said `stop` (or went away), or the timeout passed.
    pub fn stopping(&self) -> bool {
        self.phase.load(Ordering::SeqCst) == STOP || self.timed_out()
    }

    fn timed_out(&self) -> bool {
        self.started.elapsed() >= self.timeout
    }
}

/// Waits until `count()` stops moving (read every 50 ms, at most 2 s): what is still
/// queued in a socket buffer when the sender ends is received, not lost.
pub fn settle(mut count: impl FnMut() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = count();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = count();
        if now == last {
            break;
        }
        last = now;
    }
}

/// Prints the `result` line: `fields` as `key=value`, whitespace in values replaced.
pub fn print_result(fields: &[(&str, String)]) {
    let mut line = String::from("result");
    for (k, v) in fields {
        line.push_str(&format!(" {k}={}", v.replace(char::is_whitespace, "_")));
    }
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Prints the `error` line and returns the exit status for it.
pub fn print_error(e: &str) -> i32 {
    println!("error {}", e.replace('\n', " | "));
    let _ = std::io::stdout().flush();
    crate::launch::EXIT_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_lines_parse() {
        let kv = parse_kv(" packets=5 bytes=10 junk memory=system");
        assert_eq!(kv.get("packets").map(String::as_str), Some("5"));
        assert_eq!(num::<u64>(&kv, "bytes"), 10);
        assert_eq!(num::<u64>(&kv, "missing"), 0);
        assert_eq!(kv.get("memory").map(String::as_str), Some("system"));
        assert!(!kv.contains_key("junk"));
    }

    #[test]
    fn settle_stops_when_the_count_holds() {
        let mut n = 0u64;
        let t = Instant::now();
        // Moves three times, then holds: four reads of 50 ms, well under the 2 s bound.
        settle(|| {
            n = (n + 1).min(3);
            n
        });
        assert!(t.elapsed() < Duration::from_millis(1500));
        assert_eq!(n, 3);
    }
}
