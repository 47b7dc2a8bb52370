//! The kernel-UDP receive engine: `recvmmsg` into one slab per batch, UDP GRO split by
//! segment size, receive times (the kernel's if asked for, else one per batch) and drop counters, an interruptible wait.
//!
//! No GStreamer types here: [`UdpReceiver`] fills a caller-provided byte slab and a list
//! of [`PacketInfo`]s, so it can be tested and benchmarked alone.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Instant;

use std::sync::Arc;

use firehose_core::endpoint::{Endpoint, EndpointCounters, EndpointTable, Tally};
use firehose_core::meta::dest::PacketDest;
use firehose_core::wake::{nap, wait_readable_set, Coalescer, Waker};
use firehose_core::{PacketAddr, PacketInfo};
use socket2::Socket;

pub use crate::endpoint_sockets::grow_recv_buffer;
use crate::endpoint_sockets::{open_sockets, setsockopt_int, PortSocket};
use crate::groadapt::{Action as GroAction, GroAdapt, Mode as GroMode};

/// The endpoint of a datagram whose destination is not listed.
const NO_ENDPOINT: u16 = u16::MAX;

/// Datagrams in a message of `len` bytes with GRO segment size `gso` (0: one).
fn segments(len: usize, gso: usize) -> u64 {
    if gso > 0 {
        len.div_ceil(gso) as u64
    } else {
        1
    }
}

/// Largest UDP payload the kernel can hand us in one (GRO-coalesced) datagram.
pub const MAX_DATAGRAM: usize = 65535;

/// Space for the control messages we ask for: a timespec, the drop counter, the GRO
/// size, the destination address (`IP_PKTINFO` / `IPV6_PKTINFO`).
const CMSG_SPACE: usize = 192;

/// How to open the socket.
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// Where to receive: local addresses or multicast groups with their ports and SSM
    /// sources (at least one; port 0, any free port, for a single endpoint only).
    pub endpoints: Vec<Endpoint>,
    /// Interface for multicast joins (name), if any.
    pub multicast_iface: Option<String>,
    /// Requested SO_RCVBUF in bytes (0 = kernel default).
    pub buffer_size: usize,
    /// Allow other sockets to bind the same port (SO_REUSEADDR).
    pub reuse: bool,
    /// Ask for UDP GRO.
    pub gro: bool,
    /// Ask for kernel receive timestamps (`SO_TIMESTAMPNS`, one per datagram); without
    /// them [`UdpReceiver::recv_batch`] stamps a batch's datagrams with the time it read
    /// the batch.
    pub timestamps: bool,
    /// `SO_BUSY_POLL` in µs (0: off): an empty read spins on the NIC queue this long
    /// before it sleeps (`net.core.busy_poll` extends it to the `poll` waits).
    pub busy_poll_us: u32,
}

/// What opening the socket found that the user should hear about (not fatal).
#[derive(Debug, Default)]
pub struct OpenReport {
    /// The address actually bound (port filled in when 0 was asked for).
    pub local: Option<SocketAddr>,
    /// Receive buffer the kernel granted, in bytes (as it reports it: twice the usable).
    pub buffer_granted: usize,
    /// Set when the kernel capped the receive buffer below what was asked.
    pub buffer_warning: Option<String>,
    /// Whether UDP GRO is on.
    pub gro: bool,
}

/// Counters one receive call adds to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecvCounts {
    /// Datagrams appended to the batch.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Datagrams longer than `max_packet_size` (dropped).
    pub truncated: u64,
    /// Zero-length datagrams (dropped).
    pub empty: u64,
    /// Datagrams to a destination not in the endpoint list (dropped).
    pub filtered: u64,
}

impl RecvCounts {
    /// Adds `o` to `self`.
    pub fn add(&mut self, o: &RecvCounts) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.truncated += o.truncated;
        self.empty += o.empty;
        self.filtered += o.filtered;
    }
}

/// Outcome of [`UdpReceiver::recv_batch`].
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    /// Some datagrams were received (possibly all dropped as truncated/empty).
    Batch {
        /// Bytes of the slab used (end of the last message written).
        used: usize,
        /// What this call counted.
        counts: RecvCounts,
    },
    /// [`Waker::wake`] was called while waiting.
    Woken,
}

/// One message of a [`UdpReceiver::recv_vectored`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Bytes received (all GRO segments).
    pub len: usize,
    /// GRO segment size (0: one datagram).
    pub gso: usize,
    /// Kernel receive time, ns since the epoch (0: none, as without `timestamps`).
    pub rx_time_ns: u64,
    /// The datagram did not fit the scatter list.
    pub truncated: bool,
    /// The index of its endpoint in the list; `None`: sent to a destination not listed,
    /// to be dropped (the receiver counted it as filtered).
    pub endpoint: Option<usize>,
}

impl SocketConfig {
    /// One endpoint, `address`:`port`, and the defaults otherwise (no multicast
    /// interface, kernel buffer, no reuse, GRO, no timestamps, no busy polling).
    pub fn one(address: SocketAddr) -> Self {
        Self {
            endpoints: vec![Endpoint {
                addr: address.ip(),
                port: address.port(),
                sources: Vec::new(),
            }],
            multicast_iface: None,
            buffer_size: 0,
            reuse: false,
            gro: true,
            timestamps: false,
            busy_poll_us: 0,
        }
    }
}

/// Bound UDP sockets — one per port of the endpoint list, most often one — plus
/// preallocated `recvmmsg` state.
pub struct UdpReceiver {
    /// The sockets (at least one); `sock` is the first, the one most callers know.
    socks: Vec<PortSocket>,
    /// The socket the next batch is read from first; each batch moves it on, so that a
    /// busy port cannot starve the others.
    next: usize,
    /// The socket of the last batch.
    last: usize,
    /// The sockets' pollfds and the waker's, last.
    pollfds: Vec<libc::pollfd>,
    /// Finds the endpoint of a datagram on a socket with several.
    table: EndpointTable,
    /// This batch's per-endpoint counts, and where they go once per batch.
    tally: Tally,
    counters: Arc<EndpointCounters>,
    /// Per message of the last [`UdpReceiver::recv_vectored`]: receive time, GRO size,
    /// endpoint ([`NO_ENDPOINT`]: not listed).
    vec_meta: Vec<(u64, usize, u16)>,
    waker: std::sync::Arc<Waker>,
    max_packet: usize,
    /// Room per message while GRO may coalesce (a whole datagram), and the most
    /// messages per batch then.
    per_msg_gro: usize,
    batch_gro: usize,
    /// Room per message for one datagram.
    per_msg_plain: usize,
    /// The most messages per batch (`batch-size`) and the most bytes one batch may
    /// fill (`batch-bytes`, 0 = no limit).
    batch_max: usize,
    batch_bytes: usize,
    /// The longest datagram of the last batch: one-datagram batches hold as many
    /// datagrams as `batch_bytes` allows of that length (the slab has room for
    /// `batch_max` of `per_msg_plain` each).
    recent_len: usize,
    /// Whether GRO pays for this stream, learned as it arrives.
    adapt: GroAdapt,
    /// A read found the socket queue empty since the last batch was learned from.
    emptied: bool,
    /// The last [`UdpReceiver::recv_batch`] filled every message it had room for: more
    /// is probably queued.
    last_full: bool,
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_SPACE / 8]>,
    /// Where each datagram of the last [`UdpReceiver::recv_batch`] was sent.
    dests: Vec<PacketDest>,
    /// The SO_RXQ_OVFL count last seen on each socket.
    kernel_drops: Vec<u64>,
    /// Receive buffer the kernel granted (as it reports it).
    buffer_granted: usize,
    coalesce: Coalescer,
    /// Longest wait in `poll` before a waiting receive returns an empty batch, in ms
    /// (-1: none; see [`UdpReceiver::set_idle_return`]).
    idle_ms: i32,
}

