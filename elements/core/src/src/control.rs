//! [`LiveControl`]: what a source's `unlock()` must reach, in one place.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::pace::Interrupt;
use crate::pool::SlotPool;
use crate::sync::lock;
use crate::wake::{self, Waker};

/// The flushing flag of a source, the eventfd [`Waker`] its receive waits on, and the
/// pools whose waiters an `unlock()` must wake.
///
/// Why one struct: a source's streaming thread waits in several ways — in `poll` on a
/// socket (the waker), for a free pool slot (the pool's condition variable), in a
/// pacing sleep (the [`Interrupt`]'s condition variable), or in a nap between polls of
/// a device that cannot wake anyone — and `unlock()` has to end whichever it is in.
/// The waker and the pools live outside the element's state, which the streaming
/// thread holds while it waits.
#[derive(Debug, Default)]
pub struct LiveControl {
    interrupt: Interrupt,
    waker: Mutex<Option<Arc<Waker>>>,
    pools: Mutex<Vec<SlotPool>>,
    /// Between `start` and `stop`: an application's EOS is ours to handle.
    running: AtomicBool,
    /// An application's EOS came ([`LiveControl::request_eos`]): `create` ends the stream.
    eos: AtomicBool,
}

impl LiveControl {
    /// At start: not flushing, no EOS pending, no waker or pool from a previous run.
    pub fn start(&self) {
        self.interrupt.clear();
        self.stop();
        self.eos.store(false, Ordering::Release);
        self.running.store(true, Ordering::Release);
    }

    /// At stop: forgets the waker and the pools (buffers downstream keep a pool alive).
    pub fn stop(&self) {
        self.running.store(false, Ordering::Release);
        *lock(&self.waker) = None;
        lock(&self.pools).clear();
    }

    /// An application's EOS (`ElementImpl::send_event`; `firehose` on Ctrl-C and
    /// `gst-launch-1.0 -e` send one): true if the source takes it, false when it is not
    /// started (the caller hands it to GstBaseSrc).
    ///
    /// Why not GstBaseSrc's own handling: it sets the element flushing and throws away
    /// the buffer `create` returns meanwhile — a batch the source already received and
    /// counted. Here the EOS ends every wait as `unlock()` does, but nothing is flushed:
    /// a batch `create` already holds is pushed, and [`LiveControl::create`] turns the
    /// cut-short wait, or the next call, into `FlowError::Eos`, on which GstBaseSrc
    /// sends EOS downstream.
    pub fn request_eos(&self) -> bool {
        if !self.mark_eos() {
            return false;
        }
        // Ends a wait in `poll`, for a pool slot, in a pacing sleep or a nap.
        let _ = self.unlock();
        true
    }

    /// An application's EOS for a source that drains before it ends (the landing
    /// sources: what the socket has queued, then the heaps and chunks still open): sets
    /// the flag and wakes the receive's `poll` only, without raising the flushing flag,
    /// so that the receive goes on until it sees [`LiveControl::eos_flag`]. False when
    /// not started, as [`LiveControl::request_eos`].
    pub fn request_drain(&self) -> bool {
        if !self.mark_eos() {
            return false;
        }
        if let Some(w) = self.waker() {
            w.wake();
        }
        true
    }

    /// Sets the EOS flag if started.
    fn mark_eos(&self) -> bool {
        if !self.running.load(Ordering::Acquire) {
            return false;
        }
        self.eos.store(true, Ordering::Release);
        true
    }

    /// The EOS flag itself, for a receive loop that watches it
    /// ([`LiveControl::request_drain`]).
    pub fn eos_flag(&self) -> &AtomicBool {
        &self.eos
    }

    /// True once an application's EOS was taken, until the next start.
    pub fn eos_requested(&self) -> bool {
        self.eos.load(Ordering::Acquire)
    }

    /// Runs a source's `create` work `f`, ending the stream after an application's EOS:
    /// `FlowError::Eos` at once if one is pending, and in place of the `Flushing` of a
    /// wait it cut short. A batch `f` returns is returned (pushed), even if the EOS came
    /// while `f` ran; the next call ends the stream.
    pub fn create<T>(
        &self,
        f: impl FnOnce() -> Result<T, gst::FlowError>,
    ) -> Result<T, gst::FlowError> {
        if self.eos_requested() {
            return Err(gst::FlowError::Eos);
        }
        match f() {
            Err(gst::FlowError::Flushing) if self.eos_requested() => Err(gst::FlowError::Eos),
            r => r,
        }
    }

    /// Creates a waker, installs it and returns it (for receive code that waits in
    /// `poll`).
    pub fn new_waker(&self) -> io::Result<Arc<Waker>> {
        let w = Arc::new(Waker::new()?);
        self.set_waker(w.clone());
        Ok(w)
    }

    /// Installs the waker a receiver created itself.
    pub fn set_waker(&self, waker: Arc<Waker>) {
        *lock(&self.waker) = Some(waker);
    }

    /// The installed waker, if any.
    pub fn waker(&self) -> Option<Arc<Waker>> {
        lock(&self.waker).clone()
    }

    /// Adds a pool whose blocked acquires `unlock()` wakes.
    pub fn add_pool(&self, pool: SlotPool) {
        lock(&self.pools).push(pool);
    }

    /// Replaces the pools with `pool` (a source that changed its pool mid-stream, e.g.
    /// for memory downstream proposed: the old one is no longer waited on).
    pub fn set_pool(&self, pool: SlotPool) {
        *lock(&self.pools) = vec![pool];
    }

