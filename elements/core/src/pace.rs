//! Rate pacing without drift, and a sleep that another thread can cut short.
//!
//! [`Pacer`] computes when a send may start from the bytes sent before it, against one
//! origin, so rounding and oversleeping never accumulate: a late send is followed by
//! early ones until the schedule is met again. Two options, both off by default:
//! - a burst allowance ([`Pacer::with_burst`]): a token bucket, full at the start, that
//!   lets that many bytes go ahead of the schedule;
//! - a lag limit ([`Pacer::with_max_lag`]): when the sender falls further behind than
//!   that (a pause or a stall upstream), the schedule moves instead of the sender
//!   catching up, so the catch-up burst stays short.
//!
//! The same schedule gives the nominal time of any byte offset ([`Pacer::time_of`]), so
//! a source can timestamp what it paces.
//!
//! [`Interrupt`] is the flag an element's `unlock()` raises to end a pacing sleep (or any
//! other wait that watches the flag) at once.
//!
//! No GStreamer types: the pacing of an engine can be tested without a pipeline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Schedules sends so that the bytes sent by time `t` after the origin are
/// `rate * t / 8` (plus the burst allowance, if any).
///
/// The caller asks when a send may start ([`Pacer::deadline`] or [`Pacer::wait`]), sends,
/// then reports what went out ([`Pacer::record`]). The origin is fixed by the first
/// request, paced or not.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    rate_bps: u64,
    burst: u64,
    max_lag: Option<Duration>,
    origin: Option<Instant>,
    /// How far the schedule has moved, in total, because the sender fell behind.
    slip: Duration,
    sent: u64,
}

impl Pacer {
    /// A pacer for `rate_bps` bits per second (0: unpaced) with no burst allowance and a
    /// schedule that never moves, however late the sender is.
    pub fn new(rate_bps: u64) -> Self {
        Self {
            rate_bps,
            ..Self::default()
        }
    }

    /// Lets `bytes` go back-to-back ahead of the schedule (a token bucket of that size,
    /// full at the start).
    #[must_use]
    pub fn with_burst(mut self, bytes: u64) -> Self {
        self.burst = bytes;
        self
    }

    /// Moves the schedule when a send is asked for more than `lag` after its time, so
    /// that the sender is then exactly `lag` behind: it catches up with at most `lag`
    /// worth of back-to-back sends, not with everything a stall left undone.
    #[must_use]
    pub fn with_max_lag(mut self, lag: Duration) -> Self {
        self.max_lag = Some(lag);
        self
    }

    /// Whether sends are paced at all.
    pub fn is_paced(&self) -> bool {
        self.rate_bps > 0
    }

