//! The batch and chunk metas every language reads: `GstCustomMeta`s whose structures
//! repeat what the Rust metas ([`crate::PacketBatchMeta`],
//! [`super::chunk::ChunkMeta`]) say, as scalars and as numeric arrays in `GBytes`
//! (native byte order, each listed below with its numpy dtype), so that Python reads a
//! whole batch with `numpy.frombuffer` and C with `g_bytes_get_data`, no Rust involved.
//! docs/python.md shows both.
//!
//! Built once per buffer, in one pass over the packets or slots: the arrays share one
//! allocation, whatever the packet count (see [`super::custom::Arrays`]).
//!
//! `FirehoseBatchMeta` (on `application/x-firehose-packets` buffers):
//!
//! | field | type | |
//! |---|---|---|
//! | `packets` | guint64 | datagrams in the batch (n) |
//! | `offsets` | GBytes, `=u4`\[n\] | byte offset of each datagram in the buffer |
//! | `lengths` | GBytes, `=u4`\[n\] | its length in bytes |
//! | `timestamps` | GBytes, `=u8`\[n\] | receive time, ns since the Unix epoch (0: unknown): the kernel's per datagram where asked for (`fhudpsrc timestamps=true`), else the batch's |
//! | `addresses` | GBytes, `u1`\[n, 16\] | source address, IPv6 in network order; IPv4 as IPv4-mapped (`::ffff:a.b.c.d`) |
//! | `ports` | GBytes, `=u2`\[n\] | source port |
//! | `destinations` | GBytes, `u1`\[n, 16\] | destination address, as `addresses` (only from sources that know it: fhudpsrc, fhxdpsrc, fhdpdksrc, fhibvsrc; all zeros: unknown) |
//! | `destination-ports` | GBytes, `=u2`\[n\] | destination port (with `destinations`) |
//!
//! `FirehoseChunkInfoMeta` (on `application/x-firehose-chunk` buffers; slot `i` is
//! bytes `i × slot-size ..` of the buffer):
//!
//! | field | type | |
//! |---|---|---|
//! | `chunk-id` | guint64 | the chunk's number |
//! | `slots` | guint64 | slots (heaps, messages) per chunk (n) |
//! | `slot-size` | guint64 | bytes per slot |
//! | `slots-present` | guint64 | slots whose message is present |
//! | `packets`, `bytes` | guint64 | packets and payload bytes written into the chunk |
//! | `present` | GBytes, `u1`\[n\] | 1 where slot `i`'s message is present |
//! | `bytes-present` | GBytes, `=u8`\[n\] | payload bytes written into slot `i` |
//! | `packets-per-slot` | guint64 | packets tracked per slot (0: per-packet presence off) |
//! | `packet-present` | GBytes, `u1`\[n × packets-per-slot\] | 1 where packet `k` of slot `i` (index `i × packets-per-slot + k`) was written |

use std::sync::LazyLock;

use crate::meta::chunk::ChunkInfo;
use crate::meta::custom::{Arrays, CustomMetaType};
use crate::meta::dest::PacketDest;
use crate::packet::PacketInfo;

/// The batch meta's registered name.
pub const BATCH_NAME: &str = "FirehoseBatchMeta";
/// The chunk meta's registered name (`FirehoseChunkMeta` is the Rust meta's).
pub const CHUNK_NAME: &str = "FirehoseChunkInfoMeta";

/// The batch meta's fields, in [`CustomMetaType`] order.
pub const BATCH_FIELDS: [&str; 8] = [
    "packets",
    "offsets",
    "lengths",
    "timestamps",
    "addresses",
    "ports",
    "destinations",
    "destination-ports",
];

/// The chunk meta's fields, in [`CustomMetaType`] order.
pub const CHUNK_FIELDS: [&str; 10] = [
    "chunk-id",
    "slots",
    "slot-size",
    "slots-present",
    "packets",
    "bytes",
    "packets-per-slot",
    "present",
    "bytes-present",
    "packet-present",
];

static BATCH: LazyLock<CustomMetaType> =
    LazyLock::new(|| CustomMetaType::register(BATCH_NAME, &BATCH_FIELDS));
static CHUNK: LazyLock<CustomMetaType> =
    LazyLock::new(|| CustomMetaType::register(CHUNK_NAME, &CHUNK_FIELDS));

/// Registers both metas and [`RUST_ONLY_API`] (idempotent; also done on first use).
/// Needs `gst::init`.
pub fn register() {
    LazyLock::force(&BATCH);
    LazyLock::force(&CHUNK);
    LazyLock::force(&RUST_ONLY);
}

