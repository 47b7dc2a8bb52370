//! An equal CPU budget for benchmark receivers: a cgroup with a CFS quota.
//!
//! On a two-core machine the sender runs out of CPU before any good receiver loses a
//! packet, so "highest lossless rate" cannot separate receivers. Giving every receiver
//! process the same fraction of one core (`--cpu-limit 0.25`) brings each receiver's own
//! limit below what the sender can offer, and the lossless rates become comparable: a
//! receiver that needs half the CPU per byte keeps up with twice the rate. The period is
//! short (10 ms) so that a throttled receiver pauses for at most a few milliseconds,
//! which every receiver's 32 MiB socket buffer absorbs; what is measured is CPU per
//! byte, not buffering.
//!
//! Works with cgroup v2 (`cpu.max`, the default on Debian 12) and with cgroup v1's `cpu`
//! controller (`cpu.cfs_quota_us`). Needs root.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The CFS period, µs: short, so throttled pauses stay within socket buffering.
pub const PERIOD_US: u64 = 10_000;
/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The smallest and largest budgets accepted, in cores.
const RANGE: (f64, f64) = (0.01, 64.0);

/// Which cgroup interface holds the `cpu` controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A cgroup that limits its processes to a fraction of one core; removed on drop.
#[derive(Debug)]
pub struct CpuLimit {
    dir: PathBuf,
    version: Version,
    cores: f64,
    quota_us: u64,
}

/// Parses a `--cpu-limit` value: a fraction of one core, 0.01 to 64.
pub fn parse_cores(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|c| (RANGE.0..=RANGE.1).contains(c))
        .ok_or_else(|| {
            format!(
                "--cpu-limit '{s}' must be a number of cores from {} to {} (e.g. 0.25)",
                RANGE.0, RANGE.1
            )
        })
}

impl CpuLimit {
    /// Creates `firehose-bench-<pid>` limited to `cores` of one CPU under the machine's
    /// cgroup hierarchy.
    pub fn create(cores: f64) -> Result<Self, String> {
        Self::create_in(Path::new(CGROUP_ROOT), cores)
    }

    /// As [`CpuLimit::create`], under `root` (tests use a plain directory).
    fn create_in(root: &Path, cores: f64) -> Result<Self, String> {
        let quota_us = ((cores * PERIOD_US as f64).round() as u64).max(1000);
        let name = format!("{PREFIX}{}", std::process::id());
        let fail = |what: &str, path: &Path, e: io::Error| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (--cpu-limit needs root)"
            } else {
                ""
            };
            format!("--cpu-limit: cannot {what} {}: {e}{hint}", path.display())
        };
        let controllers = root.join("cgroup.controllers");
        let (version, dir) = if controllers.exists() {
            let have =
                fs::read_to_string(&controllers).map_err(|e| fail("read", &controllers, e))?;
            if !have.split_whitespace().any(|c| c == "cpu") {
                return Err(format!(
                    "--cpu-limit: the cgroup v2 hierarchy at {} offers no cpu controller \
                     (it has: {}); enable it in the kernel or leave --cpu-limit out",
                    root.display(),
                    have.trim()
                ));
            }
            // Children only get the controller once the parent delegates it.
            let subtree = root.join("cgroup.subtree_control");
            let delegated = fs::read_to_string(&subtree).unwrap_or_default();
            if !delegated.split_whitespace().any(|c| c == "cpu") {
                fs::write(&subtree, "+cpu").map_err(|e| fail("enable +cpu in", &subtree, e))?;
            }
            (Version::V2, root.join(name))
        } else if root.join("cpu").join("cpu.cfs_quota_us").exists() {
            (Version::V1, root.join("cpu").join(name))
        } else {
            return Err(format!(
                "--cpu-limit: no cgroup cpu controller under {} (neither cgroup v2 with \
                 cpu nor cgroup v1's cpu hierarchy is mounted); leave --cpu-limit out",
                root.display()
            ));
        };
        if let Some(parent) = dir.parent() {
            remove_stale(parent);
        }
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("create", &dir, e)),
        }
        let limit = Self {
            dir,
            version,
            cores,
            quota_us,
        };
        let writes: Vec<(&str, String)> = match version {
            Version::V2 => vec![("cpu.max", format!("{quota_us} {PERIOD_US}"))],
            // The period first: a quota above the old period would otherwise be refused.
            Version::V1 => vec![
                ("cpu.cfs_period_us", PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota_us.to_string()),
            ],
        };
        for (file, value) in writes {
            let path = limit.dir.join(file);
            fs::write(&path, value).map_err(|e| fail("write", &path, e))?;
        }
        Ok(limit)
    }

    /// Moves process `pid` (all its threads, and any it starts later) into the budget.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        let procs = self.dir.join("cgroup.procs");
        fs::write(&procs, pid.to_string()).map_err(|e| {
            format!(
                "--cpu-limit: cannot move process {pid} into {}: {e}",
                procs.display()
            )
        })
    }

    /// The budget, in cores of one CPU.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// One line for reports: the budget and how it is enforced.
    pub fn describe(&self) -> String {
        let how = match self.version {
            Version::V2 => "cgroup v2 cpu.max",
            Version::V1 => "cgroup v1 cpu.cfs_quota_us",
        };
        format!(
            "{} of one core per receiver process ({how}: {} µs per {PERIOD_US} µs)",
            self.cores, self.quota_us
        )
    }
}

