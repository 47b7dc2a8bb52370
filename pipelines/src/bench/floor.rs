//! The floor receiver: the least a program can do to receive a UDP stream — one
//! `recvmmsg` of 64 messages at a time into a preallocated buffer, nothing parsed,
//! copied or pushed, no GStreamer. Its CPU per GB is the physical limit of the kernel
//! path on this machine, against which every other receiver's figure reads.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// Messages per `recvmmsg` call (what spead2 and most capture loops use).
pub const BATCH: usize = 64;

/// Counts of what the loop received.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Datagrams.
    pub datagrams: u64,
    /// UDP payload bytes.
    pub bytes: u64,
    /// `recvmmsg` calls that brought datagrams.
    pub batches: u64,
}

/// A bound socket and the preallocated receive buffer.
pub struct Floor {
    socket: UdpSocket,
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// What has been received so far.
    pub counts: Counts,
}

impl Floor {
    /// Binds `addr` with a receive buffer of `buffer_size` bytes (SO_RCVBUFFORCE as root,
    /// else SO_RCVBUF) and room for datagrams of up to `max_payload` bytes. The socket
    /// wakes up every `tick` so that the caller can look at its stop flag.
    pub fn bind(
        addr: SocketAddr,
        buffer_size: usize,
        max_payload: usize,
        tick: Duration,
    ) -> Result<Self, String> {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| format!("floor receiver: socket: {e}"))?;
        let want = libc::c_int::try_from(buffer_size).unwrap_or(libc::c_int::MAX);
        // SAFETY: setsockopt on a socket we own, reading one c_int from a live local.
        let forced = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&want as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if !forced {
            // Not root: as much as net.core.rmem_max grants.
            let _ = s.set_recv_buffer_size(buffer_size);
        }
        s.bind(&addr.into())
            .map_err(|e| format!("floor receiver: cannot bind {addr}: {e}"))?;
        s.set_read_timeout(Some(tick))
            .map_err(|e| format!("floor receiver: SO_RCVTIMEO: {e}"))?;
        let socket: UdpSocket = s.into();
        // One slot per message, one byte more than the largest payload so that a larger
        // datagram shows as truncated rather than passing unnoticed.
        let slot = max_payload + 1;
        let mut floor = Self {
            socket,
            buf: vec![0u8; slot * BATCH],
            iov: Vec::with_capacity(BATCH),
            msgs: Vec::with_capacity(BATCH),
            counts: Counts::default(),
        };
        // Touch every page now, as any receiver's pool is pre-faulted.
        floor.buf.iter_mut().step_by(4096).for_each(|b| *b = 1);
        let base = floor.buf.as_mut_ptr();
        for i in 0..BATCH {
            floor.iov.push(libc::iovec {
                // SAFETY: `i * slot` is within `buf` (BATCH slots of `slot` bytes); the
                // pointer is only handed to the kernel while `buf` lives in `self`.
                iov_base: unsafe { base.add(i * slot) }.cast(),
                iov_len: slot,
            });
        }
        let iov = floor.iov.as_mut_ptr();
        for i in 0..BATCH {
            // SAFETY: an all-zero mmsghdr is a valid empty header (plain C struct).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: `i < BATCH == iov.len()`; the vector is never resized after this.
            m.msg_hdr.msg_iov = unsafe { iov.add(i) };
            m.msg_hdr.msg_iovlen = 1;
            floor.msgs.push(m);
        }
        Ok(floor)
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr, String> {
        self.socket.local_addr().map_err(|e| e.to_string())
    }

    /// One `recvmmsg` call (blocking up to the tick for the first datagram, then taking
    /// what is queued); adds what it got to [`Self::counts`] and returns the number of
    /// datagrams (0 on the tick).
    pub fn receive(&mut self) -> Result<usize, String> {
        // SAFETY: `msgs` holds BATCH headers whose iovecs point into `buf`, all owned
        // by `self` and alive for the call; the kernel writes at most `slot` bytes into
        // each and fills msg_len.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                _ => Err(format!("floor receiver: recvmmsg: {e}")),
            };
        }
        let n = n as usize;
        let bytes: u64 = self.msgs[..n].iter().map(|m| u64::from(m.msg_len)).sum();
        self.counts.datagrams += n as u64;
        self.counts.bytes += bytes;
        self.counts.batches += u64::from(n > 0);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_datagram_and_byte() {
        let mut floor = Floor::bind(
            "127.0.0.1:0".parse().unwrap(),
            1 << 20,
            1472,
            Duration::from_millis(20),
        )
        .unwrap();
        let to = floor.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..100u16 {
            tx.send_to(&vec![0u8; 100 + usize::from(i)], to).unwrap();
        }
        let mut got = 0;
        for _ in 0..50 {
            got += floor.receive().unwrap();
            if got == 100 {
                break;
            }
        }
        assert_eq!(got, 100);
        // 100 + 101 + … + 199
        assert_eq!(
            (floor.counts.datagrams, floor.counts.bytes),
            (100, (100..200).sum())
        );
        // At most BATCH datagrams per call, and only calls that brought some count.
        assert!(
            (2..=100).contains(&floor.counts.batches),
            "{:?}",
            floor.counts
        );
        // Nothing queued: the call returns on the tick with nothing.
        assert_eq!(floor.receive().unwrap(), 0);
    }
}