/// The property that switches these metas (and the SPEAD heap one) on and off, on
/// every element that attaches them.
pub const PROPERTY: &str = "readable-metas";
/// Its default: on (docs/python.md gives the measured cost).
pub const DEFAULT: bool = true;

/// The meta API type a Firehose consumer adds to the ALLOCATION query it answers to
/// say that it reads only the Rust metas (see [`ReadableOutput`]).
pub const RUST_ONLY_API: &str = "FirehoseRustMetasOnlyAPI";

/// [`RUST_ONLY_API`], registered once per process whichever plugin comes first.
static RUST_ONLY: LazyLock<gst::glib::Type> = LazyLock::new(|| {
    use gst::glib::translate::{from_glib, IntoGlib};
    let name = std::ffi::CString::new(RUST_ONLY_API).expect("no NUL");
    // SAFETY: a NUL-terminated name; g_type_from_name only reads it.
    let known: gst::glib::Type =
        unsafe { from_glib(gst::glib::gobject_ffi::g_type_from_name(name.as_ptr())) };
    if known.is_valid() {
        return known;
    }
    let tags: [*const std::ffi::c_char; 1] = [std::ptr::null()];
    // SAFETY: a NUL-terminated name and a NULL-terminated (empty) tag list, both alive
    // for the call; GStreamer keeps the type for the life of the process.
    let t: gst::glib::Type = unsafe {
        from_glib(gst::ffi::gst_meta_api_type_register(
            name.as_ptr(),
            tags.as_ptr() as *mut _,
        ))
    };
    let _ = t.into_glib();
    t
});

/// Says in `query` (an ALLOCATION query this consumer answers) that it reads only the
/// Rust metas, so that the element upstream may leave the readable ones out.
pub fn declare_rust_only(query: &mut gst::query::Allocation) {
    use gst::glib::translate::IntoGlib;
    // SAFETY: a valid, writable allocation query (we hold it mutably) and a registered
    // meta API type; no parameters.
    unsafe {
        gst::ffi::gst_query_add_allocation_meta(
            query.as_mut_ptr(),
            RUST_ONLY.into_glib(),
            std::ptr::null(),
        )
    };
}

/// Whether whoever answered `query` may read the readable metas: false only if every
/// consumer behind it declared [`declare_rust_only`] (a `tee` keeps a meta only when
/// every branch adds it, and fails the query if one branch does not answer).
pub fn downstream_may_read(query: &gst::query::Allocation) -> bool {
    use gst::glib::translate::IntoGlib;
    // SAFETY: a valid allocation query and a registered meta API type; the index out
    // parameter may be NULL.
    let found = unsafe {
        gst::ffi::gst_query_find_allocation_meta(
            query.as_ptr() as *mut _,
            RUST_ONLY.into_glib(),
            std::ptr::null_mut(),
        )
    };
    found == gst::glib::ffi::GFALSE
}

/// Whether an element attaches the readable metas to what it pushes: its
/// `readable-metas` setting, and what the ALLOCATION query said of its downstream.
///
/// Why: the readable metas cost about 1 µs per batch or heap to build, and a pipeline
/// whose every consumer is a Firehose element reads none of them. Those consumers
/// say so in the query ([`declare_rust_only`]); an appsink, a stock element or any
/// branch of a `tee` that does not say so keeps the metas on. A new branch triggers a
/// renegotiation, and with it a new query.
#[derive(Debug)]
pub struct ReadableOutput {
    setting: std::sync::atomic::AtomicBool,
    downstream: std::sync::atomic::AtomicBool,
}

