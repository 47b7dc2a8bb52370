//! The UDP send engine behind `fhudpsink` (no GStreamer types).
//!
//! [`UdpSender`] owns one socket and sends a batch of datagrams to one or several
//! destinations with as few `sendmmsg` calls as possible: every datagram goes to every
//! destination, destination by destination, so that runs of equal-size datagrams to one
//! destination can go out as one UDP GSO send (`UDP_SEGMENT`). The message, iovec and
//! control-message arrays are allocated once and reused, so sending costs no heap
//! allocation. A [`Pacer`] spaces the sends to a target rate; an [`Interrupt`] lets
//! another thread cut a paced send short (the element's `unlock`). Both come from
//! [`firehose_core::pace`] and are re-exported here, since [`UdpSender`]'s API uses them.
//!
//! The parts: `gso` groups datagrams into GSO sends, `mmsg` builds and sends one
//! round of messages, `socket` opens and configures the socket.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use firehose_core::stats::Counter;
use socket2::{SockAddr, Socket};

pub use firehose_core::pace::{Interrupt, Pacer};
pub use gso::{gso_run, GSO_MAX_BYTES, GSO_MAX_SEGMENTS};

mod gso;
mod mmsg;
mod socket;

use mmsg::{RoundEnd, Scratch};

/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const MAX_PAYLOAD_V4: usize = 65507;
/// Largest UDP payload over IPv6 without jumbograms (65535 − 8).
pub const MAX_PAYLOAD_V6: usize = 65527;
/// Messages, and iovecs, per `sendmmsg`: the kernel caps `vlen` at `UIO_MAXIOV`.
const MAX_MSGS: usize = 1024;
/// How long one message may keep failing with `EAGAIN`/`ENOBUFS` before it is dropped
/// and counted: long enough for a NIC queue to drain, short enough not to stall a pipeline.
const STALL_LIMIT: Duration = Duration::from_secs(1);
/// How often an ICMP "port unreachable" may be reported for one message before it is
/// dropped (each report consumes one pending socket error, so a retry normally succeeds).
const REFUSED_RETRIES: u32 = 3;

/// Anything that holds a batch of datagrams, addressed by index.
pub trait Datagrams {
    /// Number of datagrams.
    fn count(&self) -> usize;
    /// The payload of datagram `i` (`i < count()`).
    fn datagram(&self, i: usize) -> &[u8];
}

impl<T: AsRef<[u8]>> Datagrams for [T] {
    fn count(&self) -> usize {
        self.len()
    }
    fn datagram(&self, i: usize) -> &[u8] {
        self[i].as_ref()
    }
}

/// Socket and sending options of a [`UdpSender`].
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Where every datagram goes (at least one).
    pub destinations: Vec<SocketAddr>,
    /// Local source address to bind to (`None`: any address, any port).
    pub bind: Option<SocketAddr>,
    /// Unicast TTL / hop limit.
    pub ttl: u32,
    /// Multicast TTL / hop limit.
    pub ttl_mc: u32,
    /// Whether multicast is looped back to local receivers.
    pub multicast_loop: bool,
    /// Interface for outgoing multicast, by name.
    pub multicast_iface: Option<String>,
    /// `SO_SNDBUF` in bytes (0: the system default).
    pub send_buffer: usize,
    /// Use UDP GSO where the kernel allows it.
    pub gso: bool,
    /// Target rate in bits/s of UDP payload, all destinations together (0: unpaced).
    pub rate_bps: u64,
    /// Bytes that may go back-to-back before pacing applies.
    pub burst_bytes: u64,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            destinations: Vec::new(),
            bind: None,
            ttl: 64,
            ttl_mc: 1,
            multicast_loop: true,
            multicast_iface: None,
            send_buffer: 0,
            gso: true,
            rate_bps: 0,
            burst_bytes: 65536,
        }
    }
}

/// Why [`UdpSender::send`] stopped before the end of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// Datagram `index` has `size` bytes, more than one UDP datagram can carry (`max`).
    /// Nothing of the batch was sent.
    TooLarge {
        /// Index of the datagram in the batch.
        index: usize,
        /// Its size in bytes.
        size: usize,
        /// The largest payload for the destinations' address family.
        max: usize,
    },
    /// [`Interrupt::raise`] was called; pass `resume_at` to the next `send` of the
    /// same batch to send the rest.
    Interrupted {
        /// Where to resume.
        resume_at: usize,
    },
}

