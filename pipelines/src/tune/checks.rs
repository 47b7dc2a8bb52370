//! The rules of `firehose tune`: each reads the host (through [`Host`] and [`Nic`]) and
//! says ok / warn / fail, what it found, what it wants, the command that fixes it and,
//! where the change is safe at run time, the [`Action`] `--apply` takes.
//!
//! The reasons follow spead2's "Tuning" guide and DAQIRI's system configuration tutorial:
//! socket buffers, hugepages, locked memory, CPU frequency and idle states, isolation,
//! interrupt placement, NIC rings, coalescing, flow control, offloads and the MTU.

use std::net::IpAddr;

use super::ethtool::Nic;
use super::host::{format_cpulist, parse_cpulist, Host};
use super::needs::{Needs, DEFAULT_SOCKET_BUFFER};

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Fine as it is.
    Ok,
    /// Could not be checked here (file missing, no such device, not supported).
    Skip,
    /// Works, but costs performance or risks loss under load.
    Warn,
    /// The pipeline will lose data or not start.
    Fail,
}

impl Status {
    /// Ok when the host has `enough`; short of it, a failure when the pipeline is
    /// `strict` about it (it will lose data or not start), else a warning.
    fn of(enough: bool, strict: bool) -> Self {
        match (enough, strict) {
            (true, _) => Self::Ok,
            (false, true) => Self::Fail,
            (false, false) => Self::Warn,
        }
    }

    /// The word printed for it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Skip => "skip",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// A change `--apply` can make at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `value` to a sysctl / sysfs file (`path` is absolute, under the root).
    Write {
        /// The file.
        path: String,
        /// What to write.
        value: String,
    },
    /// Set the ring sizes of the named interface.
    Rings {
        /// The interface (always the one given with --interface).
        ifname: String,
        /// Receive descriptors.
        rx: u32,
        /// Transmit descriptors.
        tx: u32,
    },
}

impl Action {
    /// Writing `value` to the file `path`.
    pub fn write(path: impl Into<String>, value: impl Into<String>) -> Self {
        Self::Write {
            path: path.into(),
            value: value.into(),
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Short name of the check ("rmem_max", "irq-affinity"…).
    pub check: &'static str,
    /// The verdict.
    pub status: Status,
    /// What the host has.
    pub found: String,
    /// What it should have.
    pub wanted: String,
    /// The shell command that fixes it (empty when ok or not fixable by a command).
    pub fix: String,
    /// Why it matters.
    pub why: &'static str,
    /// What `--apply` does about it, when it is safe at run time.
    pub actions: Vec<Action>,
    /// How to make the fix survive a reboot.
    pub persist: String,
}

impl Finding {
    fn new(check: &'static str, why: &'static str) -> Self {
        Self {
            check,
            status: Status::Ok,
            found: String::new(),
            wanted: String::new(),
            fix: String::new(),
            why,
            actions: Vec::new(),
            persist: String::new(),
        }
    }

    fn skip(mut self, found: impl Into<String>) -> Self {
        self.status = Status::Skip;
        self.found = found.into();
        self
    }

    fn with(mut self, status: Status, found: impl Into<String>, wanted: impl Into<String>) -> Self {
        self.status = status;
        self.found = found.into();
        self.wanted = wanted.into();
        self
    }

    /// Applies `set` when the check found a problem (warn or fail): only a problem has a
    /// fix, actions and a way to keep them.
    fn on_problem(mut self, set: impl FnOnce(&mut Self)) -> Self {
        if self.status > Status::Skip {
            set(&mut self);
        }
        self
    }

    fn fix(self, fix: impl Into<String>) -> Self {
        self.on_problem(|f| f.fix = fix.into())
    }

    fn act(self, action: Action, persist: impl Into<String>) -> Self {
        self.acts(vec![action], persist)
    }

    fn acts(self, actions: Vec<Action>, persist: impl Into<String>) -> Self {
        self.on_problem(|f| {
            if !actions.is_empty() {
                f.actions = actions;
                f.persist = persist.into();
            }
        })
    }

    fn persist(self, persist: impl Into<String>) -> Self {
        self.on_problem(|f| f.persist = persist.into())
    }

    /// The fix, the action and the persistence of setting sysctl `key` to `value`.
    fn sysctl(self, key: &str, value: &str) -> Self {
        self.fix(format!("sysctl -w {key}={value}")).act(
            Action::write(sysctl_path(key), value),
            persist_sysctl(key, value),
        )
    }
}

/// Everything a check may look at.
pub struct Ctx<'a> {
    /// The files of the host.
    pub host: &'a Host,
    /// The NIC's ethtool interface.
    pub nic: &'a dyn Nic,
    /// The capture interface, if named.
    pub iface: Option<String>,
    /// What the pipeline asks for, with --pipeline.
    pub needs: Option<Needs>,
    /// The CPU the capture thread runs on, with --cpu.
    pub cpu: Option<u32>,
}

/// The file sysctl `key` lives in ("net.core.rmem_max" → "/proc/sys/net/core/rmem_max").
pub fn sysctl_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

const SYSCTL_D: &str = "/etc/sysctl.d/90-firehose.conf";

fn persist_sysctl(key: &str, value: &str) -> String {
    format!("echo '{key} = {value}' >> {SYSCTL_D}")
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{bytes} ({} MiB)", bytes >> 20)
    } else {
        bytes.to_string()
    }
}

