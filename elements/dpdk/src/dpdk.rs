//! The safe layer over the DPDK bindings that both elements share: the once-per-process
//! EAL, virtual devices hot-plugged per element, ports claimed by one element at a time,
//! and mbuf pools whose memory is one virtually contiguous range.
//!
//! # The EAL, once per process
//!
//! `rte_eal_init` may succeed only once in a process and re-pins the thread that calls
//! it, so it runs on a dedicated thread (which then exits) behind a process-wide lock.
//! `eal-args` is split into its `--vdev=` devices and the rest (the "base" arguments):
//! - the first element to start initialises the EAL with the base arguments plus
//!   defaults ([`EalArgs::argv`]);
//! - a later element whose base arguments are empty, or equal to the first element's,
//!   uses the running EAL; different base arguments are an error (the EAL cannot change);
//! - every element then hot-plugs (`rte_dev_probe`) the `--vdev=` devices it names that
//!   are not present yet, and unplugs them when the last element naming them stops.
//!
//! A failed `rte_eal_init` cannot be retried reliably (DPDK keeps what it parsed), so
//! after one failure every start in the process reports it and asks for a restart.
//!
//! Devices are never passed to `rte_eal_init` itself: a device that fails to probe there
//! (a wrong `iface=`) would make the EAL fail for good, where a failed hot-plug is an
//! error of one element's start that the next start may retry.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::sync::{Arc, Mutex};

use firehose_core::sync::lock;

use crate::sys;

/// What kind of failure a [`DpdkError`] is, to pick the GStreamer error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The EAL, a device or a port could not be set up.
    Init,
    /// A property value is wrong.
    Settings,
    /// Memory (an mbuf pool) could not be allocated.
    NoMemory,
}

/// A DPDK start-up failure with a message that says the cause and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// The user-facing message.
    pub message: String,
}

