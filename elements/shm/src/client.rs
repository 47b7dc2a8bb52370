//! The consumer's engine: connect, map the segments the producer announces read-only,
//! and hand out each buffer as a view into them ([`BufferView`]) that sends its release
//! message when dropped. No GStreamer: `fhshmsrc` wraps the views as `GstMemory`.
//!
//! Every message is checked ([`proto::Consumer`]): a segment's descriptor must be a
//! memfd sealed against shrinking, and its claimed size no more than the file's (a
//! mapping past the end of a file faults on access), a buffer's range within its
//! segment. A lie ends the connection with an
//! error that says what was wrong.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::proto::{self, BufferMsg, Msg, OnFull, ProtoError};
use crate::wire::{self, Address, Received};

/// A segment mapped read-only; unmapped when the last view into it is gone.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a read-only mapping owned by this value; only shared reads happen through it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` read-only, after checking that the file is sealed
    /// against shrinking ([`wire::check_sealed`]) and is that large (in that order: once
    /// sealed, the size read is the size for good).
    pub fn new(fd: BorrowedFd<'_>, len: u64) -> Result<Self, ClientError> {
        wire::check_sealed(fd).map_err(|why| {
            ClientError::Protocol(ProtoError::Invalid(format!(
                "a segment of {len} bytes: {why}"
            )))
        })?;
        let actual = wire::file_size(fd).map_err(ClientError::Io)?;
        if actual < len {
            return Err(ClientError::Protocol(ProtoError::Invalid(format!(
                "a segment announced as {len} bytes whose file has {actual}"
            ))));
        }
        let len = usize::try_from(len).map_err(|_| {
            ClientError::Protocol(ProtoError::Invalid(format!("segment of {len} bytes")))
        })?;
        // SAFETY: maps a descriptor we were given, read-only, at no fixed address; the
        // result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ClientError::Io(io::Error::last_os_error()));
        }
        Ok(Self {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.len, "checked by proto::Consumer");
        // SAFETY: within the mapping (asserted), which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; no view outlives this (they hold an Arc).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Sends release messages: one non-blocking `send` per released buffer, no lock;
/// releases that find the socket full wait in a list that the receive loop flushes.
#[derive(Debug)]
pub struct Releaser {
    fd: Arc<OwnedFd>,
    pending: Mutex<Vec<u64>>,
    has_pending: AtomicBool,
}

impl Releaser {
    fn release(&self, seq: u64) {
        let mut m = [0u8; 11];
        m[0] = 16; // RELEASE
        m[1..3].copy_from_slice(&1u16.to_le_bytes());
        m[3..].copy_from_slice(&seq.to_le_bytes());
        match wire::send(self.fd.as_fd(), &m, None) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                firehose_core::sync::lock(&self.pending).push(seq);
                self.has_pending.store(true, Ordering::Release);
            }
            // Ok, or the producer is gone: nothing to give back to.
            _ => {}
        }
    }

    /// Sends releases that found the socket full earlier, in batches.
    pub fn flush(&self) {
        if !self.has_pending.load(Ordering::Acquire) {
            return;
        }
        let mut p = firehose_core::sync::lock(&self.pending);
        let mut out = Vec::new();
        while !p.is_empty() {
            let n = p.len().min(proto::MAX_RELEASE);
            let batch: Vec<u64> = p[..n].to_vec();
            proto::encode(&Msg::Release(batch), &mut out).expect("within the cap");
            match wire::send(self.fd.as_fd(), &out, None) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                _ => {
                    p.drain(..n);
                }
            }
        }
        self.has_pending.store(!p.is_empty(), Ordering::Release);
    }
}

/// One buffer: a read-only view of its bytes in the segment, and its message (times,
/// flags, metas, buffers missed before it). Dropping it releases it to the producer.
#[derive(Debug)]
pub struct BufferView {
    /// What the producer said of the buffer.
    pub msg: BufferMsg,
    mapping: Arc<Mapping>,
    releaser: Arc<Releaser>,
}

impl AsRef<[u8]> for BufferView {
    fn as_ref(&self) -> &[u8] {
        self.mapping
            .bytes(self.msg.offset as usize, self.msg.len as usize)
    }
}

impl Drop for BufferView {
    fn drop(&mut self) {
        self.releaser.release(self.msg.seq);
    }
}

/// What the consumer reads from the producer.
#[derive(Debug)]
pub enum Event {
    /// Caps of the buffers that follow.
    Caps(String),
    /// A buffer.
    Buffer(BufferView),
    /// End of stream.
    Eos,
    /// The producer failed: its message.
    Error(String),
}