/// Every check, in report order.
pub fn run_all(ctx: &Ctx) -> Vec<Finding> {
    let mut out: Vec<Finding> = socket_buffer(ctx, "net.core.rmem_max", "rmem_max", true)
        .into_iter()
        .chain(socket_buffer(ctx, "net.core.wmem_max", "wmem_max", false))
        .collect();
    out.extend(hugepages(ctx));
    out.extend([
        memlock(ctx),
        governor(ctx),
        cstates(ctx),
        isolation(ctx),
        cpu_numa(ctx),
    ]);
    out.extend(irq_affinity(ctx));
    out.extend(nic(ctx));
    out.push(mtu(ctx));
    out.extend(multicast(ctx));
    out.extend([conntrack(ctx), busy_poll(ctx), pcie_path(ctx)]);
    out
}

/// `net.core.rmem_max` / `wmem_max` against the largest buffer the pipeline asks for
/// (8 MiB, the Firehose receivers' default, without --pipeline): the kernel silently
/// caps SO_RCVBUF / SO_SNDBUF there.
pub fn socket_buffer(ctx: &Ctx, key: &str, check: &'static str, receive: bool) -> Option<Finding> {
    let why = if receive {
        "the kernel silently caps a socket's receive buffer (SO_RCVBUF) at rmem_max; a small buffer overflows during any scheduling hiccup and the datagrams are lost (drops-kernel)"
    } else {
        "the kernel silently caps a socket's send buffer (SO_SNDBUF) at wmem_max; a small one makes a paced sender block or fail with ENOBUFS"
    };
    let f = Finding::new(check, why);
    let asked = match &ctx.needs {
        Some(n) if receive => n.rcvbuf,
        Some(n) => n.sndbuf,
        None => DEFAULT_SOCKET_BUFFER,
    };
    if asked == 0 {
        // The pipeline has no socket in this direction: nothing to ask of the limit.
        return None;
    }
    let path = sysctl_path(key);
    let found = match ctx.host.read_u64(&path) {
        Ok(v) => v,
        Err(e) => return Some(f.skip(format!("cannot read {path}: {e}"))),
    };
    let status = Status::of(found >= asked, ctx.needs.is_some());
    Some(
        f.with(status, mib(found), format!(">= {}", mib(asked)))
            .sysctl(key, &asked.to_string()),
    )
}

/// Hugepages: free pages of each size, and per NUMA node of the interface, against the
/// pool bytes that want hugepages.
pub fn hugepages(ctx: &Ctx) -> Vec<Finding> {
    let why = "pools in hugepages take far fewer TLB misses and page faults than in 4 KiB pages; a pool asking for hugepages falls back to normal pages (memory=auto) or fails to start (memory=hugepages) when too few are free";
    let f = Finding::new("hugepages", why);
    let sizes = ctx.host.list("/sys/kernel/mm/hugepages");
    if sizes.is_empty() {
        return vec![f.skip("no /sys/kernel/mm/hugepages (kernel without hugetlbfs)")];
    }
    let default_kb = ctx
        .host
        .read("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("Hugepagesize:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(2048);
    let dir = format!("/sys/kernel/mm/hugepages/hugepages-{default_kb}kB");
    let (free, total) = match (
        ctx.host.read_u64(&format!("{dir}/free_hugepages")),
        ctx.host.read_u64(&format!("{dir}/nr_hugepages")),
    ) {
        (Ok(f), Ok(t)) => (f, t),
        _ => return vec![f.skip(format!("cannot read {dir}"))],
    };
    let page = default_kb * 1024;
    let (need_bytes, required) = match &ctx.needs {
        Some(n) => (n.hugepage_bytes, n.hugepages_required),
        // Without a pipeline: a modest reservation (1 GiB), so pools can use them at all.
        None => (1 << 30, false),
    };
    if need_bytes == 0 {
        return vec![f.with(
            Status::Ok,
            format!("{free} of {total} free ({default_kb} kB)"),
            "none (the pipeline uses normal pages)",
        )];
    }
    let need_pages = need_bytes.div_ceil(page);
    let mut out = Vec::new();
    let status = Status::of(free >= need_pages, required);
    let target = total + need_pages.saturating_sub(free);
    out.push(
        f.clone()
            .with(
                status,
                format!("{free} of {total} free ({default_kb} kB pages)"),
                format!(
                    ">= {need_pages} free ({} MiB of pools{})",
                    need_bytes.div_ceil(1 << 20),
                    match ctx.needs.as_ref().map(|n| &n.pools_sized_at_start) {
                        Some(v) if !v.is_empty() => {
                            format!(", plus the pools {} size at start", v.join(", "))
                        }
                        _ => String::new(),
                    }
                ),
            )
            .fix(format!("sysctl -w vm.nr_hugepages={target}"))
            .act(
                Action::write(format!("{dir}/nr_hugepages"), target.to_string()),
                format!(
                    "{}  (or on the kernel command line: hugepagesz={default_kb}K hugepages={target})",
                    persist_sysctl("vm.nr_hugepages", &target.to_string())
                ),
            ),
    );
    // Per NUMA node: pools are allocated on the node of the capture thread, best the NIC's.
    if let Some(node) = iface_numa_node(ctx) {
        let ndir =
            format!("/sys/devices/system/node/node{node}/hugepages/hugepages-{default_kb}kB");
        if let (Ok(nfree), Ok(ntotal)) = (
            ctx.host.read_u64(&format!("{ndir}/free_hugepages")),
            ctx.host.read_u64(&format!("{ndir}/nr_hugepages")),
        ) {
            let status = Status::of(nfree >= need_pages, false);
            let ntarget = ntotal + need_pages.saturating_sub(nfree);
            let mut nf = f
                .clone()
                .with(
                    status,
                    format!("{nfree} of {ntotal} free on node {node} (the NIC's)"),
                    format!(">= {need_pages} free on node {node}"),
                )
                .fix(format!("echo {ntarget} > {ndir}/nr_hugepages"))
                .act(
                    Action::write(format!("{ndir}/nr_hugepages"), ntarget.to_string()),
                    format!(
                        "kernel command line: hugepagesz={default_kb}K hugepages={node}:{ntarget}"
                    ),
                );
            nf.check = "hugepages-numa";
            // Pages reserved on the node count globally too: with a node known, --apply
            // reserves them there only, not twice.
            if !nf.actions.is_empty() {
                out[0].actions.clear();
            }
            out.push(nf);
        }
    }
    let others: Vec<&String> = sizes
        .iter()
        .filter(|s| !s.contains(&format!("-{default_kb}kB")))
        .collect();
    for s in others {
        if let Ok(free) = ctx
            .host
            .read_u64(&format!("/sys/kernel/mm/hugepages/{s}/free_hugepages"))
        {
            let mut o = f.clone().with(
                Status::Ok,
                format!("{free} free ({s})"),
                "any (not the default size)",
            );
            o.check = "hugepages-other";
            out.push(o);
        }
    }
    out
}

/// The NUMA node of the named interface's device, when sysfs says (-1 = none).
fn iface_numa_node(ctx: &Ctx) -> Option<u32> {
    let iface = ctx.iface.as_ref()?;
    let v = ctx
        .host
        .read(&format!("/sys/class/net/{iface}/device/numa_node"))
        .ok()?;
    v.parse::<i64>().ok().filter(|n| *n >= 0).map(|n| n as u32)
}

/// The soft RLIMIT_MEMLOCK of this process (as `/proc/self/limits` shows it) against the
/// memory AF_XDP / RDMA pin.
pub fn memlock(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "memlock",
        "AF_XDP UMEM and RDMA memory regions are pinned and count against RLIMIT_MEMLOCK (unless the process has CAP_IPC_LOCK, as root does); above it the socket or region cannot be created",
    );
    let text = match ctx.host.read("/proc/self/limits") {
        Ok(t) => t,
        Err(e) => return f.skip(format!("cannot read /proc/self/limits: {e}")),
    };
    let Some(line) = text.lines().find(|l| l.starts_with("Max locked memory")) else {
        return f.skip("no 'Max locked memory' in /proc/self/limits");
    };
    let soft = line.split_whitespace().nth(3).unwrap_or("");
    let need = ctx.needs.as_ref().map_or(0, |n| n.pinned_bytes);
    let fix = "ulimit -l unlimited (for services: LimitMEMLOCK=infinity in the systemd unit)";
    let persist = "echo '* - memlock unlimited' >> /etc/security/limits.d/90-firehose.conf";
    if soft == "unlimited" {
        return f.with(
            Status::Ok,
            "unlimited",
            if need > 0 {
                format!(">= {}", mib(need))
            } else {
                "unlimited".into()
            },
        );
    }
    let Ok(bytes) = soft.parse::<u64>() else {
        return f.skip(format!("cannot parse '{line}'"));
    };
    if need == 0 && ctx.needs.is_some() {
        return f.with(Status::Ok, mib(bytes), "any (the pipeline pins no memory)");
    }
    let (status, wanted) = if need > 0 {
        (Status::of(bytes >= need, true), format!(">= {}", mib(need)))
    } else {
        // Root (CAP_IPC_LOCK) is exempt, a service user is not. Only a warning without a
        // pipeline that pins memory.
        (
            Status::Warn,
            "unlimited (for fhxdpsrc / fhibvsrc)".to_string(),
        )
    };
    f.with(status, mib(bytes), wanted).fix(fix).persist(persist)
}

