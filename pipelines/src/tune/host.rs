//! The host as files under a root directory ("/" normally, a fake sysfs/procfs tree in
//! tests), so every rule can be tested without touching the machine.

use std::io;
use std::path::{Path, PathBuf};

/// Reads (and for `--apply`, writes) the kernel's files under `root`.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    /// The host seen from `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// True when this is the real machine (root "/"): only then are the live kernel
    /// interfaces (ethtool ioctls) consulted.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `path` (absolute, e.g. "/proc/cmdline") under the root.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The trimmed text of `path`.
    pub fn read(&self, path: &str) -> io::Result<String> {
        std::fs::read_to_string(self.path(path)).map(|s| s.trim().to_string())
    }

    /// `path` parsed as an unsigned integer.
    pub fn read_u64(&self, path: &str) -> io::Result<u64> {
        let text = self.read(path)?;
        text.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path} holds '{text}', not a number"),
            )
        })
    }

    /// Names of the entries of directory `path`, sorted (empty when it does not exist).
    pub fn list(&self, path: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(path))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort_by_key(|n| natural(n));
        names
    }

    /// True when `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    /// Writes `value` to `path` (a sysctl or sysfs knob).
    pub fn write(&self, path: &str, value: &str) -> io::Result<()> {
        std::fs::write(self.path(path), value)
    }
}

/// Sort key putting "cpu10" after "cpu9".
fn natural(s: &str) -> (String, u64) {
    let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = s.split_at(s.len() - digits);
    (head.to_string(), tail.parse().unwrap_or(0))
}

/// Parses a CPU list ("0-3,8,10-11") into CPU numbers; `None` on junk.
pub fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// Formats CPU numbers as a compact list ("0-3,8").
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(format_cpulist(&[8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
    }

    #[test]
    fn reads_under_root_and_lists_naturally() {
        let dir = std::env::temp_dir().join(format!("fh-host-{}", std::process::id()));
        for n in ["cpu10", "cpu9", "cpu0"] {
            std::fs::create_dir_all(dir.join("sys/cpu").join(n)).unwrap();
        }
        std::fs::write(dir.join("sys/v"), " 42\n").unwrap();
        let h = Host::new(&dir);
        assert!(!h.is_live());
        assert_eq!(h.list("/sys/cpu"), ["cpu0", "cpu9", "cpu10"]);
        assert_eq!(h.read_u64("/sys/v").unwrap(), 42);
        assert!(h.read("/sys/missing").is_err());
        assert!(h.list("/nope").is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
