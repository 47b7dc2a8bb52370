//! The `bpf(2)` calls `fhxdpsrc` needs, made directly: create the XSKMAP, load the
//! program (with the verifier's log on failure), insert a socket, attach to an
//! interface through a BPF link, and run a program on a test packet.
//!
//! Each command's `union bpf_attr` member is a `#[repr(C)]` prefix of the kernel's; the
//! kernel accepts a shorter attr and treats the rest as zero.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::bpf::Insn;

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
/// `BPF_F_XDP_HAS_FRAGS`: an XDP program that handles multi-buffer frames.
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const BPF_PROG_TEST_RUN: libc::c_int = 10;
const BPF_LINK_CREATE: libc::c_int = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type` value of XDP.
const BPF_XDP: u32 = 37;

/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on the skb after the driver.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before any skb exists.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// XDP verdicts (`enum xdp_action`).
pub mod action {
    /// Drop the packet.
    pub const DROP: u32 = 1;
    /// Hand it to the kernel's stack.
    pub const PASS: u32 = 2;
    /// Redirected (to our socket).
    pub const REDIRECT: u32 = 4;
}

/// `bpf_redirect_map` helper number.
pub const HELPER_REDIRECT_MAP: i32 = 51;

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u64; 4],
}

#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

/// `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed #[repr(C)] prefix of `union
    // bpf_attr` for `cmd`; the kernel reads (and for some commands writes) at most
    // `size_of::<T>()` bytes of it. Pointers inside it are to memory the caller keeps
    // alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fd_from(r: libc::c_long) -> OwnedFd {
    // SAFETY: the bpf command returned a new file descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(r as libc::c_int) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, c) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = c;
    }
    n
}

/// Creates an XSKMAP of `entries` slots (key: queue index, value: AF_XDP socket fd).
pub fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name16("fh_xsks"),
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut a).map(fd_from)
}

/// Puts socket `xsk` at `key` of an XSKMAP.
pub fn xskmap_insert(map: &OwnedFd, key: u32, xsk: &impl AsRawFd) -> io::Result<()> {
    let value: u32 = xsk.as_raw_fd() as u32;
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// A program the verifier refused, with its log.
#[derive(Debug)]
pub struct LoadError {
    /// The errno of the load.
    pub error: io::Error,
    /// The verifier's log (may be empty, e.g. for EPERM).
    pub log: String,
}

/// Loads `insns` as an XDP program. On failure the load is repeated with the verifier
/// log on, so the error carries the reason.
///
/// `frags`: the program accepts multi-buffer frames (`BPF_F_XDP_HAS_FRAGS`, what
/// `SEC("xdp.frags")` sets), which a driver hands it for frames longer than a page; it
/// reads only the headers, which lie in the first buffer.
pub fn load_xdp(insns: &[Insn], name: &str, frags: bool) -> Result<OwnedFd, LoadError> {
    // GPL-compatible, so every helper is allowed; the project itself is MPL-2.0.
    let license = CString::new("Dual MPL/GPL").expect("no NUL");
    let load = |log: &mut [u8]| {
        let mut a = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name16(name),
            expected_attach_type: BPF_XDP,
            prog_flags: if frags { BPF_F_XDP_HAS_FRAGS } else { 0 },
            ..Default::default()
        };
        if !log.is_empty() {
            a.log_level = 1;
            a.log_size = log.len() as u32;
            a.log_buf = log.as_mut_ptr() as u64;
        }
        bpf(BPF_PROG_LOAD, &mut a).map(fd_from)
    };
    match load(&mut []) {
        Ok(fd) => Ok(fd),
        Err(error) => {
            let mut log = vec![0u8; 1 << 16];
            let _ = load(&mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(LoadError {
                error,
                log: String::from_utf8_lossy(&log[..end]).trim().to_string(),
            })
        }
    }
}

/// Attaches `prog` to interface `ifindex` as a BPF link with `flags`
/// ([`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`]). The program stays attached
/// exactly as long as the returned fd is open: closing it (or the process dying)
/// detaches it.
pub fn attach_xdp(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
        ..Default::default()
    };
    bpf(BPF_LINK_CREATE, &mut a).map(fd_from)
}

/// Runs `prog` once on `packet` (`BPF_PROG_TEST_RUN`) and returns its verdict.
pub fn test_run(prog: &OwnedFd, packet: &[u8]) -> io::Result<u32> {
    let mut a = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: packet.len() as u32,
        data_in: packet.as_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok(a.retval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_layouts_match_the_uapi_offsets() {
        // Offsets from include/uapi/linux/bpf.h.
        assert_eq!(std::mem::size_of::<MapCreateAttr>(), 44);
        assert_eq!(std::mem::size_of::<MapElemAttr>(), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(LinkCreateAttr, flags), 12);
        assert_eq!(std::mem::offset_of!(TestRunAttr, data_in), 16);
        assert_eq!(std::mem::offset_of!(TestRunAttr, repeat), 32);
        assert_eq!(&name16("a_very_long_program_name")[15..], &[0]);
    }
}
