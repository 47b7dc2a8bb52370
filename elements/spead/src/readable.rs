//! The heap meta every language reads: `FirehoseHeapMeta`, a `GstCustomMeta` whose
//! structure repeats what [`crate::heap::HeapMeta`] says, as scalars and numeric arrays
//! in `GBytes` (native byte order; numpy dtypes below), so that Python and C read a heap
//! without Rust. docs/python.md shows both.
//!
//! | field | type | |
//! |---|---|---|
//! | `heap-cnt` | guint64 | HEAP_CNT |
//! | `complete` | gboolean | all of HEAP_LENGTH arrived |
//! | `bytes-expected` | guint64 | the heap's payload size (the buffer's size) |
//! | `bytes-received` | guint64 | payload bytes that arrived |
//! | `heap-address-bits` | guint | the flavour's A (SPEAD-64-A; 40 or 48) |
//! | `items` | guint64 | items in the heap (n), DESCRIPTOR items included, reserved per-packet items not |
//! | `item-ids` | GBytes, `=u8`\[n\] | item ids, in the order of their pointers |
//! | `item-immediate` | GBytes, `u1`\[n\] | 1 for an immediate item, 0 for an addressed one |
//! | `item-values` | GBytes, `=u8`\[n\] | an immediate item's value; an addressed item's byte offset in the buffer |
//! | `item-lengths` | GBytes, `=u8`\[n\] | an addressed item's length in bytes (0 for an immediate) |
//! | `received-ranges` | GBytes, `=u8`\[k, 2\] | the payload byte ranges that arrived, as (start, end) pairs |
//! | `descriptors` | GstCaps | the descriptors this heap carried (its DESCRIPTOR items, as spead2's `Heap.get_descriptors()`): one `spead-descriptor` structure each (below); empty on most heaps |
//! | `stream-ctrl` | guint64 | STREAM_CTRL, only on a heap that carried it |
//!
//! A `spead-descriptor` structure: `id` (guint64), `name`, `description`, `format`
//! (e.g. `"u8,f32"`: type character and bits per field; empty when none), `dtype` (the
//! numpy header, empty when none) as strings, `shape` (GBytes, `=i8`, −1 for a
//! variable-length dimension).
//!
//! The descriptors are a `GstCaps` used as an immutable list of structures. A heap
//! lists only the descriptors it carried, as spead2's `Heap.get_descriptors()` does;
//! a reader keeps the latest one per id (spead2's `ItemGroup.update` does the same).
//! Listing every descriptor known on the stream with every heap would cost each heap
//! O(descriptors known): a flood of descriptor changes (one per bad packet) made that
//! a rebuild of the whole list per bad heap (`firehose bench hostile`,
//! descriptor-churn). A heap's own list costs what its own descriptor bytes cost, and
//! heaps without descriptors share one empty list by reference.

use std::sync::LazyLock;

use firehose_core::meta::custom::{Arrays, CustomMetaType};

use crate::descriptor;
use crate::descriptor::Descriptor;
use crate::heap::{HeapInfo, HeapItem, ItemValue};
use crate::wire::ids;

/// The heap meta's registered name (`FirehoseSpeadHeapMeta` is the Rust meta's).
pub const NAME: &str = "FirehoseHeapMeta";

/// The name of each descriptor's structure in `descriptors`.
pub const DESCRIPTOR_NAME: &str = "spead-descriptor";

/// The meta's fields, in [`CustomMetaType`] order.
pub const FIELDS: [&str; 13] = [
    "heap-cnt",
    "complete",
    "bytes-expected",
    "bytes-received",
    "heap-address-bits",
    "items",
    "descriptors",
    "item-ids",
    "item-immediate",
    "item-values",
    "item-lengths",
    "received-ranges",
    "stream-ctrl",
];

static HEAP: LazyLock<CustomMetaType> = LazyLock::new(|| CustomMetaType::register(NAME, &FIELDS));

/// Registers the meta (idempotent; also done on first use). Needs `gst::init`.
pub fn register() {
    LazyLock::force(&HEAP);
}

/// The list a heap without descriptors carries: one, shared by reference.
static NO_DESCRIPTORS: LazyLock<gst::Caps> = LazyLock::new(gst::Caps::new_empty);

/// The descriptors `items` of the heap in `buffer` carry, as a list of structures
/// (the shared empty list when none): a DESCRIPTOR item that does not parse is left
/// out, as the engine counted it already.
fn own_descriptors(buffer: &gst::BufferRef, items: &[HeapItem]) -> gst::Caps {
    let carried = |i: &HeapItem| match (&i.value, i.id) {
        (ItemValue::Bytes(r), ids::DESCRIPTOR) => Some(r.clone()),
        _ => None,
    };
    if !items.iter().any(|i| carried(i).is_some()) {
        return NO_DESCRIPTORS.clone();
    }
    let Ok(map) = buffer.map_readable() else {
        return NO_DESCRIPTORS.clone();
    };
    let mut caps = gst::Caps::new_empty();
    {
        let c = caps.get_mut().expect("a new caps is writable");
        for r in items.iter().filter_map(carried) {
            if let Some(Ok(d)) = map.get(r).map(descriptor::parse) {
                c.append_structure(descriptor_structure(&d));
            }
        }
    }
    caps
}

