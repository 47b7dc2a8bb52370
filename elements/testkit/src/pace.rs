//! Rate pacing without drift, and a sleep that another thread can cut short.
//!
//! [`Pacer`] computes when a batch may leave from the bytes sent before it, against one
//! fixed origin, so rounding and oversleeping never accumulate: a late batch is followed
//! by early ones until the schedule is met again. [`Interrupt`] is the flag a source's
//! `unlock()` raises to end a pacing sleep (or a pool wait) at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Schedules batches so that the bytes sent by time `t` are `rate * t / 8`.
#[derive(Debug, Default)]
pub struct Pacer {
    rate: u64,
    origin: Option<Instant>,
}

impl Pacer {
    /// A pacer for `rate` bits per second (0 = no pacing).
    pub fn new(rate: u64) -> Self {
        Self { rate, origin: None }
    }

    /// Time after the origin at which `bytes` have been sent at the configured rate
    /// (zero when unpaced).
    pub fn offset(&self, bytes: u64) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let ns = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// When the batch that follows `bytes_before` bytes may be sent, or `None` when
    /// unpaced. The first call fixes the origin at `now`.
    pub fn deadline(&mut self, bytes_before: u64, now: Instant) -> Option<Instant> {
        let origin = *self.origin.get_or_insert(now);
        (self.rate > 0).then(|| origin + self.offset(bytes_before))
    }

    /// The origin, once the first batch has been scheduled.
    pub fn origin(&self) -> Option<Instant> {
        self.origin
    }
}

/// A flag plus a condition variable: [`Interrupt::sleep_until`] returns early once
/// [`Interrupt::raise`] is called, and stays interrupted until [`Interrupt::clear`].
#[derive(Debug, Default)]
pub struct Interrupt {
    raised: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Interrupt {
    /// Interrupts current and future sleeps.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        // Taking the lock orders this notify after a sleeper's check of the flag, so
        // the wake-up cannot fall between its check and its wait.
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cond.notify_all();
    }

    /// Lets sleeps run to their deadline again.
    pub fn clear(&self) {
        self.raised.store(false, Ordering::Release);
    }

    /// The flag itself, for waits that poll it (e.g. `SlotPool::acquire_blocking`).
    pub fn flag(&self) -> &AtomicBool {
        &self.raised
    }

    /// True while raised.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Sleeps until `deadline`; false if interrupted first.
    pub fn sleep_until(&self, deadline: Instant) -> bool {
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.is_raised() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            guard = self
                .cond
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn deadlines_follow_cumulative_bytes() {
        let mut p = Pacer::new(8_000_000); // 1 MB/s
        let t0 = Instant::now();
        assert_eq!(p.deadline(0, t0), Some(t0));
        // The origin stays put however late the caller is.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            p.deadline(500_000, later),
            Some(t0 + Duration::from_millis(500))
        );
        assert_eq!(p.offset(3_000_000), Duration::from_secs(3));
        assert_eq!(p.origin(), Some(t0));
    }

    #[test]
    fn unpaced_has_no_deadline() {
        let mut p = Pacer::new(0);
        assert_eq!(p.deadline(1 << 40, Instant::now()), None);
        assert_eq!(p.offset(1 << 40), Duration::ZERO);
    }

    #[test]
    fn huge_offsets_saturate() {
        let p = Pacer::new(1);
        assert_eq!(p.offset(u64::MAX), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn sleep_reaches_its_deadline() {
        let i = Interrupt::default();
        let start = Instant::now();
        assert!(i.sleep_until(start + Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn raise_cuts_a_sleep_short_until_cleared() {
        let i = Arc::new(Interrupt::default());
        let i2 = i.clone();
        let start = Instant::now();
        let t =
            std::thread::spawn(move || i2.sleep_until(Instant::now() + Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        i.raise();
        assert!(!t.join().unwrap());
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!i.sleep_until(Instant::now() + Duration::from_secs(30)));
        i.clear();
        assert!(i.sleep_until(Instant::now() + Duration::from_millis(1)));
    }
}
