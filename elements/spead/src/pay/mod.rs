//! `speadpay`: heaps to SPEAD packets, as batches for `fhudpsink`.
//!
//! Input is either
//! - `application/x-spead-heap` buffers with a [`crate::heap::HeapMeta`] (what
//!   `speaddepay` outputs): each is re-sent as one heap with its items, immediates and
//!   DESCRIPTOR items intact, so `speaddepay ! speadpay` re-sends a stream; or
//! - any other buffer: each becomes one heap whose payload is one addressed item
//!   (`item-id`, default 0x1000) holding the buffer's bytes, plus the static immediates
//!   of `immediates`. The item's descriptor is built from `item-name`,
//!   `item-description`, `item-dtype` and `item-shape`.
//!
//! Output is `application/x-firehose-packets`: each buffer is a pool slab of packets
//! with a [`firehose_core::PacketBatchMeta`], cut exactly as spead2's sender cuts heaps
//! (see [`crate::send`]). `fhudpsink` sends a batch with one `sendmmsg` (UDP GSO where
//! it can) and paces it with its `rate`. A heap larger than `batch-bytes` spans several
//! buffers; a buffer list's small heaps share buffers.
//!
//! Incomplete heaps (`speaddepay incomplete=deliver`) are sent as they are, the missing
//! bytes as zeros.
//!
//! Descriptors go with the first heap and every `descriptors-every` heaps after it (in
//! a heap of their own with `descriptors-separate`, as chunk receivers need). At
//! EOS the stop heap (STREAM_CTRL = 2) is sent first, unless `stop-at-eos=false`.
//! Heap counters are `heap-cnt-start + k·heap-cnt-step` for the k-th heap, so
//! interleaved senders can share a stream (a receiver with `substreams`).

use gst::glib;
use gst::prelude::*;

mod batch;
mod imp;
mod plain;
mod relay;
mod settings;

glib::wrapper! {
    /// The `speadpay` element.
    pub struct SpeadPay(ObjectSubclass<imp::SpeadPay>) @extends gst::Element, gst::Object;
}

/// Registers `speadpay` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "speadpay",
        gst::Rank::NONE,
        SpeadPay::static_type(),
    )
}
