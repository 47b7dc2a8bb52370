//! Ctrl-C (SIGINT) and SIGTERM handling.
//!
//! The handler only bumps an atomic counter, which is all a signal handler may safely do;
//! the main loop polls [`count`] between bus reads (it never blocks longer than ~100 ms),
//! so no self-pipe is needed. The first signal asks for a clean stop (EOS), the second
//! forces one, the third exits on the spot.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Signals received since [`install`].
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// The handler: lock-free atomics and `_exit` are async-signal-safe; nothing else is
/// done here. The third signal exits at once, in case stopping the pipeline itself hangs.
extern "C" fn on_signal(_signum: libc::c_int) {
    if COUNT.fetch_add(1, Ordering::SeqCst) >= 2 {
        const MSG: &[u8] = b"firehose: third interrupt, exiting without cleanup\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG outlives the call.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(130);
        }
    }
}

/// Routes SIGINT and SIGTERM to the counter read by [`count`].
pub fn install() -> io::Result<()> {
    for signum in [libc::SIGINT, libc::SIGTERM] {
        set_action(signum, on_signal as *const () as libc::sighandler_t)?;
    }
    Ok(())
}

/// Ignores SIGINT, for child processes whose parent decides when they stop (a Ctrl-C
/// in the terminal reaches the whole process group).
pub fn ignore_interrupt() -> io::Result<()> {
    set_action(libc::SIGINT, libc::SIG_IGN)
}

/// How many SIGINT/SIGTERM signals have arrived since [`install`].
pub fn count() -> usize {
    COUNT.load(Ordering::SeqCst)
}

fn set_action(signum: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid value (empty mask, no flags) that we
    // then fill in; `handler` is either SIG_IGN or `on_signal`, which is async-signal-safe.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        // SA_RESTART: a signal must not make unrelated blocking calls fail with EINTR.
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signum, &action, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