/// The CPU frequency governor of every CPU: `performance` wanted.
pub fn governor(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "governor",
        "a power-saving governor lowers the clock while the receive thread waits and raises it too late for a burst; 'performance' keeps the cores at full speed",
    );
    let cpus: Vec<String> = ctx
        .host
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|c| c.starts_with("cpu") && c[3..].parse::<u32>().is_ok())
        .collect();
    let mut slow = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in &cpus {
        let path = format!("/sys/devices/system/cpu/{c}/cpufreq/scaling_governor");
        if let Ok(g) = ctx.host.read(&path) {
            if g != "performance" {
                slow.push(c[3..].parse::<u32>().unwrap_or(0));
            }
            seen.insert(g);
        }
    }
    if seen.is_empty() {
        return f.skip("no cpufreq in sysfs (a VM, or frequency scaling off in firmware)");
    }
    let found = seen.into_iter().collect::<Vec<_>>().join(", ");
    if slow.is_empty() {
        return f.with(Status::Ok, found, "performance");
    }
    f.with(
        Status::Warn,
        format!("{found} (CPUs {})", format_cpulist(&slow)),
        "performance",
    )
    .fix("cpupower frequency-set -g performance")
    .acts(
        slow.iter()
            .map(|c| {
                Action::write(
                    format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"),
                    "performance",
                )
            })
            .collect(),
        "install cpufrequtils and set GOVERNOR=\"performance\" in /etc/default/cpufrequtils",
    )
}

/// Idle states deeper than [`MAX_EXIT_LATENCY_US`] that are enabled.
pub const MAX_EXIT_LATENCY_US: u64 = 10;