impl DpdkError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// As a GStreamer error message (for `start`).
    pub fn to_gst(&self) -> gst::ErrorMessage {
        match self.kind {
            ErrorKind::Init => gst::error_msg!(gst::ResourceError::OpenReadWrite, ("{}", self)),
            ErrorKind::Settings => gst::error_msg!(gst::ResourceError::Settings, ("{}", self)),
            ErrorKind::NoMemory => gst::error_msg!(gst::ResourceError::NoSpaceLeft, ("{}", self)),
        }
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DpdkError {}

/// DPDK's text for error number `errnum` (an `rte_errno` or a negative return, negated).
pub fn strerror(errnum: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated
    // string, valid until the next call on this thread; it is copied at once.
    unsafe {
        let p = sys::rte_strerror(errnum);
        if p.is_null() {
            return format!("error {errnum}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// This thread's `rte_errno`.
fn errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions.
    unsafe { sys::fh_rte_errno() }
}

/// `eal-args` split into the EAL's own arguments and the devices to hot-plug.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EalArgs {
    /// Everything but `--vdev`, in order.
    pub base: Vec<String>,
    /// The `--vdev` device strings (`net_af_packet0,iface=veth0,…`), in order.
    pub vdevs: Vec<String>,
}

impl EalArgs {
    /// Splits `eal-args` at white space (no quoting: DPDK arguments have no spaces).
    pub fn parse(s: &str) -> Result<Self, DpdkError> {
        let mut out = Self::default();
        let mut words = s.split_whitespace();
        while let Some(w) = words.next() {
            let dev = if let Some(d) = w.strip_prefix("--vdev=") {
                Some(d.to_owned())
            } else if w == "--vdev" {
                Some(words.next().map(str::to_owned).ok_or_else(|| {
                    DpdkError::new(
                        ErrorKind::Settings,
                        "eal-args ends with --vdev and no device: write \
                         --vdev=net_af_packet0,iface=<interface>",
                    )
                })?)
            } else {
                None
            };
            match dev {
                Some(d) if d.is_empty() || d.starts_with(',') => {
                    return Err(DpdkError::new(
                        ErrorKind::Settings,
                        format!(
                            "eal-args has --vdev='{d}' with no device name: write \
                             --vdev=net_af_packet0,iface=<interface>"
                        ),
                    ))
                }
                Some(d) => out.vdevs.push(d),
                None => out.base.push(w.to_owned()),
            }
        }
        Ok(out)
    }

    fn has(&self, names: &[&str]) -> bool {
        self.base.iter().any(|a| {
            names
                .iter()
                .any(|n| a == n || a.starts_with(&format!("{n}=")) || short_with_value(a, n))
        })
    }

    /// The full `rte_eal_init` argument vector: a program name, the base arguments, and
    /// the defaults the base arguments leave out:
    /// - `--lcores=0@(<this process's CPUs>)`: one main lcore (the EAL thread, which does
    ///   no work) allowed on every CPU, so the EAL pins nothing to one core;
    /// - memory: with `--no-huge`, `--no-shconf` (no runtime files, since `--no-huge` and
    ///   `--in-memory` do not combine); otherwise `--in-memory` (hugepages, but no
    ///   hugepage files left behind or shared with other processes);
    /// - `--file-prefix=firehose-<pid>`, unique, so two processes never share state;
    /// - `--no-telemetry`: no socket in the runtime directory.
    pub fn argv(&self) -> Vec<String> {
        let mut v = vec!["firehose".to_owned()];
        v.extend(self.base.iter().cloned());
        if !self.has(&["-l", "-c", "--lcores"]) {
            v.push(format!("--lcores=0@({})", cpu_list()));
        }
        let no_huge = self.has(&["--no-huge"]);
        if !self.has(&["--in-memory", "--no-shconf"]) {
            v.push(
                if no_huge {
                    "--no-shconf"
                } else {
                    "--in-memory"
                }
                .to_owned(),
            );
        }
        if !self.has(&["--file-prefix"]) {
            v.push(format!("--file-prefix=firehose-{}", std::process::id()));
        }
        if !self.has(&["--telemetry", "--no-telemetry"]) {
            v.push("--no-telemetry".to_owned());
        }
        v
    }
}

/// `-l0-3` style: a short option glued to its value.
fn short_with_value(arg: &str, name: &str) -> bool {
    name.len() == 2 && !name.starts_with("--") && arg.len() > 2 && arg.starts_with(name)
}

/// The CPUs this process may run on, as DPDK's comma list.
fn cpu_list() -> String {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills at most
    // its size.
    let cpus: Vec<String> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return "0".into();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c.to_string())
            .collect()
    };
    if cpus.is_empty() {
        "0".into()
    } else {
        cpus.join(",")
    }
}

/// Process-wide DPDK bookkeeping, behind one lock.
#[derive(Default)]
struct Registry {
    /// The base arguments of the running EAL; `None` until it is up.
    eal: Option<Vec<String>>,
    /// Why the EAL failed to start, if it did: DPDK keeps state from a failed
    /// `rte_eal_init` (options already parsed, memory half set up), so a second call
    /// fails in confusing ways; every later start reports the first failure instead.
    eal_failed: Option<String>,
    /// Hot-plugged devices by name: how many elements use each.
    vdevs: HashMap<String, usize>,
    /// Ports an element has claimed.
    ports: HashSet<u16>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = lock(&REGISTRY);
    f(g.get_or_insert_with(Registry::default))
}

/// An element's hold on the EAL and on the devices its `eal-args` name; dropping it
/// unplugs the devices no other element uses.
#[derive(Debug)]
pub struct Session {
    vdevs: Vec<String>,
}

/// Device name of a `--vdev` string: what comes before the first comma.
fn vdev_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or(devargs)
}

impl Session {
    /// Brings the EAL up (or checks it is up with compatible arguments) and hot-plugs the
    /// devices of `eal_args`.
    pub fn open(eal_args: &str) -> Result<Self, DpdkError> {
        let args = EalArgs::parse(eal_args)?;
        with_registry(|reg| {
            match &reg.eal {
                None => {
                    if let Some(first) = &reg.eal_failed {
                        return Err(DpdkError::new(
                            ErrorKind::Init,
                            format!(
                                "The DPDK EAL failed to start earlier in this process and cannot be \
                                 started again: fix eal-args and restart the process. The \
                                 first failure: {first}"
                            ),
                        ));
                    }
                    if let Err(e) = eal_init(&args) {
                        reg.eal_failed = Some(e.message.clone());
                        return Err(e);
                    }
                    reg.eal = Some(args.base.clone());
                }
                Some(running) if args.base.is_empty() || *running == args.base => {}
                Some(running) => {
                    return Err(DpdkError::new(
                        ErrorKind::Settings,
                        format!(
                            "The DPDK EAL is already running in this process with arguments \
                             '{}', and this element asks for '{}'. The EAL starts once per \
                             process: give every DPDK element the same eal-args apart from \
                             --vdev=… (or only --vdev=…)",
                            running.join(" "),
                            args.base.join(" ")
                        ),
                    ))
                }
            }
            let mut held: Vec<String> = Vec::new();
            for devargs in &args.vdevs {
                let name = vdev_name(devargs).to_owned();
                if held.contains(&name) {
                    continue;
                }
                let users = reg.vdevs.get(&name).copied().unwrap_or(0);
                if users == 0 {
                    if let Err(e) = probe(devargs) {
                        // Undo this start's devices; the lock is held, so not via Drop.
                        release_locked(reg, &held);
                        return Err(e);
                    }
                }
                reg.vdevs.insert(name.clone(), users + 1);
                held.push(name);
            }
            Ok(Session { vdevs: held })
        })
    }

