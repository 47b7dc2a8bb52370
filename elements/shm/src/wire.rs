//! Unix `SOCK_SEQPACKET` sockets for the transport: listen (path with a mode, or the
//! abstract namespace), connect, the peer's uid (`SO_PEERCRED`), and one message per
//! `sendmsg` / `recvmsg` with descriptors as `SCM_RIGHTS`. No GStreamer.
//!
//! Why SEQPACKET: message boundaries are kept (a message is one packet, never split or
//! merged), the connection is reliable and ordered, and a peer that goes away is seen
//! as end-of-file or `POLLHUP`, which is how a crashed consumer is found.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the producer listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A socket file.
    Path(PathBuf),
    /// A name in Linux's abstract namespace (no file; no permissions either: the peer's
    /// uid check is the only guard).
    Abstract(Vec<u8>),
}

impl Address {
    /// `path`, or the abstract name `path` when `abstract_ns`.
    pub fn new(path: &str, abstract_ns: bool) -> Self {
        if abstract_ns {
            Self::Abstract(path.as_bytes().to_vec())
        } else {
            Self::Path(PathBuf::from(path))
        }
    }

    fn sockaddr(&self) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
        // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let (bytes, skip): (&[u8], usize) = match self {
            Self::Path(p) => (p.as_os_str().as_bytes(), 0),
            Self::Abstract(n) => (n, 1),
        };
        // A path needs room for its NUL; an abstract name starts after a NUL.
        if bytes.is_empty() || bytes.len() + 1 > sa.sun_path.len() || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "socket name {:?} must be 1 to {} bytes without NUL",
                    OsStr::from_bytes(bytes),
                    sa.sun_path.len() - 1
                ),
            ));
        }
        for (d, s) in sa.sun_path[skip..].iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
        let len = match self {
            Self::Path(_) => base + bytes.len() + 1,
            Self::Abstract(_) => base + 1 + bytes.len(),
        };
        Ok((sa, len as libc::socklen_t))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path(p) => write!(f, "{}", p.display()),
            Self::Abstract(n) => write!(f, "@{}", String::from_utf8_lossy(n)),
        }
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn socket() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the result is checked.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Listens on `addr`; a socket file gets `mode` (a stale socket file left by a dead
/// producer is replaced; any other file there is an error).
///
/// A socket file appears only once it listens, with its mode: it is bound under a
/// temporary name next to it and renamed into place, so a consumer that connects as
/// soon as the file exists is never refused (a name too long for that is bound in
/// place). The rename never replaces a file that appeared there meanwhile: that is an
/// error, as `bind` on it would have been.
pub fn listen(addr: &Address, mode: u32) -> io::Result<OwnedFd> {
    let fd = socket()?;
    // The name bound first: a temporary one next to the file when it fits.
    let tmp = match addr {
        Address::Path(p) => {
            remove_stale(p)?;
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.map(|n| {
                Address::Path(p.with_file_name(format!(".{n}.{}.tmp", std::process::id())))
            })
            .filter(|t| t.sockaddr().is_ok())
        }
        Address::Abstract(_) => None,
    };
    let bound = tmp.as_ref().unwrap_or(addr);
    if let Address::Path(t) = bound {
        remove_stale(t)?;
    }
    let (sa, len) = bound.sockaddr()?;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    let r = (|| {
        if let Address::Path(p) = bound {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
        }
        // SAFETY: no pointers.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 64) })?;
        set_nonblocking(fd.as_raw_fd())?;
        if let (Some(Address::Path(t)), Address::Path(p)) = (&tmp, addr) {
            // Into place without replacing a file that appeared there meanwhile: a
            // hard link fails with EEXIST where rename would replace (the temporary
            // name is removed below on error; here, once the socket is in place, a
            // failure to remove it leaves only a stray name).
            std::fs::hard_link(t, p)?;
            let _ = std::fs::remove_file(t);
        }
        Ok(())
    })();
    if r.is_err() {
        if let Some(Address::Path(t)) = &tmp {
            let _ = std::fs::remove_file(t);
        }
    }
    r.map(|()| fd)
}

fn remove_stale(p: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(p),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", p.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no pointers.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// Connects to `addr` (the consumer); the socket is non-blocking.
pub fn connect(addr: &Address) -> io::Result<OwnedFd> {
    let (sa, len) = addr.sockaddr()?;
    let fd = socket()?;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    set_nonblocking(fd.as_raw_fd())?;
    Ok(fd)
}

/// Accepts one pending connection (`None` when there is none); non-blocking.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    // SAFETY: no address is asked for; the result is checked.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The uid and pid of the process at the other end (`SO_PEERCRED`, taken at connect).
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<(u32, i32)> {
    // SAFETY: ucred is plain data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` has room for `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((cred.uid, cred.pid))
}

/// Sends one message (with `pass` as `SCM_RIGHTS` if given), never blocking: a full
/// socket is `ErrorKind::WouldBlock`; a peer that is gone is `BrokenPipe` or
/// `ConnectionReset` (no SIGPIPE).
pub fn send(fd: BorrowedFd<'_>, msg: &[u8], pass: Option<BorrowedFd<'_>>) -> io::Result<()> {
    send_fds(fd, msg, pass.as_slice())
}

/// [`send`] with up to four descriptors.
pub fn send_fds(fd: BorrowedFd<'_>, msg: &[u8], pass: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(pass.len() <= 4, "at most four descriptors");
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Room for one control message with four descriptors, 8-byte aligned.
    let mut cbuf = [0u64; 6];
    // SAFETY: msghdr is plain data.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    if !pass.is_empty() {
        let bytes = (pass.len() * std::mem::size_of::<RawFd>()) as u32;
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        mh.msg_control = cbuf.as_mut_ptr().cast();
        mh.msg_controllen = space;
        // SAFETY: the control buffer has `space` bytes (48 >= CMSG_SPACE(16)), enough for
        // one cmsg with these descriptors; CMSG_FIRSTHDR of a buffer that large is not
        // NULL.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            for (i, p) in pass.iter().enumerate() {
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>().add(i), p.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `mh` points at live iovec and control buffers for the call.
        let r =
            unsafe { libc::sendmsg(fd.as_raw_fd(), &mh, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What [`recv`] got.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A message of this many bytes (descriptors that came with it are in `fds`).
    Message(usize),
    /// Nothing waiting.
    Nothing,
    /// The peer closed the connection.
    Closed,
}

/// Receives one message into `buf`, never blocking; descriptors that came with it are
/// pushed to `fds` as owned descriptors (so none leaks, whatever the message). A message
/// longer than `buf` is an `InvalidData` error (it was cut).
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few descriptors: a lying peer may send more than one; all are closed.
    let mut cbuf = [0u64; 16];
    // SAFETY: msghdr is plain data.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.as_mut_ptr().cast();
    mh.msg_controllen = std::mem::size_of_val(&cbuf);
    let before = fds.len();
    let r = loop {
        // SAFETY: `mh` points at live buffers of the sizes it states.
        let r = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut mh,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Received::Nothing),
            io::ErrorKind::ConnectionReset => return Ok(Received::Closed),
            _ => return Err(e),
        }
    };
    // SAFETY: walks the control messages the kernel wrote within `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let n = ((*c).cmsg_len as usize - (data as usize - c as usize))
                    / std::mem::size_of::<RawFd>();
                for i in 0..n {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    if mh.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many file descriptors came with one message",
        ));
    }
    if mh.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message longer than the {} bytes allowed", buf.len()),
        ));
    }
    if r == 0 && fds.len() == before {
        // SEQPACKET: a zero-length read is the peer's orderly close.
        return Ok(Received::Closed);
    }
    Ok(Received::Message(r))
}