// SAFETY: the raw pointers inside msgs/iovs point into this struct's own Vecs (or the
// caller's slab during a call); the receiver is used by one thread at a time.
unsafe impl Send for UdpReceiver {}

impl std::fmt::Debug for UdpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpReceiver")
            .field("local", &self.local_addr())
            .field("per_msg", &self.per_msg())
            .field("gro", &self.adapt.mode())
            .finish()
    }
}

/// Why the socket could not be opened, phrased for the user.
#[derive(Debug)]
pub struct OpenError(pub String);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpenError {}

/// `SO_PREFER_BUSY_POLL` (Linux 5.11; not in every libc): busy polling keeps the NIC's
/// interrupts masked while the socket polls, instead of racing them.
const SO_PREFER_BUSY_POLL: i32 = 69;

/// Sets `SO_BUSY_POLL` to `us` (nothing for 0), and asks to prefer busy polling where the
/// kernel has it. A refusal is an error naming the capability and the sysctl.
fn set_busy_poll(sock: &Socket, us: u32) -> Result<(), OpenError> {
    if us == 0 {
        return Ok(());
    }
    let value = i32::try_from(us).unwrap_or(i32::MAX);
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_BUSY_POLL, value).map_err(|e| {
        OpenError(if e.raw_os_error() == Some(libc::EPERM) {
            format!(
                "busy-poll={us}: the kernel refused SO_BUSY_POLL ({e}): raising it above \
                 net.core.busy_read needs CAP_NET_ADMIN; run as root or with that \
                 capability, set `sysctl net.core.busy_read={us}`, or set busy-poll=0"
            )
        } else {
            format!("busy-poll={us}: could not set SO_BUSY_POLL: {e}")
        })
    })?;
    // Older kernels do not know it: busy polling still works, only less eagerly.
    let _ = setsockopt_int(sock, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, 1);
    Ok(())
}

/// Reads an int socket option of `fd`.
fn getsockopt_int(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut value = 0i32;
    let mut len = mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: a valid int and its size for the kernel to write.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut i32).cast(), &mut len) };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket's SO_MEMINFO counters (`SK_MEMINFO_*` indexes), if available.
fn meminfo(sock: &Socket) -> Option<[u32; 16]> {
    let mut info = [0u32; 16];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: info is a writable buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    // The drop counter is the last field the kernel has filled since Linux 4.16.
    (r == 0 && len as usize > SK_MEMINFO_DROPS * 4).then_some(info)
}

/// Index of the drop counter in SO_MEMINFO.
const SK_MEMINFO_DROPS: usize = 8;

/// The kernel's count of datagrams dropped on this socket (SO_MEMINFO), if available.
fn socket_drops(sock: &Socket) -> Option<u64> {
    meminfo(sock).map(|i| u64::from(i[SK_MEMINFO_DROPS]))
}

/// Receive-buffer bytes the socket's queued datagrams are charged (SO_MEMINFO's
/// `rmem_alloc`: each datagram's whole allocation, never less than its payload), if
/// available.
fn queued_bytes(sock: &Socket) -> Option<u64> {
    meminfo(sock).map(|i| u64::from(i[libc::SK_MEMINFO_RMEM_ALLOC as usize]))
}

impl UdpReceiver {
    /// Opens, configures and binds the socket. `max_packet_size` bounds accepted
    /// datagrams; `batch` is the most datagrams (GRO messages) per `recvmmsg`, and
    /// `batch_bytes` (0 = no limit) lowers it so that one batch's slab stays within that
    /// many bytes — see [`UdpReceiver::batch_len`].
    pub fn open(
        cfg: &SocketConfig,
        max_packet_size: usize,
        batch: usize,
        batch_bytes: usize,
    ) -> Result<(Self, OpenReport), OpenError> {
        let mut report = OpenReport::default();
        let socks = open_sockets(cfg, &mut report)?;
        let mut gro = cfg.gro;
        for ps in &socks {
            let sock = &ps.sock;
            sock.set_nonblocking(true)
                .map_err(|e| OpenError(format!("could not make the socket non-blocking: {e}")))?;
            let _ = setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
            if cfg.timestamps {
                let _ = setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
            }
            gro = gro && setsockopt_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
            set_busy_poll(sock, cfg.busy_poll_us)?;
        }
        report.gro = gro;

        let max_packet = max_packet_size.clamp(1, MAX_DATAGRAM);
        // With GRO one message may carry many segments, up to a full 64 KiB datagram;
        // without it one byte more than the limit lets MSG_TRUNC flag oversize datagrams.
        // Which of the two applies is learned from the stream (`groadapt`).
        let per_msg_gro = MAX_DATAGRAM;
        let per_msg_plain = (max_packet + 1).min(MAX_DATAGRAM);
        // Why a byte limit: a downstream element that reads the payload (speaddepay,
        // chunk mode) does so right after the batch arrives. A batch that fits the CPU's
        // L2 cache is still there; 64 GRO messages (4 MiB) are not, and under load that
        // cache miss on every byte cost speaddepay a third of its throughput.
        let limit = |per_msg: usize| {
            if batch_bytes > 0 {
                batch.min(batch_bytes / per_msg)
            } else {
                batch
            }
            .max(1)
        };
        let batch_gro = limit(per_msg_gro);
        let batch_max = batch.max(1);
        let waker = Waker::new().map_err(|e| OpenError(format!("eventfd failed: {e}")))?;
        let mut pollfds: Vec<libc::pollfd> = socks
            .iter()
            .map(|p| libc::pollfd {
                fd: p.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        pollfds.push(waker.pollfd());
        let n_socks = socks.len();
        let rx = Self {
            socks,
            next: 0,
            last: 0,
            pollfds,
            table: EndpointTable::new(&cfg.endpoints),
            tally: Tally::new(cfg.endpoints.len()),
            counters: Arc::new(EndpointCounters::new(&cfg.endpoints)),
            vec_meta: vec![(0, 0, NO_ENDPOINT); batch_max],
            waker: std::sync::Arc::new(waker),
            max_packet,
            per_msg_gro,
            batch_gro,
            per_msg_plain,
            batch_max,
            batch_bytes,
            recent_len: max_packet,
            adapt: GroAdapt::new(report.gro, Instant::now()),
            emptied: false,
            last_full: false,
            // SAFETY: mmsghdr/iovec/sockaddr_storage are plain C structs; zero is valid.
            msgs: vec![unsafe { mem::zeroed() }; batch_max],
            iovs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0
                };
                batch_max
            ],
            // SAFETY: as above.
            names: vec![unsafe { mem::zeroed() }; batch_max],
            cmsgs: vec![[0u64; CMSG_SPACE / 8]; batch_max],
            dests: Vec::with_capacity(batch_max),
            kernel_drops: vec![0; n_socks],
            buffer_granted: report.buffer_granted,
            coalesce: Coalescer::new(0, 0),
            idle_ms: -1,
        };
        Ok((rx, report))
    }

