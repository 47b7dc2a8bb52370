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