/// Counters of a sender, shared with whoever reports them.
#[derive(Debug, Default)]
pub struct SendStats {
    /// Datagrams handed to the kernel (each destination counts).
    pub packets: Counter,
    /// Payload bytes handed to the kernel.
    pub bytes: Counter,
    /// Datagrams not sent (or reported refused by the peer).
    pub errors: Counter,
    /// GSO sends (one per multi-segment message).
    pub gso_sends: Counter,
    /// Times the kernel refused GSO and the sender fell back to plain sends (0 or 1).
    pub gso_fallbacks: Counter,
    /// Nanoseconds the pacer's schedule moved because the sender fell behind it (input
    /// that came late, or a stalled thread).
    pub pacing_slip_ns: Counter,
}

impl SendStats {
    /// All counters back to zero.
    pub fn reset(&self) {
        for c in [
            &self.packets,
            &self.bytes,
            &self.errors,
            &self.gso_sends,
            &self.gso_fallbacks,
            &self.pacing_slip_ns,
        ] {
            c.reset();
        }
    }
}

/// How far behind schedule a paced sender may fall before the schedule moves instead
/// of the sender catching up (after a pause or a stall upstream), so the catch-up burst
/// stays short.
const MAX_LAG: Duration = Duration::from_millis(10);

/// A UDP socket that sends batches of datagrams to fixed destinations.
pub struct UdpSender {
    socket: Socket,
    dests: Vec<SockAddr>,
    max_payload: usize,
    gso: bool,
    gso_refusal: Option<i32>,
    last_error: Option<i32>,
    pacer: Pacer,
    scratch: Scratch,
    stats: Arc<SendStats>,
}

impl std::fmt::Debug for UdpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSender")
            .field("destinations", &self.dests.len())
            .field("gso", &self.gso)
            .field("pacer", &self.pacer)
            .finish()
    }
}

impl UdpSender {
    /// Opens and configures the socket. Errors say what failed and how to fix it.
    pub fn new(cfg: &SenderConfig, stats: Arc<SendStats>) -> Result<Self, String> {
        let (socket, dests) = socket::open(cfg)?;
        let pacer = Pacer::new(cfg.rate_bps)
            .with_burst(cfg.burst_bytes)
            .with_max_lag(MAX_LAG);
        let mut sender = Self {
            dests,
            max_payload: if cfg.destinations.iter().any(SocketAddr::is_ipv4) {
                MAX_PAYLOAD_V4
            } else {
                MAX_PAYLOAD_V6
            },
            gso: false,
            gso_refusal: None,
            last_error: None,
            pacer,
            scratch: Scratch::new(),
            stats,
            socket,
        };
        if cfg.gso {
            sender.gso = true;
            if let Err(errno) = gso::probe(&sender.socket) {
                sender.refuse_gso(errno);
            }
        }
        Ok(sender)
    }

    /// Whether sends use GSO now.
    pub fn gso_active(&self) -> bool {
        self.gso
    }

    /// The errno with which the kernel refused GSO, once, after it happened.
    pub fn take_gso_refusal(&mut self) -> Option<i32> {
        self.gso_refusal.take()
    }

    /// The errno of the latest failed send since the last call, if any.
    pub fn take_last_error(&mut self) -> Option<i32> {
        self.last_error.take()
    }

    /// How many destinations each datagram goes to.
    pub fn destinations(&self) -> usize {
        self.dests.len()
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP socket"))
    }

    /// The socket's `SO_SNDBUF` as the kernel reports it.
    pub fn send_buffer_size(&self) -> io::Result<usize> {
        self.socket.send_buffer_size()
    }

    /// The pacer, e.g. to reset its schedule after a pause.
    pub fn pacer_mut(&mut self) -> &mut Pacer {
        &mut self.pacer
    }

