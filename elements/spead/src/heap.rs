//! A reassembled heap as it travels on `application/x-spead-heap` buffers: the buffer
//! holds the heap's payload; [`HeapMeta`] says what is in it.

use std::ops::Range;

use firehose_core::meta::message::Message;

use crate::descset::DescriptorSet;
use crate::wire::Flavour;

/// The value of one item of a heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemValue {
    /// An immediate value (right-aligned in the flavour's address bits).
    Immediate(u64),
    /// An addressed item: these bytes of the heap payload (the buffer).
    Bytes(Range<usize>),
}

/// One item of a heap (reserved per-packet items such as HEAP_CNT are not listed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapItem {
    /// Item id.
    pub id: u64,
    /// Its value.
    pub value: ItemValue,
}

/// Everything known about a heap besides its payload bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapInfo {
    /// HEAP_CNT.
    pub heap_cnt: u64,
    /// The flavour the heap was sent in.
    pub flavour: Flavour,
    /// The heap's items (in the order of their pointers; DESCRIPTOR items included).
    pub items: Vec<HeapItem>,
    /// Every descriptor known on the stream so far (shared, not copied per heap).
    pub descriptors: DescriptorSet,
    /// All of HEAP_LENGTH arrived.
    pub complete: bool,
    /// The payload byte ranges that did arrive (one range when complete).
    pub received: Vec<Range<usize>>,
    /// STREAM_CTRL, if the heap carried it.
    pub stream_ctrl: Option<u64>,
}

impl HeapInfo {
    /// The value of item `id`, if the heap has it.
    pub fn item(&self, id: u64) -> Option<&ItemValue> {
        self.items.iter().find(|i| i.id == id).map(|i| &i.value)
    }
}

/// What the generic message meta ([`firehose_core::meta::message`]) says of a heap of
/// `len` payload bytes: HEAP_CNT, completeness, and the bytes that arrived.
pub fn message(info: &HeapInfo, len: usize) -> Message {
    Message {
        id: info.heap_cnt,
        complete: info.complete,
        bytes_expected: len as u64,
        bytes_received: info.received.iter().map(|r| r.len() as u64).sum(),
    }
}

firehose_core::rust_meta! {
    /// The meta on `application/x-spead-heap` buffers.
    pub struct HeapMeta(HeapInfo), api = c"FirehoseSpeadHeapMetaAPI", name = c"FirehoseSpeadHeapMeta", transform = transform_heap;
}

impl HeapMeta {
    /// The heap's description.
    pub fn info(&self) -> &HeapInfo {
        self.data()
    }
}

/// Full copies keep the meta; region copies drop it (byte ranges would no longer hold).
fn transform_heap(info: &HeapInfo, region: Option<(usize, usize)>) -> Option<HeapInfo> {
    match region {
        None => Some(info.clone()),
        Some(_) => None,
    }
}
