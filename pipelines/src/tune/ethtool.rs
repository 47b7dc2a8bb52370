//! The NIC settings `tune` reads and changes, through the kernel's ethtool ioctl
//! (`SIOCETHTOOL`), not by running and parsing the `ethtool` tool.

use std::io;

/// Receive and transmit ring sizes: what is set and the most the NIC allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rings {
    /// Receive descriptors now.
    pub rx: u32,
    /// Most receive descriptors the NIC allows.
    pub rx_max: u32,
    /// Transmit descriptors now.
    pub tx: u32,
    /// Most transmit descriptors the NIC allows.
    pub tx_max: u32,
}

/// Receive interrupt coalescing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Coalesce {
    /// Microseconds the NIC waits after a packet before interrupting.
    pub rx_usecs: u32,
    /// Packets the NIC gathers before interrupting.
    pub rx_frames: u32,
    /// Adaptive receive coalescing (the driver picks the values).
    pub adaptive_rx: bool,
}

/// Ethernet flow control (pause frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pause {
    /// Pause negotiated automatically.
    pub autoneg: bool,
    /// Honours pause frames from the link partner.
    pub rx: bool,
    /// Sends pause frames when its buffers fill.
    pub tx: bool,
}

/// The NIC queries `tune` makes; the real one is [`Ethtool`], tests use a fake.
pub trait Nic {
    /// Ring sizes of `ifname`.
    fn rings(&self, ifname: &str) -> io::Result<Rings>;
    /// Receive coalescing of `ifname`.
    fn coalesce(&self, ifname: &str) -> io::Result<Coalesce>;
    /// Flow control of `ifname`.
    fn pause(&self, ifname: &str) -> io::Result<Pause>;
    /// Whether generic receive offload is on.
    fn gro(&self, ifname: &str) -> io::Result<bool>;
    /// Sets the ring sizes of `ifname` (`--apply`).
    fn set_rings(&self, ifname: &str, rx: u32, tx: u32) -> io::Result<()>;
}

/// A NIC that cannot be asked (a fake `--root` tree has no kernel behind it).
#[derive(Debug)]
pub struct NoNic;

fn no_kernel() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "the ethtool interface reads the live kernel, not a --root tree",
    )
}

impl Nic for NoNic {
    fn rings(&self, _: &str) -> io::Result<Rings> {
        Err(no_kernel())
    }
    fn coalesce(&self, _: &str) -> io::Result<Coalesce> {
        Err(no_kernel())
    }
    fn pause(&self, _: &str) -> io::Result<Pause> {
        Err(no_kernel())
    }
    fn gro(&self, _: &str) -> io::Result<bool> {
        Err(no_kernel())
    }
    fn set_rings(&self, _: &str, _: u32, _: u32) -> io::Result<()> {
        Err(no_kernel())
    }
}

const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_SRINGPARAM: u32 = 0x11;
const ETHTOOL_GPAUSEPARAM: u32 = 0x12;
const ETHTOOL_GGRO: u32 = 0x2b;

/// `struct ethtool_ringparam`.
#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

/// `struct ethtool_coalesce`: the command and 22 `__u32` fields, of which the first
/// two and `use_adaptive_rx_coalesce` (index 9) are read.
#[repr(C)]
#[derive(Default)]
struct CoalesceParam {
    cmd: u32,
    fields: [u32; 22],
}

/// `struct ethtool_pauseparam`.
#[repr(C)]
#[derive(Default)]
struct PauseParam {
    cmd: u32,
    autoneg: u32,
    rx_pause: u32,
    tx_pause: u32,
}

/// `struct ethtool_value`.
#[repr(C)]
#[derive(Default)]
struct Value {
    cmd: u32,
    data: u32,
}

/// An ethtool structure: `#[repr(C)]`, its first field the command.
trait Param: Default {
    /// The structure for command `cmd`, every other field zero.
    fn command(cmd: u32) -> Self;
}

