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
//! | `descriptors` | GstCaps | every descriptor known on the stream when the heap was finished: one `spead-descriptor` structure each (below) |
//! | `stream-ctrl` | guint64 | STREAM_CTRL, only on a heap that carried it |
//!
//! A `spead-descriptor` structure: `id` (guint64), `name`, `description`, `format`
//! (e.g. `"u8,f32"`: type character and bits per field; empty when none), `dtype` (the
//! numpy header, empty when none) as strings, `shape` (GBytes, `=i8`, −1 for a
//! variable-length dimension).
//!
//! The descriptors are a refcounted `GstCaps` used as an immutable list of structures:
//! a heap takes a reference to the list built when the stream's descriptors last
//! changed (rebuilt on the streaming thread, once per change; see
//! [`crate::descset`]), so a heap costs the same however many descriptors the stream
//! has.

use std::cell::RefCell;
use std::sync::LazyLock;

use firehose_core::meta::custom::{Arrays, CustomMetaType};

use crate::descriptor::Descriptor;
use crate::descset::DescriptorSet;
use crate::heap::{HeapInfo, ItemValue};

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

thread_local! {
    /// The descriptor list last built on this (streaming) thread, and the set it lists.
    static DESCRIPTORS: RefCell<Option<(DescriptorSet, gst::Caps)>> = const { RefCell::new(None) };
}

/// The descriptors of `set` as a list of structures: the one built last on this thread
/// when `set` is the same moment of the same stream (a reference, O(1)), else a new one.
fn descriptors(set: &DescriptorSet) -> gst::Caps {
    DESCRIPTORS.with_borrow_mut(|cached| {
        if let Some((s, caps)) = cached {
            if s.same_as(set) || (s.is_empty() && set.is_empty()) {
                return caps.clone();
            }
        }
        let caps = descriptor_caps(set);
        *cached = Some((set.clone(), caps.clone()));
        caps
    })
}

/// Builds the structure list of `set`.
fn descriptor_caps(set: &DescriptorSet) -> gst::Caps {
    let mut caps = gst::Caps::new_empty();
    {
        let c = caps.get_mut().expect("a new caps is writable");
        for d in set.iter() {
            c.append_structure(descriptor_structure(d));
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
    let descs = descriptors(&info.descriptors);
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
    use crate::descset::DescriptorTable;
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

    fn info(descriptors: DescriptorSet) -> HeapInfo {
        HeapInfo {
            heap_cnt: 1 << 39 | 5,
            flavour: Flavour::SPEAD_64_48,
            items: vec![
                HeapItem {
                    id: 0x1600,
                    value: ItemValue::Immediate(77),
                },
                HeapItem {
                    id: 0x1000,
                    value: ItemValue::Bytes(8..40),
                },
            ],
            descriptors,
            complete: false,
            received: vec![0..16, 24..40],
            stream_ctrl: Some(crate::wire::ctrl::STOP),
        }
    }

    #[test]
    fn heap_fields_say_what_the_rust_meta_says() {
        gst::init().unwrap();
        let mut table = DescriptorTable::new(8);
        table.upsert(desc(0x1000, "data"));
        table.upsert(Descriptor {
            dtype: Some("{'descr': '<u2', 'fortran_order': False, 'shape': (8,)}".into()),
            ..desc(0x1600, "timestamp")
        });
        let h = info(table.snapshot());
        let mut buf = gst::Buffer::with_size(40).unwrap();
        add(buf.get_mut().unwrap(), &h);
        // What C and Python see: a custom meta by name.
        let meta = gst::meta::CustomMeta::from_buffer(&buf, NAME).unwrap();
        let s = meta.structure();
        assert_eq!(s.get::<u64>("heap-cnt"), Ok(h.heap_cnt));
        assert_eq!(s.get::<bool>("complete"), Ok(false));
        assert_eq!(s.get::<u64>("bytes-expected"), Ok(40));
        assert_eq!(s.get::<u64>("bytes-received"), Ok(32));
        assert_eq!(s.get::<u32>("heap-address-bits"), Ok(48));
        assert_eq!(s.get::<u64>("items"), Ok(2));
        assert_eq!(u64s(s, "item-ids"), vec![0x1600, 0x1000]);
        assert_eq!(
            s.get::<gst::glib::Bytes>("item-immediate")
                .unwrap()
                .to_vec(),
            vec![1, 0]
        );
        assert_eq!(u64s(s, "item-values"), vec![77, 8]);
        assert_eq!(u64s(s, "item-lengths"), vec![0, 32]);
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
        let shape: Vec<i64> = d
            .get::<gst::glib::Bytes>("shape")
            .unwrap()
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(shape, vec![4, -1]);
        let d = caps.structure(1).unwrap();
        assert_eq!(d.get::<&str>("name"), Ok("timestamp"));
        assert!(d.get::<&str>("dtype").unwrap().contains("<u2"));
        assert!(get(&buf).is_some());
    }

    #[test]
    fn descriptors_are_shared_until_they_change_and_stream_ctrl_is_absent_unless_sent() {
        gst::init().unwrap();
        let mut table = DescriptorTable::new(8);
        table.upsert(desc(0x1000, "data"));
        let mut h = info(table.snapshot());
        h.stream_ctrl = None;
        let list = |h: &HeapInfo| {
            let mut buf = gst::Buffer::with_size(40).unwrap();
            add(buf.get_mut().unwrap(), h);
            let s = get(&buf).unwrap();
            assert!(!s.has_field("stream-ctrl"));
            s.get::<gst::Caps>("descriptors").unwrap()
        };
        let a = list(&h);
        let b = list(&h);
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same list, by reference");
        table.upsert(desc(0x1001, "more"));
        h.descriptors = table.snapshot();
        let c = list(&h);
        assert_ne!(a.as_ptr(), c.as_ptr());
        assert_eq!(c.size(), 2);
        assert_eq!(a.size(), 1, "a list already handed out does not change");
        h.descriptors = DescriptorSet::default();
        assert_eq!(list(&h).size(), 0);
    }
}