/// How often a budget held its processes back: from the cgroup's `cpu.stat`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Throttling {
    /// Quota periods in which the processes ran.
    pub periods: u64,
    /// Of those, periods that ended with the processes held back (quota spent).
    pub throttled: u64,
    /// Time the processes were held back, µs.
    pub throttled_us: u64,
}

impl Throttling {
    /// Parses `cpu.stat`: cgroup v2 counts `throttled_usec`, v1 `throttled_time` in ns.
    pub fn parse(text: &str) -> Self {
        let mut t = Self::default();
        for line in text.lines() {
            let mut kv = line.split_whitespace();
            let (Some(k), Some(v)) = (kv.next(), kv.next().and_then(|v| v.parse::<u64>().ok()))
            else {
                continue;
            };
            match k {
                "nr_periods" => t.periods = v,
                "nr_throttled" => t.throttled = v,
                "throttled_usec" => t.throttled_us = v,
                "throttled_time" => t.throttled_us = v / 1000,
                _ => {}
            }
        }
        t
    }

    /// What happened between `earlier` and this reading.
    pub fn since(&self, earlier: &Throttling) -> Throttling {
        Throttling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled: self.throttled.saturating_sub(earlier.throttled),
            throttled_us: self.throttled_us.saturating_sub(earlier.throttled_us),
        }
    }

    /// Throttled periods as a share of the periods run, 0 to 1 (`None`: none ran).
    pub fn share(&self) -> Option<f64> {
        (self.periods > 0).then(|| self.throttled as f64 / self.periods as f64)
    }
}

impl CpuLimit {
    /// The budget's throttling counters so far (`None` when `cpu.stat` cannot be read).
    pub fn throttling(&self) -> Option<Throttling> {
        fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .map(|t| Throttling::parse(&t))
    }
}

/// Prefix of the cgroups this module makes; the rest of the name is the owner's pid.
const PREFIX: &str = "firehose-bench-";

