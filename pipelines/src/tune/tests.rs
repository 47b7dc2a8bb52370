//! Every rule against fake sysfs/procfs trees: an ok case, a failing case with its fix
//! and action, and a tree without the files (a skip, never a panic).

use std::cell::RefCell;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::checks::{self, Action, Ctx, Finding, Status};
use super::ethtool::{Coalesce, Nic, NoNic, Pause, Rings};
use super::host::Host;
use super::needs::Needs;

/// A fake root directory holding `files`; removed on drop.
pub struct Tree {
    pub dir: PathBuf,
    pub host: Host,
}

impl Tree {
    pub fn new(files: &[(&str, &str)]) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fh-tune-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = Self {
            host: Host::new(&dir),
            dir,
        };
        for (path, text) in files {
            t.put(path, text);
        }
        t
    }

    pub fn put(&self, path: &str, text: &str) {
        let p = self.dir.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn mkdir(&self, path: &str) {
        std::fs::create_dir_all(self.dir.join(path.trim_start_matches('/'))).unwrap();
    }

    /// A symbolic link at `at` to `target`, both inside the tree (as sysfs links
    /// devices, interfaces and classes).
    pub fn link(&self, target: &str, at: &str) {
        self.mkdir(at.rsplit_once('/').unwrap().0);
        std::os::unix::fs::symlink(
            self.dir.join(target.trim_start_matches('/')),
            self.dir.join(at.trim_start_matches('/')),
        )
        .unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A NIC with fixed answers that records ring changes.
#[derive(Default)]
struct FakeNic {
    rings: Option<Rings>,
    coalesce: Option<Coalesce>,
    pause: Option<Pause>,
    gro: Option<bool>,
    set: RefCell<Vec<(String, u32, u32)>>,
}

fn unsupported() -> io::Error {
    io::Error::from_raw_os_error(libc::EOPNOTSUPP)
}

impl Nic for FakeNic {
    fn rings(&self, _: &str) -> io::Result<Rings> {
        self.rings.ok_or_else(unsupported)
    }
    fn coalesce(&self, _: &str) -> io::Result<Coalesce> {
        self.coalesce.ok_or_else(unsupported)
    }
    fn pause(&self, _: &str) -> io::Result<Pause> {
        self.pause.ok_or_else(unsupported)
    }
    fn gro(&self, _: &str) -> io::Result<bool> {
        self.gro.ok_or_else(unsupported)
    }
    fn set_rings(&self, ifname: &str, rx: u32, tx: u32) -> io::Result<()> {
        self.set.borrow_mut().push((ifname.into(), rx, tx));
        Ok(())
    }
}

fn ctx<'a>(t: &'a Tree, nic: &'a dyn Nic, iface: Option<&str>, needs: Option<Needs>) -> Ctx<'a> {
    Ctx {
        host: &t.host,
        nic,
        iface: iface.map(str::to_string),
        needs,
        cpu: None,
    }
}

/// What `check` finds on tree `t` with no NIC answers, for interface `iface` and a
/// pipeline that needs `needs`.
fn check_on<T>(check: fn(&Ctx) -> T, t: &Tree, iface: Option<&str>, needs: Option<Needs>) -> T {
    check(&ctx(t, &NoNic, iface, needs))
}

/// The status `check` gives on tree `t` without an interface or a pipeline.
fn status_of(check: fn(&Ctx) -> Finding, t: &Tree) -> Status {
    check_on(check, t, None, None).status
}

/// Writes `text` to `path` in `t`, then asserts the status `check` gives there without an
/// interface or a pipeline.
#[track_caller]
fn assert_status_after(
    t: &Tree,
    path: &str,
    text: &str,
    check: fn(&Ctx) -> Finding,
    status: Status,
) {
    t.put(path, text);
    assert_eq!(status_of(check, t), status);
}

/// Asserts that `f` has `status` and a fix that says `fix`.
#[track_caller]
fn assert_fix(f: &Finding, status: Status, fix: &str) {
    assert_eq!(f.status, status, "{f:?}");
    assert!(f.fix.contains(fix), "{f:?}");
}

/// Asserts that the findings, one for each of `paths`, each write `value` to their path
/// and do nothing else.
#[track_caller]
fn assert_writes<'f>(findings: impl IntoIterator<Item = &'f Finding>, paths: &[&str], value: &str) {
    let findings: Vec<&Finding> = findings.into_iter().collect();
    assert_eq!(findings.len(), paths.len(), "{findings:?}");
    for (f, path) in findings.into_iter().zip(paths) {
        assert_eq!(f.actions, [Action::write(*path, value)], "{f:?}");
    }
}

fn only(v: Vec<Finding>, check: &str) -> Finding {
    let mut m: Vec<Finding> = v.into_iter().filter(|f| f.check == check).collect();
    assert_eq!(m.len(), 1, "{check}: {m:?}");
    m.remove(0)
}

#[test]
fn socket_buffers_against_the_pipeline() {
    let t = Tree::new(&[("/proc/sys/net/core/rmem_max", "212992\n")]);
    let needs = Needs {
        rcvbuf: 64 << 20,
        ..Default::default()
    };
    // rmem_max for the receive direction, wmem_max for the send one.
    let buffer = |receive: bool, needs| {
        let (key, check) = if receive {
            ("net.core.rmem_max", "rmem_max")
        } else {
            ("net.core.wmem_max", "wmem_max")
        };
        checks::socket_buffer(&ctx(&t, &NoNic, None, needs), key, check, receive)
    };
    let rmem = |needs| buffer(true, needs).unwrap();
    let wmem = |needs| buffer(false, needs);
    let f = rmem(Some(needs.clone()));
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert_eq!(f.found, "212992");
    assert_eq!(f.fix, "sysctl -w net.core.rmem_max=67108864");
    assert_eq!(
        f.actions,
        [Action::write("/proc/sys/net/core/rmem_max", "67108864")]
    );
    assert!(f.persist.contains("/etc/sysctl.d/"), "{f:?}");
    // Without a pipeline: the 8 MiB default, and only a warning.
    assert_eq!(rmem(None).status, Status::Warn);
    t.put("/proc/sys/net/core/rmem_max", "134217728");
    let f = rmem(Some(needs.clone()));
    assert_eq!(f.status, Status::Ok);
    assert!(f.fix.is_empty() && f.actions.is_empty());
    // A pipeline that sends nothing asks nothing of wmem_max.
    assert!(wmem(Some(needs)).is_none());
    let f = wmem(None).unwrap();
    assert_eq!(f.status, Status::Skip, "missing file: {f:?}");
}

#[test]
fn hugepages_global_and_per_numa_node() {
    let t = Tree::new(&[
        (
            "/proc/meminfo",
            "MemTotal: 1 kB\nHugepagesize:       2048 kB\n",
        ),
        (
            "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
            "2",
        ),
        (
            "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "4",
        ),
        (
            "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages",
            "0",
        ),
        ("/sys/class/net/eth1/device/numa_node", "1"),
        (
            "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages",
            "0",
        ),
        (
            "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
            "2",
        ),
    ]);
    let needs = Needs {
        hugepage_bytes: 10 << 20,
        hugepages_required: true,
        ..Default::default()
    };
    let v = check_on(checks::hugepages, &t, Some("eth1"), Some(needs.clone()));
    let g = only(v.clone(), "hugepages");
    assert_eq!(g.status, Status::Fail, "{g:?}");
    assert_eq!(g.found, "2 of 4 free (2048 kB pages)");
    // 5 pages wanted, 2 free: reserve 3 more on top of the 4.
    assert_eq!(g.fix, "sysctl -w vm.nr_hugepages=7");
    // The node is known: --apply reserves the pages there, not globally as well.
    assert!(g.actions.is_empty(), "{g:?}");
    let n = only(v.clone(), "hugepages-numa");
    assert_eq!(n.status, Status::Warn);
    assert_eq!(
        n.actions,
        [Action::write(
            "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
            "7"
        )]
    );
    assert_eq!(only(v, "hugepages-other").status, Status::Ok);
    // memory=auto: a warning, not a failure.
    let auto = Needs {
        hugepages_required: false,
        ..needs.clone()
    };
    let global = |needs| {
        only(
            check_on(checks::hugepages, &t, None, Some(needs)),
            "hugepages",
        )
    };
    let g = global(auto);
    assert_eq!(g.status, Status::Warn);
    // No interface, so no node: the global reservation is the action.
    assert_eq!(
        g.actions,
        [Action::write(
            "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "7"
        )]
    );
    t.put(
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "5",
    );
    assert_eq!(global(needs).status, Status::Ok);
    assert_eq!(
        check_on(checks::hugepages, &Tree::new(&[]), None, None)[0].status,
        Status::Skip
    );
}

#[test]
fn memlock_against_pinned_memory() {
    let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\n";
    let t = Tree::new(&[("/proc/self/limits", limits)]);
    let pins = Needs {
        pinned_bytes: 16 << 20,
        ..Default::default()
    };
    let memlock = |needs| check_on(checks::memlock, &t, None, Some(needs));
    assert_fix(&memlock(pins.clone()), Status::Fail, "ulimit -l unlimited");
    assert_eq!(memlock(Needs::default()).status, Status::Ok);
    t.put(
        "/proc/self/limits",
        &limits.replace(
            "8388608              8388608",
            "unlimited            unlimited",
        ),
    );
    assert_eq!(memlock(pins).status, Status::Ok);
}

#[test]
fn governor_per_cpu() {
    let t = Tree::new(&[
        (
            "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            "performance\n",
        ),
        (
            "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "powersave\n",
        ),
    ]);
    t.mkdir("/sys/devices/system/cpu/cpufreq");
    let f = check_on(checks::governor, &t, None, None);
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.found.contains("powersave") && f.found.contains("CPUs 1"),
        "{f:?}"
    );
    assert_eq!(
        f.actions,
        [Action::write(
            "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "performance"
        )]
    );
    let governor = "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor";
    assert_status_after(&t, governor, "performance", checks::governor, Status::Ok);
    let vm = Tree::new(&[]);
    vm.mkdir("/sys/devices/system/cpu/cpu0");
    assert_eq!(status_of(checks::governor, &vm), Status::Skip);
}