/// Deep C-states: an enabled idle state with an exit latency above 10 µs.
pub fn cstates(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "c-states",
        "waking a core from a deep idle state takes tens to hundreds of µs, during which the NIC ring and socket buffer fill; bursts after idle gaps are where drops happen",
    );
    let states = ctx.host.list("/sys/devices/system/cpu/cpu0/cpuidle");
    if states.is_empty() {
        return f.skip("no cpuidle in sysfs (idle states not exposed here)");
    }
    let mut deep = Vec::new();
    let mut deep_states = Vec::new();
    for s in &states {
        let base = format!("/sys/devices/system/cpu/cpu0/cpuidle/{s}");
        let latency = ctx.host.read_u64(&format!("{base}/latency")).unwrap_or(0);
        let disabled = ctx.host.read_u64(&format!("{base}/disable")).unwrap_or(0) != 0;
        let name = ctx
            .host
            .read(&format!("{base}/name"))
            .unwrap_or_else(|_| s.clone());
        if latency > MAX_EXIT_LATENCY_US && !disabled {
            deep.push(format!("{name} ({latency} µs)"));
            deep_states.push(s.clone());
        }
    }
    if deep.is_empty() {
        return f.with(
            Status::Ok,
            "no enabled state deeper than 10 µs",
            format!("exit latency <= {MAX_EXIT_LATENCY_US} µs"),
        );
    }
    f.with(Status::Warn, format!("enabled: {}", deep.join(", ")), format!("exit latency <= {MAX_EXIT_LATENCY_US} µs"))
        .fix(format!("cpupower idle-set -D {MAX_EXIT_LATENCY_US}"))
        .acts(
            // The same states on every CPU (the idle driver is global).
            ctx.host
                .list("/sys/devices/system/cpu")
                .iter()
                .filter(|c| c.starts_with("cpu") && c[3..].parse::<u32>().is_ok())
                .flat_map(|c| {
                    deep_states.iter().map(move |s| {
                        Action::write(format!("/sys/devices/system/cpu/{c}/cpuidle/{s}/disable"), "1")
                    })
                })
                .filter(|a| matches!(a, Action::Write { path, .. } if ctx.host.exists(path)))
                .collect(),
            "kernel command line: intel_idle.max_cstate=1 processor.max_cstate=1 (or a tuned profile such as network-latency)",
        )
}

/// The capture CPU (`--cpu`, or the `cpu` a source of `--pipeline` is pinned to) on the
/// NIC's NUMA node.
pub fn cpu_numa(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "cpu-numa",
        "the capture thread should run on the NIC's NUMA node: the NIC writes packets into that node's memory, and a thread on another node reads every byte across the interconnect",
    );
    let Some(cpu) = ctx.cpu else {
        return f.skip("no capture CPU (--cpu, or cpu= on a source of --pipeline)");
    };
    let Some(node) = iface_numa_node(ctx) else {
        return f.skip("the interface's NUMA node is not known (no --interface, a virtual device, or a one-node machine)");
    };
    let path = format!("/sys/devices/system/node/node{node}/cpulist");
    let Some(cpus) = ctx.host.read(&path).ok().and_then(|l| parse_cpulist(&l)) else {
        return f.skip(format!("cannot read {path}"));
    };
    let wanted = format!("a CPU of node {node} ({})", format_cpulist(&cpus));
    if cpus.contains(&cpu) {
        f.with(Status::Ok, format!("CPU {cpu}, on node {node}"), wanted)
    } else {
        f.with(Status::Warn, format!("CPU {cpu}, not on node {node}"), wanted).fix(format!(
            "pin the capture to a CPU of node {node}: cpu=N on the source (and --cpu N here) with N in {}",
            format_cpulist(&cpus)
        ))
    }
}

/// CPU isolation on the kernel command line (`isolcpus`, `nohz_full`).
pub fn isolation(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "isolcpus",
        "an isolated core runs only the capture thread: no other task, timer tick or RCU callback preempts it in the middle of a burst",
    );
    let cmdline = match ctx.host.read("/proc/cmdline") {
        Ok(c) => c,
        Err(e) => return f.skip(format!("cannot read /proc/cmdline: {e}")),
    };
    let params: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|p| {
            p.starts_with("isolcpus=") || p.starts_with("nohz_full=") || p.starts_with("rcu_nocbs=")
        })
        .collect();
    let isolated = params
        .iter()
        .find_map(|p| p.strip_prefix("isolcpus="))
        .map(|v| {
            // "isolcpus=managed_irq,domain,2-3": the CPU list is the last part.
            let list = v
                .rsplit(',')
                .take_while(|p| parse_cpulist(p).is_some())
                .collect::<Vec<_>>();
            list.into_iter().rev().collect::<Vec<_>>().join(",")
        });
    let wanted = match ctx.cpu {
        Some(c) => format!("CPU {c} isolated (isolcpus=, nohz_full=)"),
        None => "a core for the capture thread (isolcpus=, nohz_full=)".to_string(),
    };
    let fix = format!(
        "add isolcpus={c} nohz_full={c} rcu_nocbs={c} to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot",
        c = ctx.cpu.map_or("N".to_string(), |c| c.to_string())
    );
    match (isolated, ctx.cpu) {
        (Some(list), Some(cpu)) if parse_cpulist(&list).is_some_and(|l| l.contains(&cpu)) => {
            f.with(Status::Ok, params.join(" "), wanted)
        }
        (Some(_), None) => f.with(Status::Ok, params.join(" "), wanted),
        (Some(_), Some(_)) => f.with(Status::Warn, params.join(" "), wanted).fix(fix),
        (None, _) => f
            .with(
                Status::Warn,
                "no isolcpus= on the kernel command line",
                wanted,
            )
            .fix(fix),
    }
}