    /// The devices this session holds.
    pub fn vdevs(&self) -> &[String] {
        &self.vdevs
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        release_vdevs(&self.vdevs);
    }
}

/// Gives up one use of each device; unplugs those nobody uses any more.
fn release_vdevs(names: &[String]) {
    if names.is_empty() {
        return;
    }
    let mut g = lock(&REGISTRY);
    if let Some(reg) = g.as_mut() {
        release_locked(reg, names);
    }
}

fn release_locked(reg: &mut Registry, names: &[String]) {
    for name in names {
        let users = reg.vdevs.get(name).copied().unwrap_or(0);
        if users <= 1 {
            reg.vdevs.remove(name);
            unplug(name);
        } else {
            reg.vdevs.insert(name.clone(), users - 1);
        }
    }
}

/// The EAL's runtime directory for `argv`'s file prefix, as DPDK names it: under
/// `/var/run/dpdk` for root, else `$XDG_RUNTIME_DIR/dpdk` (or `/tmp/dpdk`). `None` when
/// the prefix is not ours (`firehose-<pid>`): a directory the user named is theirs.
pub fn own_runtime_dir(argv: &[String]) -> Option<std::path::PathBuf> {
    let ours = format!("firehose-{}", std::process::id());
    let prefix = argv.iter().find_map(|a| a.strip_prefix("--file-prefix="))?;
    if prefix != ours {
        return None;
    }
    // SAFETY: getuid cannot fail.
    let base = if unsafe { libc::getuid() } == 0 {
        std::path::PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| "/tmp".into(), Into::into)
    };
    Some(base.join("dpdk").join(prefix))
}

/// Our runtime directory while the EAL runs, removed when the process exits.
static RUNTIME_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

extern "C" fn remove_runtime_dir_at_exit() {
    // No unwinding out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        if let Some(dir) = RUNTIME_DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}

/// Has `dir` removed when the process exits (once: the EAL runs once per process).
fn remove_at_exit(dir: std::path::PathBuf) {
    if RUNTIME_DIR.set(dir).is_ok() {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(remove_runtime_dir_at_exit) };
    }
}

/// Runs `rte_eal_init` on its own thread (it re-pins its caller). The runtime directory
/// the EAL makes is removed on every exit path: at once when the start failed, at
/// process exit otherwise.
fn eal_init(args: &EalArgs) -> Result<(), DpdkError> {
    let argv = args.argv();
    let runtime = own_runtime_dir(&argv);
    let result = eal_init_argv(args, argv);
    match (&result, runtime) {
        (Err(_), Some(dir)) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        (Ok(()), Some(dir)) => remove_at_exit(dir),
        _ => {}
    }
    result
}

fn eal_init_argv(args: &EalArgs, argv: Vec<String>) -> Result<(), DpdkError> {
    let shown = argv[1..].join(" ");
    let result = std::thread::Builder::new()
        .name("fh-dpdk-eal".into())
        .spawn(move || -> Result<(), i32> {
            // DPDK keeps pointers into argv (and getopt permutes it): the strings live for
            // the rest of the process, once.
            let mut ptrs: Vec<*mut c_char> = argv
                .iter()
                .map(|a| CString::new(a.as_str()).unwrap_or_default().into_raw())
                .collect();
            ptrs.push(std::ptr::null_mut());
            let ptrs: &'static mut [*mut c_char] = Box::leak(ptrs.into_boxed_slice());
            let argc = (ptrs.len() - 1) as i32;
            // SAFETY: argc/argv describe NUL-terminated strings that live forever, with
            // a NULL after the last; this thread is dedicated to the EAL.
            let r = unsafe { sys::rte_eal_init(argc, ptrs.as_mut_ptr()) };
            if r < 0 {
                // rte_errno is thread-local: read it on this thread.
                Err(errno())
            } else {
                Ok(())
            }
        })
        .map_err(|e| {
            DpdkError::new(
                ErrorKind::Init,
                format!("cannot start the DPDK EAL thread: {e}"),
            )
        })?
        .join()
        .map_err(|_| DpdkError::new(ErrorKind::Init, "the DPDK EAL thread panicked"))?;
    result.map_err(|e| {
        let no_huge = args.has(&["--no-huge"]);
        let fix = if no_huge {
            "Check eal-args against the DPDK EAL parameters (dpdk-testpmd --help shows \
             them), run as root, and see DPDK's log above"
                .to_owned()
        } else {
            format!(
                "Without --no-huge the EAL needs hugepages ({} of {} free): add --no-huge \
                 to eal-args, or reserve some with echo 512 > /proc/sys/vm/nr_hugepages; \
                 also check eal-args against the DPDK EAL parameters and run as root",
                firehose_core::memory::hugepages_free(),
                firehose_core::memory::hugepages_total()
            )
        };
        DpdkError::new(
            ErrorKind::Init,
            format!(
                "DPDK EAL initialisation failed: {} (rte_errno {e}) with arguments '{shown}'. {fix}",
                strerror(e)
            ),
        )
    })
}