/// Why the connection ended badly.
#[derive(Debug)]
pub enum ClientError {
    /// The producer broke the protocol.
    Protocol(ProtoError),
    /// The socket failed.
    Io(io::Error),
    /// The producer closed the connection without EOS (it stopped or crashed).
    Closed,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Protocol(e) => write!(f, "the producer broke the protocol: {e}"),
            Self::Io(e) => write!(f, "the connection to the producer failed: {e}"),
            Self::Closed => write!(
                f,
                "the producer closed the connection without end-of-stream (it stopped or \
                 crashed)"
            ),
        }
    }
}

impl std::error::Error for ClientError {}

/// A connection to a producer.
#[derive(Debug)]
pub struct Client {
    fd: Arc<OwnedFd>,
    state: proto::Consumer,
    maps: HashMap<u32, Arc<Mapping>>,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
    releaser: Arc<Releaser>,
    hello: Option<(u64, OnFull, u32)>,
}

impl Client {
    /// Connects to the producer at `addr`.
    pub fn connect(addr: &Address) -> io::Result<Self> {
        Self::subscribe(addr, None)
    }

    /// Connects to the producer at `addr`, asking for this consumer's own back-pressure
    /// (`on-full` and buffers held, 0: the producer's limit) instead of the producer's
    /// default. The producer applies it when it reads it, right after the set-up.
    pub fn subscribe(addr: &Address, mode: Option<(OnFull, u32)>) -> io::Result<Self> {
        let fd = Arc::new(wire::connect(addr)?);
        if let Some((on_full, max_held)) = mode {
            let mut out = Vec::new();
            proto::encode(&Msg::Subscribe { on_full, max_held }, &mut out)
                .expect("a subscribe fits");
            wire::send(fd.as_fd(), &out, None)?;
        }
        Ok(Self {
            releaser: Arc::new(Releaser {
                fd: fd.clone(),
                pending: Mutex::default(),
                has_pending: AtomicBool::new(false),
            }),
            fd,
            state: Default::default(),
            maps: HashMap::new(),
            buf: vec![0; proto::MAX_MESSAGE],
            fds: Vec::new(),
            hello: None,
        })
    }

    /// The socket, to wait on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What the producer said in its hello: this consumer's number, its back-pressure
    /// and the buffers it may hold at once.
    pub fn hello(&self) -> Option<(u64, OnFull, u32)> {
        self.hello
    }

    /// Segments mapped now.
    pub fn segments(&self) -> usize {
        self.maps.len()
    }

    /// The next event, without waiting (`Ok(None)`: nothing yet, or only the hello;
    /// wait on [`Client::fd`] for `POLLIN`). Segments and the hello are handled here.
    pub fn poll_event(&mut self) -> Result<Option<Event>, ClientError> {
        self.releaser.flush();
        loop {
            self.fds.clear();
            let n = match wire::recv(self.fd.as_fd(), &mut self.buf, &mut self.fds) {
                Ok(Received::Message(n)) => n,
                Ok(Received::Nothing) => return Ok(None),
                Ok(Received::Closed) => return Err(ClientError::Closed),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(ClientError::Protocol(ProtoError::Invalid(e.to_string())))
                }
                Err(e) => return Err(ClientError::Io(e)),
            };
            let msg = proto::decode(&self.buf[..n]).map_err(ClientError::Protocol)?;
            let msg = self
                .state
                .accept(msg, self.fds.len())
                .map_err(ClientError::Protocol)?;
            match msg {
                Msg::Hello {
                    consumer,
                    on_full,
                    max_held,
                } => {
                    // Back to the caller, who may be waiting for just this.
                    self.hello = Some((consumer, on_full, max_held));
                    return Ok(None);
                }
                Msg::Segment { id, size } => {
                    let m = Mapping::new(self.fds[0].as_fd(), size)?;
                    self.maps.insert(id, Arc::new(m));
                }
                Msg::SegmentGone { id } => {
                    self.maps.remove(&id);
                }
                Msg::Caps(c) => return Ok(Some(Event::Caps(c))),
                Msg::Eos => return Ok(Some(Event::Eos)),
                Msg::Error(e) => return Ok(Some(Event::Error(e))),
                Msg::Buffer(b) => {
                    let mapping = self.maps.get(&b.segment).expect("checked").clone();
                    return Ok(Some(Event::Buffer(BufferView {
                        msg: b,
                        mapping,
                        releaser: self.releaser.clone(),
                    })));
                }
                Msg::Release(_) | Msg::Subscribe { .. } => unreachable!("refused by accept"),
            }
        }
    }

    /// The next event, waiting up to `timeout_ms` (`Ok(None)` when none came).
    pub fn wait_event(&mut self, timeout_ms: i32) -> Result<Option<Event>, ClientError> {
        if let Some(e) = self.poll_event()? {
            return Ok(Some(e));
        }
        wire::wait(self.fd.as_fd(), libc::POLLIN, timeout_ms).map_err(ClientError::Io)?;
        self.poll_event()
    }
}
