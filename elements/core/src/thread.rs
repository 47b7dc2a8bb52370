//! Where a receive thread runs: pinned to one CPU (`sched_setaffinity`) and, if asked,
//! at a real-time priority (`SCHED_FIFO`). No GStreamer types.
//!
//! Why here and not in `firehose tune`: tune keeps interrupts and other work off a CPU,
//! but only the element knows which thread receives. The thread is GStreamer's
//! streaming thread, which the element does not create, so a [`Pinner`] applies the
//! placement from inside it, on the first batch after each start and again whenever a
//! batch comes on another thread (a flushing seek may restart the task on a new one),
//! with no syscall on the batches in between. GStreamer returns a stopped task's
//! thread to a pool that any element may draw from, so [`Pinner::restore`] gives each
//! thread it placed its earlier CPUs and scheduling back when the element stops.
//!
//! ```
//! use firehose_core::thread::Placement;
//!
//! let cpu = Placement::allowed_cpus().unwrap()[0];
//! std::thread::spawn(move || {
//!     Placement { cpu: Some(cpu), rt_priority: 0 }.apply().unwrap();
//!     assert_eq!(Placement::current_cpus().unwrap(), [cpu]);
//! })
//! .join()
//! .unwrap();
//! ```

use std::cell::Cell;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The highest CPU number a `cpu_set_t` can name (`CPU_SETSIZE`, 1024 on Linux).
pub const MAX_CPU: u32 = libc::CPU_SETSIZE as u32 - 1;

/// The highest `SCHED_FIFO` priority Linux gives (`sched_get_priority_max`).
pub const MAX_RT_PRIORITY: u32 = 99;

/// Where a thread should run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The one CPU it runs on; `None`: wherever the scheduler puts it.
    pub cpu: Option<u32>,
    /// Its `SCHED_FIFO` priority, 1–99; 0: normal scheduling.
    pub rt_priority: u32,
}

/// Why a placement could not be applied, with the fix.
#[derive(Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// The CPU is beyond what a CPU set holds, offline, or outside the process's
    /// allowed set (a cgroup cpuset, `taskset`).
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: u32,
        /// The CPUs this process may run on.
        allowed: Vec<u32>,
    },
    /// The priority is outside 1–99.
    PriorityOutOfRange(u32),
    /// The kernel refused real-time scheduling: no CAP_SYS_NICE and no RLIMIT_RTPRIO
    /// that covers the priority.
    PriorityRefused(u32),
    /// Another error from the kernel.
    Os {
        /// What was being done.
        what: &'static str,
        /// The kernel's error.
        error: String,
    },
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CpuNotAllowed { cpu, allowed } => write!(
                f,
                "cpu {cpu} cannot be used: this process may run on CPUs {} (offline CPUs, \
                 a cgroup cpuset or taskset narrow it); choose one of those",
                cpu_list(allowed)
            ),
            Self::PriorityOutOfRange(p) => write!(
                f,
                "rt-priority {p} is out of range: SCHED_FIFO takes 1 to {MAX_RT_PRIORITY} \
                 (0: normal scheduling)"
            ),
            Self::PriorityRefused(p) => write!(
                f,
                "real-time priority {p} refused: SCHED_FIFO needs CAP_SYS_NICE; run as \
                 root, grant it (`setcap cap_sys_nice+ep $(which gst-launch-1.0)`, or \
                 AmbientCapabilities=CAP_SYS_NICE in a systemd unit), raise RLIMIT_RTPRIO \
                 to {p} (/etc/security/limits.conf: `<user> - rtprio {p}`), or set \
                 rt-priority=0"
            ),
            Self::Os { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for PlacementError {}

/// `0-3,6` for `[0, 1, 2, 3, 6]`.
fn cpu_list(cpus: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        out.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    out.join(",")
}

/// The CPUs in `set`.
fn cpus_of(set: &libc::cpu_set_t) -> Vec<u32> {
    // SAFETY: CPU_ISSET reads a bit of an initialised set, for an index below its size.
    (0..=MAX_CPU)
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, set) })
        .collect()
}

/// The affinity of thread `tid` (0: the calling thread).
fn affinity(tid: libc::pid_t) -> io::Result<Vec<u32>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel writes at most its
    // size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(cpus_of(&set))
    }
}

impl Placement {
    /// True when there is nothing to apply.
    pub fn is_default(&self) -> bool {
        self.cpu.is_none() && self.rt_priority == 0
    }

    /// The CPUs this process may run on (the main thread's affinity).
    pub fn allowed_cpus() -> io::Result<Vec<u32>> {
        // SAFETY: getpid cannot fail.
        affinity(unsafe { libc::getpid() })
    }

    /// The CPUs the calling thread may run on.
    pub fn current_cpus() -> io::Result<Vec<u32>> {
        affinity(0)
    }

