//! One round of `sendmmsg`: the message, iovec and control-message arrays (allocated
//! once, reused for every round), filling them from a batch, and handing them to the
//! kernel with the retries and fallbacks a full queue or a refused GSO call for.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::gso::{gso_run, GsoCmsg};
use super::{Datagrams, Interrupt, UdpSender, MAX_MSGS, REFUSED_RETRIES, STALL_LIMIT};

/// What one message of a round carries.
#[derive(Clone, Copy, Default)]
struct MsgInfo {
    /// Position (destination × datagram) of its first datagram.
    pos: usize,
    datagrams: usize,
    bytes: usize,
}

/// The arrays handed to `sendmmsg`, allocated once.
pub(super) struct Scratch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    cmsgs: Vec<GsoCmsg>,
    info: Vec<MsgInfo>,
    len: usize,
}

// SAFETY: the raw pointers in `msgs` and `iovs` point into the current batch only while
// `UdpSender::send` runs on one thread; between calls they are stale and never read.
unsafe impl Send for Scratch {}

impl Scratch {
    pub(super) fn new() -> Self {
        let iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let msg = libc::mmsghdr {
            msg_hdr: libc::msghdr {
                msg_name: std::ptr::null_mut(),
                msg_namelen: 0,
                msg_iov: std::ptr::null_mut(),
                msg_iovlen: 0,
                msg_control: std::ptr::null_mut(),
                msg_controllen: 0,
                msg_flags: 0,
            },
            msg_len: 0,
        };
        Self {
            msgs: vec![msg; MAX_MSGS],
            iovs: vec![iov; MAX_MSGS],
            cmsgs: vec![GsoCmsg::new(); MAX_MSGS],
            info: vec![MsgInfo::default(); MAX_MSGS],
            len: 0,
        }
    }

    /// Messages in the round built last.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Payload bytes of the first `k` messages of the round.
    pub(super) fn bytes_of_first(&self, k: usize) -> u64 {
        self.info[..k].iter().map(|m| m.bytes as u64).sum()
    }

    /// Position (destination × datagram) of the first datagram of message `k`.
    pub(super) fn pos(&self, k: usize) -> usize {
        self.info[k].pos
    }
}

/// How a round of messages ended.
pub(super) enum RoundEnd {
    /// All messages were sent or counted as errors.
    Done,
    /// The kernel refused GSO at message `.0`; GSO is now off.
    GsoRefused(usize),
    /// Interrupted before message `.0`.
    Interrupted(usize),
}

impl UdpSender {
    /// Fills the scratch arrays with messages from position `pos` and returns the
    /// position after the last datagram placed.
    pub(super) fn build<D: Datagrams + ?Sized>(
        &mut self,
        data: &D,
        mut pos: usize,
        total: usize,
    ) -> usize {
        let n = data.count();
        let budget = self.pacer.chunk_bytes();
        let s = &mut self.scratch;
        let (mut msgs, mut iovs, mut bytes) = (0, 0, 0usize);
        while pos < total && msgs < MAX_MSGS && iovs < MAX_MSGS {
            let (dest, first) = (pos / n, pos % n);
            let end = n.min(first + (MAX_MSGS - iovs));
            let run = if self.gso {
                gso_run(data, first, end)
            } else {
                1
            };
            // Trim the run to the pacing budget; a round always carries one datagram.
            let (mut count, mut len) = (0, 0);
            while count < run {
                let l = data.datagram(first + count).len();
                if bytes + len + l > budget && (msgs > 0 || count > 0) {
                    break;
                }
                len += l;
                count += 1;
            }
            if count == 0 {
                break;
            }
            for (i, iov) in s.iovs[iovs..iovs + count].iter_mut().enumerate() {
                let d = data.datagram(first + i);
                iov.iov_base = d.as_ptr() as *mut libc::c_void;
                iov.iov_len = d.len();
            }
            let hdr = &mut s.msgs[msgs].msg_hdr;
            hdr.msg_name = self.dests[dest].as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = self.dests[dest].len();
            hdr.msg_iov = s.iovs[iovs..].as_mut_ptr();
            hdr.msg_iovlen = count;
            if count > 1 {
                let seg = data.datagram(first).len();
                s.cmsgs[msgs].segment = seg as u16; // seg ≤ GSO_MAX_BYTES / 2
                hdr.msg_control = (&mut s.cmsgs[msgs] as *mut GsoCmsg).cast();
                hdr.msg_controllen = std::mem::size_of::<GsoCmsg>();
            } else {
                hdr.msg_control = std::ptr::null_mut();
                hdr.msg_controllen = 0;
            }
            s.info[msgs] = MsgInfo {
                pos,
                datagrams: count,
                bytes: len,
            };
            msgs += 1;
            iovs += count;
            bytes += len;
            pos += count;
            if bytes >= budget {
                break;
            }
        }
        s.len = msgs;
        pos
    }