    /// Sets wake-up coalescing (see [`Coalescer`]): when a read after data finds the
    /// queue empty, [`UdpReceiver::recv_batch`] naps up to `max_ns` (0 = never) before
    /// reading again instead of sleeping in `poll`, cut short so that the socket buffer
    /// never fills past a quarter of what the kernel granted.
    pub fn set_coalesce(&mut self, max_ns: u64) {
        self.coalesce = Coalescer::new(max_ns, self.buffer_granted as u64 / 4);
    }

    /// Makes a waiting receive return an empty batch after `after` with nothing to
    /// read (`None`, the default: it waits for data or the waker), so that its caller
    /// can look at something else now and then, such as the interface it receives on.
    pub fn set_idle_return(&mut self, after: Option<std::time::Duration>) {
        self.idle_ms = after.map_or(-1, |d| d.as_millis().clamp(1, i32::MAX as u128) as i32);
    }

    /// The most datagrams (GRO messages) one batch receives now: few 64 KiB messages
    /// while GRO may coalesce; else as many datagrams of the last batch's longest as
    /// `batch-bytes` holds, at most `batch-size`.
    pub fn batch_len(&self) -> usize {
        if self.adapt.coalescing() {
            self.batch_gro
        } else if self.batch_bytes > 0 {
            (self.batch_bytes / self.recent_len.max(1)).clamp(1, self.batch_max)
        } else {
            self.batch_max
        }
    }

    /// The most messages a batch may ever hold, whichever way messages are sized: what
    /// a caller of [`UdpReceiver::recv_vectored`] sizes its scatter lists for.
    pub fn max_batch_len(&self) -> usize {
        self.msgs.len()
    }

    /// Bytes of slab one full batch needs, whichever way messages are sized.
    pub fn slab_size(&self) -> usize {
        let plain = self.per_msg_plain * self.batch_max;
        if self.adapt.mode() == GroMode::Never {
            plain
        } else {
            plain.max(self.per_msg_gro * self.batch_gro)
        }
    }

    /// Bytes of slab the next batch should have: a whole batch's room
    /// ([`UdpReceiver::batch_len`] messages) after a batch that filled its room, since
    /// more is probably queued; else one message's. A caller that fills successive
    /// batches into one slot takes a fresh slot below this, so that what is queued comes
    /// in one `recvmmsg`, not in the crumbs of the last slot (a 9217-byte stride left
    /// fhudpsrc's batches at 18–21 datagrams where the batching floor takes 64).
    pub fn next_slab(&self) -> usize {
        if self.last_full {
            self.per_msg() * self.batch_len()
        } else {
            self.per_msg()
        }
    }

    /// Bytes of slab one datagram (or GRO message) needs now: a slab smaller than this
    /// cannot receive.
    pub fn per_msg(&self) -> usize {
        if self.adapt.coalescing() {
            self.per_msg_gro
        } else {
            self.per_msg_plain
        }
    }

    /// Waits until a datagram is queued (false) or the waker fired (true).
    pub fn wait(&mut self) -> io::Result<bool> {
        self.wait_readable()
    }

    /// The socket's `SO_BUSY_POLL`, in µs, as the kernel holds it.
    pub fn busy_poll_us(&self) -> io::Result<i32> {
        getsockopt_int(
            self.socks[0].sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
        )
    }