/// Removes cgroups left by benchmark runs that were killed before they could clean up
/// (their pid is gone). A cgroup that still has processes refuses rmdir and stays.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        // Empty by now (every receiver was waited for); a cgroup directory is removed
        // with rmdir even though it lists control files.
        let _ = fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory standing in for /sys/fs/cgroup.
    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fh-cpulimit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A scratch cgroup v1 tree: a `cpu` hierarchy with no quota set.
    fn v1_scratch(tag: &str) -> PathBuf {
        let root = scratch(tag);
        fs::create_dir(root.join("cpu")).unwrap();
        fs::write(root.join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
        root
    }

    #[test]
    fn parses_cores_and_refuses_nonsense() {
        assert_eq!(parse_cores("0.25"), Ok(0.25));
        assert_eq!(parse_cores("2"), Ok(2.0));
        for bad in ["0", "-1", "0.001", "65", "x", ""] {
            assert!(parse_cores(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn v2_delegates_cpu_and_writes_cpu_max() {
        let root = scratch("v2");
        fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        fs::write(root.join("cgroup.subtree_control"), "memory pids\n").unwrap();
        let l = CpuLimit::create_in(&root, 0.25).unwrap();
        assert_eq!(l.version, Version::V2);
        assert_eq!(
            fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "+cpu"
        );
        assert_eq!(
            fs::read_to_string(l.dir.join("cpu.max")).unwrap(),
            "2500 10000"
        );
        l.add(4242).unwrap();
        assert_eq!(
            fs::read_to_string(l.dir.join("cgroup.procs")).unwrap(),
            "4242"
        );
        assert!(l
            .describe()
            .contains("cgroup v2 cpu.max: 2500 µs per 10000 µs"));
        drop(l);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v2_without_cpu_controller_is_a_clear_error() {
        let root = scratch("v2-nocpu");
        fs::write(root.join("cgroup.controllers"), "memory pids\n").unwrap();
        let e = CpuLimit::create_in(&root, 0.5).unwrap_err();
        assert!(e.contains("offers no cpu controller"), "{e}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v1_writes_period_then_quota() {
        let root = v1_scratch("v1");
        let l = CpuLimit::create_in(&root, 1.5).unwrap();
        assert_eq!(l.version, Version::V1);
        assert_eq!(
            fs::read_to_string(l.dir.join("cpu.cfs_period_us")).unwrap(),
            "10000"
        );
        assert_eq!(
            fs::read_to_string(l.dir.join("cpu.cfs_quota_us")).unwrap(),
            "15000"
        );
        drop(l);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn throttling_reads_both_versions_of_cpu_stat() {
        let v1 = Throttling::parse("nr_periods 200\nnr_throttled 50\nthrottled_time 375000000\n");
        assert_eq!(
            v1,
            Throttling {
                periods: 200,
                throttled: 50,
                throttled_us: 375_000
            }
        );
        let v2 = Throttling::parse(
            "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 300\nnr_throttled 30\n\
             throttled_usec 2000\n",
        );
        let d = v2.since(&v1);
        assert_eq!((d.periods, d.throttled, d.throttled_us), (100, 0, 0));
        assert_eq!(v1.share(), Some(0.25));
        assert_eq!(Throttling::default().share(), None);
        let root = v1_scratch("stat");
        let l = CpuLimit::create_in(&root, 0.5).unwrap();
        assert_eq!(l.throttling(), None, "no cpu.stat yet");
        fs::write(l.dir.join("cpu.stat"), "nr_periods 4\nnr_throttled 1\n").unwrap();
        assert_eq!(l.throttling().map(|t| t.throttled), Some(1));
        fs::remove_file(l.dir.join("cpu.stat")).unwrap();
        drop(l);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn stale_cgroups_of_dead_runs_are_removed() {
        let root = v1_scratch("stale");
        // pid_max is at most 2^22, so this pid cannot be alive.
        let dead = root.join("cpu/firehose-bench-4294967");
        let other = root.join("cpu/someone-else-1");
        fs::create_dir(&dead).unwrap();
        fs::create_dir(&other).unwrap();
        let l = CpuLimit::create_in(&root, 0.5).unwrap();
        assert!(!dead.exists(), "a dead run's cgroup stayed");
        assert!(other.exists(), "a cgroup that is not ours was removed");
        assert!(l.dir.exists());
        drop(l);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_controller_at_all_is_a_clear_error() {
        let root = scratch("none");
        let e = CpuLimit::create_in(&root, 0.5).unwrap_err();
        assert!(e.contains("no cgroup cpu controller"), "{e}");
        fs::remove_dir_all(&root).unwrap();
    }

    /// CPU seconds process `pid` has used so far (utime + stime from /proc).
    fn proc_cpu_seconds(pid: u32) -> f64 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / hz
    }

    /// On this machine's real hierarchy (tests run as root, as the network tests need):
    /// a busy child held to 0.2 of a core uses about that much CPU.
    #[test]
    fn real_cgroup_limits_a_busy_child() {
        let l = CpuLimit::create(0.2).expect("a cgroup cpu controller on the test machine");
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        l.add(child.id()).unwrap();
        let cpu0 = proc_cpu_seconds(child.id());
        let t0 = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let cpu = proc_cpu_seconds(child.id()) - cpu0;
        let wall = t0.elapsed().as_secs_f64();
        child.kill().unwrap();
        child.wait().unwrap();
        drop(l);
        // Unlimited it would use ~1 core; held to 0.2 it cannot use much more than 0.2
        // of the wall time (a generous bound for noisy VMs and 10 ms clock ticks).
        assert!(cpu < 0.4 * wall, "child used {cpu:.2} s CPU in {wall:.2} s");
        assert!(
            cpu > 0.05 * wall,
            "child barely ran: {cpu:.2} s CPU in {wall:.2} s"
        );
    }
}
