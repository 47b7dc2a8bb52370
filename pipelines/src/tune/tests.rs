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

/// The status `check` gives on tree `t` without an interface or a pipeline.
fn status_of(check: fn(&Ctx) -> Finding, t: &Tree) -> Status {
    check(&ctx(t, &NoNic, None, None)).status
}

fn write(path: &str, value: &str) -> Action {
    Action::Write {
        path: path.into(),
        value: value.into(),
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
    let f = checks::socket_buffer(
        &ctx(&t, &NoNic, None, Some(needs.clone())),
        "net.core.rmem_max",
        "rmem_max",
        true,
    )
    .unwrap();
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert_eq!(f.found, "212992");
    assert_eq!(f.fix, "sysctl -w net.core.rmem_max=67108864");
    assert_eq!(
        f.actions,
        [write("/proc/sys/net/core/rmem_max", "67108864")]
    );
    assert!(f.persist.contains("/etc/sysctl.d/"), "{f:?}");
    // Without a pipeline: the 8 MiB default, and only a warning.
    let f = checks::socket_buffer(
        &ctx(&t, &NoNic, None, None),
        "net.core.rmem_max",
        "rmem_max",
        true,
    )
    .unwrap();
    assert_eq!(f.status, Status::Warn);
    t.put("/proc/sys/net/core/rmem_max", "134217728");
    let f = checks::socket_buffer(
        &ctx(&t, &NoNic, None, Some(needs.clone())),
        "net.core.rmem_max",
        "rmem_max",
        true,
    )
    .unwrap();
    assert_eq!(f.status, Status::Ok);
    assert!(f.fix.is_empty() && f.actions.is_empty());
    // A pipeline that sends nothing asks nothing of wmem_max.
    assert!(checks::socket_buffer(
        &ctx(&t, &NoNic, None, Some(needs)),
        "net.core.wmem_max",
        "wmem_max",
        false
    )
    .is_none());
    let f = checks::socket_buffer(
        &ctx(&t, &NoNic, None, None),
        "net.core.wmem_max",
        "wmem_max",
        false,
    )
    .unwrap();
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
    let v = checks::hugepages(&ctx(&t, &NoNic, Some("eth1"), Some(needs.clone())));
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
        [write(
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
    let g = only(
        checks::hugepages(&ctx(&t, &NoNic, None, Some(auto))),
        "hugepages",
    );
    assert_eq!(g.status, Status::Warn);
    // No interface, so no node: the global reservation is the action.
    assert_eq!(
        g.actions,
        [write(
            "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "7"
        )]
    );
    t.put(
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "5",
    );
    assert_eq!(
        only(
            checks::hugepages(&ctx(&t, &NoNic, None, Some(needs))),
            "hugepages"
        )
        .status,
        Status::Ok
    );
    let empty = Tree::new(&[]);
    assert_eq!(
        checks::hugepages(&ctx(&empty, &NoNic, None, None))[0].status,
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
    let f = checks::memlock(&ctx(&t, &NoNic, None, Some(pins.clone())));
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.contains("ulimit -l unlimited"), "{f:?}");
    assert_eq!(
        checks::memlock(&ctx(&t, &NoNic, None, Some(Needs::default()))).status,
        Status::Ok
    );
    t.put(
        "/proc/self/limits",
        &limits.replace(
            "8388608              8388608",
            "unlimited            unlimited",
        ),
    );
    assert_eq!(
        checks::memlock(&ctx(&t, &NoNic, None, Some(pins))).status,
        Status::Ok
    );
    assert_eq!(status_of(checks::memlock, &Tree::new(&[])), Status::Skip);
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
    let f = checks::governor(&ctx(&t, &NoNic, None, None));
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.found.contains("powersave") && f.found.contains("CPUs 1"),
        "{f:?}"
    );
    assert_eq!(
        f.actions,
        [write(
            "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "performance"
        )]
    );
    t.put(
        "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "performance",
    );
    assert_eq!(status_of(checks::governor, &t), Status::Ok);
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
    let f = checks::cstates(&ctx(&t, &NoNic, None, None));
    assert_eq!(f.status, Status::Warn);
    assert!(f.found.contains("C6 (133 µs)"), "{f:?}");
    assert_eq!(
        f.actions,
        [
            write("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable", "1"),
            write("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable", "1")
        ]
    );
    t.put("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable", "1");
    assert_eq!(status_of(checks::cstates, &t), Status::Ok);
    assert_eq!(status_of(checks::cstates, &Tree::new(&[])), Status::Skip);
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
    let f = checks::isolation(&c);
    assert_eq!(f.status, Status::Warn);
    assert!(f.fix.contains("isolcpus=1"), "{f:?}");
    t.put("/proc/cmdline", "root=/dev/sda1 quiet");
    let f = checks::isolation(&ctx(&t, &NoNic, None, None));
    assert_eq!(f.status, Status::Warn);
    assert_eq!(status_of(checks::isolation, &Tree::new(&[])), Status::Skip);
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
    assert_eq!(
        v[0].actions,
        [write("/proc/irq/40/smp_affinity_list", "0-1,3")]
    );
    assert_eq!(
        v[2].actions,
        [write("/proc/irq/42/smp_affinity_list", "0-1,3")]
    );
    // Without MSI in sysfs, the /proc/interrupts names are used; other devices are not.
    let t = Tree::new(&[
        ("/proc/interrupts", "           CPU0       CPU1\n 50:   1 2  PCI-MSI 1-edge  eth1-TxRx-0\n 51:  1 2  PCI-MSI 2-edge  eth10-TxRx-0\n 52: 1 2 PCI-MSI 3-edge eth0-TxRx-0\n"),
        ("/proc/irq/50/smp_affinity_list", "0-1"),
    ]);
    t.mkdir("/sys/class/net/eth1");
    let v = checks::irq_affinity(&ctx(&t, &NoNic, Some("eth1"), None));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].status, Status::Ok);
    assert!(v[0].found.contains("IRQ 50"));
    assert_eq!(
        checks::irq_affinity(&ctx(&t, &NoNic, None, None))[0].status,
        Status::Skip
    );
    assert_eq!(
        checks::irq_affinity(&ctx(&t, &NoNic, Some("eth9"), None))[0].status,
        Status::Skip
    );
}