#[test]
fn deep_cstates() {
    let mut files = Vec::new();
    for cpu in 0..2 {
        files.push((
            format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/latency"),
            "0",
        ));
        files.push((
            format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/disable"),
            "0",
        ));
        files.push((
            format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/latency"),
            "133",
        ));
        files.push((
            format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/disable"),
            "0",
        ));
        files.push((
            format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/name"),
            "C6",
        ));
    }
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    let t = Tree::new(&files);
    let f = check_on(checks::cstates, &t, None, None);
    assert_eq!(f.status, Status::Warn);
    assert!(f.found.contains("C6 (133 µs)"), "{f:?}");
    assert_eq!(
        f.actions,
        [
            Action::write("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable", "1"),
            Action::write("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable", "1")
        ]
    );
    let disable = "/sys/devices/system/cpu/cpu0/cpuidle/state1/disable";
    assert_status_after(&t, disable, "1", checks::cstates, Status::Ok);
}

#[test]
fn isolated_cpus_from_the_command_line() {
    let t = Tree::new(&[(
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 isolcpus=managed_irq,domain,2-3 nohz_full=2-3\n",
    )]);
    let mut c = ctx(&t, &NoNic, None, None);
    c.cpu = Some(2);
    assert_eq!(checks::isolation(&c).status, Status::Ok);
    c.cpu = Some(1);
    assert_fix(&checks::isolation(&c), Status::Warn, "isolcpus=1");
    let cmdline = "root=/dev/sda1 quiet";
    assert_status_after(
        &t,
        "/proc/cmdline",
        cmdline,
        checks::isolation,
        Status::Warn,
    );
}