    /// The bound address (of the first socket, where the list has several ports).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.socks[0]
            .sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
    }

    /// How many sockets receive the endpoint list (one per port and IP family).
    pub fn sockets(&self) -> usize {
        self.socks.len()
    }

    /// Packets and bytes per endpoint so far, in the list's order (updated once per
    /// receive call); share it with whatever shows the stats.
    pub fn endpoint_counters(&self) -> Arc<EndpointCounters> {
        self.counters.clone()
    }

    /// The waker that interrupts a wait in [`UdpReceiver::recv_batch`].
    pub fn waker(&self) -> std::sync::Arc<Waker> {
        self.waker.clone()
    }

    /// Datagrams the kernel dropped on this socket since it was opened.
    pub fn kernel_drops(&self) -> u64 {
        self.socks
            .iter()
            .zip(&self.kernel_drops)
            .map(|(p, &seen)| socket_drops(&p.sock).unwrap_or(0).max(seen))
            .sum()
    }

    /// Receives up to one batch into `slab`, appending one [`PacketInfo`] per datagram
    /// (per GRO segment) to `out`. Waits for data (interruptibly) if `wait` is true and
    /// none is queued; returns an empty batch if `wait` is false and none is queued.
    pub fn recv_batch(
        &mut self,
        slab: &mut [u8],
        out: &mut Vec<PacketInfo>,
        wait: bool,
    ) -> io::Result<Recv> {
        let per_msg = self.per_msg();
        let vlen = (slab.len() / per_msg).min(self.batch_len());
        if vlen == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "slab of {} bytes holds no datagram of {per_msg}",
                    slab.len()
                ),
            ));
        }
        for i in 0..vlen {
            self.iovs[i] = libc::iovec {
                // SAFETY: i * per_msg + per_msg <= slab.len(), so the pointer stays in bounds.
                iov_base: unsafe { slab.as_mut_ptr().add(i * per_msg) }.cast(),
                iov_len: per_msg,
            };
            let iov: *mut libc::iovec = &mut self.iovs[i];
            self.prepare(i, iov, 1);
        }
        let n = match self.recvmmsg_wait(vlen, wait)? {
            Some(n) => n,
            None => return Ok(Recv::Woken),
        };
        if n == 0 {
            // The queue is empty: what was coalesced before a switch is all read.
            self.emptied = false;
            self.learn(0, 0, true);
            return Ok(Recv::Batch {
                used: 0,
                counts: RecvCounts::default(),
            });
        }
        self.dests.clear();
        let mut counts = RecvCounts::default();
        let mut used = 0;
        let mut coalesced = 0;
        let mut batch_time = 0;
        for i in 0..n {
            let base = i * per_msg;
            let len = self.msgs[i].msg_len as usize;
            used = base + len;
            let (mut rx_time_ns, gso, to) = self.parse_cmsgs(i);
            if rx_time_ns == 0 {
                // No kernel timestamp (not asked for: they cost every datagram a clock
                // read and a control message): when this batch was read, one clock
                // read per batch, as the bypass sources stamp theirs.
                if batch_time == 0 {
                    batch_time = firehose_core::batch::unix_ns();
                }
                rx_time_ns = batch_time;
            }
            let src = self.source(i);
            let ps = &self.socks[self.last];
            let dest = PacketDest {
                dst: to
                    .or(ps.bound)
                    .map(|ip| SocketAddr::new(ip, ps.port).into())
                    .unwrap_or_default(),
                header_len: 0,
            };
            let endpoint = self.endpoint_of(to);
            if endpoint == NO_ENDPOINT {
                counts.filtered += segments(len, gso);
                continue;
            }
            self.tally
                .add(usize::from(endpoint), segments(len, gso), len as u64);
            if self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                counts.truncated += 1;
                continue;
            }
            if len == 0 {
                counts.empty += 1;
                continue;
            }
            let seg = if gso > 0 { gso } else { len };
            coalesced += usize::from(len > seg);
            if seg > self.max_packet {
                counts.truncated += len.div_ceil(seg) as u64;
                continue;
            }
            let mut off = 0;
            while off < len {
                let l = seg.min(len - off);
                out.push(PacketInfo {
                    offset: (base + off) as u32,
                    len: l as u32,
                    rx_time_ns,
                    src,
                });
                self.dests.push(dest);
                off += l;
                counts.packets += 1;
            }
            counts.bytes += len as u64;
        }
        self.coalesce.received(counts.bytes, n as u64);
        self.counters.add(&mut self.tally);
        self.last_full = n == vlen;
        self.learn_batch(n, coalesced, n < vlen);
        Ok(Recv::Batch { used, counts })
    }

    /// The endpoint of a datagram on the socket of the last batch, sent to `to` (from
    /// `IP_PKTINFO`): the socket's own when it has one, else the table's;
    /// [`NO_ENDPOINT`] when it is not listed.
    fn endpoint_of(&self, to: Option<IpAddr>) -> u16 {
        let ps = &self.socks[self.last];
        if let Some(e) = ps.endpoint {
            return e;
        }
        to.and_then(|ip| self.table.find(ip, ps.port))
            .map_or(NO_ENDPOINT, |i| i as u16)
    }

    /// Feeds one batch of `messages` (`coalesced` of them holding several datagrams;
    /// `short`: fewer than the batch had room for) to the GRO adaptation and applies
    /// what it decides. [`UdpReceiver::recv_batch`] does this itself; a caller of
    /// [`UdpReceiver::recv_vectored`] does it after reading the messages.
    /// It also sizes the next batches (see [`UdpReceiver::batch_len`]) for datagrams
    /// as long as this batch's longest, when none was coalesced: both ways of receiving
    /// learn it (until 2026-11-26 only `recv_batch` did, and the landing sources took at
    /// most `batch-bytes` ÷ `max-packet-size` datagrams per receive, 28 by default,
    /// whatever their length).
    pub fn learn_batch(&mut self, messages: usize, coalesced: usize, short: bool) {
        if coalesced == 0 && messages > 0 {
            let longest = self.msgs[..messages]
                .iter()
                .map(|m| m.msg_len as usize)
                .max()
                .unwrap_or(0);
            self.recent_len = longest.clamp(1, self.max_packet);
        }
        let drained = short || std::mem::take(&mut self.emptied);
        self.learn(messages, coalesced, drained);
    }

    fn learn(&mut self, messages: usize, coalesced: usize, drained: bool) {
        if self.adapt.mode() == GroMode::Draining {
            // What this batch read counts towards what was queued at the switch.
            let bytes = self.msgs[..messages]
                .iter()
                .map(|m| u64::from(m.msg_len))
                .sum();
            self.adapt.read(bytes);
        }
        let action = self
            .adapt
            .after_batch(messages, coalesced, drained, Instant::now);
        let on = match action {
            GroAction::Keep => return,
            GroAction::TurnOff => 0,
            GroAction::TurnOn => 1,
        };
        let ok = self
            .socks
            .iter()
            .all(|p| setsockopt_int(&p.sock, libc::SOL_UDP, libc::UDP_GRO, on).is_ok());
        self.adapt.switched(action, ok, Instant::now());
        if ok && action == GroAction::TurnOff {
            // Only what is queued now can be coalesced: once that much payload has been
            // read, the rest came after the switch, one datagram per message, even if
            // the queue never runs empty (a receiver that is behind, or throttled).
            let queued: Option<u64> = self.socks.iter().map(|p| queued_bytes(&p.sock)).sum();
            if let Some(queued) = queued {
                self.adapt.queued_at_switch(queued);
            }
        }
    }

    /// The GRO adaptation's mode (see [`crate::groadapt`]).
    pub fn gro_mode(&self) -> GroMode {
        self.adapt.mode()
    }

    /// Replaces the GRO adaptation's thresholds (tests: a quicker switch and probe).
    #[doc(hidden)]
    pub fn set_gro_limits(&mut self, plain_after: u64, probe_every: std::time::Duration) {
        let gro = self.adapt.mode() != GroMode::Never;
        self.adapt = GroAdapt::with_limits(gro, Instant::now(), plain_after, probe_every);
    }

    /// Sets up message `i` of the next `recvmmsg`: its scatter list (`iovlen` entries at
    /// `iov`), and our own name and control buffers.
    fn prepare(&mut self, i: usize, iov: *mut libc::iovec, iovlen: usize) {
        let h = &mut self.msgs[i].msg_hdr;
        h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = iov;
        h.msg_iovlen = iovlen;
        h.msg_control = self.cmsgs[i].as_mut_ptr().cast();
        h.msg_controllen = CMSG_SPACE;
        h.msg_flags = 0;
        self.msgs[i].msg_len = 0;
    }

    /// Runs `recvmmsg` on `msgs[..vlen]` (set up by the caller), on each socket in turn
    /// from the one after the last batch's: the number of messages received (from
    /// socket `self.last`), 0 when none is queued on any and `wait` is false, `None` when
    /// the waker fired.
    fn recvmmsg_wait(&mut self, vlen: usize, wait: bool) -> io::Result<Option<usize>> {
        let mut waited = false;
        loop {
            let k = self.socks.len();
            for t in 0..k {
                let idx = (self.next + t) % k;
                if let Some(n) = self.recvmmsg_on(idx, vlen)? {
                    self.last = idx;
                    self.next = (idx + 1) % k;
                    return Ok(Some(n));
                }
            }
            self.emptied = true;
            // Nothing after a wait bounded by set_idle_return: the caller looks.
            if !wait || (waited && self.idle_ms >= 0) {
                return Ok(Some(0));
            }
            if self.wait_for_data()? {
                return Ok(None);
            }
            waited = true;
        }
    }

    /// One `recvmmsg` on socket `idx`: the number of messages, `None` when its queue is
    /// empty.
    fn recvmmsg_on(&mut self, idx: usize, vlen: usize) -> io::Result<Option<usize>> {
        let fd = self.socks[idx].sock.as_raw_fd();
        loop {
            // SAFETY: the caller set msgs[..vlen] to point at live iovecs of the declared
            // lengths and at our own name and control buffers, all of the declared sizes.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    vlen as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r > 0 {
                return Ok(Some(r as usize));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                // An ICMP error queued on the socket (e.g. from a connected peer): the
                // datagrams themselves are fine, try again.
                Some(libc::ECONNREFUSED) => continue,
                _ => return Err(err),
            }
        }
    }

    /// Waits after a read found the socket queue empty: a nap of up to `coalesce-us`
    /// while a stream is coming in (wake-up coalescing, see
    /// [`UdpReceiver::set_coalesce`]), in `poll` otherwise. True when the waker fired.
    /// The receive calls wait this way themselves; a caller that receives without
    /// waiting (to stamp what it receives with the time it was read) waits with this.
    pub fn wait_for_data(&mut self) -> io::Result<bool> {
        if let Some(ns) = self.coalesce.on_empty(Instant::now()) {
            return nap(&self.waker, ns);
        }
        let woken = self.wait_readable()?;
        self.coalesce.woke(Instant::now());
        Ok(woken)
    }

    /// Receives up to `lens.len()` messages (GRO: each up to [`MAX_DATAGRAM`] bytes of
    /// segments) into caller-provided scatter lists: message `i` fills
    /// `iovs[i * stride ..][..lens[i]]` in order. Waits like [`UdpReceiver::recv_batch`].
    /// Returns the number of messages (0: none queued and `wait` false; `None`: woken);
    /// read each with [`UdpReceiver::message`].
    ///
    /// The iovecs must point at memory that stays valid and unaliased for the call; the
    /// lists must be long enough for a whole message, or it is flagged truncated. Each
    /// list is as long as it needs to be, not `stride`: the kernel imports every entry.
    pub fn recv_vectored(
        &mut self,
        iovs: &mut [libc::iovec],
        stride: usize,
        lens: &[usize],
        wait: bool,
    ) -> io::Result<Option<usize>> {
        let vlen = lens.len().min(self.msgs.len());
        let fits = lens[..vlen]
            .iter()
            .enumerate()
            .all(|(i, &n)| n <= stride && (i + 1) * stride <= iovs.len());
        if vlen == 0 || !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no scatter list to receive into, or one longer than its room",
            ));
        }
        for (i, &n) in lens[..vlen].iter().enumerate() {
            self.prepare(i, iovs[i * stride..].as_mut_ptr(), n);
        }
        let n = self.recvmmsg_wait(vlen, wait)?;
        if let Some(n) = n {
            let bytes = (0..n).map(|i| u64::from(self.msgs[i].msg_len)).sum();
            self.coalesce.received(bytes, n as u64);
            for i in 0..n {
                let (ts, gso, to) = self.parse_cmsgs(i);
                let endpoint = self.endpoint_of(to);
                let len = self.msgs[i].msg_len as usize;
                // Unlisted ones are the caller's to drop and count ([`Message::endpoint`]).
                if endpoint != NO_ENDPOINT {
                    self.tally
                        .add(usize::from(endpoint), segments(len, gso), len as u64);
                }
                self.vec_meta[i] = (ts, gso, endpoint);
            }
            self.counters.add(&mut self.tally);
        }
        Ok(n)
    }

    /// Message `i` of the last [`UdpReceiver::recv_vectored`]: its length, GRO segment
    /// size, receive time and whether the kernel truncated it.
    pub fn message(&self, i: usize) -> Message {
        let (rx_time_ns, gso, endpoint) = self.vec_meta[i];
        Message {
            len: self.msgs[i].msg_len as usize,
            gso,
            rx_time_ns,
            truncated: self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            endpoint: (endpoint != NO_ENDPOINT).then_some(usize::from(endpoint)),
        }
    }

    /// The largest datagram accepted (`max_packet_size`).
    pub fn max_packet(&self) -> usize {
        self.max_packet
    }

    /// Whether UDP GRO is on: a message may carry many datagrams.
    pub fn gro(&self) -> bool {
        self.adapt.coalescing()
    }

    /// Waits until the socket is readable (false) or the waker fired (true); a signal
    /// also returns false, and the caller's next read finds out.
    fn wait_readable(&mut self) -> io::Result<bool> {
        for p in &mut self.pollfds {
            p.revents = 0;
        }
        wait_readable_set(&mut self.pollfds, self.idle_ms)
    }

    /// Where each datagram of the last [`UdpReceiver::recv_batch`] was sent (from
    /// `IP_PKTINFO`, else the bound address), one entry per datagram it appended; the
    /// entries of a [`PacketDestMeta`](firehose_core::meta::dest::PacketDestMeta).
    pub fn take_dests(&mut self) -> Vec<PacketDest> {
        std::mem::replace(&mut self.dests, Vec::with_capacity(self.batch_max))
    }

    /// Receive time (ns since the epoch, 0 if absent), GRO segment size (0 if none) and
    /// destination address (`None` if absent) of message `i`; also tracks the kernel
    /// drop counter.
    fn parse_cmsgs(&mut self, i: usize) -> (u64, usize, Option<IpAddr>) {
        let (mut ts, mut gso, mut to) = (0u64, 0usize, None);
        let hdr = &self.msgs[i].msg_hdr;
        // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, bounded by
        // msg_controllen; each payload is read unaligned with its documented type.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                        let t = std::ptr::read_unaligned(data as *const libc::timespec);
                        ts = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
                    }
                    (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                        let d = std::ptr::read_unaligned(data as *const u32);
                        let seen = &mut self.kernel_drops[self.last];
                        *seen = (*seen).max(u64::from(d));
                    }
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        gso = std::ptr::read_unaligned(data as *const i32).max(0) as usize;
                    }
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data as *const libc::in_pktinfo);
                        let a = Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr));
                        to = Some(IpAddr::V4(a));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data as *const libc::in6_pktinfo);
                        let a = Ipv6Addr::from(p.ipi6_addr.s6_addr);
                        // An IPv4 datagram on an IPv6 socket: its IPv4 form.
                        to = Some(a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        (ts, gso, to)
    }

    fn source(&self, i: usize) -> PacketAddr {
        let ss = &self.names[i];
        // SAFETY: the kernel wrote a sockaddr of the family it names into the storage,
        // which is large enough and aligned for either.
        unsafe {
            match i32::from(ss.ss_family) {
                libc::AF_INET => {
                    let sin = &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in);
                    SocketAddr::new(
                        IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                        u16::from_be(sin.sin_port),
                    )
                    .into()
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in6);
                    SocketAddr::new(
                        IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                        u16::from_be(sin6.sin6_port),
                    )
                    .into()
                }
                _ => PacketAddr::default(),
            }
        }
    }
}