#[test]
fn nic_rings_coalescing_pause_gro() {
    let t = Tree::new(&[]);
    let nic = FakeNic {
        rings: Some(Rings {
            rx: 512,
            rx_max: 4096,
            tx: 512,
            tx_max: 4096,
        }),
        coalesce: Some(Coalesce {
            rx_usecs: 0,
            rx_frames: 1,
            adaptive_rx: false,
        }),
        pause: Some(Pause {
            autoneg: true,
            rx: true,
            tx: true,
        }),
        gro: Some(false),
        ..Default::default()
    };
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
    let good = FakeNic {
        rings: Some(Rings {
            rx: 4096,
            rx_max: 4096,
            tx: 512,
            tx_max: 4096,
        }),
        coalesce: Some(Coalesce {
            rx_usecs: 0,
            rx_frames: 1,
            adaptive_rx: true,
        }),
        pause: Some(Pause::default()),
        gro: Some(true),
        ..Default::default()
    };
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
    let f = checks::mtu(&ctx(&t, &NoNic, Some("eth1"), Some(needs.clone())));
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.starts_with("ip link set dev eth1 mtu 9000"), "{f:?}");
    t.put("/sys/class/net/eth1/mtu", "9000");
    assert_eq!(
        checks::mtu(&ctx(&t, &NoNic, Some("eth1"), Some(needs))).status,
        Status::Ok
    );
    assert_eq!(
        checks::mtu(&ctx(&t, &NoNic, Some("eth2"), None)).status,
        Status::Skip
    );
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
    let v = checks::multicast(&ctx(&t, &NoNic, Some("eth1"), Some(needs.clone())));
    let rp: Vec<&Finding> = v.iter().filter(|f| f.check == "rp_filter").collect();
    assert_eq!(rp.len(), 2, "{v:?}");
    assert!(rp.iter().all(|f| f.status == Status::Fail));
    assert_eq!(
        rp[0].actions,
        [write("/proc/sys/net/ipv4/conf/all/rp_filter", "2")]
    );
    assert_eq!(
        rp[1].actions,
        [write("/proc/sys/net/ipv4/conf/eth1/rp_filter", "2")]
    );
    let igmp = only(v, "igmp");
    assert_eq!(igmp.status, Status::Fail);
    assert_eq!(igmp.fix, "sysctl -w net.ipv4.igmp_max_memberships=25");
    t.put("/proc/sys/net/ipv4/conf/all/rp_filter", "0");
    t.put("/proc/sys/net/ipv4/conf/eth1/rp_filter", "2");
    t.put("/proc/sys/net/ipv4/igmp_max_memberships", "64");
    assert!(
        checks::multicast(&ctx(&t, &NoNic, Some("eth1"), Some(needs)))
            .iter()
            .all(|f| f.status == Status::Ok)
    );
    // Strict, but no multicast in the pipeline: a warning and nothing to apply.
    t.put("/proc/sys/net/ipv4/conf/all/rp_filter", "1");
    let f = only(checks::multicast(&ctx(&t, &NoNic, None, None)), "rp_filter");
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
    let f = checks::conntrack(&ctx(&t, &NoNic, None, Some(needs)));
    assert_eq!(f.status, Status::Warn);
    assert!(f.fix.contains("udp dport 7148 notrack"), "{f:?}");
    t.put("/proc/modules", "veth 40960 0 - Live 0x0\n");
    t.mkdir("/proc/sys/net");
    assert_eq!(status_of(checks::conntrack, &t), Status::Ok);
    // Built in: no module line, but the sysctl is there.
    t.put("/proc/sys/net/netfilter/nf_conntrack_count", "3");
    assert_eq!(status_of(checks::conntrack, &t), Status::Warn);
    assert_eq!(status_of(checks::conntrack, &Tree::new(&[])), Status::Skip);
}

