//! `speaddepay`: SPEAD packets in, one buffer per reassembled heap out, as spead2's
//! receiver makes them.
//!
//! Input: `application/x-firehose-packets` batches (every packet of the batch, one map
//! per buffer) or any other buffers, one packet each. Output:
//! `application/x-spead-heap`, one buffer per heap whose memory is the heap payload in
//! pool memory (no copy after reassembly) with a [`crate::heap::HeapMeta`] saying what
//! is in it, and the PTS of the buffer that brought the heap's first packet. Heaps of a
//! batch (or buffer list) are pushed together as one buffer list.
//!
//! The rules (window, order, duplicates, incomplete heaps, bounds, descriptors, stop)
//! are the engine's, see [`crate::reassembly`]. The element adds:
//! - a stop heap becomes EOS (`stop-is-eos`, the default), and later input is refused
//!   with `GST_FLOW_EOS` until a flush; with `stop-is-eos=false` the stop heap is pushed
//!   like any heap (its meta has `stream_ctrl` = stop) and the stream goes on;
//! - at EOS, heaps under construction are flushed through the `incomplete` policy;
//! - a flush (FLUSH_STOP) discards heaps under construction;
//! - the read-only `stats` structure and periodic `firehose-stats` messages;
//! - for payloads received straight into heap memory (the kernel's copy the only one),
//!   use `fhspeadsrc`, which owns the socket and this reassembler in one element;
//!   `speaddepay` copies every payload once from its input (`landing` has no effect
//!   here).
//!
//! Memory: everything is allocated and pre-faulted at start (READY → PAUSED). Payload
//! memory comes in size classes of 16 KiB ×4 up to `max-heap-size` (a heap takes one
//! slot of the smallest class that holds it, or of a larger one when that class is in
//! use), plus an arena for single-packet heaps. With the automatic `pool-size` (0)
//! every class holds `max-heaps × substreams + 4` heaps: about 8 × 1.33 ×
//! `max-heap-size` + 8 MiB, ≈ 180 MiB with the defaults. Set `max-heap-size` to the
//! largest heap the stream really has to need less. When no slot is free a packet that
//! would start a heap is dropped and counted (`drops-pool`).
//!
//! ## `mode=chunks`
//!
//! Instead of one buffer per heap, heaps are placed into large chunks as spead2's chunk
//! stream does: the core [`firehose_chunk::ChunkAssembler`] runs the `spead`
//! packet handler ([`crate::chunk`]), exactly as `fhdepay handler=spead` does (same
//! bytes, same meta). Output: `application/x-firehose-chunk`, one buffer per chunk of
//! `heaps-per-chunk × heap-size` bytes (one pool chunk, no copy) with a
//! [`firehose_core::meta::chunk::ChunkMeta`] (chunk id, heap presence bitmap and, with
//! `packet-presence-size`, per-packet presence), and the PTS of the buffer that opened
//! the chunk. A heap is placed by HEAP_CNT (`place-item=0`) or by the value of an
//! immediate item (`place-item=0x1600`, a timestamp): with `n = (value − place-offset)
//! / place-step` it goes to chunk `n / heaps-per-chunk`, slot `n mod heaps-per-chunk`.
//! `max-chunks` chunks are open at once; `max-heaps × substreams` heaps are assembled at
//! once. A stop heap emits every open chunk and becomes EOS (with `stop-is-eos=false`
//! the stream goes on). The pool holds twice `max-chunks` chunks, or as many as fit in
//! `pool-size` (which must be more than `max-chunks`). `max-heap-size`,
//! `allow-out-of-order` (chunks take packets in any order) and `incomplete` (incomplete
//! heaps are left absent in the bitmap) do not apply. `stats` are the engine's:
//! `chunks`, `chunks-incomplete`, `heaps`, `heaps-incomplete`, `too-old`,
//! `drops-handler`, … (see `docs/handlers.md`).

use gst::glib;

mod imp;
mod settings;

pub(crate) use settings::HeapSettings;

firehose_core::property_enum! {
    /// `mode=heaps|chunks`: what `speaddepay` outputs.
    pub enum Mode = "GstFhSpeadDepayMode" {
        /// One `application/x-spead-heap` buffer per heap, with a heap meta.
        #[default]
        Heaps = 0, "heaps", "Heaps: one buffer per heap";
        /// `application/x-firehose-chunk`: heaps placed into chunks of `heaps-per-chunk`
        /// slots, as spead2's chunk stream does.
        Chunks = 1, "chunks", "Chunks: heaps placed into chunks (spead2 chunk stream)";
    }
}

firehose_core::property_enum! {
    /// `incomplete=drop|deliver`: what happens to heaps that end incomplete.
    pub enum IncompletePolicy = "GstFhSpeadDepayIncomplete" {
        /// Drop them and count them (`heaps-incomplete`), as spead2 does by default.
        #[default]
        Drop = 0, "drop", "Drop: count as heaps-incomplete";
        /// Push them with `complete = false` and the byte ranges that arrived in the meta
        /// (the rest of the payload is zeroed).
        Deliver = 1, "deliver", "Deliver: push with complete=false and the ranges received";
    }
}

impl From<IncompletePolicy> for crate::reassembly::Incomplete {
    fn from(p: IncompletePolicy) -> Self {
        match p {
            IncompletePolicy::Drop => Self::Drop,
            IncompletePolicy::Deliver => Self::Deliver,
        }
    }
}

glib::wrapper! {
    /// The `speaddepay` element.
    pub struct SpeadDepay(ObjectSubclass<imp::SpeadDepay>) @extends gst::Element, gst::Object;
}

/// Registers `speaddepay` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_core::element::register::<SpeadDepay>(Some(plugin), "speaddepay")
}