    /// Sends every datagram of `data` to every destination, from position `from`
    /// (0 for a new batch; positions run over destinations × datagrams). Failed
    /// datagrams are counted in the stats, not returned.
    pub fn send<D: Datagrams + ?Sized>(
        &mut self,
        data: &D,
        from: usize,
        interrupt: &Interrupt,
    ) -> Result<(), SendError> {
        let n = data.count();
        if let Some(index) = (0..n).find(|&i| data.datagram(i).len() > self.max_payload) {
            return Err(SendError::TooLarge {
                index,
                size: data.datagram(index).len(),
                max: self.max_payload,
            });
        }
        let total = n * self.dests.len();
        let mut pos = from;
        while pos < total {
            let end = self.build(data, pos, total);
            let bytes = self.scratch.bytes_of_first(self.scratch.len());
            let slip = self.pacer.slip();
            let waited = self.pacer.wait(bytes, interrupt);
            let moved = self.pacer.slip().saturating_sub(slip);
            self.stats.pacing_slip_ns.add(moved.as_nanos() as u64);
            if !waited {
                return Err(SendError::Interrupted { resume_at: pos });
            }
            let (done, how) = self.flush(interrupt);
            self.pacer.record(self.scratch.bytes_of_first(done));
            pos = match how {
                RoundEnd::Done => end,
                RoundEnd::GsoRefused(k) => self.scratch.pos(k),
                RoundEnd::Interrupted(k) => {
                    let resume_at = self.scratch.pos(k);
                    return Err(SendError::Interrupted { resume_at });
                }
            };
        }
        Ok(())
    }

    /// Turns GSO off for good after the kernel refused it with `errno`.
    fn refuse_gso(&mut self, errno: i32) {
        self.gso = false;
        self.gso_refusal = Some(errno);
        self.stats.gso_fallbacks.add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Instant;

    fn receiver() -> UdpSocket {
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        r
    }

    fn recv_all(r: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 65536];
        (0..n)
            .map(|_| {
                let len = r.recv(&mut buf).expect("datagram");
                buf[..len].to_vec()
            })
            .collect()
    }

    fn batch(lens: &[usize]) -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect()
    }

    #[test]
    fn sends_gso_runs_and_plain_datagrams_alike() {
        let data = batch(&[1200, 1200, 1200, 300, 50, 1200, 1200, 0, 9000]);
        for gso in [true, false] {
            let r = receiver();
            let stats = Arc::new(SendStats::default());
            let cfg = SenderConfig {
                destinations: vec![r.local_addr().unwrap()],
                gso,
                ..Default::default()
            };
            let mut s = UdpSender::new(&cfg, stats.clone()).unwrap();
            s.send(data.as_slice(), 0, &Interrupt::default()).unwrap();
            assert_eq!(recv_all(&r, data.len()), data, "gso={gso}");
            assert_eq!(stats.packets.get(), data.len() as u64);
            assert_eq!(stats.errors.get(), 0);
            if gso {
                assert!(s.gso_active(), "UDP GSO works on loopback since Linux 4.18");
                assert_eq!(stats.gso_sends.get(), 2);
            } else {
                assert_eq!(stats.gso_sends.get(), 0);
            }
        }
    }

    #[test]
    fn too_large_is_refused_before_sending() {
        let r = receiver();
        let cfg = SenderConfig {
            destinations: vec![r.local_addr().unwrap()],
            ..Default::default()
        };
        let mut s = UdpSender::new(&cfg, Arc::default()).unwrap();
        let data = batch(&[10, 70000]);
        let e = s.send(data.as_slice(), 0, &Interrupt::default());
        assert_eq!(
            e,
            Err(SendError::TooLarge {
                index: 1,
                size: 70000,
                max: MAX_PAYLOAD_V4
            })
        );
    }

    #[test]
    fn interrupted_paced_send_resumes_where_it_stopped() {
        let r = receiver();
        let cfg = SenderConfig {
            destinations: vec![r.local_addr().unwrap()],
            rate_bps: 800, // 100 B/s: the interrupt has most of a second to land
            burst_bytes: 100,
            ..Default::default()
        };
        let mut s = UdpSender::new(&cfg, Arc::default()).unwrap();
        let data = batch(&[100, 100, 100]);
        let stop = Interrupt::default();
        // The first datagram is the burst; the second is due 1 s later.
        let first = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                stop.raise();
            });
            s.send(data.as_slice(), 0, &stop)
        });
        assert_eq!(first, Err(SendError::Interrupted { resume_at: 1 }));
        stop.clear();
        s.pacer_mut().reset();
        let t0 = Instant::now();
        s.send(data.as_slice(), 1, &stop).unwrap();
        // After the reset: one datagram of burst, then one 1 s later.
        let took = t0.elapsed();
        assert!(
            // Under 1.8 s: without the reset the schedule would still count the burst
            // already spent, and the resumed sends would take about 2 s.
            took >= Duration::from_millis(950) && took < Duration::from_millis(1800),
            "{took:?}"
        );
        assert_eq!(recv_all(&r, 3), data);
    }
}
