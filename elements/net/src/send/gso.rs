//! UDP GSO (`UDP_SEGMENT`): which datagrams can share one send, the control message
//! that gives the segment size, and the check that the kernel knows the option.

use std::io;
use std::os::fd::AsRawFd;

use socket2::Socket;

use super::{Datagrams, MAX_PAYLOAD_V4};

/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` before Linux 6.9).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one GSO send (the segments must fit one IPv4 datagram).
pub const GSO_MAX_BYTES: usize = MAX_PAYLOAD_V4;
/// `UDP_SEGMENT` from `<linux/udp.h>`; libc only exports it for some targets.
const UDP_SEGMENT: libc::c_int = 103;

/// How many datagrams from `first` (below `end`) one GSO send can carry: a run of
/// equal-size datagrams, the last of which may be shorter, at most [`GSO_MAX_SEGMENTS`]
/// of them and [`GSO_MAX_BYTES`] in all. 1 means "send it alone".
pub fn gso_run<D: Datagrams + ?Sized>(data: &D, first: usize, end: usize) -> usize {
    let seg = data.datagram(first).len();
    if seg == 0 || 2 * seg > GSO_MAX_BYTES {
        return 1;
    }
    let (mut n, mut bytes) = (1, seg);
    while first + n < end && n < GSO_MAX_SEGMENTS {
        let len = data.datagram(first + n).len();
        if len == 0 || len > seg || bytes + len > GSO_MAX_BYTES {
            break;
        }
        n += 1;
        bytes += len;
        if len < seg {
            break; // only the last segment may be short
        }
    }
    n
}

/// The `UDP_SEGMENT` control message, laid out as `CMSG_SPACE(sizeof(u16))` bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct GsoCmsg {
    hdr: libc::cmsghdr,
    /// The segment size: every datagram of the send but the last has this length.
    pub(super) segment: u16,
    _pad: [u8; 6],
}

impl GsoCmsg {
    /// A `UDP_SEGMENT` message with segment size 0 (set before each send).
    pub(super) fn new() -> Self {
        Self {
            hdr: libc::cmsghdr {
                cmsg_len: std::mem::offset_of!(GsoCmsg, segment) + 2,
                cmsg_level: libc::SOL_UDP,
                cmsg_type: UDP_SEGMENT,
            },
            segment: 0,
            _pad: [0; 6],
        }
    }
}

/// Checks that the kernel knows `UDP_SEGMENT` on `socket` (setting 0 keeps it off per
/// socket; each GSO send sets its segment size in a control message). Err: the errno.
pub(super) fn probe(socket: &Socket) -> Result<(), i32> {
    let zero: libc::c_int = 0;
    // SAFETY: setsockopt on an open socket with a valid pointer to a c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            (&zero as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(v: &[usize]) -> Vec<Vec<u8>> {
        v.iter().map(|&n| vec![0u8; n]).collect()
    }

    #[test]
    fn cmsg_layout_matches_the_kernel() {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let (space, len) = unsafe { (libc::CMSG_SPACE(2), libc::CMSG_LEN(2)) };
        assert_eq!(std::mem::size_of::<GsoCmsg>(), space as usize);
        assert_eq!(std::mem::offset_of!(GsoCmsg, segment) + 2, len as usize);
    }

    #[test]
    fn gso_runs_group_equal_sizes_with_a_short_tail() {
        let d = sizes(&[1000, 1000, 1000, 400, 1000, 1000]);
        assert_eq!(
            gso_run(d.as_slice(), 0, d.len()),
            4,
            "short tail ends the run"
        );
        assert_eq!(gso_run(d.as_slice(), 4, d.len()), 2);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 2, "end bounds the run");
        let d = sizes(&[500, 1000]);
        assert_eq!(
            gso_run(d.as_slice(), 0, 2),
            1,
            "a longer datagram is not a segment"
        );
        let d = sizes(&[0, 0]);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 1, "empty datagrams go alone");
    }

    #[test]
    fn gso_runs_respect_segment_and_byte_limits() {
        let d = sizes(&[100; 100]);
        assert_eq!(gso_run(d.as_slice(), 0, 100), GSO_MAX_SEGMENTS);
        let d = sizes(&[9000; 10]);
        assert_eq!(
            gso_run(d.as_slice(), 0, 10),
            7,
            "7 × 9000 ≤ 65507 < 8 × 9000"
        );
        let d = sizes(&[40000, 40000]);
        assert_eq!(gso_run(d.as_slice(), 0, 2), 1);
    }
}