#[test]
fn the_capture_cpu_on_the_nics_numa_node() {
    let t = Tree::new(&[
        ("/sys/class/net/eth1/device/numa_node", "1"),
        ("/sys/devices/system/node/node1/cpulist", "4-7"),
    ]);
    let mut c = ctx(&t, &NoNic, Some("eth1"), None);
    assert_eq!(checks::cpu_numa(&c).status, Status::Skip, "no capture CPU");
    c.cpu = Some(5);
    assert_eq!(checks::cpu_numa(&c).status, Status::Ok);
    c.cpu = Some(2);
    assert_fix(&checks::cpu_numa(&c), Status::Warn, "N in 4-7");
    c.iface = None;
    assert_eq!(checks::cpu_numa(&c).status, Status::Skip, "no interface");
}

#[test]
fn irq_affinity_on_the_nics_node_off_the_capture_cpu() {
    let t = Tree::new(&[
        ("/sys/class/net/eth1/device/numa_node", "0"),
        ("/sys/devices/system/node/node0/cpulist", "0-3"),
        ("/proc/irq/40/smp_affinity_list", "4-7"),
        ("/proc/irq/41/smp_affinity_list", "1"),
        ("/proc/irq/42/smp_affinity_list", "2"),
    ]);
    for irq in [40, 41, 42] {
        t.mkdir(&format!("/sys/class/net/eth1/device/msi_irqs/{irq}"));
    }
    let mut c = ctx(&t, &NoNic, Some("eth1"), None);
    c.cpu = Some(2);
    let v = checks::irq_affinity(&c);
    let s: Vec<Status> = v.iter().map(|f| f.status).collect();
    assert_eq!(s, [Status::Warn, Status::Ok, Status::Warn], "{v:?}");
    assert_writes(
        [&v[0], &v[2]],
        &[
            "/proc/irq/40/smp_affinity_list",
            "/proc/irq/42/smp_affinity_list",
        ],
        "0-1,3",
    );
    // Without MSI in sysfs, the /proc/interrupts names are used; other devices are not.
    let t = Tree::new(&[
        ("/proc/interrupts", "           CPU0       CPU1\n 50:   1 2  PCI-MSI 1-edge  eth1-TxRx-0\n 51:  1 2  PCI-MSI 2-edge  eth10-TxRx-0\n 52: 1 2 PCI-MSI 3-edge eth0-TxRx-0\n"),
        ("/proc/irq/50/smp_affinity_list", "0-1"),
    ]);
    t.mkdir("/sys/class/net/eth1");
    let irqs = |iface| check_on(checks::irq_affinity, &t, iface, None);
    let v = irqs(Some("eth1"));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].status, Status::Ok);
    assert!(v[0].found.contains("IRQ 50"));
    for iface in [None, Some("eth9")] {
        assert_eq!(irqs(iface)[0].status, Status::Skip);
    }
}

