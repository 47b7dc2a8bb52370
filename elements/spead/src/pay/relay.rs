//! Heaps from `speaddepay` (buffers with a [`HeapMeta`]): their items re-sent as they
//! came, descriptors re-encoded only when the flavour changes.
//!
//! [`HeapMeta`]: crate::heap::HeapMeta

use crate::heap::{HeapInfo, ItemValue};
use crate::send::Item;
use crate::wire::{ctrl, ids};

/// The items of a heap from `speaddepay`; returns how many were skipped, if any.
///
/// DESCRIPTOR items pass through byte for byte when the flavour is unchanged. In
/// another flavour their nested packets would be wrong, so they are replaced by the
/// heap's known descriptors, encoded anew. The known descriptors are also added
/// when descriptors are due and the heap carries none.
pub(super) fn heap_items<'a>(
    info: &HeapInfo,
    data: &'a [u8],
    known: Option<&'a [Vec<u8>]>,
    same_flavour: bool,
    due: bool,
    descs: &mut Vec<Item<'a>>,
    items: &mut Vec<Item<'a>>,
) -> Option<usize> {
    let carries = info.items.iter().any(|i| i.id == ids::DESCRIPTOR);
    if (due && !carries) || (carries && !same_flavour) {
        if let Some(encoded) = known {
            descs.extend(encoded.iter().map(|d| Item::descriptor(d)));
        }
    }
    let mut skipped = 0;
    let mut has_ctrl = false;
    for it in &info.items {
        match &it.value {
            ItemValue::Immediate(v) => {
                has_ctrl |= it.id == ids::STREAM_CTRL;
                items.push(Item::immediate(it.id, *v));
            }
            ItemValue::Bytes(_) if it.id == ids::DESCRIPTOR && !same_flavour => {}
            ItemValue::Bytes(r) => match data.get(r.clone()) {
                Some(bytes) if it.id == ids::DESCRIPTOR => descs.push(Item::descriptor(bytes)),
                Some(bytes) => items.push(Item::bytes(it.id, bytes)),
                None => skipped += 1,
            },
        }
    }
    // A start or descriptor-reissue marker travels on; a stop does not: this
    // element sends its own at EOS.
    match info.stream_ctrl {
        Some(c) if c != ctrl::STOP && !has_ctrl => items.push(Item::immediate(ids::STREAM_CTRL, c)),
        _ => {}
    }
    (skipped > 0).then_some(skipped)
}