/// Hot-plugs one `--vdev` device.
fn probe(devargs: &str) -> Result<(), DpdkError> {
    let c = CString::new(devargs).map_err(|_| {
        DpdkError::new(ErrorKind::Settings, "a --vdev argument contains a NUL byte")
    })?;
    // SAFETY: a NUL-terminated string; the EAL is up.
    let r = unsafe { sys::rte_dev_probe(c.as_ptr()) };
    if r < 0 {
        let name = vdev_name(devargs);
        let hint = if name.starts_with("net_af_packet") || name.starts_with("net_af_xdp") {
            " Check that iface= names an existing interface that is up (ip link), and that \
             this process runs as root"
        } else {
            " Check the device name (a DPDK driver name plus a number, e.g. net_af_packet0) \
             and its arguments"
        };
        return Err(DpdkError::new(
            ErrorKind::Init,
            format!(
                "DPDK could not add device '{devargs}': {}.{hint}; DPDK's log above says more",
                strerror(-r)
            ),
        ));
    }
    Ok(())
}

/// Removes a hot-plugged virtual device (its port must be closed).
fn unplug(name: &str) {
    let Ok(c) = CString::new(name) else { return };
    // SAFETY: NUL-terminated strings; the port of this device was closed by its owner.
    let r = unsafe { sys::rte_eal_hotplug_remove(c"vdev".as_ptr(), c.as_ptr()) };
    if r < 0 {
        eprintln!(
            "firehose-dpdk: could not remove device {name}: {}",
            strerror(-r)
        );
    }
}