/// Waits until `fd` has one of `events` (POLLIN, POLLOUT) or hangs up, or `timeout_ms`
/// passes; the `revents` seen (0 on timeout or signal).
pub fn wait(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let timeout = u64::try_from(timeout_ms).ok().map(|ms| ms * 1_000_000);
    wait_for(fd, events, timeout)
}

/// [`wait`] for at most `timeout_ns` nanoseconds (`ppoll`).
pub fn wait_ns(fd: BorrowedFd<'_>, events: i16, timeout_ns: u64) -> io::Result<i16> {
    wait_for(fd, events, Some(timeout_ns))
}

/// [`wait`] with no timeout for `None`.
fn wait_for(fd: BorrowedFd<'_>, events: i16, timeout_ns: Option<u64>) -> io::Result<i16> {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }];
    firehose_core::wake::ppoll(&mut p, timeout_ns)?;
    Ok(p[0].revents)
}

/// Size in bytes of the file behind `fd` (a segment's memfd), to check a producer's
/// claimed size before mapping it: a mapping past the end of the file faults on access.
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live stat.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size as u64)
}

/// The seals a segment must carry before a consumer maps it: it cannot shrink (a page
/// past the file's end faults with `SIGBUS` on access, so a producer that could cut the
/// file could crash its consumers). `fhshmsink`'s segments also carry `F_SEAL_GROW` and
/// `F_SEAL_SEAL` (`firehose_core::provider::SEGMENT_SEALS`); only the shrink seal is
/// needed for a consumer's safety, so only it is demanded.
pub const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_SHRINK;

