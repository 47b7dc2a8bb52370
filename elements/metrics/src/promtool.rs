//! `promtool check metrics` on an exposition, for tests (Debian package `prometheus`).

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` on `text`: `Ok` when it passes with nothing to say,
/// else what it said. Panics when promtool is not installed, naming the package.
pub fn check_metrics(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool not found: install the Debian package `prometheus` (scripts/setup test does)",
        );
    // A failed write (promtool gone early) still waits for the child, which says why.
    let written = child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes());
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(e) = written {
        return Err(format!("cannot write to promtool: {e}; it said: {said}"));
    }
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(said)
    }
}