/// The name of port `id`, if it exists.
pub fn port_name(id: u16) -> Option<String> {
    // SAFETY: plain query.
    if unsafe { sys::rte_eth_dev_is_valid_port(id) } == 0 {
        return None;
    }
    let mut buf = [0 as c_char; sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: the buffer has the size the API requires.
    let r = unsafe { sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: DPDK wrote a NUL-terminated name into the buffer.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Every port, as `id=name`, for error messages.
fn port_list() -> String {
    let names: Vec<String> = (0..1024u16)
        .filter_map(|i| port_name(i).map(|n| format!("{i}={n}")))
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Settings of a port opened by [`Port::open`].
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// Receive queue to set up and poll.
    pub queue: u16,
    /// Receive descriptors (adjusted to what the device allows).
    pub rx_desc: u16,
    /// Transmit descriptors (adjusted to what the device allows).
    pub tx_desc: u16,
    /// Whether to receive frames for any MAC address.
    pub promiscuous: bool,
}

/// A port claimed by one element, configured and started; stopped, closed and released
/// on drop.
pub struct Port {
    id: u16,
    name: String,
    mac: [u8; 6],
    driver: String,
    bus: String,
    started: bool,
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "port {} ({}, {})", self.id, self.name, self.driver)
    }
}

impl Port {
    /// Finds the port `spec` names (a port index or a device name) and claims it for the
    /// caller; [`Port::start`] then configures and starts it.
    pub fn claim(spec: &str) -> Result<Self, DpdkError> {
        let spec = spec.trim();
        let id = if let Ok(i) = spec.parse::<u16>() {
            port_name(i).map(|_| i)
        } else {
            let c = CString::new(spec).unwrap_or_default();
            let mut id = 0u16;
            // SAFETY: a NUL-terminated name and a valid out pointer.
            let r = unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
            (r == 0).then_some(id)
        };
        let Some(id) = id else {
            return Err(DpdkError::new(
                ErrorKind::Settings,
                format!(
                    "No DPDK port '{spec}' (ports: {}). Set dpdk-port to a port index or to \
                     a device name added with --vdev=… in eal-args (e.g. \
                     eal-args=\"--no-huge --vdev=net_af_packet0,iface=eth1\" \
                     dpdk-port=net_af_packet0)",
                    port_list()
                ),
            ));
        };
        let name = port_name(id).unwrap_or_else(|| spec.to_owned());
        let claimed = with_registry(|reg| reg.ports.insert(id));
        if !claimed {
            return Err(DpdkError::new(
                ErrorKind::Settings,
                format!(
                    "DPDK port {id} ({name}) is already used by another element in this \
                     process: give each fhdpdksrc / fhdpdksink its own device"
                ),
            ));
        }
        let mut port = Port {
            id,
            name,
            mac: [0; 6],
            driver: String::new(),
            bus: String::new(),
            started: false,
        };
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: a valid port and an out struct of the right type.
        let r = unsafe { sys::rte_eth_dev_info_get(id, &mut info) };
        if r != 0 {
            return Err(port.fail("reading device information", r, "Is the device gone?"));
        }
        if !info.driver_name.is_null() {
            // SAFETY: a static NUL-terminated driver name.
            port.driver = unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned();
        }
        // SAFETY: a valid port; the result is NULL or a static NUL-terminated name.
        let bus = unsafe { sys::fh_port_bus_name(id) };
        if !bus.is_null() {
            // SAFETY: as above.
            port.bus = unsafe { CStr::from_ptr(bus) }
                .to_string_lossy()
                .into_owned();
        }
        Ok(port)
    }

    /// Whether the device is virtual (on the vdev bus: af_packet, af_xdp, pcap…): it
    /// does no DMA, so its pool needs no IOVA-contiguous objects and can be packed.
    pub fn is_virtual(&self) -> bool {
        self.bus == "vdev"
    }

    fn fail(&self, what: &str, r: i32, fix: &str) -> DpdkError {
        DpdkError::new(
            ErrorKind::Init,
            format!(
                "DPDK port {} ({}, driver {}): {what} failed: {} ({r}). {fix}",
                self.id,
                self.name,
                self.driver,
                strerror(-r)
            ),
        )
    }

    /// Configures receive queue `cfg.queue` (and those below it) and one transmit queue
    /// with mbufs from `pool`, and starts the port. The caller keeps `pool` alive until
    /// after the port is dropped.
    pub fn start(&mut self, cfg: &PortConfig, pool: &Pool) -> Result<(), DpdkError> {
        let id = self.id;
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: a valid port and an out struct of the right type.
        let r = unsafe { sys::rte_eth_dev_info_get(id, &mut info) };
        if r != 0 {
            return Err(self.fail("reading device information", r, "Is the device gone?"));
        }
        if cfg.queue >= info.max_rx_queues {
            return Err(DpdkError::new(
                ErrorKind::Settings,
                format!(
                    "queue {} does not exist on DPDK port {} ({}), which has {} receive \
                     queues: set queue below {} (af_packet: add qpairs=N to its --vdev)",
                    cfg.queue, id, self.name, info.max_rx_queues, info.max_rx_queues
                ),
            ));
        }
        let nb_rx = cfg.queue + 1;
        let conf = sys::rte_eth_conf::default();
        // SAFETY: a valid port, a zeroed (default) configuration.
        let r = unsafe { sys::rte_eth_dev_configure(id, nb_rx, 1, &conf) };
        if r != 0 {
            return Err(self.fail(
                "rte_eth_dev_configure",
                r,
                "The device refused one transmit and the receive queues: check its \
                 --vdev arguments (e.g. qpairs=) and DPDK's log",
            ));
        }
        let (mut rxd, mut txd) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: valid port and out pointers.
        let r = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rxd, &mut txd) };
        if r != 0 {
            return Err(self.fail("adjusting descriptor counts", r, "Check rx-descriptors"));
        }
        // SAFETY: plain query.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 {
            sys::SOCKET_ID_ANY
        } else {
            socket
        } as u32;
        for q in 0..nb_rx {
            // SAFETY: valid port and queue, NULL rxconf (device defaults), a live pool
            // that outlives the port (the caller keeps it until after close).
            let r = unsafe {
                sys::rte_eth_rx_queue_setup(id, q, rxd, socket, std::ptr::null(), pool.raw())
            };
            if r != 0 {
                return Err(self.fail(
                    "setting up a receive queue",
                    r,
                    "The mbuf pool may be too small for the descriptors (raise mbufs or \
                     lower rx-descriptors), or its mbufs too small for the device's frames",
                ));
            }
        }
        // SAFETY: valid port and queue, NULL txconf (device defaults).
        let r = unsafe { sys::rte_eth_tx_queue_setup(id, 0, txd, socket, std::ptr::null()) };
        if r != 0 {
            return Err(self.fail("setting up the transmit queue", r, "See DPDK's log"));
        }
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: valid port and out struct.
        if unsafe { sys::rte_eth_macaddr_get(id, &mut mac) } == 0 {
            self.mac = mac.addr_bytes;
        }
        // SAFETY: a configured port.
        let r = unsafe { sys::rte_eth_dev_start(id) };
        if r != 0 {
            return Err(self.fail(
                "rte_eth_dev_start",
                r,
                "Check that the interface is up and not used by another DPDK process",
            ));
        }
        self.started = true;
        if cfg.promiscuous {
            // SAFETY: a started port. Not all PMDs support it: a failure is not fatal.
            let r = unsafe { sys::rte_eth_promiscuous_enable(id) };
            if r != 0 {
                eprintln!(
                    "firehose-dpdk: port {id}: promiscuous mode not enabled: {}",
                    strerror(-r)
                );
            }
        }
        Ok(())
    }

    /// Makes the started port receive frames to the multicast MACs `macs` besides its
    /// own (nothing to do for none): the device's multicast filter set to that list, else,
    /// where the PMD has none, all multicast. Returns which one took, or why neither did
    /// (the groups then arrive only with `promiscuous`).
    pub fn accept_multicast(&self, macs: &[[u8; 6]]) -> Result<&'static str, String> {
        if macs.is_empty() {
            return Ok("none needed");
        }
        let mut list: Vec<sys::rte_ether_addr> = macs
            .iter()
            .map(|&addr_bytes| sys::rte_ether_addr { addr_bytes })
            .collect();
        // SAFETY: a started port; `list` holds `len` addresses and outlives the call
        // (the PMD copies them).
        let r = unsafe {
            sys::rte_eth_dev_set_mc_addr_list(self.id, list.as_mut_ptr(), list.len() as u32)
        };
        if r == 0 {
            return Ok("multicast address list");
        }
        // SAFETY: a started port.
        let a = unsafe { sys::rte_eth_allmulticast_enable(self.id) };
        if a == 0 {
            return Ok("all-multicast");
        }
        Err(format!(
            "the port's driver takes neither a multicast address list ({}) nor \
             all-multicast mode ({})",
            strerror(-r),
            strerror(-a)
        ))
    }

    /// The port index.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The bus of the port's device ("vdev", "pci"…).
    pub fn bus(&self) -> &str {
        &self.bus
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }
}

