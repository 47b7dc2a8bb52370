//! The set-up steps of an AF_XDP capture, in the order [`super::open`] runs them; each
//! turns its failure into a [`SetupError`] naming the fix.

use std::os::fd::{AsRawFd, OwnedFd};

use firehose_core::netif::iface_index;
use firehose_core::MemoryRegion;

use super::error::{is_permission, ErrorKind, SetupError, PRIVILEGE_FIX};
use super::jumbo::Geometry;
use super::{rx_queues, AttachMode, BindMode, Config, Notice};
use crate::prog::{self, Match};
use crate::sys::{self, action};
use crate::xsk::{self, XskError, XskSocket};

/// The fewest UMEM frames: a batch's worth for the kernel while one is lent.
pub const MIN_FRAMES: u32 = 64;

/// The interface index of `cfg.interface`.
pub(super) fn interface(cfg: &Config) -> Result<u32, SetupError> {
    let iface = &cfg.interface;
    iface_index(iface).map_err(|_| {
        SetupError::new(
            ErrorKind::NotFound,
            format!(
                "no network interface named {iface:?}: set interface to one listed by \
                 ip link (in this network namespace)"
            ),
        )
    })
}

/// Checks `cfg.queue` against the interface's receive queues; returns their number.
pub(super) fn check_queue(cfg: &Config) -> Result<u32, SetupError> {
    let iface = &cfg.interface;
    let queues = rx_queues(iface).unwrap_or(cfg.queue + 1);
    if cfg.queue >= queues {
        return Err(SetupError::new(
            ErrorKind::Settings,
            format!(
                "queue {} is out of range: {iface} has {queues} receive queue(s), \
                 0 to {}; set queue to one of them (ethtool -l {iface} shows them)",
                cfg.queue,
                queues - 1
            ),
        ));
    }
    Ok(queues)
}

/// Checks the UMEM geometry the rings and the kernel accept.
pub(super) fn check_frames(cfg: &Config) -> Result<(), SetupError> {
    if cfg.frames < MIN_FRAMES {
        return Err(SetupError::new(
            ErrorKind::Settings,
            format!(
                "{} frames of {} B are too few: AF_XDP capture needs at least {MIN_FRAMES}; \
                 raise pool-size",
                cfg.frames, cfg.frame_size
            ),
        ));
    }
    if !cfg.frames.is_power_of_two() {
        return Err(SetupError::new(
            ErrorKind::Settings,
            format!(
                "frames={} is not a power of two: AF_XDP rings need one (e.g. 4096)",
                cfg.frames
            ),
        ));
    }
    if !matches!(cfg.frame_size, 2048 | 4096) {
        return Err(SetupError::new(
            ErrorKind::Settings,
            format!("frame-size={} must be 2048 or 4096", cfg.frame_size),
        ));
    }
    Ok(())
}

/// The interface's MTU as this thread's network namespace sees it, or 1500 where it
/// cannot be read (the bind that follows names the interface's real problem).
pub(super) fn mtu(cfg: &Config) -> u32 {
    firehose_core::netif::iface_mtu(&cfg.interface).unwrap_or(1500)
}

/// Allocates the UMEM (and, for multi-buffer capture, the guard after it that
/// datagrams wrapping from the last frame to the first are joined in); a fallback
/// from hugepages is a warning.
pub(super) fn umem(
    cfg: &Config,
    multi_buffer: bool,
    notice: &mut dyn FnMut(Notice),
) -> Result<MemoryRegion, SetupError> {
    let geometry = Geometry {
        frames: cfg.frames as usize,
        frame_size: cfg.frame_size as usize,
    };
    let len = if multi_buffer {
        geometry.region_len()
    } else {
        cfg.frames as usize * cfg.frame_size as usize
    };
    // The UMEM is pinned when registered: above the locked-memory limit the kernel
    // refuses it (ENOBUFS), after the allocation and pre-fault. Say so first.
    firehose_core::memory::check_lockable(len)
        .map_err(|e| SetupError::new(ErrorKind::NoSpace, e.to_string()))?;
    // RegionError's text carries the fix (the nr_hugepages command).
    let region = MemoryRegion::allocate(len, cfg.hugepages)
        .map_err(|e| SetupError::new(ErrorKind::NoSpace, e.to_string()))?;
    if let Some(reason) = region.fallback_reason() {
        notice(Notice::Warning(reason.to_string()));
    }
    Ok(region)
}

/// Creates the XSKMAP with `entries` queues.
pub(super) fn xskmap(entries: u32) -> Result<OwnedFd, SetupError> {
    sys::create_xskmap(entries).map_err(|e| {
        if is_permission(&e) {
            SetupError::new(
                ErrorKind::NotAuthorized,
                format!("not allowed to create a BPF map ({e}): {PRIVILEGE_FIX}"),
            )
        } else {
            SetupError::new(ErrorKind::Open, format!("could not create the XSKMAP: {e}"))
        }
    })
}