    /// The target rate in bits per second (0: unpaced).
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Most bytes per send: the burst allowance when paced (a send always carries at
    /// least one unit, hence at least 1), unlimited otherwise.
    pub fn chunk_bytes(&self) -> usize {
        if self.is_paced() {
            usize::try_from(self.burst).unwrap_or(usize::MAX).max(1)
        } else {
            usize::MAX
        }
    }

    /// How long `bytes` take at the target rate (zero when unpaced; saturates at
    /// `u64::MAX` nanoseconds).
    pub fn duration_of(&self, bytes: u64) -> Duration {
        if self.rate_bps == 0 {
            return Duration::ZERO;
        }
        let ns = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(self.rate_bps);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The scheduled time of byte offset `bytes` of the stream, as time since the
    /// origin: when the bytes before it have had their time at the target rate, plus
    /// every move of the schedule so far (none without [`Pacer::with_max_lag`]). The
    /// burst allowance is not counted: this is the nominal time, for timestamps.
    pub fn time_of(&self, bytes: u64) -> Duration {
        self.slip + self.duration_of(bytes)
    }

    /// How far the schedule has moved, in total, since the start (or the last
    /// [`Pacer::reset`]) because the sender fell behind by more than the lag limit: the
    /// time by which the stream runs longer than its rate says.
    pub fn slip(&self) -> Duration {
        self.slip
    }

    /// The origin of the schedule, once a send has been asked for.
    pub fn origin(&self) -> Option<Instant> {
        self.origin
    }

    /// Bytes recorded as sent since the start (or the last [`Pacer::reset`]).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// When a send of `next` bytes may start, asked at `now`: once the bytes sent so
    /// far plus these, less the burst allowance, have had their time. The first call
    /// fixes the origin at `now`. Unpaced: `now`.
    pub fn deadline(&mut self, now: Instant, next: u64) -> Instant {
        let origin = *self.origin.get_or_insert(now);
        if !self.is_paced() {
            return now;
        }
        let due = self.sent.saturating_add(next).saturating_sub(self.burst);
        let target = origin + self.time_of(due);
        match (self.max_lag, now.checked_duration_since(target)) {
            (Some(max), Some(lag)) if lag > max => {
                self.slip += lag - max;
                target + (lag - max)
            }
            _ => target,
        }
    }

    /// Counts `bytes` as sent.
    pub fn record(&mut self, bytes: u64) {
        self.sent = self.sent.saturating_add(bytes);
    }

    /// Forgets the past: the next send starts a new schedule with a full burst.
    pub fn reset(&mut self) {
        self.origin = None;
        self.slip = Duration::ZERO;
        self.sent = 0;
    }

    /// Sleeps until a send of `next` bytes may start (see [`Pacer::deadline`]). Returns
    /// false, early, if `interrupt` is or gets raised.
    pub fn wait(&mut self, next: u64, interrupt: &Interrupt) -> bool {
        if !self.is_paced() {
            // Still fix the origin: an unpaced stream is timed from it.
            self.origin.get_or_insert_with(Instant::now);
            return !interrupt.is_raised();
        }
        let deadline = self.deadline(Instant::now(), next);
        interrupt.sleep_until(deadline)
    }
}

/// The tail of a sleep that is spun rather than slept: thread wake-ups are late by tens
/// of microseconds (timer slack), which would make every paced send late.
const SPIN: Duration = Duration::from_micros(50);

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
        // Raised under the lock, so a sleeper that checked the flag is already waiting
        // (and gets the notification) or has yet to check (and sees the flag).
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.raised.store(true, Ordering::Release);
        self.cond.notify_all();
    }

    /// Lets sleeps run to their deadline again.
    pub fn clear(&self) {
        self.raised.store(false, Ordering::Release);
    }

    /// True while raised.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// The flag itself, for waits that watch it (e.g. `SlotPool::acquire_blocking`).
    pub fn flag(&self) -> &AtomicBool {
        &self.raised
    }