    /// `BaseSrcImpl::unlock`: raises the flag, then fires the waker and wakes the
    /// pools' waiters, so a wait sees the flag when it wakes.
    pub fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.interrupt.raise();
        if let Some(w) = lock(&self.waker).as_ref() {
            w.wake();
        }
        for p in lock(&self.pools).iter() {
            p.wake_waiters();
        }
        Ok(())
    }

    /// `BaseSrcImpl::unlock_stop`: consumes the wake-up, then lowers the flag.
    pub fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(w) = lock(&self.waker).as_ref() {
            w.clear();
        }
        self.interrupt.clear();
        Ok(())
    }

    /// True between `unlock()` and `unlock_stop()`.
    pub fn is_flushing(&self) -> bool {
        self.interrupt.is_raised()
    }

    /// The flag, for `SlotPool::acquire_blocking`.
    pub fn flag(&self) -> &AtomicBool {
        self.interrupt.flag()
    }

    /// The interrupt, for a [`crate::pace::Pacer`] wait or a sleep until a deadline.
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// Sleeps `d` unless `unlock()` comes first; false if it did (or had). Through the
    /// waker where there is one (a `ppoll`, no spinning), else on the interrupt's
    /// condition variable.
    pub fn nap(&self, d: Duration) -> bool {
        if self.is_flushing() {
            return false;
        }
        match self.waker() {
            Some(w) => {
                !matches!(wake::nap(&w, d.as_nanos() as u64), Ok(true)) && !self.is_flushing()
            }
            None => self.interrupt.sleep_until(Instant::now() + d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HugepagePolicy;
    use crate::pool::PoolConfig;
    use std::sync::atomic::Ordering;

    #[test]
    fn unlock_ends_a_poll_a_nap_and_a_pool_wait() {
        let c = Arc::new(LiveControl::default());
        c.start();
        let w = c.new_waker().unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 64,
            slots: 1,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        c.add_pool(pool.clone());
        let held = pool.try_acquire().unwrap();
        // A socket nothing sends to: its descriptor never becomes readable.
        let idle = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (c2, p2) = (c.clone(), pool.clone());
        let t = std::time::Instant::now();
        let waiter = std::thread::spawn(move || {
            // Blocks in poll on a descriptor that never becomes readable.
            let woken =
                wake::wait_readable(std::os::fd::AsRawFd::as_raw_fd(&idle), &w, -1).unwrap();
            let napped = c2.nap(Duration::from_secs(30));
            let slot = p2.acquire_blocking(c2.flag(), Duration::from_secs(30));
            (woken, napped, slot.is_none())
        });
        std::thread::sleep(Duration::from_millis(50));
        c.unlock().unwrap();
        let (woken, napped, no_slot) = waiter.join().unwrap();
        assert!(woken && !napped && no_slot);
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(c.is_flushing());
        c.unlock_stop().unwrap();
        assert!(!c.flag().load(Ordering::Acquire));
        // Unflushed: a short nap runs to its end.
        assert!(c.nap(Duration::from_millis(1)));
        drop(held);
    }

    #[test]
    fn an_eos_ends_a_wait_keeps_a_batch_and_then_ends_the_stream() {
        let c = Arc::new(LiveControl::default());
        // Not started: GstBaseSrc handles it.
        assert!(!c.request_eos());
        c.start();
        assert!(!c.eos_requested());
        // A wait cut short by the EOS ends the stream instead of flushing it.
        let c2 = c.clone();
        let waiter = std::thread::spawn(move || {
            c2.create(|| {
                if c2
                    .interrupt()
                    .sleep_until(Instant::now() + Duration::from_secs(30))
                {
                    Ok(1)
                } else {
                    Err(gst::FlowError::Flushing)
                }
            })
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.request_eos());
        assert_eq!(waiter.join().unwrap(), Err(gst::FlowError::Eos));
        // A fresh start forgets it; a batch received while the EOS came is kept.
        c.start();
        let r = c.create(|| {
            assert!(c.request_eos());
            Ok(7)
        });
        assert_eq!(r, Ok(7));
        // ... and the next call ends the stream without running its work.
        assert_eq!(
            c.create(|| -> Result<i32, _> { panic!("not called after EOS") }),
            Err(gst::FlowError::Eos)
        );
        // Real errors pass through.
        c.start();
        assert_eq!(
            c.create(|| -> Result<i32, _> { Err(gst::FlowError::Error) }),
            Err(gst::FlowError::Error)
        );
        c.stop();
        assert!(!c.request_eos());
        // A draining EOS wakes the poll but does not flush: the receive goes on.
        assert!(!c.request_drain(), "not started");
        c.start();
        let w = c.new_waker().unwrap();
        assert!(c.request_drain());
        assert!(c.eos_flag().load(Ordering::Acquire) && !c.is_flushing());
        let idle = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(wake::wait_readable(std::os::fd::AsRawFd::as_raw_fd(&idle), &w, 0).unwrap());
    }

    #[test]
    fn a_nap_without_a_waker_is_cut_short_too() {
        let c = Arc::new(LiveControl::default());
        let c2 = c.clone();
        let t = std::time::Instant::now();
        let h = std::thread::spawn(move || c2.nap(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        c.unlock().unwrap();
        assert!(!h.join().unwrap());
        assert!(t.elapsed() < Duration::from_secs(10));
        c.start();
        assert!(!c.is_flushing() && c.waker().is_none());
    }
}