    /// Checks what can be checked before the thread exists: the CPU is one this
    /// process may run on, the priority is in range. (Whether the kernel grants the
    /// priority is known only when [`Placement::apply`] asks.)
    pub fn check(&self) -> Result<(), PlacementError> {
        if self.rt_priority > MAX_RT_PRIORITY {
            return Err(PlacementError::PriorityOutOfRange(self.rt_priority));
        }
        if let Some(cpu) = self.cpu {
            let allowed = Self::allowed_cpus().map_err(|e| PlacementError::Os {
                what: "reading this process's CPU affinity",
                error: e.to_string(),
            })?;
            if !allowed.contains(&cpu) {
                return Err(PlacementError::CpuNotAllowed { cpu, allowed });
            }
        }
        Ok(())
    }

    /// Applies the placement to the calling thread.
    pub fn apply(&self) -> Result<(), PlacementError> {
        self.check()?;
        if let Some(cpu) = self.cpu {
            // SAFETY: a zeroed set with one bit set below CPU_SETSIZE (checked), passed
            // with its own size.
            let rc = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EINVAL) => PlacementError::CpuNotAllowed {
                        cpu,
                        allowed: Self::allowed_cpus().unwrap_or_default(),
                    },
                    _ => PlacementError::Os {
                        what: "pinning the receive thread (sched_setaffinity)",
                        error: e.to_string(),
                    },
                });
            }
        }
        if self.rt_priority > 0 {
            let param = libc::sched_param {
                sched_priority: self.rt_priority as i32,
            };
            // SAFETY: a valid sched_param for the calling thread (0).
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EPERM) => PlacementError::PriorityRefused(self.rt_priority),
                    _ => PlacementError::Os {
                        what: "setting the receive thread's priority (sched_setscheduler)",
                        error: e.to_string(),
                    },
                });
            }
        }
        Ok(())
    }
}

/// Every [`Pinner::start`] gets a number no other start anywhere had, so a thread
/// that applied one start's placement applies the next one's too.
static STARTS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The start whose placement this thread has applied (0: none).
    static APPLIED: Cell<u64> = const { Cell::new(0) };
}

/// A thread's placement before a [`Pinner`] changed it.
#[derive(Debug)]
struct Before {
    tid: libc::pid_t,
    cpus: Vec<u32>,
    policy: libc::c_int,
    priority: libc::c_int,
}

