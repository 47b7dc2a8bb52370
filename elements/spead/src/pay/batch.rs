//! Output batching: packets written back to back into pool slabs, each slab pushed as
//! one buffer with a [`PacketBatchMeta`], so `fhudpsink` sends it with one `sendmmsg`.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use firehose_core::batch::batch_buffer;
use firehose_core::{gstmem, PacketInfo, Slot, SlotPool};

use crate::send::HeapPackets;

/// How often a pool wait re-checks the flushing flag if a wake-up were ever missed.
const POOL_POLL: Duration = Duration::from_millis(100);

/// The slab being filled.
pub(super) struct Pending {
    slot: Slot,
    used: usize,
    packets: Vec<PacketInfo>,
    pts: Option<gst::ClockTime>,
}

/// A finished slab, ready to push, and what it adds to the counters.
pub(super) struct Batch {
    /// The slab as a buffer with its [`PacketBatchMeta`].
    pub buffer: gst::Buffer,
    /// Packets in the batch.
    pub packets: u64,
    /// Packet bytes in the batch.
    pub bytes: u64,
}

impl Pending {
    /// The slab as an output buffer, or `None` when it holds no packet (an empty
    /// buffer would only cost the sink a wake-up).
    pub fn finish(self) -> Option<Batch> {
        let Pending {
            mut slot,
            used,
            packets,
            pts,
        } = self;
        if packets.is_empty() {
            return None;
        }
        slot.set_len(used);
        let n = packets.len() as u64;
        // A payloader's batches go to a sender (fhudpsink): the Rust meta only.
        let buf = batch_buffer(gstmem::slot_into_memory(slot), packets, pts, false);
        Some(Batch {
            buffer: buf,
            packets: n,
            bytes: used as u64,
        })
    }
}

/// Writes every packet of `heap` into slabs from `pool`, handing each slab that fills
/// up to `push`. The last, partly filled slab stays pending for the next heap of a
/// buffer list. A pool wait gives up with `Flushing` once `flushing` is set.
pub(super) fn write_heap(
    pending: &mut Option<Pending>,
    pool: &SlotPool,
    flushing: &AtomicBool,
    heap: &mut HeapPackets<'_>,
    pts: Option<gst::ClockTime>,
    mut push: impl FnMut(&mut Option<Pending>) -> Result<(), gst::FlowError>,
) -> Result<(), gst::FlowError> {
    loop {
        if pending.is_none() {
            let slot = pool
                .acquire_blocking(flushing, POOL_POLL)
                .ok_or(gst::FlowError::Flushing)?;
            let estimate = slot.capacity() / heap.next_len().unwrap_or(1).max(1) + 1;
            *pending = Some(Pending {
                slot,
                used: 0,
                packets: Vec::with_capacity(estimate),
                pts,
            });
        }
        let p = pending.as_mut().expect("set above");
        let Pending {
            slot,
            used,
            packets,
            ..
        } = p;
        let base = *used;
        let written = heap.fill(&mut slot.as_mut_full()[base..], |offset, len| {
            packets.push(PacketInfo {
                offset: (base + offset) as u32,
                len: len as u32,
                rx_time_ns: 0,
                src: Default::default(),
            })
        });
        *used += written;
        if heap.is_done() {
            return Ok(());
        }
        // The slab is full (a slab always holds at least one packet).
        push(pending)?;
    }
}