/// One descriptor as a structure.
pub fn descriptor_structure(d: &Descriptor) -> gst::Structure {
    let mut shape = Vec::with_capacity(d.shape.len() * 8);
    for dim in &d.shape {
        let v = dim.map_or(-1i64, |n| n.min(i64::MAX as u64) as i64);
        shape.extend_from_slice(&v.to_ne_bytes());
    }
    let format = d
        .format
        .iter()
        .map(|&(c, bits)| format!("{}{bits}", c as char))
        .collect::<Vec<_>>()
        .join(",");
    gst::Structure::builder(DESCRIPTOR_NAME)
        .field("id", d.id)
        .field("name", d.name.as_str())
        .field("description", d.description.as_str())
        .field("format", format)
        .field("dtype", d.dtype.as_deref().unwrap_or(""))
        .field("shape", gst::glib::Bytes::from_owned(shape))
        .build()
}

/// Attaches the readable heap meta describing `info` to `buffer`, whose size is the
/// heap's payload size.
pub fn add(buffer: &mut gst::BufferRef, info: &HeapInfo) {
    let n = info.items.len();
    let k = info.received.len();
    let mut a = Arrays::with_capacity(Arrays::room(n, 8) * 3 + Arrays::room(n, 1) + k * 16);
    let items = &info.items;
    a.array(n, |i| items[i].id.to_ne_bytes());
    a.array(n, |i| {
        [matches!(items[i].value, ItemValue::Immediate(_)) as u8]
    });
    a.array(n, |i| {
        match &items[i].value {
            ItemValue::Immediate(v) => *v,
            ItemValue::Bytes(r) => r.start as u64,
        }
        .to_ne_bytes()
    });
    a.array(n, |i| {
        match &items[i].value {
            ItemValue::Immediate(_) => 0,
            ItemValue::Bytes(r) => r.len() as u64,
        }
        .to_ne_bytes()
    });
    let received = &info.received;
    a.array(k * 2, |j| {
        let r = &received[j / 2];
        (if j % 2 == 0 { r.start } else { r.end } as u64).to_ne_bytes()
    });
    let expected = buffer.size() as u64;
    let received: u64 = info.received.iter().map(|r| r.len() as u64).sum();
    let descs = own_descriptors(buffer, &info.items);
    let t = &*HEAP;
    let s = t.add(buffer);
    t.set(s, 0, info.heap_cnt);
    t.set(s, 1, info.complete);
    t.set(s, 2, expected);
    t.set(s, 3, received);
    t.set(s, 4, info.flavour.heap_address_bits() as u32);
    t.set(s, 5, n as u64);
    t.set(s, 6, descs);
    a.finish(|i, b| t.set(s, 7 + i, b));
    if let Some(c) = info.stream_ctrl {
        t.set(s, 12, c);
    }
}