impl Before {
    /// The calling thread's.
    fn now() -> io::Result<Self> {
        let cpus = affinity(0)?;
        // SAFETY: gettid cannot fail; sched_getscheduler and sched_getparam read the
        // calling thread's (0) into a valid sched_param.
        unsafe {
            let policy = libc::sched_getscheduler(0);
            let mut param = libc::sched_param { sched_priority: 0 };
            if policy < 0 || libc::sched_getparam(0, &mut param) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Self {
                tid: libc::gettid(),
                cpus,
                policy,
                priority: param.sched_priority,
            })
        }
    }

    /// Puts thread `tid` back (from any thread of the process).
    fn restore(&self) -> io::Result<()> {
        // SAFETY: a zeroed set with bits below CPU_SETSIZE (they came from one), passed
        // with its size; a valid sched_param; `tid` is a thread of this process that
        // GStreamer keeps (a pool's idle thread) or that has gone (ESRCH, harmless).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &self.cpus {
                libc::CPU_SET(c as usize, &mut set);
            }
            let param = libc::sched_param {
                sched_priority: self.priority,
            };
            if libc::sched_setscheduler(self.tid, self.policy, &param) != 0
                || libc::sched_setaffinity(self.tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
                    != 0
            {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// The threads placed and not yet put back, by thread id: which start placed each
/// (its owner) and how it was before. Why one table for the process: GStreamer returns
/// a task's thread to its pool *before* the element's `stop`, so another element may
/// take the thread and place it again before the first one restores it; the second
/// then owns it (and its true earlier state), and the first leaves it alone. Locked
/// once per thread placed and at each stop, never per batch.
static PLACED: Mutex<Vec<(u64, Before)>> = Mutex::new(Vec::new());

/// Applies a [`Placement`] from inside a thread the caller does not create (a
/// GStreamer streaming thread): once per start on each thread that asks; and puts
/// those threads back at [`Pinner::restore`].
#[derive(Debug, Default)]
pub struct Pinner {
    placement: Placement,
    start: u64,
}

impl Pinner {
    /// A pinner for `placement`, for one start of an element (checked first:
    /// [`Placement::check`]).
    pub fn start(placement: Placement) -> Result<Self, PlacementError> {
        placement.check()?;
        Ok(Self {
            placement,
            start: STARTS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// What it applies.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Applies the placement to the calling thread unless this thread already has
    /// (no syscall then): call it at the top of every batch. `Ok(true)` when it was
    /// applied now.
    pub fn on_this_thread(&self) -> Result<bool, PlacementError> {
        if self.placement.is_default() || APPLIED.with(Cell::get) == self.start {
            return Ok(false);
        }
        // Marked first: a refusal is reported once, not on every batch.
        APPLIED.with(|a| a.set(self.start));
        {
            let mut placed = PLACED.lock().unwrap_or_else(PoisonError::into_inner);
            // SAFETY: gettid cannot fail.
            let tid = unsafe { libc::gettid() };
            match placed.iter_mut().find(|(_, b)| b.tid == tid) {
                // Placed by an element that has not stopped yet: keep the state from
                // before it, which is the one to go back to.
                Some(entry) => entry.0 = self.start,
                None => {
                    let before = Before::now().map_err(|e| PlacementError::Os {
                        what: "reading the receive thread's CPUs and scheduling",
                        error: e.to_string(),
                    })?;
                    placed.push((self.start, before));
                }
            }
        }
        self.placement.apply().map(|()| true)
    }

    /// Gives every thread this start placed, and no other element has placed since,
    /// its earlier CPUs and scheduling back (call it when they no longer receive for
    /// this element: after its task stopped). Returns the first error, having tried
    /// every thread.
    pub fn restore(&self) -> io::Result<()> {
        let mut placed = PLACED.lock().unwrap_or_else(PoisonError::into_inner);
        let mut result = Ok(());
        placed.retain(|(owner, before)| {
            if *owner != self.start {
                return true;
            }
            result = std::mem::replace(&mut result, Ok(())).and(before.restore());
            false
        });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_new_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn pins_to_each_allowed_cpu() {
        for cpu in Placement::allowed_cpus().unwrap() {
            let got = on_new_thread(move || {
                Placement {
                    cpu: Some(cpu),
                    rt_priority: 0,
                }
                .apply()
                .unwrap();
                Placement::current_cpus().unwrap()
            });
            assert_eq!(got, [cpu]);
        }
    }

    #[test]
    fn a_cpu_outside_the_allowed_set_is_refused_with_the_set() {
        let allowed = Placement::allowed_cpus().unwrap();
        for cpu in [*allowed.last().unwrap() + 1, MAX_CPU, MAX_CPU + 1, u32::MAX] {
            let p = Placement {
                cpu: Some(cpu),
                rt_priority: 0,
            };
            let e = p.apply().unwrap_err();
            assert_eq!(
                e,
                PlacementError::CpuNotAllowed {
                    cpu,
                    allowed: allowed.clone()
                }
            );
            assert!(e.to_string().contains(&cpu_list(&allowed)), "{e}");
        }
    }

    #[test]
    fn priorities_out_of_range_are_refused() {
        let e = Placement {
            cpu: None,
            rt_priority: 100,
        }
        .check()
        .unwrap_err();
        assert_eq!(e, PlacementError::PriorityOutOfRange(100));
        assert!(e.to_string().contains("1 to 99"), "{e}");
    }

    #[test]
    fn a_real_time_priority_is_set_or_refused_naming_cap_sys_nice() {
        let r = on_new_thread(|| {
            let r = Placement {
                cpu: None,
                rt_priority: 1,
            }
            .apply();
            // SAFETY: reads the calling thread's policy.
            (r, unsafe { libc::sched_getscheduler(0) })
        });
        match r {
            (Ok(()), policy) => assert_eq!(policy, libc::SCHED_FIFO),
            (Err(e), policy) => {
                assert_eq!(e, PlacementError::PriorityRefused(1));
                assert!(e.to_string().contains("CAP_SYS_NICE"), "{e}");
                assert_eq!(policy, libc::SCHED_OTHER);
            }
        }
    }

    #[test]
    fn a_pinner_applies_once_per_thread_and_again_after_a_new_start() {
        let cpu = Placement::allowed_cpus().unwrap()[0];
        let placement = Placement {
            cpu: Some(cpu),
            rt_priority: 0,
        };
        let first = Pinner::start(placement).unwrap();
        let second = Pinner::start(placement).unwrap();
        let applied = on_new_thread(move || {
            [
                first.on_this_thread().unwrap(),
                first.on_this_thread().unwrap(),
                second.on_this_thread().unwrap(),
                second.on_this_thread().unwrap(),
            ]
        });
        assert_eq!(applied, [true, false, true, false]);
        let nothing = Pinner::start(Placement::default()).unwrap();
        assert!(!nothing.on_this_thread().unwrap());
    }

    #[test]
    fn restore_gives_a_placed_thread_its_cpus_back() {
        let allowed = Placement::allowed_cpus().unwrap();
        let pinner = std::sync::Arc::new(
            Pinner::start(Placement {
                cpu: Some(allowed[0]),
                rt_priority: 0,
            })
            .unwrap(),
        );
        let (placed_tx, placed_rx) = std::sync::mpsc::channel();
        let (restored_tx, restored_rx) = std::sync::mpsc::channel::<()>();
        let p = pinner.clone();
        let thread = std::thread::spawn(move || {
            p.on_this_thread().unwrap();
            placed_tx.send(Placement::current_cpus().unwrap()).unwrap();
            restored_rx.recv().unwrap();
            Placement::current_cpus().unwrap()
        });
        assert_eq!(placed_rx.recv().unwrap(), [allowed[0]]);
        // From another thread, as an element's stop does.
        pinner.restore().unwrap();
        restored_tx.send(()).unwrap();
        assert_eq!(thread.join().unwrap(), allowed);
    }

    #[test]
    fn cpu_lists_read_as_ranges() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[0, 2, 3]), "0,2-3");
        assert_eq!(cpu_list(&[]), "");
    }
}