/// Kernel UDP as a transport: one `recvmmsg` batch per receive.
impl firehose_core::transport::Transport for UdpReceiver {
    fn batch_bytes(&self) -> usize {
        self.slab_size()
    }

    fn receive(
        &mut self,
        slot: &mut [u8],
        packets: &mut Vec<PacketInfo>,
        wait: bool,
    ) -> io::Result<firehose_core::transport::Received> {
        use firehose_core::transport::Received;
        let before = packets.len();
        Ok(match self.recv_batch(slot, packets, wait)? {
            Recv::Woken => Received::Interrupted,
            Recv::Batch { used, .. } if packets.len() > before => Received::Batch { used },
            Recv::Batch { .. } => Received::Nothing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    /// A loopback socket on any port, with a 1 MiB receive buffer.
    fn loopback(gro: bool, timestamps: bool) -> SocketConfig {
        SocketConfig {
            buffer_size: 1 << 20,
            gro,
            timestamps,
            ..SocketConfig::one("127.0.0.1:0".parse().unwrap())
        }
    }

    #[test]
    fn busy_poll_is_set_on_the_socket_or_refused_naming_cap_net_admin() {
        let off = UdpReceiver::open(&loopback(false, false), 1500, 8, 0)
            .unwrap()
            .0;
        assert_eq!(off.busy_poll_us().unwrap(), 0);
        let cfg = SocketConfig {
            busy_poll_us: 50,
            ..loopback(false, false)
        };
        match UdpReceiver::open(&cfg, 1500, 8, 0) {
            Ok((rx, _)) => assert_eq!(rx.busy_poll_us().unwrap(), 50),
            Err(e) => assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}"),
        }
    }

    fn open(gro: bool, max: usize) -> UdpReceiver {
        UdpReceiver::open(&loopback(gro, true), max, 8, 0)
            .unwrap()
            .0
    }

    #[test]
    fn batch_bytes_caps_the_batch_at_whole_messages() {
        let cfg = |gro| loopback(gro, false);
        // GRO messages take a whole datagram's room each: 256 KiB holds 4 of 64 KiB.
        let (rx, report) = UdpReceiver::open(&cfg(true), 9000, 64, 256 << 10).unwrap();
        assert!(report.gro, "loopback grants UDP_GRO");
        assert_eq!(rx.batch_len(), 4);
        // The slab also has room for a batch of 64 single datagrams of up to 9000 bytes,
        // for when the stream turns out not to coalesce.
        assert_eq!(rx.slab_size(), 64 * 9001);
        // 0 = no limit; a limit below one message still receives one.
        assert_eq!(
            UdpReceiver::open(&cfg(true), 9000, 64, 0)
                .unwrap()
                .0
                .batch_len(),
            64
        );
        assert_eq!(
            UdpReceiver::open(&cfg(true), 9000, 64, 1)
                .unwrap()
                .0
                .batch_len(),
            1
        );
        // Without GRO a message is one datagram: 256 KiB / 9001 B = 29 of 9000-byte ones,
        // and the count limit still applies to small ones.
        assert_eq!(
            UdpReceiver::open(&cfg(false), 9000, 64, 256 << 10)
                .unwrap()
                .0
                .batch_len(),
            29
        );
        assert_eq!(
            UdpReceiver::open(&cfg(false), 1472, 64, 256 << 10)
                .unwrap()
                .0
                .batch_len(),
            64
        );
    }

    #[test]
    fn one_datagram_batches_hold_what_batch_bytes_allows_of_the_datagrams_seen() {
        // Room for 64 datagrams of up to 9000 bytes; until one is seen, 256 KiB holds
        // 29 of the longest allowed.
        let (mut rx, _) = UdpReceiver::open(&loopback(false, false), 9000, 64, 256 << 10).unwrap();
        assert_eq!(rx.slab_size(), 64 * 9001);
        assert_eq!(rx.batch_len(), 29);
        let port = rx.local_addr().unwrap().port();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut slab = vec![0u8; rx.slab_size()];
        let mut receive = |rx: &mut UdpReceiver, size: usize, n: usize| {
            for _ in 0..n {
                s.send_to(&vec![7u8; size], ("127.0.0.1", port)).unwrap();
            }
            let mut got = 0;
            while got < n {
                let mut out = Vec::new();
                rx.recv_batch(&mut slab, &mut out, true).unwrap();
                assert!(out.iter().all(|p| p.len as usize == size));
                got += out.len();
            }
        };
        // 1472-byte datagrams: 256 KiB holds 178 of them, batch-size caps at 64.
        receive(&mut rx, 1472, 10);
        assert_eq!(rx.batch_len(), 64);
        // 8000-byte ones: 32; nothing is cut on the way.
        receive(&mut rx, 8000, 5);
        assert_eq!(rx.batch_len(), 32);
    }

    #[test]
    fn vectored_receives_learn_the_datagram_length_too() {
        // As above, through recv_vectored + learn_batch (the landing sources' way).
        let (mut rx, _) = UdpReceiver::open(&loopback(false, false), 9000, 64, 256 << 10).unwrap();
        assert_eq!(rx.batch_len(), 29);
        let port = rx.local_addr().unwrap().port();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..10 {
            s.send_to(&[7u8; 1472], ("127.0.0.1", port)).unwrap();
        }
        let mut room = vec![0u8; 64 * 9001];
        let mut iovs: Vec<libc::iovec> = room
            .chunks_mut(9001)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            })
            .collect();
        let lens = [1usize; 64];
        let mut got = 0;
        while got < 10 {
            let vlen = rx.batch_len();
            let n = rx
                .recv_vectored(&mut iovs, 1, &lens[..vlen], true)
                .unwrap()
                .unwrap();
            assert!((0..n).all(|i| rx.message(i).len == 1472));
            rx.learn_batch(n, 0, n < vlen);
            got += n;
        }
        assert_eq!(got, 10);
        assert_eq!(rx.batch_len(), 64);
    }