#[test]
fn nic_rings_coalescing_pause_gro() {
    let t = Tree::new(&[]);
    // Rings of at most 4096 (tx at 512) and 1-frame coalescing without a timer.
    let fake = |rx, adaptive_rx, pause, gro| FakeNic {
        rings: Some(Rings {
            rx,
            rx_max: 4096,
            tx: 512,
            tx_max: 4096,
        }),
        coalesce: Some(Coalesce {
            rx_usecs: 0,
            rx_frames: 1,
            adaptive_rx,
        }),
        pause: Some(pause),
        gro: Some(gro),
        ..Default::default()
    };
    let on = Pause {
        autoneg: true,
        rx: true,
        tx: true,
    };
    let nic = fake(512, false, on, false);
    let v = checks::nic(&ctx(&t, &nic, Some("eth1"), None));
    let ring = only(v.clone(), "rx-ring");
    assert_eq!(ring.status, Status::Warn);
    assert_eq!(ring.fix, "ethtool -G eth1 rx 4096");
    assert_eq!(
        ring.actions,
        [Action::Rings {
            ifname: "eth1".into(),
            rx: 4096,
            tx: 512
        }]
    );
    assert_eq!(only(v.clone(), "coalescing").status, Status::Warn);
    assert_eq!(
        only(v.clone(), "pause").fix,
        "ethtool -A eth1 autoneg off rx off tx off"
    );
    assert_eq!(only(v, "gro").status, Status::Warn);
    // A pipeline without UDP GRO does not care.
    let v = checks::nic(&ctx(&t, &nic, Some("eth1"), Some(Needs::default())));
    assert_eq!(only(v, "gro").status, Status::Ok);
    let good = fake(4096, true, Pause::default(), true);
    assert!(checks::nic(&ctx(&t, &good, Some("eth1"), None))
        .iter()
        .all(|f| f.status == Status::Ok));
    // No ethtool support (or a fake root): every NIC check says it cannot check.
    assert!(checks::nic(&ctx(&t, &NoNic, Some("eth1"), None))
        .iter()
        .all(|f| f.status == Status::Skip));
}