/// The seals on `fd` (`F_GET_SEALS`): `Ok(0)` for a memfd made without
/// `MFD_ALLOW_SEALING`, an error (`EINVAL`) for a file that cannot be sealed at all.
pub fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: fcntl on a descriptor we hold; no pointers.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
}

/// Checks that `fd` is sealed against shrinking ([`REQUIRED_SEALS`]): `Err` with what is
/// wrong, in words, otherwise.
pub fn check_sealed(fd: BorrowedFd<'_>) -> Result<(), String> {
    match seals(fd) {
        Ok(s) if s & REQUIRED_SEALS == REQUIRED_SEALS => Ok(()),
        Ok(s) => Err(format!(
            "its memfd is not sealed against shrinking (seals {s:#x}, F_SEAL_SHRINK missing): \
             the producer could cut it and make this consumer crash (SIGBUS); refusing to \
             map it (is the producer an fhshmsink of this version?)"
        )),
        Err(e) => Err(format!(
            "its descriptor cannot be sealed (not a memfd: {e}); refusing to map it"
        )),
    }
}

/// A connected pair of unix seqpacket sockets, with more socket `flags` (such as
/// `SOCK_NONBLOCK`), for tests.
#[cfg(test)]
pub(crate) fn socket_pair(flags: libc::c_int) -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: fresh descriptors nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn messages_keep_their_bounds_and_carry_a_descriptor() {
        let (a, b) = socket_pair(0);
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        send(a.as_fd(), b"one", None).unwrap();
        send(a.as_fd(), b"second", Some(file.as_fd())).unwrap();
        let mut buf = [0u8; 64];
        let mut fds = Vec::new();
        assert_eq!(
            recv(b.as_fd(), &mut buf, &mut fds).unwrap(),
            Received::Message(3)
        );
        assert!(fds.is_empty());
        assert_eq!(
            recv(b.as_fd(), &mut buf, &mut fds).unwrap(),
            Received::Message(6)
        );
        assert_eq!(&buf[..6], b"second");
        assert_eq!(fds.len(), 1);
        assert_eq!(
            file_size(fds[0].as_fd()).unwrap(),
            file.metadata().unwrap().len()
        );
        assert_eq!(
            recv(b.as_fd(), &mut buf, &mut fds).unwrap(),
            Received::Nothing
        );
        drop(a);
        assert_eq!(
            recv(b.as_fd(), &mut buf, &mut fds).unwrap(),
            Received::Closed
        );
    }

    #[test]
    fn an_overlong_message_is_an_error() {
        let (a, b) = socket_pair(0);
        send(a.as_fd(), &[1u8; 100], None).unwrap();
        let mut buf = [0u8; 10];
        let e = recv(b.as_fd(), &mut buf, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn listen_connect_accept_and_peer_uid() {
        let dir = std::env::temp_dir().join(format!("fhshm-wire-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let addr = Address::Path(path.clone());
        let l = listen(&addr, 0o600).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A second listen replaces the stale socket file.
        drop(l);
        let l = listen(&addr, 0o660).unwrap();
        // Bound under a temporary name and renamed into place: nothing else is left.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s"]);
        let c = connect(&addr).unwrap();
        let s = accept(l.as_fd()).unwrap().expect("a pending connection");
        // SAFETY: geteuid has no arguments.
        let me = unsafe { libc::geteuid() };
        assert_eq!(peer_cred(s.as_fd()).unwrap().0, me);
        assert!(accept(l.as_fd()).unwrap().is_none());
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
        // Abstract names: no file.
        let name = Address::new(&format!("fhshm-test-{}", std::process::id()), true);
        let l = listen(&name, 0o600).unwrap();
        let _c = connect(&name).unwrap();
        assert!(accept(l.as_fd()).unwrap().is_some());
        // Not a socket: refused, the file kept.
        let f = std::env::temp_dir().join(format!("fhshm-notsock-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        assert!(listen(&Address::Path(f.clone()), 0o600).is_err());
        assert!(f.exists());
        std::fs::remove_file(f).unwrap();
    }
}