/// The IRQs of the interface's queues: from the device's MSI list, else from
/// /proc/interrupts lines naming the interface.
fn iface_irqs(ctx: &Ctx, iface: &str) -> Vec<u32> {
    // A PCI NIC lists its MSI vectors; a virtio NIC's are on its parent PCI function
    // (only then: a PCI NIC's parent is a bridge, whose vectors are the bridge's own).
    let virtio = std::fs::canonicalize(ctx.host.path(&format!("/sys/class/net/{iface}/device")))
        .ok()
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("virtio"))
        })
        .unwrap_or(false);
    let dirs: &[&str] = if virtio {
        &["device/msi_irqs", "device/../msi_irqs"]
    } else {
        &["device/msi_irqs"]
    };
    let mut irqs: Vec<u32> = Vec::new();
    for dir in dirs {
        irqs = ctx
            .host
            .list(&format!("/sys/class/net/{iface}/{dir}"))
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        if !irqs.is_empty() {
            break;
        }
    }
    if irqs.is_empty() {
        if let Ok(text) = ctx.host.read("/proc/interrupts") {
            for line in text.lines() {
                let Some((num, rest)) = line.trim_start().split_once(':') else {
                    continue;
                };
                let Ok(n) = num.parse::<u32>() else { continue };
                let name = rest.split_whitespace().last().unwrap_or("");
                let named = name == iface
                    || name.starts_with(&format!("{iface}-"))
                    || name.starts_with(&format!("{iface}@"));
                if named {
                    irqs.push(n);
                }
            }
        }
    }
    irqs.sort_unstable();
    irqs.dedup();
    irqs
}

/// IRQ affinity of the interface's queues against its NUMA node and the capture CPU.
pub fn irq_affinity(ctx: &Ctx) -> Vec<Finding> {
    let f = Finding::new(
        "irq-affinity",
        "the interrupt (and its softirq packet processing) should run on the NIC's NUMA node, so packets land in local memory, but not on the capture thread's core, which it would preempt",
    );
    let Some(iface) = ctx.iface.clone() else {
        return vec![f.skip("no --interface given")];
    };
    let irqs = iface_irqs(ctx, &iface);
    if irqs.is_empty() {
        return vec![f.skip(format!(
            "no interrupts of {iface} found (virtual device, or none in /proc/interrupts)"
        ))];
    }
    let node = iface_numa_node(ctx);
    let node_cpus = node.and_then(|n| {
        parse_cpulist(
            &ctx.host
                .read(&format!("/sys/devices/system/node/node{n}/cpulist"))
                .ok()?,
        )
    });
    let mut wanted_cpus: Option<Vec<u32>> = node_cpus.clone();
    if let (Some(w), Some(c)) = (&mut wanted_cpus, ctx.cpu) {
        w.retain(|x| *x != c);
    }
    let mut out = Vec::new();
    for irq in irqs {
        let path = format!("/proc/irq/{irq}/smp_affinity_list");
        let Some(aff) = ctx.host.read(&path).ok().and_then(|t| parse_cpulist(&t)) else {
            out.push(f.clone().skip(format!("IRQ {irq}: cannot read {path}")));
            continue;
        };
        let off_node = node_cpus
            .as_ref()
            .is_some_and(|n| aff.iter().any(|c| !n.contains(c)));
        let on_capture = ctx.cpu.is_some_and(|c| aff.contains(&c));
        let wanted = match (&node, &wanted_cpus) {
            (Some(n), Some(w)) => format!(
                "CPUs {} (node {n}{})",
                format_cpulist(w),
                if ctx.cpu.is_some() {
                    ", not the capture CPU"
                } else {
                    ""
                }
            ),
            _ => match ctx.cpu {
                Some(c) => format!("not CPU {c} (the capture CPU)"),
                None => "the NIC's NUMA node (sysfs shows none: single node)".into(),
            },
        };
        let found = format!("IRQ {irq} on CPUs {}", format_cpulist(&aff));
        if !off_node && !on_capture {
            out.push(f.clone().with(Status::Ok, found, wanted));
            continue;
        }
        let target = match &wanted_cpus {
            Some(w) if !w.is_empty() => w.clone(),
            _ => {
                // No node information: every CPU but the capture one.
                let all = ctx
                    .host
                    .read("/sys/devices/system/cpu/online")
                    .ok()
                    .and_then(|t| parse_cpulist(&t))
                    .unwrap_or_default();
                all.into_iter().filter(|c| Some(*c) != ctx.cpu).collect()
            }
        };
        if target.is_empty() {
            out.push(f.clone().with(Status::Warn, found, wanted));
            continue;
        }
        let list = format_cpulist(&target);
        out.push(
            f.clone()
                .with(Status::Warn, found, wanted)
                .fix(format!("echo {list} > {path}  (stop irqbalance first: systemctl stop irqbalance)"))
                .act(
                    Action::write(path.clone(), list.clone()),
                    "disable irqbalance (systemctl disable --now irqbalance) and set the affinity from a boot script, or use IRQBALANCE_BANNED_CPULIST",
                ),
        );
    }
    out
}