    #[test]
    fn empty_socket_without_wait_returns_an_empty_batch() {
        let mut rx = open(true, 1500);
        let mut slab = vec![0u8; rx.slab_size()];
        let mut out = Vec::new();
        let r = rx.recv_batch(&mut slab, &mut out, false).unwrap();
        assert_eq!(
            r,
            Recv::Batch {
                used: 0,
                counts: RecvCounts::default()
            }
        );
    }

    #[test]
    fn one_socket_per_port_whatever_the_number_of_addresses() {
        // Three addresses on one port and one on another: two sockets, and what each
        // datagram was sent to found from its destination.
        let p1 = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p2 = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let list = format!("127.0.0.1+2:{p1},127.0.0.1:{p2}");
        let cfg = SocketConfig {
            endpoints: firehose_core::endpoint::parse_list(&list, 0, &[]).unwrap(),
            ..loopback(false, false)
        };
        let mut rx = UdpReceiver::open(&cfg, 1500, 8, 0).unwrap().0;
        assert_eq!(rx.sockets(), 2);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for (to, port) in [("127.0.0.3", p1), ("127.0.0.1", p2), ("127.0.0.9", p1)] {
            tx.send_to(b"x", (to, port)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut slab = vec![0u8; rx.slab_size()];
        let (mut out, mut counts) = (Vec::new(), RecvCounts::default());
        for _ in 0..4 {
            if let Ok(Recv::Batch { counts: c, .. }) = rx.recv_batch(&mut slab, &mut out, false) {
                counts.add(&c);
            }
        }
        assert_eq!(
            (counts.packets, counts.filtered),
            (2, 1),
            "127.0.0.9 is not listed"
        );
        let per: Vec<u64> = rx
            .endpoint_counters()
            .snapshot()
            .iter()
            .map(|e| e.1)
            .collect();
        assert_eq!(per, [0, 0, 1, 1]);
    }

    #[test]
    fn after_a_full_batch_the_next_wants_a_whole_batchs_room() {
        // No GRO: one datagram per message, 8 messages per batch.
        let mut rx = open(false, 1500);
        assert_eq!(rx.next_slab(), rx.per_msg(), "nothing read yet");
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..12 {
            tx.send_to(&[7u8; 100], to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut slab = vec![0u8; rx.slab_size()];
        let mut out = Vec::new();
        rx.recv_batch(&mut slab, &mut out, false).unwrap();
        assert_eq!(out.len(), 8, "a full batch");
        assert_eq!(rx.next_slab(), rx.per_msg() * rx.batch_len());
        assert!(
            rx.next_slab() <= rx.slab_size(),
            "a fresh slot always has room"
        );
        out.clear();
        rx.recv_batch(&mut slab, &mut out, false).unwrap();
        assert_eq!(out.len(), 4, "the rest, a short batch");
        assert_eq!(rx.next_slab(), rx.per_msg());
    }

    #[test]
    fn waker_interrupts_a_wait() {
        let mut rx = open(true, 1500);
        let w = rx.waker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.wake();
        });
        let mut slab = vec![0u8; rx.slab_size()];
        let r = rx.recv_batch(&mut slab, &mut Vec::new(), true).unwrap();
        assert_eq!(r, Recv::Woken);
        t.join().unwrap();
        rx.waker().clear();
    }

    #[test]
    fn each_datagram_says_where_it_was_sent() {
        // A wildcard bind receives what is sent to any loopback address; IP_PKTINFO
        // says which one each datagram went to.
        for (bind, sent_to) in [
            ("0.0.0.0", ["127.0.0.3", "127.0.0.9"]),
            ("::", ["127.0.0.4", "::1"]),
            ("127.0.0.1", ["127.0.0.1", "127.0.0.1"]),
        ] {
            let cfg = SocketConfig {
                endpoints: SocketConfig::one(SocketAddr::new(bind.parse().unwrap(), 0)).endpoints,
                ..loopback(false, false)
            };
            let mut rx = UdpReceiver::open(&cfg, 1500, 8, 0).unwrap().0;
            let port = rx.local_addr().unwrap().port();
            for to in sent_to {
                let ip: IpAddr = to.parse().unwrap();
                let s = UdpSocket::bind(if ip.is_ipv6() {
                    "[::1]:0"
                } else {
                    "127.0.0.1:0"
                })
                .unwrap();
                s.send_to(b"where", (ip, port)).unwrap();
            }
            let mut slab = vec![0u8; rx.slab_size()];
            let mut out = Vec::new();
            let mut dests = Vec::new();
            while out.len() < 2 {
                if let Recv::Batch { .. } = rx.recv_batch(&mut slab, &mut out, true).unwrap() {
                    dests.extend(rx.take_dests());
                }
            }
            let got: Vec<SocketAddr> = dests.iter().map(|d| d.dst.to_socket_addr()).collect();
            let want: Vec<SocketAddr> = sent_to
                .iter()
                .map(|t| SocketAddr::new(t.parse().unwrap(), port))
                .collect();
            assert_eq!(got, want, "bound to {bind}");
            assert!(dests.iter().all(|d| d.header_len == 0));
        }
    }

    #[test]
    fn batch_offsets_point_at_each_datagram() {
        let mut rx = open(false, 1500);
        let port = rx.local_addr().unwrap().port();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..5u8 {
            s.send_to(&vec![i; 10 + usize::from(i)], ("127.0.0.1", port))
                .unwrap();
        }
        let mut slab = vec![0u8; rx.slab_size()];
        let mut out = Vec::new();
        let mut total = RecvCounts::default();
        while out.len() < 5 {
            if let Recv::Batch { counts, .. } = rx.recv_batch(&mut slab, &mut out, true).unwrap() {
                total.add(&counts);
                for (k, p) in out.iter().enumerate() {
                    assert_eq!(&slab[p.range()], &vec![k as u8; 10 + k][..]);
                }
            }
        }
        assert_eq!(total.packets, 5);
        assert_eq!(total.bytes, (10..15).sum::<u64>());
        assert!(out.iter().all(|p| p.rx_time_ns > 0));
    }

    #[test]
    fn a_grown_buffer_is_granted_and_reported() {
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        let got = grow_recv_buffer(&s, 1 << 20);
        assert!(got >= 4096, "granted {got}");
        if has_net_admin() {
            assert!(
                got >= 1 << 20,
                "CAP_NET_ADMIN is granted past rmem_max: {got}"
            );
        }
    }

    /// Whether this process has CAP_NET_ADMIN (bit 12 of its effective set).
    fn has_net_admin() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 12) != 0)
    }

    /// Receives `n` datagrams sent one every 200 µs by another thread; returns how many
    /// batches they came in and how long the sender took (longer than 40 ms on a loaded
    /// machine). Panics unless each arrives once, in order.
    fn trickle(rx: &mut UdpReceiver, n: u16) -> (usize, Duration) {
        let port = rx.local_addr().unwrap().port();
        let sender = std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let t0 = std::time::Instant::now();
            for i in 0..n {
                s.send_to(&i.to_be_bytes(), ("127.0.0.1", port)).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
            t0.elapsed()
        });
        let mut slab = vec![0u8; rx.slab_size()];
        let (mut got, mut batches) = (0u16, 0);
        while got < n {
            let mut out = Vec::new();
            if let Recv::Batch { .. } = rx.recv_batch(&mut slab, &mut out, true).unwrap() {
                batches += usize::from(!out.is_empty());
                for p in &out {
                    assert_eq!(&slab[p.range()], &got.to_be_bytes());
                    got += 1;
                }
            }
        }
        (batches, sender.join().unwrap())
    }

    #[test]
    fn coalescing_takes_a_trickle_in_fewer_batches_and_loses_nothing() {
        let mut rx = open(false, 1500);
        // The batch holds 8 datagrams: with 2 ms naps (10 datagrams' worth) most
        // batches come full; without, each datagram wakes the receiver on its own.
        rx.set_coalesce(2_000_000);
        // Each batch is full or waited its 2 ms, so a sender that took `span` allows at
        // most n/8 + span/2 ms + 2 batches. A loaded machine stretches the sender's
        // naps; where that leaves the bound too loose to tell coalescing from waking per
        // datagram (over 3/4 of n), the trickle is sent again.
        let n = 200;
        let mut tries = Vec::new();
        for _ in 0..4 {
            let (batches, span) = trickle(&mut rx, n);
            let bound = usize::from(n) / 8 + (span.as_micros() / 2000) as usize + 2;
            tries.push((batches, bound));
            if bound < usize::from(n) * 3 / 4 {
                assert!(
                    batches <= bound,
                    "{batches} batches for {n} datagrams sent over {span:?}"
                );
                rx.set_coalesce(0);
                let _ = trickle(&mut rx, 50);
                return;
            }
        }
        panic!("the sender never trickled at its pace (batches, bound): {tries:?}");
    }

    /// Sends `payload` as one UDP GSO send of `seg`-byte segments.
    fn send_gso(s: &UdpSocket, port: u16, payload: &[u8], seg: u16) {
        let v = i32::from(seg);
        // SAFETY: valid int option on our own socket.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&v as *const i32).cast(),
                4,
            )
        };
        assert_eq!(r, 0, "UDP_SEGMENT: {}", io::Error::last_os_error());
        s.send_to(payload, ("127.0.0.1", port)).unwrap();
    }

    /// Receives until `n` datagrams came; checks each is `want(k)`; returns the largest
    /// batch seen and whether any message held coalesced datagrams.
    fn receive_checked(
        rx: &mut UdpReceiver,
        slab: &mut [u8],
        n: usize,
        want: impl Fn(usize) -> Vec<u8>,
    ) -> usize {
        let (mut got, mut largest) = (0, 0);
        while got < n {
            let mut out = Vec::new();
            match rx.recv_batch(slab, &mut out, true).unwrap() {
                Recv::Batch { counts, .. } => {
                    assert_eq!(counts.truncated, 0, "nothing truncated by a switch");
                    largest = largest.max(out.len());
                    for p in &out {
                        let (have, want) = (&slab[p.range()], want(got));
                        assert!(
                            have == &want[..],
                            "datagram {got}: {} bytes, want {}, mode {:?}",
                            have.len(),
                            want.len(),
                            rx.gro_mode()
                        );
                        got += 1;
                    }
                }
                Recv::Woken => panic!("not woken"),
            }
        }
        assert_eq!(got, n, "no datagram more than sent");
        largest
    }

    #[test]
    fn a_plain_stream_turns_gro_off_and_fills_batches() {
        // 64 messages per batch at most, 256 KiB: 4 GRO messages or 64 datagrams of 1472.
        let (mut rx, report) =
            UdpReceiver::open(&loopback(true, true), 1472, 64, 256 << 10).unwrap();
        assert!(report.gro);
        // A probe interval long enough that a loaded machine cannot reach it before the
        // checks of the "off" state below are done.
        rx.set_gro_limits(64, Duration::from_millis(1500));
        assert_eq!(rx.batch_len(), 4);
        // The slab holds a full batch of either kind (4 × 64 KiB > 64 × 1473 B).
        assert_eq!(rx.slab_size(), 4 * MAX_DATAGRAM);
        let mut slab = vec![0u8; rx.slab_size()];
        let port = rx.local_addr().unwrap().port();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let datagram = |k: usize| vec![(k % 251) as u8; 1472];
        // Plain datagrams, a few at a time: after 64 of them GRO goes off.
        let mut k = 0;
        for _ in 0..40 {
            for _ in 0..8 {
                s.send_to(&datagram(k), ("127.0.0.1", port)).unwrap();
                k += 1;
            }
            let base = k - 8;
            receive_checked(&mut rx, &mut slab, 8, |i| datagram(base + i));
        }
        // GRO went off when the queue held nothing: no message can be coalesced, so the
        // next batch is sized for single datagrams already.
        assert_eq!(rx.gro_mode(), GroMode::Off);
        let empty = rx.recv_batch(&mut slab, &mut Vec::new(), false).unwrap();
        assert!(matches!(empty, Recv::Batch { used: 0, .. }));
        assert_eq!(rx.gro_mode(), GroMode::Off);
        assert!(!rx.gro());
        assert_eq!(rx.batch_len(), 64);
        // A burst now comes in batches of up to 64, not 4.
        for _ in 0..200 {
            s.send_to(&datagram(k), ("127.0.0.1", port)).unwrap();
            k += 1;
        }
        let base = k - 200;
        let largest = receive_checked(&mut rx, &mut slab, 200, |i| datagram(base + i));
        assert!(largest > 4, "batches of {largest}");
        // A GSO sender while GRO is off: the kernel splits its super-packets, nothing
        // is truncated.
        // (Its own socket: UDP_SEGMENT stays set on a socket for every later send.)
        let gso = UdpSocket::bind("127.0.0.1:0").unwrap();
        let seg = |k: usize| vec![(k % 7) as u8 + 100; 1000];
        let burst: Vec<u8> = (0..20).flat_map(seg).collect();
        send_gso(&gso, port, &burst, 1000);
        receive_checked(&mut rx, &mut slab, 20, seg);
        // After the probe interval GRO is on again, and the GSO stream is taken coalesced
        // and split, each segment intact.
        std::thread::sleep(Duration::from_millis(1550));
        s.send_to(&datagram(0), ("127.0.0.1", port)).unwrap();
        receive_checked(&mut rx, &mut slab, 1, datagram);
        assert_eq!(rx.gro_mode(), GroMode::On);
        assert_eq!(rx.batch_len(), 4);
        for _ in 0..5 {
            send_gso(&gso, port, &burst, 1000);
        }
        receive_checked(&mut rx, &mut slab, 100, |i| seg(i % 20));
        assert_eq!(
            rx.gro_mode(),
            GroMode::On,
            "a coalescing stream keeps GRO on"
        );
    }

    #[test]
    fn a_receiver_that_never_empties_its_queue_still_leaves_draining() {
        let (mut rx, report) =
            UdpReceiver::open(&loopback(true, false), 1472, 64, 256 << 10).unwrap();
        assert!(report.gro);
        rx.set_gro_limits(16, Duration::from_secs(60));
        let mut slab = vec![0u8; rx.slab_size()];
        let port = rx.local_addr().unwrap().port();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let plain = |k: usize| vec![(k % 251) as u8; 1472];
        let mut expected = std::collections::VecDeque::new();
        let mut k = 0;
        let mut send_plain = |n: usize, expected: &mut std::collections::VecDeque<Vec<u8>>| {
            for _ in 0..n {
                s.send_to(&plain(k), ("127.0.0.1", port)).unwrap();
                expected.push_back(plain(k));
                k += 1;
            }
        };
        // 16 plain datagrams (GRO goes off after them) and a backlog behind them.
        // (Not a coalesced message: read after the switch it comes without its segment
        // size, which the kernel reports only while GRO is on, and is dropped as
        // truncated; see groadapt.)
        send_plain(40, &mut expected);
        let mut read = |rx: &mut UdpReceiver,
                        expected: &mut std::collections::VecDeque<Vec<u8>>| {
            let mut out = Vec::new();
            match rx.recv_batch(&mut slab, &mut out, false).unwrap() {
                Recv::Batch { counts, .. } => {
                    assert_eq!(
                        counts.truncated,
                        0,
                        "nothing truncated, mode {:?}",
                        rx.gro_mode()
                    );
                    for p in &out {
                        let want = expected.pop_front().expect("no datagram more than sent");
                        assert!(slab[p.range()] == want[..], "mode {:?}", rx.gro_mode());
                    }
                    out.len()
                }
                Recv::Woken => panic!("not woken"),
            }
        };
        for _ in 0..4 {
            assert_eq!(read(&mut rx, &mut expected), 4);
        }
        assert_eq!(rx.gro_mode(), GroMode::Draining);
        // Behind its stream: as many datagrams arrive as each read takes, so the queue
        // never runs empty; draining ends anyway, once what was queued at the switch
        // has been read.
        let mut reads = 0;
        while rx.gro_mode() == GroMode::Draining {
            send_plain(4, &mut expected);
            assert!(read(&mut rx, &mut expected) > 0, "the queue ran empty");
            reads += 1;
            assert!(reads < 2000, "still draining after {reads} reads");
        }
        assert_eq!(rx.gro_mode(), GroMode::Off);
        assert!(expected.len() >= 4, "left draining with datagrams queued");
        while !expected.is_empty() {
            assert!(
                read(&mut rx, &mut expected) > 0,
                "{} not received",
                expected.len()
            );
        }
    }

    #[test]
    fn too_small_a_slab_is_an_error_not_a_panic() {
        let mut rx = open(true, 1500);
        let mut slab = vec![0u8; 100];
        assert!(rx.recv_batch(&mut slab, &mut Vec::new(), false).is_err());
    }
}