/// Generates and loads the redirect program for `cfg`'s endpoints.
/// `multi_buffer`: loaded as accepting multi-buffer frames (jumbo frames).
pub(super) fn program(
    cfg: &Config,
    map: &OwnedFd,
    multi_buffer: bool,
) -> Result<OwnedFd, SetupError> {
    let m = Match::endpoints(&cfg.endpoints);
    let insns = prog::redirect_program(&m, map.as_raw_fd(), action::PASS)
        .map_err(|e| SetupError::new(ErrorKind::Settings, e.to_string()))?;
    sys::load_xdp(&insns, "fhxdpsrc", multi_buffer).map_err(|e| {
        if is_permission(&e.error) && e.log.is_empty() {
            SetupError::new(
                ErrorKind::NotAuthorized,
                format!(
                    "not allowed to load an XDP program ({}): {PRIVILEGE_FIX}",
                    e.error
                ),
            )
        } else {
            SetupError::new(
                ErrorKind::Open,
                format!(
                    "the kernel refused fhxdpsrc's XDP program ({}); please report this \
                     with the verifier log:\n{}",
                    e.error, e.log
                ),
            )
        }
    })
}

/// Opens and binds the socket in the mode `cfg.bind` asks for.
pub(super) fn socket(
    cfg: &Config,
    ifindex: u32,
    region: &MemoryRegion,
    mtu: Option<u32>,
    notice: &mut dyn FnMut(Notice),
) -> Result<XskSocket, SetupError> {
    let xcfg = |zero_copy| xsk::Config {
        ifindex,
        queue: cfg.queue,
        frames: cfg.frames,
        frame_size: cfg.frame_size,
        multi_buffer: mtu.is_some(),
        zero_copy,
    };
    match cfg.bind {
        BindMode::ZeroCopy => XskSocket::open(&xcfg(true), region),
        BindMode::Copy => XskSocket::open(&xcfg(false), region),
        BindMode::Auto => match XskSocket::open(&xcfg(true), region) {
            Err(e) if e.step == "bind" => {
                notice(Notice::Debug(format!(
                    "zero-copy bind on {} refused ({}): binding in copy mode",
                    cfg.interface, e.error
                )));
                XskSocket::open(&xcfg(false), region)
            }
            other => other,
        },
    }
    .map_err(|e| socket_error(cfg, e, mtu))
}

/// The message for a socket that could not be opened or bound.
///
/// `mtu`: the interface's MTU when it needed multi-buffer mode.
fn socket_error(cfg: &Config, e: XskError, mtu: Option<u32>) -> SetupError {
    let (iface, queue) = (&cfg.interface, cfg.queue);
    let errno = e.error.raw_os_error();
    if let (Some(mtu), "bind", Some(libc::EINVAL | libc::EOPNOTSUPP)) = (mtu, e.step, errno) {
        let fits = Geometry::max_mtu(cfg.frame_size);
        return SetupError::new(
            ErrorKind::Settings,
            format!(
                "{e}: {iface} has an MTU of {mtu}, longer than one {} B frame holds, and \
                 multi-buffer AF_XDP (XDP_USE_SG), which jumbo frames need, was refused: \
                 it needs Linux 6.6 or later and a driver with XDP multi-buffer support. \
                 Or lower the MTU to {fits} (ip link set dev {iface} mtu {fits}), or use \
                 fhudpsrc",
                cfg.frame_size
            ),
        );
    }
    if is_permission(&e.error) {
        SetupError::new(ErrorKind::NotAuthorized, format!("{e}: {PRIVILEGE_FIX}"))
    } else if e.step == "socket" && errno == Some(libc::EAFNOSUPPORT) {
        SetupError::new(
            ErrorKind::Open,
            format!("{e}: this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS); use fhudpsrc"),
        )
    } else if e.step == "bind" && errno == Some(libc::EBUSY) {
        SetupError::new(
            ErrorKind::Busy,
            format!(
                "{e}: queue {queue} of {iface} is already used by another AF_XDP socket; \
                 stop it or set another queue"
            ),
        )
    } else if e.step == "bind" && cfg.bind == BindMode::ZeroCopy {
        SetupError::new(
            ErrorKind::Settings,
            format!(
                "{e}: zero-copy=on, but the driver of {iface} cannot bind AF_XDP in \
                 zero-copy mode on queue {queue}; set zero-copy=auto (falls back to copy \
                 mode) or zero-copy=off"
            ),
        )
    } else {
        SetupError::new(
            ErrorKind::Open,
            format!("{e} (interface {iface}, queue {queue})"),
        )
    }
}

/// Turns on busy polling if asked; a refusal is a warning, not an error.
pub(super) fn busy_poll(cfg: &Config, sock: &XskSocket, notice: &mut dyn FnMut(Notice)) {
    if cfg.busy_poll == 0 {
        return;
    }
    if let Err(e) = sock.set_busy_poll(cfg.busy_poll, cfg.busy_poll_budget) {
        notice(Notice::Warning(format!(
            "busy polling not enabled ({e}): the element still polls in a loop; \
             run as root or with CAP_NET_ADMIN to allow SO_BUSY_POLL"
        )));
    }
}