/// NIC ring sizes, coalescing, flow control and GRO through the ethtool ioctl.
pub fn nic(ctx: &Ctx) -> Vec<Finding> {
    let Some(iface) = ctx.iface.clone() else {
        return vec![Finding::new(
            "nic",
            "ring sizes, coalescing, pause frames and GRO are per interface",
        )
        .skip("no --interface given")];
    };
    // One setting: a skip when ethtool cannot read `what`, else what `judge` makes of it.
    fn setting<T>(
        iface: &str,
        (f, what): (Finding, &str),
        answer: std::io::Result<T>,
        judge: impl FnOnce(Finding, T) -> Finding,
    ) -> Finding {
        match answer {
            Err(e) => f.skip(format!("{iface}: cannot read {what}: {e}")),
            Ok(v) => judge(f, v),
        }
    }
    // Each setting: its check, what ethtool reads and why it matters.
    let [rings, coalescing, pause, gro] = [
        (
            "rx-ring",
            "ring sizes",
            "the receive ring absorbs bursts while the CPU is busy elsewhere; at the driver default a few hundred µs of stall overflow it (rx_missed / rx_no_buffer in the NIC's counters)",
        ),
        (
            "coalescing",
            "coalescing",
            "an interrupt per packet costs more CPU than the packet; a few tens of µs of receive coalescing batches them (adaptive coalescing may choose too little under a steady high rate)",
        ),
        (
            "pause",
            "flow control",
            "with flow control on, a receiver that falls behind sends pause frames that stall the switch port (and every stream through it) instead of dropping its own packets; capture hosts count their drops and leave pause off unless the whole network is designed for it",
        ),
        (
            "gro",
            "GRO",
            "fhudpsrc gro=true (UDP GRO) needs the interface's GRO on: it merges a flow's datagrams into one receive call, the largest single saving on the receive path",
        ),
    ]
    .map(|(check, what, why)| (Finding::new(check, why), what));
    vec![
        setting(&iface, rings, ctx.nic.rings(&iface), |f, r| {
            if r.rx_max == 0 {
                return f.skip(format!("{iface}: the driver reports no ring limits"));
            }
            f.with(
                Status::of(r.rx >= r.rx_max, false),
                format!("rx {} of max {}", r.rx, r.rx_max),
                format!("rx {}", r.rx_max),
            )
            .fix(format!("ethtool -G {iface} rx {}", r.rx_max))
            .act(
                Action::Rings {
                    ifname: iface.clone(),
                    rx: r.rx_max,
                    tx: r.tx,
                },
                format!(
                    "a udev rule or networkd .link file: [Link] RxBufferSize={}",
                    r.rx_max
                ),
            )
        }),
        setting(&iface, coalescing, ctx.nic.coalesce(&iface), |f, c| {
            let found = format!(
                "rx-usecs {} rx-frames {} adaptive-rx {}",
                c.rx_usecs,
                c.rx_frames,
                onoff(c.adaptive_rx)
            );
            let enough = c.adaptive_rx || c.rx_usecs >= 8 || c.rx_frames > 1;
            f.with(
                Status::of(enough, false),
                found,
                "rx-usecs >= 8, or adaptive",
            )
            .fix(format!("ethtool -C {iface} rx-usecs 20"))
        }),
        setting(&iface, pause, ctx.nic.pause(&iface), |f, p| {
            let found = format!(
                "autoneg {} rx {} tx {}",
                onoff(p.autoneg),
                onoff(p.rx),
                onoff(p.tx)
            );
            f.with(Status::of(!p.tx, false), found, "tx off")
                .fix(format!("ethtool -A {iface} autoneg off rx off tx off"))
        }),
        setting(&iface, gro, ctx.nic.gro(&iface), |f, on| {
            let wants = ctx.needs.as_ref().is_none_or(|n| n.udp_gro);
            f.with(
                Status::of(on || !wants, false),
                onoff(on),
                if wants { "on" } else { "any" },
            )
            .fix(format!("ethtool -K {iface} gro on"))
        }),
    ]
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// MTU of the interface against the largest packet of the pipeline.
pub fn mtu(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "mtu",
        "a datagram larger than the MTU is fragmented by the sender and reassembled (or dropped) by the receiver; jumbo frames (MTU 9000) cut the per-packet cost by six",
    );
    let Some(iface) = ctx.iface.clone() else {
        return f.skip("no --interface given");
    };
    let path = format!("/sys/class/net/{iface}/mtu");
    let mtu = match ctx.host.read_u64(&path) {
        Ok(m) => m,
        Err(e) => return f.skip(format!("cannot read {path}: {e}")),
    };
    match ctx.needs.as_ref().map(|n| n.max_ip_packet).filter(|p| *p > 0) {
        Some(need) if mtu < need => f
            .with(Status::Fail, mtu.to_string(), format!(">= {need} (largest packet + 28 bytes of IPv4/UDP headers)"))
            .fix(format!("ip link set dev {iface} mtu {need}  (every hop must carry it)"))
            .persist(format!("MTUBytes={need} in the interface's systemd-networkd .network/.link file, or mtu {need} in /etc/network/interfaces")),
        Some(need) => f.with(Status::Ok, mtu.to_string(), format!(">= {need}")),
        None if mtu < 9000 => f.with(Status::Warn, mtu.to_string(), "9000 (jumbo frames) for high packet rates"),
        None => f.with(Status::Ok, mtu.to_string(), "9000 (jumbo frames)"),
    }
}

