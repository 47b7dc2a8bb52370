//! Caps names used between Firehose elements.

/// A batch of datagrams in one buffer, described by [`crate::PacketBatchMeta`].
pub const PACKETS: &str = "application/x-firehose-packets";
/// One reassembled SPEAD heap's payload.
pub const SPEAD_HEAP: &str = "application/x-spead-heap";
/// Many heaps placed by index in one chunk.
pub const CHUNK: &str = "application/x-firehose-chunk";

/// Caps for packet batches.
pub fn packets_caps() -> gst::Caps {
    gst::Caps::new_empty_simple(PACKETS)
}

/// Caps for chunks of `slots_per_chunk` slots of `slot_size` bytes (fields
/// `slots-per-chunk` and `slot-size`, so a consumer can size its buffers before the first
/// chunk; values above `i32::MAX` are clamped, as caps integers are 32-bit).
pub fn chunk_caps(slots_per_chunk: usize, slot_size: usize) -> gst::Caps {
    let int = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
    gst::Caps::builder(CHUNK)
        .field("slots-per-chunk", int(slots_per_chunk))
        .field("slot-size", int(slot_size))
        .build()
}
