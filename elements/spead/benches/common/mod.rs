//! Shared by the benches (`mod common;`).

use std::time::Duration;

/// The median of the times `f` reports over `runs` runs, after one warm-up run.
pub fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}
