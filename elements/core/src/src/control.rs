//! [`LiveControl`]: what a source's `unlock()` must reach, in one place.

use std::io;
use std::sync::atomic::AtomicBool;
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
}

impl LiveControl {
    /// At start: not flushing, no waker or pool from a previous run.
    pub fn start(&self) {
        self.interrupt.clear();
        self.stop();
    }

    /// At stop: forgets the waker and the pools (buffers downstream keep a pool alive).
    pub fn stop(&self) {
        *lock(&self.waker) = None;
        lock(&self.pools).clear();
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
