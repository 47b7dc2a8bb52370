//! Why a capture could not be set up, in words a user can act on.

use std::fmt;
use std::io;

/// The class of a set-up failure; the element maps it to a GStreamer resource error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No such interface.
    NotFound,
    /// A setting cannot work (queue out of range, frame count, mode the driver lacks).
    Settings,
    /// Missing privileges.
    NotAuthorized,
    /// The interface or queue is taken by someone else.
    Busy,
    /// Not enough memory (hugepages) for the UMEM.
    NoSpace,
    /// Any other failure of a system call.
    Open,
}

/// A failed set-up step: its class and the message, which names the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupError {
    /// The class.
    pub kind: ErrorKind,
    /// What went wrong and what to do.
    pub message: String,
}

impl SetupError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SetupError {}

/// What to do about missing privileges.
pub(super) const PRIVILEGE_FIX: &str = "run as root, or give the program CAP_NET_ADMIN, \
     CAP_BPF and CAP_NET_RAW (e.g. setcap cap_net_admin,cap_bpf,cap_net_raw+ep <program>)";

/// Whether `e` is a refusal for lack of privileges.
pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}