#[test]
fn mtu_against_the_largest_packet() {
    let t = Tree::new(&[("/sys/class/net/eth1/mtu", "1500\n")]);
    let needs = Needs {
        max_ip_packet: 9000,
        ..Default::default()
    };
    let mtu = |iface, needs| check_on(checks::mtu, &t, Some(iface), needs);
    let f = mtu("eth1", Some(needs.clone()));
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.starts_with("ip link set dev eth1 mtu 9000"), "{f:?}");
    t.put("/sys/class/net/eth1/mtu", "9000");
    assert_eq!(mtu("eth1", Some(needs)).status, Status::Ok);
    assert_eq!(mtu("eth2", None).status, Status::Skip);
}

#[test]
fn multicast_rp_filter_and_igmp() {
    let t = Tree::new(&[
        ("/proc/sys/net/ipv4/conf/all/rp_filter", "1"),
        ("/proc/sys/net/ipv4/conf/eth1/rp_filter", "1"),
        ("/proc/sys/net/ipv4/igmp_max_memberships", "20"),
    ]);
    let groups: Vec<std::net::IpAddr> = (0..25)
        .map(|i| format!("239.0.0.{i}").parse().unwrap())
        .collect();
    let needs = Needs {
        multicast_groups: groups,
        ..Default::default()
    };
    let v = check_on(checks::multicast, &t, Some("eth1"), Some(needs.clone()));
    let rp: Vec<&Finding> = v.iter().filter(|f| f.check == "rp_filter").collect();
    assert_eq!(rp.len(), 2, "{v:?}");
    assert!(rp.iter().all(|f| f.status == Status::Fail));
    assert_writes(
        rp,
        &[
            "/proc/sys/net/ipv4/conf/all/rp_filter",
            "/proc/sys/net/ipv4/conf/eth1/rp_filter",
        ],
        "2",
    );
    let igmp = only(v, "igmp");
    assert_eq!(igmp.status, Status::Fail);
    assert_eq!(igmp.fix, "sysctl -w net.ipv4.igmp_max_memberships=25");
    t.put("/proc/sys/net/ipv4/conf/all/rp_filter", "0");
    t.put("/proc/sys/net/ipv4/conf/eth1/rp_filter", "2");
    t.put("/proc/sys/net/ipv4/igmp_max_memberships", "64");
    assert!(check_on(checks::multicast, &t, Some("eth1"), Some(needs))
        .iter()
        .all(|f| f.status == Status::Ok));
    // Strict, but no multicast in the pipeline: a warning and nothing to apply.
    t.put("/proc/sys/net/ipv4/conf/all/rp_filter", "1");
    let f = only(check_on(checks::multicast, &t, None, None), "rp_filter");
    assert_eq!(f.status, Status::Warn);
    assert!(f.actions.is_empty());
}

#[test]
fn conntrack_loaded_or_not() {
    let t = Tree::new(&[(
        "/proc/modules",
        "nf_conntrack 180224 1 nf_nat, Live 0x0\nveth 40960 0 - Live 0x0\n",
    )]);
    let needs = Needs {
        ports: vec![7148],
        ..Default::default()
    };
    let f = check_on(checks::conntrack, &t, None, Some(needs));
    assert_fix(&f, Status::Warn, "udp dport 7148 notrack");
    t.mkdir("/proc/sys/net");
    let modules = "veth 40960 0 - Live 0x0\n";
    assert_status_after(&t, "/proc/modules", modules, checks::conntrack, Status::Ok);
    // Built in: no module line, but the sysctl is there.
    let count = "/proc/sys/net/netfilter/nf_conntrack_count";
    assert_status_after(&t, count, "3", checks::conntrack, Status::Warn);
}