impl Default for ReadableOutput {
    fn default() -> Self {
        Self {
            setting: std::sync::atomic::AtomicBool::new(DEFAULT),
            downstream: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl ReadableOutput {
    /// At start: the `readable-metas` setting; downstream may read until a query says
    /// otherwise.
    pub fn start(&self, setting: bool) {
        use std::sync::atomic::Ordering;
        self.setting.store(setting, Ordering::Relaxed);
        self.downstream.store(true, Ordering::Relaxed);
    }

    /// From `decide_allocation`: what downstream's answer to the allocation query says
    /// (`None`: nobody answered, so someone may read them).
    pub fn decide(&self, element: &gst::Element, answer: Option<&gst::query::Allocation>) {
        use std::sync::atomic::Ordering;
        let may_read = answer.is_none_or(downstream_may_read);
        let was = self.downstream.swap(may_read, Ordering::Relaxed);
        if was != may_read && self.setting.load(Ordering::Relaxed) {
            gst::debug!(
                gst::CAT_RUST,
                obj = element,
                "readable metas {}",
                if may_read {
                    "on: a consumer downstream may read them"
                } else {
                    "off: every consumer downstream reads only the Rust metas"
                }
            );
        }
    }

    /// Whether to attach the readable metas now.
    pub fn wanted(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.setting.load(Ordering::Relaxed) && self.downstream.load(Ordering::Relaxed)
    }
}

/// The `readable-metas` property's spec (a fresh one: each class owns its specs).
pub fn param_spec() -> gst::glib::ParamSpec {
    use gst::prelude::*;
    gst::glib::ParamSpecBoolean::builder(PROPERTY)
        .nick("Readable metas")
        .blurb("Attach the metas every language reads (FirehoseBatchMeta, FirehoseHeapMeta, FirehoseChunkInfoMeta: structures with numpy-ready arrays, see docs/python.md) beside the Rust ones, unless every consumer downstream is a Firehose element that reads only the Rust ones (it says so in the allocation query); false: never")
        .default_value(DEFAULT)
        .mutable_ready()
        .build()
}

/// Attaches the readable batch meta describing `packets` to `buffer`, with their
/// destinations where the source knows them (`dests`, one per packet).
pub fn add_batch(
    buffer: &mut gst::BufferRef,
    packets: &[PacketInfo],
    dests: Option<&[PacketDest]>,
) {
    let n = packets.len();
    let d = dests.map_or(0, |d| d.len().min(n));
    let mut a = Arrays::with_capacity(
        Arrays::room(n, 4) * 2
            + Arrays::room(n, 8)
            + Arrays::room(n, 16)
            + Arrays::room(n, 2)
            + Arrays::room(d, 16)
            + Arrays::room(d, 2),
    );
    a.array(n, |i| packets[i].offset.to_ne_bytes());
    a.array(n, |i| packets[i].len.to_ne_bytes());
    a.array(n, |i| packets[i].rx_time_ns.to_ne_bytes());
    a.array(n, |i| packets[i].src.octets().0);
    a.array(n, |i| packets[i].src.octets().1.to_ne_bytes());
    if let Some(dests) = dests {
        a.array(d, |i| dests[i].dst.octets().0);
        a.array(d, |i| dests[i].dst.octets().1.to_ne_bytes());
    }
    let t = &*BATCH;
    let s = t.add(buffer);
    t.set(s, 0, n as u64);
    a.finish(|i, b| t.set_owned(s, i + 1, b));
}

/// Attaches the readable chunk meta describing `info` to `buffer`; `bytes_present`
/// holds the payload bytes written into each slot (one entry per slot; missing
/// entries read 0).
pub fn add_chunk(buffer: &mut gst::BufferRef, info: &ChunkInfo, bytes_present: &[u64]) {
    let n = info.slots;
    let pp = info.packets_per_slot;
    let mut a =
        Arrays::with_capacity(Arrays::room(n, 1) + Arrays::room(n, 8) + Arrays::room(n * pp, 1));
    a.array(n, |i| [info.is_present(i) as u8]);
    a.array(n, |i| {
        bytes_present.get(i).copied().unwrap_or(0).to_ne_bytes()
    });
    let bits = if pp > 0 { n * pp } else { 0 };
    a.array(bits, |b| [info.is_packet_present(b / pp, b % pp) as u8]);
    let t = &*CHUNK;
    let s = t.add(buffer);
    t.set(s, 0, info.chunk_id);
    t.set(s, 1, n as u64);
    t.set(s, 2, info.slot_size as u64);
    t.set(s, 3, info.slots_present as u64);
    t.set(s, 4, info.packets);
    t.set(s, 5, info.bytes);
    t.set(s, 6, pp as u64);
    a.finish(|i, b| t.set_owned(s, 7 + i, b));
}

/// The readable batch meta's API type (to find or remove it among a buffer's metas).
pub fn batch_api() -> gst::glib::Type {
    BATCH.api()
}

/// The readable batch meta's structure on `buffer`, if it has one.
pub fn batch(buffer: &gst::BufferRef) -> Option<&gst::StructureRef> {
    BATCH.get(buffer)
}

/// The readable chunk meta's structure on `buffer`, if it has one.
pub fn chunk(buffer: &gst::BufferRef) -> Option<&gst::StructureRef> {
    CHUNK.get(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PacketBatchMeta;
    use std::net::SocketAddr;

    #[test]
    fn a_consumer_that_declares_rust_only_turns_them_off_and_nothing_else_does() {
        gst::init().unwrap();
        let el = gst::ElementFactory::make("identity").build().unwrap();
        let caps = gst::Caps::new_empty_simple("application/x-test");
        let out = ReadableOutput::default();
        out.start(true);
        assert!(out.wanted(), "on until a query says otherwise");
        let unanswered = gst::query::Allocation::new(Some(&caps), false);
        assert!(downstream_may_read(&unanswered));
        out.decide(&el, Some(&unanswered));
        assert!(out.wanted());
        let mut declared = gst::query::Allocation::new(Some(&caps), false);
        declare_rust_only(&mut declared);
        assert!(!downstream_may_read(&declared));
        out.decide(&el, Some(&declared));
        assert!(!out.wanted());
        // A later query (a new branch) turns them back on; a fresh start too.
        out.decide(&el, Some(&unanswered));
        assert!(out.wanted());
        out.decide(&el, Some(&declared));
        out.start(true);
        assert!(out.wanted());
        out.decide(&el, Some(&declared));
        out.decide(&el, None);
        assert!(out.wanted(), "no answer: someone may read them");
        // Off by setting whatever downstream says.
        out.start(false);
        out.decide(&el, Some(&unanswered));
        assert!(!out.wanted());
        // Registered once: the type is found by name again.
        assert_eq!(RUST_ONLY.name(), RUST_ONLY_API);
        assert_eq!(gst::glib::Type::from_name(RUST_ONLY_API), Some(*RUST_ONLY));
    }

    fn bytes_field(s: &gst::StructureRef, name: &str) -> Vec<u8> {
        s.get::<gst::glib::Bytes>(name).unwrap().to_vec()
    }

    fn ne<const N: usize, T>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        assert_eq!(b.len() % N, 0);
        b.chunks_exact(N)
            .map(|c| f(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn batch_fields_say_what_the_rust_meta_says() {
        gst::init().unwrap();
        let srcs: [SocketAddr; 3] = [
            "10.1.2.3:7148".parse().unwrap(),
            "[2001:db8::5]:9".parse().unwrap(),
            "127.0.0.1:65535".parse().unwrap(),
        ];
        let packets: Vec<PacketInfo> = srcs
            .iter()
            .enumerate()
            .map(|(i, a)| PacketInfo {
                offset: 100 * i as u32 + 3,
                len: 10 + i as u32,
                rx_time_ns: 1_700_000_000_000_000_000 + i as u64,
                src: (*a).into(),
            })
            .collect();
        let mut buf = gst::Buffer::with_size(400).unwrap();
        add_batch(buf.get_mut().unwrap(), &packets, None);
        PacketBatchMeta::add(buf.get_mut().unwrap(), packets.clone());
        // What C and Python see: a custom meta by name.
        let meta = gst::meta::CustomMeta::from_buffer(&buf, BATCH_NAME).unwrap();
        let s = meta.structure();
        assert_eq!(s.get::<u64>("packets"), Ok(3));
        assert_eq!(
            ne(&bytes_field(s, "offsets"), u32::from_ne_bytes),
            vec![3, 103, 203]
        );
        assert_eq!(
            ne(&bytes_field(s, "lengths"), u32::from_ne_bytes),
            vec![10, 11, 12]
        );
        assert_eq!(
            ne(&bytes_field(s, "timestamps"), u64::from_ne_bytes),
            packets.iter().map(|p| p.rx_time_ns).collect::<Vec<_>>()
        );
        assert_eq!(
            ne(&bytes_field(s, "ports"), u16::from_ne_bytes),
            vec![7148, 9, 65535]
        );
        let addrs = bytes_field(s, "addresses");
        assert_eq!(addrs.len(), 48);
        assert_eq!(
            &addrs[..16],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        assert_eq!(
            &addrs[16..32],
            &"2001:db8::5"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(&addrs[44..48], &[127, 0, 0, 1]);
        // C casts each array's pointer: every one starts 8-byte aligned.
        for f in &BATCH_FIELDS[1..6] {
            let b = s.get::<gst::glib::Bytes>(*f).unwrap();
            assert_eq!(b.as_ptr() as usize % 8, 0, "{f}");
        }
        // No destinations from a source that does not know them.
        assert!(!s.has_field("destinations") && !s.has_field("destination-ports"));
        assert!(batch(&buf).is_some());
        // A copy keeps it (custom metas copy their structure).
        assert_eq!(batch(&buf.copy()).unwrap().get::<u64>("packets"), Ok(3));
    }

    #[test]
    fn destinations_come_as_the_sources_do_and_aligned() {
        gst::init().unwrap();
        let packets: Vec<PacketInfo> = (0..2)
            .map(|i| PacketInfo {
                offset: 8 * i,
                len: 8,
                rx_time_ns: 0,
                src: "10.0.0.9:5".parse::<std::net::SocketAddr>().unwrap().into(),
            })
            .collect();
        let dests = [
            PacketDest {
                dst: "10.211.0.1:7148"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
                header_len: 0,
            },
            PacketDest {
                dst: "[ff02::1]:9"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
                header_len: 42,
            },
        ];
        let mut buf = gst::Buffer::with_size(16).unwrap();
        add_batch(buf.get_mut().unwrap(), &packets, Some(&dests));
        let s = batch(&buf).unwrap();
        let d = bytes_field(s, "destinations");
        assert_eq!(
            &d[..16],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 211, 0, 1]
        );
        assert_eq!(
            &d[16..],
            &"ff02::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(
            ne(&bytes_field(s, "destination-ports"), u16::from_ne_bytes),
            vec![7148, 9]
        );
        for f in &BATCH_FIELDS[1..] {
            let b = s.get::<gst::glib::Bytes>(*f).unwrap();
            assert_eq!(b.as_ptr() as usize % 8, 0, "{f}");
        }
    }

    #[test]
    fn an_empty_batch_has_empty_arrays() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::new();
        add_batch(buf.get_mut().unwrap(), &[], Some(&[]));
        let s = batch(&buf).unwrap();
        assert_eq!(s.get::<u64>("packets"), Ok(0));
        for f in &BATCH_FIELDS[1..] {
            assert!(bytes_field(s, f).is_empty(), "{f}");
        }
    }

    #[test]
    fn chunk_fields_say_what_the_rust_meta_says() {
        gst::init().unwrap();
        // 70 slots (two bitmap words), 2 packets per slot.
        let slots = 70;
        let mut present = vec![0u64; 2];
        let mut packet_present = vec![0u64; 3];
        for i in [0usize, 5, 64, 69] {
            present[i / 64] |= 1 << (i % 64);
            let b = i * 2 + 1;
            packet_present[b / 64] |= 1 << (b % 64);
        }
        let info = ChunkInfo {
            chunk_id: 1 << 33 | 9,
            slots,
            slot_size: 4096,
            present,
            slots_present: 4,
            packets_per_slot: 2,
            packet_present,
            packets: 4,
            bytes: 4000,
        };
        let bytes: Vec<u64> = (0..slots as u64).map(|i| i * 3).collect();
        let mut buf = gst::Buffer::new();
        add_chunk(buf.get_mut().unwrap(), &info, &bytes);
        let meta = gst::meta::CustomMeta::from_buffer(&buf, CHUNK_NAME).unwrap();
        let s = meta.structure();
        assert_eq!(s.get::<u64>("chunk-id"), Ok(info.chunk_id));
        assert_eq!(s.get::<u64>("slots"), Ok(70));
        assert_eq!(s.get::<u64>("slot-size"), Ok(4096));
        assert_eq!(s.get::<u64>("slots-present"), Ok(4));
        assert_eq!(s.get::<u64>("packets"), Ok(4));
        assert_eq!(s.get::<u64>("bytes"), Ok(4000));
        assert_eq!(s.get::<u64>("packets-per-slot"), Ok(2));
        let p = bytes_field(s, "present");
        let want: Vec<u8> = (0..slots).map(|i| info.is_present(i) as u8).collect();
        assert_eq!(p, want);
        assert_eq!(p.iter().filter(|&&b| b == 1).count(), 4);
        assert_eq!(
            ne(&bytes_field(s, "bytes-present"), u64::from_ne_bytes),
            bytes
        );
        let pp = bytes_field(s, "packet-present");
        assert_eq!(pp.len(), 140);
        let set: Vec<usize> = (0..140).filter(|&b| pp[b] == 1).collect();
        assert_eq!(set, vec![1, 11, 129, 139]);
        assert!(chunk(&buf).is_some());
        assert!(batch(&buf).is_none());
    }

    #[test]
    fn registering_again_is_harmless() {
        gst::init().unwrap();
        let fatal = gst::glib::LogLevels::LEVEL_CRITICAL | gst::glib::LogLevels::LEVEL_WARNING;
        gst::glib::log_set_fatal_mask(Some("GLib-GObject"), fatal);
        gst::glib::log_set_fatal_mask(Some("GStreamer"), fatal);
        register();
        // What another plugin's copy of this crate does: its statics are fresh.
        let again = CustomMetaType::register(BATCH_NAME, &BATCH_FIELDS);
        assert_eq!(again.name(), BATCH_NAME);
        let mut buf = gst::Buffer::new();
        add_batch(buf.get_mut().unwrap(), &[], None);
        assert!(again.get(&buf).is_some());
    }
}