/// Whether port `id` has its link: `Ok(true)` up, `Ok(false)` down, `Err` when the
/// device cannot say (for `net_af_packet`, its kernel interface is gone). Does not wait
/// for autonegotiation (`rte_eth_link_get_nowait`); `net_af_packet` reports its
/// interface's IFF_RUNNING.
pub fn port_link_up(id: u16) -> Result<bool, String> {
    let mut link = sys::rte_eth_link::default();
    // SAFETY: out struct of the right type; an invalid port only returns an error.
    let r = unsafe { sys::rte_eth_link_get_nowait(id, &mut link) };
    if r < 0 {
        return Err(strerror(-r));
    }
    Ok(link.link_status() != 0)
}

/// Watches the link of a running receive port, as `netif::LinkWatch` watches a kernel
/// interface: checked at most every [`PortLinkWatch::EVERY`] from a poll loop that found
/// nothing, so a busy capture never pays for it.
///
/// A link that is down before it was ever seen up is not an error: a physical port
/// negotiates for a few seconds after start. Once seen up, down (a cable pulled, a
/// `net_af_packet` interface set down) or gone (the device cannot report: its interface
/// was deleted) is.
///
/// A virtual port over a kernel interface (`--vdev=net_af_packet0,iface=eth1`,
/// `net_af_xdp`) is also watched through that interface (`netif::LinkWatch`): not every
/// PMD reports the interface's state as its link.
#[derive(Debug)]
pub struct PortLinkWatch {
    id: u16,
    name: String,
    seen_up: bool,
    next: std::time::Instant,
    iface: Option<firehose_core::netif::LinkWatch>,
}

impl PortLinkWatch {
    /// How often [`PortLinkWatch::check`] looks.
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(500);

    /// Watches port `id`, named `name` in messages, and the kernel interface of its
    /// device if `eal_args` gives one (`iface=` of the `--vdev` named `name`).
    pub fn new(id: u16, name: &str, eal_args: &str) -> Self {
        let iface = vdev_iface(eal_args, name).and_then(|ifname| {
            firehose_core::netif::iface_index(&ifname)
                .ok()
                .map(|index| firehose_core::netif::LinkWatch::new(&ifname, index))
        });
        Self {
            id,
            name: name.to_owned(),
            seen_up: false,
            next: std::time::Instant::now(),
            iface,
        }
    }

    /// `Err` with a message naming the port once its link went down or its device is gone.
    pub fn check(&mut self, now: std::time::Instant) -> Result<(), String> {
        if let Some(w) = self.iface.as_mut() {
            w.check(now)
                .map_err(|e| format!("DPDK port '{}': {e}", self.name))?;
        }
        if now < self.next {
            return Ok(());
        }
        self.next = now + Self::EVERY;
        self.judge(port_link_up(self.id))
    }

