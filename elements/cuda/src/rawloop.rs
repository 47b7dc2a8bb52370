//! The ceiling `firehose bench gpu` holds `fhcudaupload` against: a bare loop of
//! `cuMemcpyHtoDAsync` from pinned host memory into device blocks, `in_flight` copies
//! queued at once, each closed by an event — what the element does, minus the element.
//! Any [`Backend`] runs it, so the test backend checks its logic; only the CUDA
//! backend's figures mean anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_core::provider::{Anonymous, MemoryProvider, Registered, Registrar};
use firehose_core::HugepagePolicy;

use crate::engine::{Backend, BackendError, Event};

/// What a raw loop measured.
#[derive(Clone, Copy, Debug)]
pub struct RawRun {
    /// Bytes copied.
    pub bytes: u64,
    /// From the first copy queued to the last event completed.
    pub elapsed: Duration,
}

impl RawRun {
    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Copies `copies` blocks of `size` bytes from pinned memory (registered through
/// `registrar`) to the device, `in_flight` at once.
pub fn raw_h2d(
    backend: &Arc<dyn Backend>,
    registrar: Arc<dyn Registrar>,
    size: usize,
    copies: usize,
    in_flight: usize,
) -> Result<RawRun, String> {
    let in_flight = in_flight.max(1);
    let size = size.max(1);
    let host = Registered::new(Arc::new(Anonymous(HugepagePolicy::Auto)), registrar)
        .allocate(size * in_flight)
        .map_err(|e| e.to_string())?;
    let mut blocks = Vec::with_capacity(in_flight);
    let mut events: Vec<Event> = Vec::with_capacity(in_flight);
    let result = (|| -> Result<RawRun, BackendError> {
        for _ in 0..in_flight {
            blocks.push(backend.alloc(size)?);
            events.push(backend.create_event()?);
        }
        let t0 = Instant::now();
        for i in 0..copies {
            let k = i % in_flight;
            if i >= in_flight {
                backend.wait(events[k])?;
            }
            // SAFETY: slot k of the pinned region (size bytes), not reused before its
            // event (waited for above) completes; blocks[k] holds size bytes.
            unsafe {
                backend.copy_to_device(blocks[k], host.as_ptr().add(k * size), size)?;
            }
            backend.record(events[k])?;
        }
        for e in &events {
            backend.wait(*e)?;
        }
        Ok(RawRun {
            bytes: (size * copies) as u64,
            elapsed: t0.elapsed(),
        })
    })();
    // Waited for above (or the backend failed and may still read: keep the region).
    if result.is_err() {
        std::mem::forget(host);
    }
    for e in events {
        backend.destroy_event(e);
    }
    for b in blocks {
        backend.free(b, size);
    }
    result.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{HostBackend, HostRegistrar};

    #[test]
    fn the_raw_loop_copies_every_block_and_frees_what_it_made() {
        let hb = HostBackend::new(50, 1);
        let b: Arc<dyn Backend> = hb.clone();
        let r = raw_h2d(&b, Arc::new(HostRegistrar::default()), 4096, 40, 3).unwrap();
        assert_eq!(r.bytes, 40 * 4096);
        assert_eq!(hb.copies_done(), 40);
        assert!(hb.high_water() <= 3);
        assert_eq!((hb.live_blocks(), hb.live_events()), (0, 0));
    }
}