/// Puts the socket in the XSKMAP at its queue.
pub(super) fn insert(cfg: &Config, map: &OwnedFd, sock: &XskSocket) -> Result<(), SetupError> {
    sys::xskmap_insert(map, cfg.queue, sock).map_err(|e| {
        SetupError::new(
            ErrorKind::Open,
            format!("could not add the socket to the XSKMAP: {e}"),
        )
    })
}

/// Attaches the program in the mode `cfg.attach` asks for; returns the link and
/// `native` or `generic`.
pub(super) fn attach(
    cfg: &Config,
    ifindex: u32,
    prog: &OwnedFd,
    notice: &mut dyn FnMut(Notice),
) -> Result<(OwnedFd, &'static str), SetupError> {
    let attach = |flags| sys::attach_xdp(prog, ifindex, flags);
    let attached = match cfg.attach {
        AttachMode::Native => attach(sys::XDP_FLAGS_DRV_MODE).map(|l| (l, "native")),
        AttachMode::Generic => attach(sys::XDP_FLAGS_SKB_MODE).map(|l| (l, "generic")),
        AttachMode::Auto => match attach(sys::XDP_FLAGS_DRV_MODE) {
            Ok(l) => Ok((l, "native")),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
                ) =>
            {
                notice(Notice::Debug(format!(
                    "native XDP refused on {} ({e}): generic",
                    cfg.interface
                )));
                attach(sys::XDP_FLAGS_SKB_MODE).map(|l| (l, "generic"))
            }
            Err(e) => Err(e),
        },
    };
    attached.map_err(|e| attach_error(cfg, e))
}

/// The message for a program that could not be attached.
fn attach_error(cfg: &Config, e: std::io::Error) -> SetupError {
    let iface = &cfg.interface;
    match e.raw_os_error() {
        Some(libc::EBUSY) | Some(libc::EEXIST) => SetupError::new(
            ErrorKind::Busy,
            format!(
                "{iface} already has an XDP program attached ({e}); see ip link show dev \
                 {iface}, detach it (ip link set dev {iface} xdp off) or capture elsewhere"
            ),
        ),
        _ if is_permission(&e) => SetupError::new(
            ErrorKind::NotAuthorized,
            format!("not allowed to attach an XDP program ({e}): {PRIVILEGE_FIX}"),
        ),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) if cfg.attach == AttachMode::Native => {
            SetupError::new(
                ErrorKind::Settings,
                format!(
                    "mode=native, but the driver of {iface} cannot run XDP programs ({e}); \
                     set mode=auto or mode=generic"
                ),
            )
        }
        _ => SetupError::new(
            ErrorKind::Open,
            format!(
                "could not attach the XDP program to {iface} ({e}); kernel 5.9 or \
                 later is needed for BPF links"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            interface: "lo".into(),
            queue: 0,
            endpoints: firehose_core::endpoint::parse_list("0.0.0.0:7148", 0, &[]).unwrap(),
            attach: AttachMode::Auto,
            bind: BindMode::Auto,
            busy_poll: 0,
            busy_poll_budget: 64,
            frames: 4096,
            frame_size: 4096,
            batch_size: 64,
            hugepages: firehose_core::HugepagePolicy::Off,
        }
    }

    #[test]
    fn frame_geometry_is_checked_with_the_fix() {
        assert!(check_frames(&cfg()).is_ok());
        let e = check_frames(&Config {
            frames: 5000,
            ..cfg()
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Settings);
        assert!(e.message.contains("power of two"), "{e}");
        let e = check_frames(&Config {
            frame_size: 3000,
            ..cfg()
        })
        .unwrap_err();
        assert!(e.message.contains("2048 or 4096"), "{e}");
    }

    #[test]
    fn a_refused_multi_buffer_bind_names_the_mtu_and_the_fixes() {
        let refused = || XskError {
            step: "bind",
            error: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        let e = socket_error(&cfg(), refused(), Some(9000));
        assert_eq!(e.kind, ErrorKind::Settings);
        for want in ["MTU of 9000", "Linux 6.6", "mtu 3822", "fhudpsrc"] {
            assert!(e.message.contains(want), "{want}: {e}");
        }
        // Without jumbo frames the same refusal is not blamed on them.
        let e = socket_error(&cfg(), refused(), None);
        assert!(!e.message.contains("MTU"), "{e}");
    }

    #[test]
    fn an_unknown_interface_says_where_to_look() {
        let e = interface(&Config {
            interface: "no-such-if0".into(),
            ..cfg()
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.message.contains("ip link"), "{e}");
    }

    #[test]
    fn attach_errors_name_the_fix() {
        let busy = attach_error(&cfg(), std::io::Error::from_raw_os_error(libc::EBUSY));
        assert_eq!(busy.kind, ErrorKind::Busy);
        assert!(busy.message.contains("xdp off"), "{busy}");
        let native = Config {
            attach: AttachMode::Native,
            ..cfg()
        };
        let e = attach_error(&native, std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert_eq!(e.kind, ErrorKind::Settings);
        assert!(e.message.contains("mode=auto"), "{e}");
    }
}