macro_rules! impl_param {
    ($($t:ty),*) => {
        $(impl Param for $t {
            fn command(cmd: u32) -> Self {
                Self { cmd, ..Default::default() }
            }
        })*
    };
}

impl_param!(RingParam, CoalesceParam, PauseParam, Value);

/// `struct ifreq` with the `ifr_data` member of its union (padded to the union's size).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// The live kernel's ethtool interface.
#[derive(Debug)]
pub struct Ethtool;

impl Ethtool {
    /// Runs ethtool command `T` (its `cmd` already set) on `ifname`.
    fn ioctl<T>(ifname: &str, param: &mut T) -> io::Result<()> {
        let bytes = ifname.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{ifname}' is not an interface name"),
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: param as *mut T as *mut libc::c_void,
            _pad: [0; 16],
        };
        req.name[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: socket() has no memory preconditions; the descriptor is closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `req` is a valid ifreq whose data points at `param`, a live #[repr(C)]
        // ethtool struct of the layout the command expects; both outlive the call.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req as *mut IfReq) };
        let err = io::Error::last_os_error();
        // SAFETY: `fd` is our socket and is not used after this.
        unsafe { libc::close(fd) };
        if rc < 0 {
            return Err(err);
        }
        Ok(())
    }

    /// What ethtool command `cmd` reads of `ifname` into structure `T`.
    fn get<T: Param>(ifname: &str, cmd: u32) -> io::Result<T> {
        let mut p = T::command(cmd);
        Self::ioctl(ifname, &mut p)?;
        Ok(p)
    }
}

impl Nic for Ethtool {
    fn rings(&self, ifname: &str) -> io::Result<Rings> {
        let p: RingParam = Self::get(ifname, ETHTOOL_GRINGPARAM)?;
        Ok(Rings {
            rx: p.rx_pending,
            rx_max: p.rx_max_pending,
            tx: p.tx_pending,
            tx_max: p.tx_max_pending,
        })
    }

    fn coalesce(&self, ifname: &str) -> io::Result<Coalesce> {
        let p: CoalesceParam = Self::get(ifname, ETHTOOL_GCOALESCE)?;
        Ok(Coalesce {
            rx_usecs: p.fields[0],
            rx_frames: p.fields[1],
            adaptive_rx: p.fields[9] != 0,
        })
    }

    fn pause(&self, ifname: &str) -> io::Result<Pause> {
        let p: PauseParam = Self::get(ifname, ETHTOOL_GPAUSEPARAM)?;
        Ok(Pause {
            autoneg: p.autoneg != 0,
            rx: p.rx_pause != 0,
            tx: p.tx_pause != 0,
        })
    }

    fn gro(&self, ifname: &str) -> io::Result<bool> {
        let p: Value = Self::get(ifname, ETHTOOL_GGRO)?;
        Ok(p.data != 0)
    }

    fn set_rings(&self, ifname: &str, rx: u32, tx: u32) -> io::Result<()> {
        let mut p: RingParam = Self::get(ifname, ETHTOOL_GRINGPARAM)?;
        p.cmd = ETHTOOL_SRINGPARAM;
        p.rx_pending = rx;
        p.tx_pending = tx;
        Self::ioctl(ifname, &mut p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<RingParam>(), 36);
        assert_eq!(std::mem::size_of::<CoalesceParam>(), 92);
        assert_eq!(std::mem::size_of::<PauseParam>(), 16);
        assert_eq!(
            std::mem::size_of::<IfReq>(),
            std::mem::size_of::<libc::ifreq>()
        );
    }

    #[test]
    fn loopback_answers_or_says_why() {
        // `lo` has GRO state on every kernel; rings it has not (EOPNOTSUPP): an error,
        // never a crash.
        assert!(Ethtool.gro("lo").is_ok());
        let _ = Ethtool.rings("lo");
        assert!(Ethtool.rings("no-such-if0").is_err());
        assert!(Ethtool.rings("a-name-far-too-long-for-ifnamsiz").is_err());
    }
}
