//! A benchmark receiver running in a child process, so that its CPU time is its own.
//!
//! The child speaks a line protocol on stdout: `ready port=P` once its socket is bound,
//! then, after any line (e.g. `stop`) on its stdin, `result key=value …`; or
//! `error message` (lines joined with ` | `) at any point.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::cpulimit::CpuLimit;

/// Splits `key=value key=value …` into a map.
pub fn parse_kv(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The `firehose` executable itself, to run a hidden receiver subcommand.
pub fn self_command() -> Result<Command, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the firehose executable to run receivers: {e}"))?;
    Ok(Command::new(exe))
}

/// A receiver child process, between `ready` and `result`.
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

    /// Tells the receiver to stop and returns the fields of its `result` line.
    pub fn finish(mut self) -> Result<BTreeMap<String, String>, String> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
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

/// The step with the highest asked rate up to which every step was lossless, or `None`
/// if the lowest already lost. The first loss ends the climb: a lucky lossless step
/// above a lossy one does not count, because a capture must keep up at every rate
/// below the one quoted.
pub fn highest_sustained<'a, T>(
    steps: impl IntoIterator<Item = &'a T>,
    asked: impl Fn(&T) -> u64,
    lossless: impl Fn(&T) -> bool,
) -> Option<&'a T> {
    let mut v: Vec<&T> = steps.into_iter().collect();
    v.sort_by_key(|s| asked(s));
    v.into_iter().take_while(|s| lossless(s)).last()
}

/// Prints `report`, writes it to `out` when given, and returns the exit status: an
/// error when writing failed or the run stopped early (`failure`).
pub fn publish_report(report: &str, out: Option<&std::path::Path>, failure: Option<&str>) -> i32 {
    use crate::launch::{EXIT_ERROR, EXIT_OK};
    println!("{report}");
    if let Some(path) = out {
        if let Err(e) = std::fs::write(path, report) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            return EXIT_ERROR;
        }
        eprintln!("bench: report written to {}", path.display());
    }
    match failure {
        Some(f) => {
            eprintln!("bench: stopped early: {f}");
            EXIT_ERROR
        }
        None => EXIT_OK,
    }
}

/// The command line that is running, quoted for copying into a shell (for reports).
pub fn command_line() -> String {
    std::env::args()
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes a command-line argument for display when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Bits/s as Gb/s with two decimals.
pub fn gbps(bps: f64) -> String {
    format!("{:.2}", bps / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_lines_parse() {
        let kv = parse_kv(" packets=5 bytes=10 junk memory=system");
        assert_eq!(kv.get("packets").map(String::as_str), Some("5"));
        assert_eq!(kv.get("memory").map(String::as_str), Some("system"));
        assert!(!kv.contains_key("junk"));
    }

    #[test]
    fn quoting_and_rates() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("--sizes=1472,8972"), "--sizes=1472,8972");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(gbps(1.5e9), "1.50");
    }

    #[test]
    fn highest_sustained_stops_at_the_first_loss() {
        // (asked rate, lossless), out of order as a caller may hold them.
        let steps = [(3, true), (1, true), (2, false), (4, true)];
        let best = |v: &[(u64, bool)]| highest_sustained(v, |s| s.0, |s| s.1).map(|s| s.0);
        assert_eq!(
            best(&steps),
            Some(1),
            "a lossless step above a loss must not count"
        );
        assert_eq!(best(&[(1, true), (2, true)]), Some(2));
        assert_eq!(best(&[(1, false), (2, true)]), None);
        assert_eq!(best(&[]), None);
    }
}