/// Reverse-path filtering and IGMP limits, for multicast receivers.
pub fn multicast(ctx: &Ctx) -> Vec<Finding> {
    let groups: Vec<IpAddr> = ctx
        .needs
        .as_ref()
        .map(|n| n.multicast_groups.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    let f = Finding::new(
        "rp_filter",
        "strict reverse-path filtering (1) drops multicast whose source is not routed back through the receiving interface, which is common for a dedicated capture network; loose (2) or off (0) keeps it",
    );
    let all = ctx.host.read_u64("/proc/sys/net/ipv4/conf/all/rp_filter");
    let dev = ctx.iface.as_ref().map(|i| {
        (
            i.clone(),
            ctx.host
                .read_u64(&format!("/proc/sys/net/ipv4/conf/{i}/rp_filter")),
        )
    });
    match (all, dev) {
        (Err(e), _) => out.push(f.skip(format!("cannot read net.ipv4.conf.all.rp_filter: {e}"))),
        (Ok(a), dev) => {
            // The kernel uses the larger of `all` and the interface's value.
            let (label, effective, key) = match &dev {
                Some((i, Ok(d))) => (
                    format!("all={a} {i}={d}"),
                    a.max(*d),
                    format!("net.ipv4.conf.{i}.rp_filter"),
                ),
                _ => (
                    format!("all={a}"),
                    a,
                    "net.ipv4.conf.all.rp_filter".to_string(),
                ),
            };
            if effective != 1 {
                out.push(f.with(Status::Ok, label, "0 or 2 (not strict)"));
            } else {
                let status = if groups.is_empty() {
                    Status::Warn
                } else {
                    Status::Fail
                };
                // Strict in `all` overrides the interface: both must be relaxed.
                let mut fix = format!("sysctl -w {key}=2");
                if a == 1 && key != "net.ipv4.conf.all.rp_filter" {
                    fix = format!("sysctl -w net.ipv4.conf.all.rp_filter=2 {key}=2");
                }
                let path = if a == 1 {
                    sysctl_path("net.ipv4.conf.all.rp_filter")
                } else {
                    sysctl_path(&key)
                };
                let mut found = f.with(status, label, "0 or 2 (not strict)").fix(fix);
                if groups.is_empty() {
                    // Only matters for multicast; without a pipeline say so, change nothing.
                    found.why = "strict reverse-path filtering (1) drops multicast whose source is not routed back through the receiving interface (only matters for multicast receivers)";
                } else {
                    found = found.act(Action::write(path, "2"), persist_sysctl(&key, "2"));
                    if a == 1 && key != "net.ipv4.conf.all.rp_filter" {
                        found.persist = format!(
                            "{}; {}",
                            persist_sysctl("net.ipv4.conf.all.rp_filter", "2"),
                            persist_sysctl(&key, "2")
                        );
                    }
                }
                out.push(found);
                // With `all` strict and the interface strict too, both must change.
                if a == 1 && !groups.is_empty() {
                    if let Some((_, Ok(1))) = &dev {
                        out.push(
                            Finding::new(
                                "rp_filter",
                                "the interface's own rp_filter is strict too",
                            )
                            .with(status, format!("{key}=1"), "0 or 2")
                            .sysctl(&key, "2"),
                        );
                    }
                }
            }
        }
    }
    if !groups.is_empty() {
        let f = Finding::new(
            "igmp",
            "a socket may join at most igmp_max_memberships groups (20 by default); a receiver of more streams fails to join the rest",
        );
        out.push(
            match ctx.host.read_u64("/proc/sys/net/ipv4/igmp_max_memberships") {
                Err(e) => f.skip(format!("cannot read net.ipv4.igmp_max_memberships: {e}")),
                Ok(max) => f
                    .with(
                        Status::of(max >= groups.len() as u64, true),
                        max.to_string(),
                        format!(">= {} groups", groups.len()),
                    )
                    .sysctl("net.ipv4.igmp_max_memberships", &groups.len().to_string()),
            },
        );
    }
    out
}

/// Connection tracking: loaded, it looks up (and may drop at a full table) every datagram.
pub fn conntrack(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "conntrack",
        "with nf_conntrack loaded every received datagram is looked up in the connection table, costing CPU per packet, and a full table drops packets; exempt the capture port with a NOTRACK rule",
    );
    // Built in or as a module, a live conntrack shows nf_conntrack_count; /proc/modules
    // is absent on kernels without module support.
    let module = ctx.host.read("/proc/modules").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().next() == Some("nf_conntrack"))
    });
    let loaded = module
        || ctx
            .host
            .exists("/proc/sys/net/netfilter/nf_conntrack_count");
    if !loaded && !ctx.host.exists("/proc/sys/net") {
        return f.skip("cannot read /proc/modules or /proc/sys/net");
    }
    if !loaded {
        return f.with(
            Status::Ok,
            "nf_conntrack not loaded",
            "not loaded, or the port exempt",
        );
    }
    let ports = ctx
        .needs
        .as_ref()
        .map(|n| n.ports.clone())
        .unwrap_or_default();
    let port = ports.first().map_or("PORT".to_string(), |p| p.to_string());
    // Firewall rules live in netlink, not in files: an existing exemption is not seen.
    f.with(
        Status::Warn,
        format!("nf_conntrack loaded (firewall rules not read: ignore if port {port} is already notrack)"),
        "the capture port exempt (NOTRACK)",
    )
        .fix(format!("nft add table inet raw; nft add chain inet raw prerouting '{{ type filter hook prerouting priority -300; }}'; nft add rule inet raw prerouting udp dport {port} notrack"))
        .persist("save the rule in /etc/nftables.conf")
}

/// Busy polling: what the pipeline's `busy-poll` relies on in the kernel.
pub fn busy_poll(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "busy_poll",
        "busy polling spins on the NIC queue instead of waiting for its interrupt, trading a core for latency; fhxdpsrc busy-poll=N needs the interface to defer its interrupts (napi_defer_hard_irqs, gro_flush_timeout) or the kernel keeps interrupting",
    );
    let asked = ctx.needs.as_ref().map_or(0, |n| n.busy_poll_us);
    let global = ctx.host.read_u64("/proc/sys/net/core/busy_poll");
    if asked == 0 {
        return match global {
            Ok(v) => f.with(
                Status::Ok,
                format!("net.core.busy_poll={v}"),
                "any (the pipeline does not busy-poll)",
            ),
            Err(e) => f.skip(format!("cannot read net.core.busy_poll: {e}")),
        };
    }
    let Some(iface) = ctx.iface.clone() else {
        return f.skip("busy-poll asked for, but no --interface given");
    };
    let defer = ctx
        .host
        .read_u64(&format!("/sys/class/net/{iface}/napi_defer_hard_irqs"));
    let flush = ctx
        .host
        .read_u64(&format!("/sys/class/net/{iface}/gro_flush_timeout"));
    match (defer, flush) {
        (Ok(d), Ok(t)) if d >= 2 && t >= 200_000 => f.with(Status::Ok, format!("napi_defer_hard_irqs={d} gro_flush_timeout={t}"), "napi_defer_hard_irqs >= 2, gro_flush_timeout >= 200000"),
        (Ok(d), Ok(t)) => f
            .with(Status::Warn, format!("napi_defer_hard_irqs={d} gro_flush_timeout={t}"), "napi_defer_hard_irqs >= 2, gro_flush_timeout >= 200000")
            .fix(format!("echo 2 > /sys/class/net/{iface}/napi_defer_hard_irqs; echo 200000 > /sys/class/net/{iface}/gro_flush_timeout"))
            .acts(
                vec![
                    Action::write(format!("/sys/class/net/{iface}/napi_defer_hard_irqs"), d.max(2).to_string()),
                    Action::write(format!("/sys/class/net/{iface}/gro_flush_timeout"), t.max(200_000).to_string()),
                ],
                "a udev rule writing both values when the interface appears",
            ),
        _ => f.skip(format!("no napi_defer_hard_irqs / gro_flush_timeout for {iface} (kernel older than 5.11?)")),
    }
}