/// The readable heap meta's structure on `buffer`, if it has one.
pub fn get(buffer: &gst::BufferRef) -> Option<&gst::StructureRef> {
    HEAP.get(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::HeapItem;
    use crate::wire::Flavour;

    fn u64s(s: &gst::StructureRef, f: &str) -> Vec<u64> {
        let b = s.get::<gst::glib::Bytes>(f).unwrap();
        b.chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn desc(id: u64, name: &str) -> Descriptor {
        Descriptor {
            id,
            name: name.into(),
            description: format!("the {name}"),
            shape: vec![Some(4), None],
            format: vec![(b'u', 8), (b'f', 32)],
            dtype: None,
        }
    }

    fn info(items: Vec<HeapItem>) -> HeapInfo {
        HeapInfo {
            heap_cnt: 1 << 39 | 5,
            flavour: Flavour::SPEAD_64_48,
            items,
            descriptors: Default::default(),
            complete: false,
            received: vec![0..16, 24..40],
            stream_ctrl: Some(crate::wire::ctrl::STOP),
        }
    }

    fn plain_items() -> Vec<HeapItem> {
        vec![
            HeapItem {
                id: 0x1600,
                value: ItemValue::Immediate(77),
            },
            HeapItem {
                id: 0x1000,
                value: ItemValue::Bytes(8..40),
            },
        ]
    }

    /// A heap buffer of 40 payload bytes followed by `descs` encoded, with a
    /// DESCRIPTOR item for each after the plain items.
    fn heap_with(descs: &[Descriptor]) -> (gst::Buffer, HeapInfo) {
        let mut bytes = vec![0u8; 40];
        let mut items = plain_items();
        for d in descs {
            let e = descriptor::encode(d, Flavour::SPEAD_64_48);
            items.push(HeapItem {
                id: ids::DESCRIPTOR,
                value: ItemValue::Bytes(bytes.len()..bytes.len() + e.len()),
            });
            bytes.extend_from_slice(&e);
        }
        (gst::Buffer::from_mut_slice(bytes), info(items))
    }

    #[test]
    fn heap_fields_say_what_the_rust_meta_says() {
        gst::init().unwrap();
        let (mut buf, h) = heap_with(&[
            desc(0x1000, "data"),
            Descriptor {
                dtype: Some("{'descr': '<u2', 'fortran_order': False, 'shape': (8,)}".into()),
                ..desc(0x1600, "timestamp")
            },
        ]);
        let size = buf.size() as u64;
        add(buf.get_mut().unwrap(), &h);
        // What C and Python see: a custom meta by name.
        let meta = gst::meta::CustomMeta::from_buffer(&buf, NAME).unwrap();
        let s = meta.structure();
        assert_eq!(s.get::<u64>("heap-cnt"), Ok(h.heap_cnt));
        assert_eq!(s.get::<bool>("complete"), Ok(false));
        assert_eq!(s.get::<u64>("bytes-expected"), Ok(size));
        assert_eq!(s.get::<u64>("bytes-received"), Ok(32));
        assert_eq!(s.get::<u32>("heap-address-bits"), Ok(48));
        assert_eq!(s.get::<u64>("items"), Ok(4));
        assert_eq!(
            u64s(s, "item-ids"),
            vec![0x1600, 0x1000, ids::DESCRIPTOR, ids::DESCRIPTOR]
        );
        assert_eq!(
            s.get::<gst::glib::Bytes>("item-immediate")
                .unwrap()
                .to_vec(),
            vec![1, 0, 0, 0]
        );
        assert_eq!(u64s(s, "item-values")[..2], [77, 8]);
        assert_eq!(u64s(s, "item-lengths")[..2], [0, 32]);
        assert_eq!(u64s(s, "received-ranges"), vec![0, 16, 24, 40]);
        assert_eq!(s.get::<u64>("stream-ctrl"), Ok(crate::wire::ctrl::STOP));
        let caps = s.get::<gst::Caps>("descriptors").unwrap();
        assert_eq!(caps.size(), 2);
        let d = caps.structure(0).unwrap();
        assert_eq!(d.name(), DESCRIPTOR_NAME);
        assert_eq!(d.get::<u64>("id"), Ok(0x1000));
        assert_eq!(d.get::<&str>("name"), Ok("data"));
        assert_eq!(d.get::<&str>("description"), Ok("the data"));
        assert_eq!(d.get::<&str>("format"), Ok("u8,f32"));
        assert_eq!(d.get::<&str>("dtype"), Ok(""));
        // Signed: -1 for a dimension of no fixed length.
        let shape: Vec<i64> = u64s(d, "shape").into_iter().map(|v| v as i64).collect();
        assert_eq!(shape, vec![4, -1]);
        let d = caps.structure(1).unwrap();
        assert_eq!(d.get::<&str>("name"), Ok("timestamp"));
        assert!(d.get::<&str>("dtype").unwrap().contains("<u2"));
        assert!(get(&buf).is_some());
    }

    #[test]
    fn a_heap_lists_only_its_own_descriptors_and_stream_ctrl_only_if_sent() {
        gst::init().unwrap();
        let list = |(mut buf, mut h): (gst::Buffer, HeapInfo)| {
            h.stream_ctrl = None;
            add(buf.get_mut().unwrap(), &h);
            let s = get(&buf).unwrap();
            assert!(!s.has_field("stream-ctrl"));
            s.get::<gst::Caps>("descriptors").unwrap()
        };
        // Heaps without descriptors share one empty list, whatever the stream knows.
        let a = list(heap_with(&[]));
        let b = list(heap_with(&[]));
        assert_eq!(a.size(), 0);
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same empty list, by reference");
        let c = list(heap_with(&[desc(0x1001, "more")]));
        assert_eq!(c.size(), 1);
        assert_eq!(c.structure(0).unwrap().get::<&str>("name"), Ok("more"));
        // A DESCRIPTOR item that does not parse is left out, not an error.
        let (buf, mut h) = heap_with(&[desc(0x1002, "x")]);
        h.items.push(HeapItem {
            id: ids::DESCRIPTOR,
            value: ItemValue::Bytes(0..8),
        });
        assert_eq!(list((buf, h)).size(), 1);
    }
}