#[test]
fn busy_poll_needs_deferred_interrupts() {
    let t = Tree::new(&[
        ("/proc/sys/net/core/busy_poll", "0"),
        ("/sys/class/net/eth1/napi_defer_hard_irqs", "0"),
        ("/sys/class/net/eth1/gro_flush_timeout", "0"),
    ]);
    let busy_poll = |needs| check_on(checks::busy_poll, &t, Some("eth1"), needs);
    assert_eq!(busy_poll(None).status, Status::Ok);
    let needs = Needs {
        busy_poll_us: 50,
        ..Default::default()
    };
    let f = busy_poll(Some(needs.clone()));
    assert_eq!(f.status, Status::Warn);
    assert_eq!(
        f.actions,
        [
            Action::write("/sys/class/net/eth1/napi_defer_hard_irqs", "2"),
            Action::write("/sys/class/net/eth1/gro_flush_timeout", "200000")
        ]
    );
    t.put("/sys/class/net/eth1/napi_defer_hard_irqs", "2");
    t.put("/sys/class/net/eth1/gro_flush_timeout", "200000");
    assert_eq!(busy_poll(Some(needs)).status, Status::Ok);
}

#[test]
fn an_empty_tree_is_all_skips_or_warnings_never_a_panic() {
    let t = Tree::new(&[]);
    let v = checks::run_all(&ctx(&t, &NoNic, Some("eth1"), None));
    assert!(!v.is_empty());
    assert!(v.iter().all(|f| f.status != Status::Fail), "{v:?}");
    assert!(
        v.iter().all(|f| f.actions.is_empty()),
        "nothing to apply to files that are not there"
    );
    assert_eq!(super::exit_status(&v), 0);
    // The rules that read one file or tree each say they cannot check without it.
    let empty = Tree::new(&[]);
    for check in [
        checks::memlock,
        checks::cstates,
        checks::isolation,
        checks::conntrack,
    ] {
        assert_eq!(status_of(check, &empty), Status::Skip);
    }
    let json = super::to_json(&v);
    assert!(
        json.starts_with("[{\"check\":") && json.ends_with("}]"),
        "{json}"
    );
}

#[test]
fn apply_writes_the_files_and_rings_of_the_named_interface_only() {
    let t = Tree::new(&[
        ("/proc/sys/net/core/rmem_max", "212992"),
        ("/sys/class/net/eth1/mtu", "9000"),
        ("/sys/class/net/eth0/mtu", "1500"),
        ("/proc/sys/net/ipv4/conf/all/rp_filter", "0"),
        ("/proc/sys/net/ipv4/conf/eth0/rp_filter", "1"),
    ]);
    let nic = FakeNic {
        rings: Some(Rings {
            rx: 256,
            rx_max: 1024,
            tx: 256,
            tx_max: 1024,
        }),
        ..Default::default()
    };
    let needs = Needs {
        rcvbuf: 32 << 20,
        ..Default::default()
    };
    let c = ctx(&t, &nic, Some("eth1"), Some(needs));
    let findings = checks::run_all(&c);
    assert_eq!(super::exit_status(&findings), 1, "rmem_max fails first");
    let status = super::apply(&c, &findings, true, false);
    assert_eq!(status, 0, "everything that failed was fixed");
    assert_eq!(
        t.host.read("/proc/sys/net/core/rmem_max").unwrap(),
        "33554432"
    );
    assert_eq!(*nic.set.borrow(), [("eth1".to_string(), 1024, 256)]);
    // eth0 was not named: its strict rp_filter and small MTU are left alone.
    assert_eq!(
        t.host
            .read("/proc/sys/net/ipv4/conf/eth0/rp_filter")
            .unwrap(),
        "1"
    );
    assert_eq!(t.host.read("/sys/class/net/eth0/mtu").unwrap(), "1500");
}

