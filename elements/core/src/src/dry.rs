//! [`DryWarning`]: a pool that ran dry is said on the bus, not only counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Posts an element warning when an element's `drops-pool` count grows: the first time,
/// then at most every [`DryWarning::EVERY`]. A pool runs dry when downstream (often an
/// application) holds buffers longer than the pool allows; the counter alone leaves the
/// user guessing why data is missing.
#[derive(Debug, Default)]
pub struct DryWarning {
    /// `drops-pool` when last looked at.
    seen: AtomicU64,
    /// When the last warning was posted.
    last: Mutex<Option<Instant>>,
}

impl DryWarning {
    /// Least time between two warnings.
    pub const EVERY: Duration = Duration::from_secs(10);

    /// Zeroes what was seen (a new run).
    pub fn reset(&self) {
        self.seen.store(0, Ordering::Relaxed);
        *crate::sync::lock(&self.last) = None;
    }

    /// `drops` is the element's `drops-pool` now; `pool` names what ran dry and
    /// `property` the setting that enlarges it. Cheap when nothing grew.
    pub fn check(&self, element: &gst::Element, drops: u64, pool: &str, property: &str) {
        let before = self.seen.swap(drops, Ordering::Relaxed);
        if drops <= before {
            return;
        }
        let now = Instant::now();
        {
            let mut last = crate::sync::lock(&self.last);
            if last.is_some_and(|t| now.duration_since(t) < Self::EVERY) {
                return;
            }
            *last = Some(now);
        }
        gst::element_warning!(
            element,
            gst::ResourceError::NoSpaceLeft,
            (
                "{} ran dry: {} packets dropped so far (drops-pool), because downstream \
                 holds every buffer the pool has. Raise {}, add a leaky queue after this \
                 element (queue leaky=downstream), or copy out what the application keeps",
                pool,
                drops,
                property
            )
        );
    }
}