    /// Sleeps until `deadline`, spinning the last 50 µs so the wake-up is on time.
    /// Returns false, early, if the flag is or gets raised.
    pub fn sleep_until(&self, deadline: Instant) -> bool {
        loop {
            if self.is_raised() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            let left = deadline - now;
            if left > SPIN {
                let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                // Checked again under the lock, so a concurrent raise() cannot be missed.
                if self.is_raised() {
                    return false;
                }
                let _ = self
                    .cond
                    .wait_timeout(guard, left - SPIN)
                    .unwrap_or_else(PoisonError::into_inner);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn durations_follow_the_rate() {
        let p = Pacer::new(10_000_000);
        assert_eq!(p.duration_of(1_250_000), Duration::from_secs(1));
        let p = Pacer::new(8_000_000); // 1 MB/s
        assert_eq!(p.duration_of(3_000_000), Duration::from_secs(3));
        let p = Pacer::new(1_000_000_000).with_burst(65536);
        assert_eq!(p.duration_of(125), Duration::from_micros(1));
        assert_eq!(p.chunk_bytes(), 65536);
        assert_eq!(
            Pacer::new(1).chunk_bytes(),
            1,
            "a send carries at least 1 byte"
        );
        assert_eq!(
            Pacer::new(1).duration_of(u64::MAX),
            Duration::from_nanos(u64::MAX),
            "huge offsets saturate"
        );
    }

    #[test]
    fn unpaced_sends_go_at_once() {
        let mut p = Pacer::new(0).with_burst(10);
        assert!(!p.is_paced());
        assert_eq!(p.chunk_bytes(), usize::MAX);
        assert_eq!(p.duration_of(1 << 40), Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(p.deadline(t0, 1 << 40), t0);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(p.deadline(later, 1 << 40), later);
        assert_eq!(p.origin(), Some(t0), "the origin times an unpaced stream");
        let mut q = Pacer::new(0);
        let stop = Interrupt::default();
        assert!(q.wait(1000, &stop));
        assert!(q.origin().is_some());
        stop.raise();
        assert!(!q.wait(1000, &stop));
    }

    #[test]
    fn deadlines_follow_cumulative_bytes() {
        let mut p = Pacer::new(8_000_000).with_burst(1000); // 1 byte per µs
        let t0 = Instant::now();
        assert_eq!(p.deadline(t0, 600), t0, "the burst allowance goes at once");
        p.record(600);
        assert_eq!(p.deadline(t0, 400), t0);
        p.record(400);
        assert_eq!(p.deadline(t0, 500), t0 + Duration::from_micros(500));
        p.record(500);
        // Asked late (but within the lag limit): the target does not move.
        let late = t0 + Duration::from_millis(5);
        assert_eq!(p.deadline(late, 500), t0 + Duration::from_micros(1000));
        assert_eq!(p.sent(), 1500);
        // A send larger than the burst waits for its excess even at the start.
        let mut q = Pacer::new(8_000_000).with_burst(100);
        assert_eq!(q.deadline(t0, 300), t0 + Duration::from_micros(200));
    }

    #[test]
    fn without_a_lag_limit_the_schedule_never_moves() {
        let mut p = Pacer::new(8_000_000); // 1 MB/s
        let t0 = Instant::now();
        // No burst: a send of nothing more than what went before may start at once.
        assert_eq!(p.deadline(t0, 0), t0);
        p.record(500_000);
        // The origin stays put however late the caller is.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.deadline(later, 0), t0 + Duration::from_millis(500));
        assert_eq!(p.origin(), Some(t0));
        assert_eq!(p.time_of(500_000), Duration::from_millis(500));
        assert_eq!(p.slip(), Duration::ZERO);
    }

    #[test]
    fn the_schedule_moves_after_a_long_stall() {
        const MAX_LAG: Duration = Duration::from_millis(10);
        let mut p = Pacer::new(8_000_000).with_max_lag(MAX_LAG);
        let t0 = Instant::now();
        p.deadline(t0, 1000);
        p.record(1000); // was due at t0 + 1 ms
        let now = t0 + Duration::from_secs(1);
        assert_eq!(p.deadline(now, 1000), now - MAX_LAG);
        // Due at t0 + 2 ms, asked 998 ms later: all but the lag limit is slip.
        assert_eq!(p.slip(), Duration::from_millis(988));
        p.record(1000);
        let next = p.deadline(now, 1000);
        assert_eq!(next, now - MAX_LAG + Duration::from_millis(1));
        // Timestamps follow the moved schedule.
        assert_eq!(p.origin().unwrap() + p.time_of(3000), next);
    }

    #[test]
    fn reset_starts_a_new_schedule() {
        let mut p = Pacer::new(8_000_000)
            .with_burst(100)
            .with_max_lag(Duration::from_millis(10));
        let t0 = Instant::now();
        p.deadline(t0, 100);
        p.record(100);
        p.deadline(t0 + Duration::from_secs(1), 100);
        assert!(p.slip() > Duration::ZERO);
        p.reset();
        assert_eq!(
            (p.origin(), p.sent(), p.time_of(0), p.slip()),
            (None, 0, Duration::ZERO, Duration::ZERO)
        );
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(p.deadline(t1, 100), t1, "a full burst again");
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
        assert!(i.is_raised() && i.flag().load(Ordering::Acquire));
        assert!(!i.sleep_until(Instant::now() + Duration::from_secs(30)));
        i.clear();
        assert!(!i.flag().load(Ordering::Acquire));
        assert!(i.sleep_until(Instant::now() + Duration::from_millis(1)));
    }
}