    /// The verdict on one reading of the link (see the type's documentation).
    fn judge(&mut self, link: Result<bool, String>) -> Result<(), String> {
        let name = &self.name;
        match link {
            Ok(true) => {
                self.seen_up = true;
                Ok(())
            }
            Ok(false) if !self.seen_up => Ok(()),
            Ok(false) => Err(format!(
                "DPDK port '{name}' lost its link under the capture (cable, switch port or,                  for net_af_packet, its interface set down): it receives nothing until the                  link is back; restart the capture then"
            )),
            Err(e) => Err(format!(
                "DPDK port '{name}' can no longer report its link ({e}): its device or, for                  net_af_packet, its kernel interface is gone, and it can no longer receive"
            )),
        }
    }
}

/// The kernel interface (`iface=`) of the `--vdev` named `dev` in `eal_args`, if any.
fn vdev_iface(eal_args: &str, dev: &str) -> Option<String> {
    let args = EalArgs::parse(eal_args).ok()?;
    let devargs = args.vdevs.iter().find(|d| vdev_name(d) == dev)?;
    devargs
        .split(',')
        .find_map(|kv| kv.strip_prefix("iface="))
        .map(str::to_owned)
}

/// The counters of port `id` (zero if it cannot be read).
pub fn port_stats(id: u16) -> sys::rte_eth_stats {
    let mut s = sys::rte_eth_stats::default();
    // SAFETY: out struct of the right type; an invalid port only returns an error.
    unsafe { sys::rte_eth_stats_get(id, &mut s) };
    s
}

impl Drop for Port {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: a started port owned by this value; nothing polls it any more
            // (the element's streaming thread has stopped).
            unsafe { sys::rte_eth_dev_stop(self.id) };
        }
        // SAFETY: as above; close releases the queues (their mbufs go back to the pool,
        // which the owner keeps alive until after this).
        unsafe { sys::rte_eth_dev_close(self.id) };
        with_registry(|reg| reg.ports.remove(&self.id));
    }
}

/// An mbuf pool whose memory is one virtually contiguous range, so that any set of its
/// mbufs lies inside one range that can be wrapped as a single `gst::Memory`.
pub struct Pool {
    mp: *mut sys::rte_mempool,
    span: std::ops::Range<usize>,
}

// SAFETY: an rte_mempool is made for use from many threads (the default ring ops are
// multi-producer / multi-consumer); the pointer is only freed on drop.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pool({:#x}..{:#x})", self.span.start, self.span.end)
    }
}

static POOL_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

unsafe extern "C" fn collect_chunk(
    _mp: *mut sys::rte_mempool,
    opaque: *mut c_void,
    memhdr: *mut sys::rte_mempool_memhdr,
    _idx: u32,
) {
    // SAFETY: `opaque` is the Vec passed by `Pool::new`; memhdr is valid during the call.
    unsafe {
        let v = &mut *(opaque as *mut Vec<(usize, usize)>);
        let h = &*memhdr;
        v.push((h.addr as usize, h.len));
    }
}