    /// Sends the built messages; returns how many were dealt with and why it stopped.
    pub(super) fn flush(&mut self, interrupt: &Interrupt) -> (usize, RoundEnd) {
        let fd = self.socket.as_raw_fd();
        let len = self.scratch.len;
        let (mut k, mut refused) = (0, 0);
        let mut stalled_since: Option<Instant> = None;
        while k < len {
            // SAFETY: msgs[k..len] were filled by build() with pointers into the batch
            // (alive for this call), self.dests and self.scratch, none moved since.
            let rc = unsafe {
                libc::sendmmsg(
                    fd,
                    self.scratch.msgs.as_mut_ptr().add(k),
                    (len - k) as libc::c_uint,
                    0,
                )
            };
            if rc > 0 {
                let sent = rc as usize;
                self.count_sent(k, k + sent);
                k += sent;
                (refused, stalled_since) = (0, None);
                continue;
            }
            let errno = if rc == 0 {
                libc::EAGAIN
            } else {
                io::Error::last_os_error().raw_os_error().unwrap_or(0)
            };
            let info = self.scratch.info[k];
            match errno {
                libc::EINTR => {}
                libc::EAGAIN | libc::ENOBUFS => {
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > STALL_LIMIT {
                        self.count_failed(k, errno);
                        k += 1;
                        stalled_since = None;
                    } else if !self.wait_writable(errno, interrupt) {
                        return (k, RoundEnd::Interrupted(k));
                    }
                }
                libc::ECONNREFUSED => {
                    // An ICMP port unreachable for an earlier datagram; this one was not
                    // sent, and the socket error is now consumed, so try it again.
                    self.stats.errors.add(1);
                    self.last_error = Some(errno);
                    refused += 1;
                    if refused > REFUSED_RETRIES {
                        self.count_failed(k, errno);
                        k += 1;
                        refused = 0;
                    }
                }
                // GSO refused: no support (ENOPROTOOPT, EOPNOTSUPP), no checksum offload
                // on the device (EIO), or segments larger than the path MTU (EINVAL
                // before Linux 6.5, EMSGSIZE since), which plain sends fragment.
                libc::EINVAL
                | libc::EIO
                | libc::ENOPROTOOPT
                | libc::EOPNOTSUPP
                | libc::EMSGSIZE
                    if info.datagrams > 1 =>
                {
                    self.refuse_gso(errno);
                    return (k, RoundEnd::GsoRefused(k));
                }
                _ => {
                    self.count_failed(k, errno);
                    k += 1;
                }
            }
        }
        (k, RoundEnd::Done)
    }

    /// Waits a little for room in the socket buffer (`EAGAIN`) or in the device queue
    /// (`ENOBUFS`, which poll cannot see). Returns false if interrupted.
    fn wait_writable(&self, errno: i32, interrupt: &Interrupt) -> bool {
        if errno == libc::ENOBUFS {
            return interrupt.sleep_until(Instant::now() + Duration::from_micros(200));
        }
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a short timeout so the interrupt flag is seen.
        unsafe { libc::poll(&mut pfd, 1, 5) };
        !interrupt.is_raised()
    }

    /// Counts messages `from..to` of the round as sent.
    fn count_sent(&self, from: usize, to: usize) {
        let info = &self.scratch.info[from..to];
        let datagrams: usize = info.iter().map(|m| m.datagrams).sum();
        let bytes: usize = info.iter().map(|m| m.bytes).sum();
        let gso = info.iter().filter(|m| m.datagrams > 1).count();
        self.stats.packets.add(datagrams as u64);
        self.stats.bytes.add(bytes as u64);
        self.stats.gso_sends.add(gso as u64);
    }

    /// Counts message `k` of the round as failed with `errno`.
    fn count_failed(&mut self, k: usize, errno: i32) {
        self.stats.errors.add(self.scratch.info[k].datagrams as u64);
        self.last_error = Some(errno);
    }
}
