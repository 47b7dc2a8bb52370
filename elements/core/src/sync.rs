//! Locking for element settings and state.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data even if a thread panicked while holding it.
///
/// Element settings and state stay consistent across a panic (each update is a plain
/// assignment), and a poisoned lock must not turn one panic into a cascade of them in
/// every later property read or state change.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