impl Pool {
    /// Creates a pool of `n` mbufs of `data_room` bytes (headroom included), with a
    /// per-lcore cache of `cache` (used by EAL threads only). `packed` lays the mbufs
    /// back to back without IOVA-contiguity (for virtual devices, which do no DMA):
    /// net_af_xdp registers the pool as one UMEM of exactly `n` objects and loses every
    /// mbuf past that size if objects skip page boundaries.
    pub fn new(
        what: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        packed: bool,
    ) -> Result<Arc<Self>, DpdkError> {
        let seq = POOL_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = CString::new(format!("fh{what}{seq}")).expect("no NUL");
        let cache = cache.min(512).min(n / 2);
        // SAFETY: a NUL-terminated unique name; the EAL is up.
        let flags = if packed {
            sys::RTE_MEMPOOL_F_NO_IOVA_CONTIG
        } else {
            0
        };
        let mp = unsafe {
            sys::fh_pktmbuf_pool_create(
                name.as_ptr(),
                n,
                cache,
                data_room,
                sys::SOCKET_ID_ANY,
                flags,
            )
        };
        if mp.is_null() {
            let e = errno();
            let mib = (u64::from(n) * (u64::from(data_room) + 192)) >> 20;
            return Err(DpdkError::new(
                ErrorKind::NoMemory,
                format!(
                    "Cannot allocate {n} mbufs of {data_room} B (about {mib} MiB) for the {what} \
                     pool: {} (rte_errno {e}). With --no-huge the EAL has only -m MiB (64 by \
                     default): add e.g. -m 512 to eal-args or lower mbufs; with hugepages, \
                     reserve more (echo 1024 > /proc/sys/vm/nr_hugepages)",
                    strerror(e)
                ),
            ));
        }
        let mut chunks: Vec<(usize, usize)> = Vec::new();
        // SAFETY: a live pool; the callback only appends to `chunks`.
        unsafe {
            sys::rte_mempool_mem_iter(
                mp,
                Some(collect_chunk),
                &mut chunks as *mut Vec<(usize, usize)> as *mut c_void,
            )
        };
        chunks.sort_unstable();
        let contiguous = chunks.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0);
        let span = match (chunks.first(), chunks.last()) {
            (Some(f), Some(l)) if contiguous => f.0..l.0 + l.1,
            _ => {
                // SAFETY: the pool was just created and nothing uses it.
                unsafe { sys::rte_mempool_free(mp) };
                return Err(DpdkError::new(
                    ErrorKind::NoMemory,
                    format!(
                        "The {what} mbuf pool ({n} mbufs) was placed in {} separate memory \
                         chunks, so a batch could not be one GstMemory. Lower mbufs, or give \
                         the EAL contiguous memory: --no-huge (with -m), or 1 GiB hugepages",
                        chunks.len()
                    ),
                ));
            }
        };
        Ok(Arc::new(Self { mp, span }))
    }

    /// The raw pool.
    pub fn raw(&self) -> *mut sys::rte_mempool {
        self.mp
    }

    /// The pool's memory, as addresses: every mbuf lies inside.
    pub fn span(&self) -> std::ops::Range<usize> {
        self.span.clone()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the last reference: the port using it is closed and every lent batch
        // (each holds an Arc) has returned its mbufs.
        unsafe { sys::rte_mempool_free(self.mp) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_watch_errs_on_down_only_after_up_and_at_once_when_gone() {
        let mut w = PortLinkWatch::new(0, "net_af_packet0", "");
        // Down while negotiating after start: not an error.
        assert_eq!(w.judge(Ok(false)), Ok(()));
        assert_eq!(w.judge(Ok(true)), Ok(()));
        let down = w.judge(Ok(false)).unwrap_err();
        assert!(down.contains("'net_af_packet0' lost its link"), "{down}");
        let mut fresh = PortLinkWatch::new(3, "0000:01:00.0", "");
        let gone = fresh.judge(Err("No such device".into())).unwrap_err();
        assert!(
            gone.contains("'0000:01:00.0'") && gone.contains("No such device"),
            "{gone}"
        );
        // Not due again before EVERY has passed.
        let now = std::time::Instant::now();
        let mut w = PortLinkWatch::new(u16::MAX, "x", "");
        w.next = now + PortLinkWatch::EVERY;
        assert_eq!(w.check(now), Ok(()));
        // The kernel interface under a virtual port, found by the port's name.
        let eal = "--no-huge --vdev=net_af_packet0,iface=veth7,framecnt=4096 --vdev=net_af_xdp1,iface=eth2";
        assert_eq!(vdev_iface(eal, "net_af_packet0").as_deref(), Some("veth7"));
        assert_eq!(vdev_iface(eal, "net_af_xdp1").as_deref(), Some("eth2"));
        assert_eq!(vdev_iface(eal, "net_null0"), None);
        assert_eq!(vdev_iface("--vdev=net_null0", "net_null0"), None);
    }

    #[test]
    fn eal_args_split_devices_and_add_defaults() {
        let a = EalArgs::parse(
            "--no-huge --vdev=net_af_packet0,iface=veth0,framecnt=4096 -m 128 --vdev net_null0",
        )
        .unwrap();
        assert_eq!(a.base, vec!["--no-huge", "-m", "128"]);
        assert_eq!(
            a.vdevs,
            vec!["net_af_packet0,iface=veth0,framecnt=4096", "net_null0"]
        );
        let argv = a.argv();
        assert_eq!(argv[0], "firehose");
        assert!(argv.iter().any(|x| x.starts_with("--lcores=0@(")));
        assert!(argv.contains(&"--no-shconf".to_owned()));
        assert!(
            !argv.contains(&"--in-memory".to_owned()),
            "does not combine with --no-huge"
        );
        assert!(argv
            .iter()
            .any(|x| x.starts_with("--file-prefix=firehose-")));

        let b = EalArgs::parse("-l1 --file-prefix=x").unwrap();
        let argv = b.argv();
        assert!(argv.contains(&"--in-memory".to_owned()));
        assert!(!argv.iter().any(|x| x.starts_with("--lcores")));
        assert_eq!(
            argv.iter()
                .filter(|x| x.starts_with("--file-prefix"))
                .count(),
            1
        );
    }

    #[test]
    fn eal_args_reject_empty_devices() {
        assert!(EalArgs::parse("--vdev").is_err());
        assert!(EalArgs::parse("--vdev=,iface=x").is_err());
        assert_eq!(vdev_name("net_af_xdp0,iface=v"), "net_af_xdp0");
    }
}