#[test]
fn busy_poll_needs_deferred_interrupts() {
    let t = Tree::new(&[
        ("/proc/sys/net/core/busy_poll", "0"),
        ("/sys/class/net/eth1/napi_defer_hard_irqs", "0"),
        ("/sys/class/net/eth1/gro_flush_timeout", "0"),
    ]);
    assert_eq!(
        checks::busy_poll(&ctx(&t, &NoNic, Some("eth1"), None)).status,
        Status::Ok
    );
    let needs = Needs {
        busy_poll_us: 50,
        ..Default::default()
    };
    let f = checks::busy_poll(&ctx(&t, &NoNic, Some("eth1"), Some(needs.clone())));
    assert_eq!(f.status, Status::Warn);
    assert_eq!(
        f.actions,
        [
            write("/sys/class/net/eth1/napi_defer_hard_irqs", "2"),
            write("/sys/class/net/eth1/gro_flush_timeout", "200000")
        ]
    );
    t.put("/sys/class/net/eth1/napi_defer_hard_irqs", "2");
    t.put("/sys/class/net/eth1/gro_flush_timeout", "200000");
    assert_eq!(
        checks::busy_poll(&ctx(&t, &NoNic, Some("eth1"), Some(needs))).status,
        Status::Ok
    );
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
    t.mkdir("/sys/class/net");
    t.mkdir("/sys/bus/pci/devices");
    let link = |target: &str, at: &str| {
        std::os::unix::fs::symlink(
            t.dir.join(target.trim_start_matches('/')),
            t.dir.join(at.trim_start_matches('/')),
        )
        .unwrap()
    };
    // As the kernel lays it out: the interface below its device, `device` pointing up.
    t.mkdir(&format!("{nic}/net/eth1"));
    link(&format!("{nic}/net/eth1"), "/sys/class/net/eth1");
    link(nic, &format!("{nic}/net/eth1/device"));
    link(nic, "/sys/bus/pci/devices/0000:01:00.0");
    link(gpu_b, "/sys/bus/pci/devices/0000:41:00.0");
    let gpu_needs = Needs {
        gpu: true,
        ..Default::default()
    };
    let f = checks::pcie_path(&ctx(&t, &NoNic, Some("eth1"), Some(gpu_needs.clone())));
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert_eq!(f.found, "GPU 0000:41:00.0: SYS");
    link(gpu_a, "/sys/bus/pci/devices/0000:02:00.0");
    let f = checks::pcie_path(&ctx(&t, &NoNic, Some("eth1"), Some(gpu_needs)));
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert_eq!(f.found, "GPU 0000:02:00.0: PIX, GPU 0000:41:00.0: SYS");
    // Without GPUs, or without a PCI NIC, it says so.
    let plain = Tree::new(&[]);
    plain.mkdir("/sys/class/net/lo");
    assert_eq!(
        checks::pcie_path(&ctx(&plain, &NoNic, Some("lo"), None)).status,
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
    let link = |target: &str, at: &str| {
        t.mkdir(at.rsplit_once('/').unwrap().0);
        std::os::unix::fs::symlink(
            t.dir.join(target.trim_start_matches('/')),
            t.dir.join(at.trim_start_matches('/')),
        )
        .unwrap()
    };
    // virtio: the net device hangs below virtio2, whose PCI function has the vectors.
    t.mkdir("/sys/devices/pci0000:00/0000:00:03.0/msi_irqs/37");
    t.mkdir("/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0");
    link(
        "/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0",
        "/sys/class/net/eth0",
    );
    link(
        "/sys/devices/pci0000:00/0000:00:03.0/virtio2",
        "/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/device",
    );
    let v = checks::irq_affinity(&ctx(&t, &NoNic, Some("eth0"), None));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].found, "IRQ 37 on CPUs 0-1");
    // A PCI NIC without MSI: its bridge's vectors (24) are not the NIC's.
    t.mkdir("/sys/devices/pci0000:00/0000:00:01.0/msi_irqs/24");
    t.mkdir("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/net/eth1");
    link(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/net/eth1",
        "/sys/class/net/eth1",
    );
    link(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/net/eth1/device",
    );
    let v = checks::irq_affinity(&ctx(&t, &NoNic, Some("eth1"), None));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].status, Status::Skip, "{v:?}");
}