/// Where a PCI device sits: its chain of PCI addresses below the host bridge
/// (`pci0000:00`), read from the sysfs device path, and its NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPlace {
    /// The host bridge (root complex), e.g. "pci0000:00".
    pub root: String,
    /// Bridges and the device itself, from the root down.
    pub chain: Vec<String>,
    /// NUMA node, when sysfs gives one.
    pub numa: Option<u32>,
}

/// The PCI place of a sysfs device directory (`/sys/class/net/IF/device`,
/// `/sys/bus/pci/devices/ADDR`): the symlink resolved, then walked up past non-PCI
/// parts (a virtio device hangs below its PCI function).
pub fn pci_place(host: &Host, dir: &str) -> Option<PciPlace> {
    let real = std::fs::canonicalize(host.path(dir)).ok()?;
    let sys = std::fs::canonicalize(host.path("/sys/devices")).ok()?;
    let rel = real.strip_prefix(&sys).ok()?;
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let root = parts.first().filter(|p| p.starts_with("pci"))?.clone();
    let is_addr = |p: &String| {
        p.len() == 12 && p.as_bytes().get(4) == Some(&b':') && p.as_bytes().get(7) == Some(&b':')
    };
    let chain: Vec<String> = parts[1..]
        .iter()
        .take_while(|p| is_addr(p))
        .cloned()
        .collect();
    if chain.is_empty() {
        return None;
    }
    let mut devdir = sys.join(&root);
    for c in &chain {
        devdir = devdir.join(c);
    }
    let numa = std::fs::read_to_string(devdir.join("numa_node"))
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(|n| n as u32);
    Some(PciPlace { root, chain, numa })
}

/// How data gets from one PCI device to another, in `nvidia-smi topo -m` words: PIX (one
/// PCIe switch), PXB (several), PHB (through the host bridge), NODE (between host
/// bridges of one NUMA node), SYS (across the inter-socket link).
pub fn pci_link(a: &PciPlace, b: &PciPlace) -> &'static str {
    if a.numa.is_some() && b.numa.is_some() && a.numa != b.numa {
        return "SYS";
    }
    if a.root != b.root {
        return "NODE";
    }
    // Shared bridges below the host bridge (the devices themselves are not bridges).
    let shared = a
        .chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count();
    let shared = shared.min(a.chain.len() - 1).min(b.chain.len() - 1);
    match shared {
        0 => "PHB",
        1 => "PIX",
        _ => "PXB",
    }
}

/// The PCIe path between the capture NIC and each GPU (GPUDirect pipelines).
pub fn pcie_path(ctx: &Ctx) -> Finding {
    let f = Finding::new(
        "pcie-path",
        "NIC-to-GPU transfers (GPUDirect RDMA, or copies into GPU memory) run at full rate only through a PCIe switch the two share (PIX/PXB); through the host bridge (PHB) or another root complex (NODE) they are slower, and across sockets (SYS) they also load the inter-socket link",
    );
    let Some(iface) = ctx.iface.clone() else {
        return f.skip("no --interface given");
    };
    let gpus: Vec<(String, PciPlace)> = ctx
        .host
        .list("/sys/bus/pci/devices")
        .into_iter()
        .filter(|d| {
            let class = ctx
                .host
                .read(&format!("/sys/bus/pci/devices/{d}/class"))
                .unwrap_or_default();
            class.starts_with("0x0300") || class.starts_with("0x0302")
        })
        .filter_map(|d| {
            Some((
                d.clone(),
                pci_place(ctx.host, &format!("/sys/bus/pci/devices/{d}"))?,
            ))
        })
        .collect();
    if gpus.is_empty() {
        return f.skip("no GPU on the PCI bus");
    }
    let Some(nic) = pci_place(ctx.host, &format!("/sys/class/net/{iface}/device")) else {
        return f.skip(format!("{iface} is not a PCI device"));
    };
    let links: Vec<(String, &'static str)> = gpus
        .iter()
        .map(|(d, g)| (d.clone(), pci_link(&nic, g)))
        .collect();
    let found = links
        .iter()
        .map(|(d, l)| format!("GPU {d}: {l}"))
        .collect::<Vec<_>>()
        .join(", ");
    let best_close = links.iter().any(|(_, l)| matches!(*l, "PIX" | "PXB"));
    let gpu_pipeline = ctx.needs.as_ref().is_some_and(|n| n.gpu);
    let status = Status::of(best_close || !gpu_pipeline, false);
    f.with(status, found, "PIX or PXB (NIC and GPU behind one PCIe switch)")
        .fix("move the NIC or the GPU into slots behind the same PCIe switch, or use the GPU closest to the NIC (CUDA_VISIBLE_DEVICES)")
}