#[test]
fn pcie_path_between_nic_and_gpus() {
    let t = Tree::new(&[]);
    // pci0000:00 ── 00:01.0 (switch) ─┬─ 01:00.0 NIC
    //                                 └─ 02:00.0 GPU A (PIX)
    // pci0000:40 ── 40:01.0 ── 41:00.0 GPU B (another root complex, node 1)
    let nic = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
    let gpu_a = "/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0";
    let gpu_b = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0";
    t.put(&format!("{nic}/class"), "0x020000");
    t.put(&format!("{nic}/numa_node"), "0");
    t.put(&format!("{gpu_a}/class"), "0x030200");
    t.put(&format!("{gpu_a}/numa_node"), "0");
    t.put(&format!("{gpu_b}/class"), "0x030000");
    t.put(&format!("{gpu_b}/numa_node"), "1");
    // As the kernel lays it out: the interface below its device, `device` pointing up.
    t.mkdir(&format!("{nic}/net/eth1"));
    t.link(&format!("{nic}/net/eth1"), "/sys/class/net/eth1");
    t.link(nic, &format!("{nic}/net/eth1/device"));
    t.link(nic, "/sys/bus/pci/devices/0000:01:00.0");
    t.link(gpu_b, "/sys/bus/pci/devices/0000:41:00.0");
    let gpu_needs = Needs {
        gpu: true,
        ..Default::default()
    };
    let found = |status| {
        let f = check_on(checks::pcie_path, &t, Some("eth1"), Some(gpu_needs.clone()));
        assert_eq!(f.status, status, "{f:?}");
        f.found
    };
    assert_eq!(found(Status::Warn), "GPU 0000:41:00.0: SYS");
    t.link(gpu_a, "/sys/bus/pci/devices/0000:02:00.0");
    assert_eq!(
        found(Status::Ok),
        "GPU 0000:02:00.0: PIX, GPU 0000:41:00.0: SYS"
    );
    // Without GPUs, or without a PCI NIC, it says so.
    let plain = Tree::new(&[]);
    plain.mkdir("/sys/class/net/lo");
    assert_eq!(
        check_on(checks::pcie_path, &plain, Some("lo"), None).status,
        Status::Skip
    );
}

#[test]
fn pci_links_in_nvidia_smi_words() {
    let place = |root: &str, chain: &[&str], numa: u32| checks::PciPlace {
        root: root.into(),
        chain: chain.iter().map(|s| s.to_string()).collect(),
        numa: Some(numa),
    };
    let nic = place(
        "pci0000:00",
        &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
        0,
    );
    assert_eq!(
        checks::pci_link(
            &nic,
            &place(
                "pci0000:00",
                &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"],
                0
            )
        ),
        "PXB"
    );
    assert_eq!(
        checks::pci_link(
            &nic,
            &place("pci0000:00", &["0000:00:01.0", "0000:03:00.0"], 0)
        ),
        "PIX"
    );
    assert_eq!(
        checks::pci_link(&nic, &place("pci0000:00", &["0000:00:02.0"], 0)),
        "PHB"
    );
    assert_eq!(
        checks::pci_link(&nic, &place("pci0000:40", &["0000:40:01.0"], 0)),
        "NODE"
    );
    assert_eq!(
        checks::pci_link(&nic, &place("pci0000:40", &["0000:40:01.0"], 1)),
        "SYS"
    );
}

#[test]
fn virtio_irqs_are_on_the_parent_function_pci_ones_are_not() {
    let t = Tree::new(&[
        ("/proc/irq/37/smp_affinity_list", "0-1"),
        ("/proc/irq/24/smp_affinity_list", "0-1"),
    ]);
    // A net device `ifname` below `device`, each linked to the other as in sysfs, and
    // the one finding irq_affinity gives for it.
    let irq_of = |device: &str, ifname: &str| {
        let net = format!("{device}/net/{ifname}");
        t.mkdir(&net);
        t.link(&net, &format!("/sys/class/net/{ifname}"));
        t.link(device, &format!("{net}/device"));
        let mut v = check_on(checks::irq_affinity, &t, Some(ifname), None);
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    };
    // virtio: the net device hangs below virtio2, whose PCI function has the vectors.
    t.mkdir("/sys/devices/pci0000:00/0000:00:03.0/msi_irqs/37");
    let f = irq_of("/sys/devices/pci0000:00/0000:00:03.0/virtio2", "eth0");
    assert_eq!(f.found, "IRQ 37 on CPUs 0-1");
    // A PCI NIC without MSI: its bridge's vectors (24) are not the NIC's.
    t.mkdir("/sys/devices/pci0000:00/0000:00:01.0/msi_irqs/24");
    let f = irq_of("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", "eth1");
    assert_eq!(f.status, Status::Skip, "{f:?}");
}
