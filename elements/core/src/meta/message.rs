//! The message meta: what one buffer holding one message (a SPEAD heap, a chunk, a
//! handler's message) says about it, readable from Rust, C and Python.
//!
//! Unlike the Rust-only metas of [`crate::rust_meta!`], this one is a `GstCustomMeta`
//! named [`NAME`] whose `GstStructure` holds the fields, so any language reads it:
//!
//! ```text
//! meta = buf.get_custom_meta("FirehoseMessageMeta")
//! s = meta.get_structure()   # id (guint64), complete (gboolean),
//!                            # bytes-expected, bytes-received (guint64)
//! ```
//!
//! Engines attach it next to their own richer metas (heap items, chunk presence), so a
//! consumer that only needs "which message, did all of it arrive" (the recorder) depends
//! on nothing but this crate.
//!
//! Registration is once per process, and safe to ask for again: both Firehose plugins
//! link their own copy of this crate (each with its own statics), so [`register`] asks
//! GStreamer whether the name is taken before registering it. Plugins are loaded under
//! GStreamer's plugin-loading lock, so two copies never register at the same moment.

use std::sync::OnceLock;

use gst::glib;
use gst::glib::translate::{from_glib, IntoGlib};

/// The custom meta's registered name, as C and Python ask for it.
pub const NAME: &str = "FirehoseMessageMeta";

/// Structure field: the message id (SPEAD heap cnt, chunk id), `guint64`.
pub const FIELD_ID: &str = "id";
/// Structure field: every byte of the message arrived, `gboolean`.
pub const FIELD_COMPLETE: &str = "complete";
/// Structure field: bytes the whole message holds (0: unknown), `guint64`.
pub const FIELD_BYTES_EXPECTED: &str = "bytes-expected";
/// Structure field: payload bytes that arrived, `guint64`.
pub const FIELD_BYTES_RECEIVED: &str = "bytes-received";

/// What the meta says about one message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The message id: SPEAD HEAP_CNT, a chunk's id.
    pub id: u64,
    /// Every byte of the message arrived.
    pub complete: bool,
    /// Bytes the whole message holds, when known (0: unknown).
    pub bytes_expected: u64,
    /// Payload bytes that arrived.
    pub bytes_received: u64,
}

/// The registered meta and its field quarks, looked up once: setting and reading fields
/// by quark skips GLib's global quark lock that a field name string takes each time.
struct Registered {
    info: *const gst::ffi::GstMetaInfo,
    id: glib::Quark,
    complete: glib::Quark,
    expected: glib::Quark,
    received: glib::Quark,
}

// SAFETY: a GstMetaInfo is immutable after registration and lives as long as the
// process; quarks are plain integers.
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

/// Registers the meta with GStreamer if no one has (idempotent, also across the copies
/// of this crate that separate plugins link). Needs `gst::init`.
pub fn register() {
    registered();
}

fn registered() -> &'static Registered {
    static REG: OnceLock<Registered> = OnceLock::new();
    REG.get_or_init(|| {
        register_custom();
        let name = std::ffi::CString::new(NAME).expect("no NUL");
        // SAFETY: a NUL-terminated name; the info returned is owned by GStreamer for the
        // life of the process.
        let info = unsafe { gst::ffi::gst_meta_get_info(name.as_ptr()) };
        assert!(!info.is_null(), "{NAME} is registered");
        Registered {
            info,
            id: glib::Quark::from_str(FIELD_ID),
            complete: glib::Quark::from_str(FIELD_COMPLETE),
            expected: glib::Quark::from_str(FIELD_BYTES_EXPECTED),
            received: glib::Quark::from_str(FIELD_BYTES_RECEIVED),
        }
    })
}

/// Registers the custom meta unless the name is already registered (by another copy of
/// this crate): a second `gst_meta_register_custom` of one name fails with criticals.
fn register_custom() {
    if !gst::meta::CustomMeta::is_registered(NAME) {
        gst::meta::CustomMeta::register(NAME, &[]);
    }
}

/// Attaches `m` to `buffer` as its message meta (registering the meta if needed).
pub fn add(buffer: &mut gst::BufferRef, m: &Message) {
    let reg = registered();
    // SAFETY: `info` is the registered custom meta's; a custom meta's init ignores the
    // params and makes its empty structure, which the returned pointer owns.
    let meta = unsafe {
        gst::ffi::gst_buffer_add_meta(buffer.as_mut_ptr(), reg.info, std::ptr::null_mut())
            as *mut gst::ffi::GstCustomMeta
    };
    assert!(!meta.is_null(), "adding a custom meta cannot fail");
    // SAFETY: the meta was just added to a buffer we hold mutably; its structure is
    // owned by the meta and nothing else refers to it yet.
    let s = unsafe {
        gst::StructureRef::from_glib_borrow_mut(gst::ffi::gst_custom_meta_get_structure(meta))
    };
    #[allow(deprecated)] // The quark setters are the ones that skip the quark lock on 1.22.
    {
        s.set_value_by_quark(reg.id, glib::SendValue::from_owned(m.id));
        s.set_value_by_quark(reg.complete, glib::SendValue::from_owned(m.complete));
        s.set_value_by_quark(reg.expected, glib::SendValue::from_owned(m.bytes_expected));
        s.set_value_by_quark(reg.received, glib::SendValue::from_owned(m.bytes_received));
    }
}

/// The message meta of `buffer`, if it has one (and its fields are of the right types).
pub fn read(buffer: &gst::BufferRef) -> Option<Message> {
    let reg = registered();
    // SAFETY: `info` is the registered custom meta's API; the meta found (if any) lives
    // as long as `buffer`, which outlives this function's use of it.
    let s = unsafe {
        let api: glib::Type = from_glib((*reg.info).api);
        let meta = gst::ffi::gst_buffer_get_meta(buffer.as_mut_ptr(), api.into_glib());
        if meta.is_null() {
            return None;
        }
        gst::StructureRef::from_glib_borrow(gst::ffi::gst_custom_meta_get_structure(
            meta as *mut gst::ffi::GstCustomMeta,
        ))
    };
    #[allow(deprecated)]
    Some(Message {
        id: s.get_by_quark(reg.id).ok()?,
        complete: s.get_by_quark(reg.complete).ok()?,
        bytes_expected: s.get_by_quark(reg.expected).ok()?,
        bytes_received: s.get_by_quark(reg.received).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_fields_read_back_from_rust_and_by_name() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::with_size(16).unwrap();
        let m = Message {
            id: 1 << 40 | 7,
            complete: false,
            bytes_expected: 16,
            bytes_received: 12,
        };
        add(buf.get_mut().unwrap(), &m);
        assert_eq!(read(&buf), Some(m));
        // What C and Python see: a custom meta by name, with a plain structure.
        let meta = gst::meta::CustomMeta::from_buffer(&buf, NAME).unwrap();
        let s = meta.structure();
        assert_eq!(s.get::<u64>(FIELD_ID), Ok(m.id));
        assert_eq!(s.get::<bool>(FIELD_COMPLETE), Ok(false));
        assert_eq!(s.get::<u64>(FIELD_BYTES_EXPECTED), Ok(16));
        assert_eq!(s.get::<u64>(FIELD_BYTES_RECEIVED), Ok(12));
    }

    #[test]
    fn a_buffer_without_it_reads_none_and_a_copy_keeps_it() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::with_size(4).unwrap();
        assert_eq!(read(&buf), None);
        let m = Message {
            id: 3,
            complete: true,
            bytes_expected: 4,
            bytes_received: 4,
        };
        add(buf.get_mut().unwrap(), &m);
        let copy = buf.copy_deep().unwrap();
        assert_eq!(read(&copy), Some(m));
    }

    #[test]
    fn registering_again_is_harmless() {
        gst::init().unwrap();
        // A second registration's GObject warning or GStreamer critical aborts the test.
        let fatal = glib::LogLevels::LEVEL_CRITICAL | glib::LogLevels::LEVEL_WARNING;
        glib::log_set_fatal_mask(Some("GLib-GObject"), fatal);
        glib::log_set_fatal_mask(Some("GStreamer"), fatal);
        register();
        register();
        // What a second plugin's copy of this crate does: its own statics are fresh,
        // so it reaches GStreamer's registry, which already has the name.
        register_custom();
        register_custom();
        assert!(gst::meta::CustomMeta::is_registered(NAME));
        let mut buf = gst::Buffer::new();
        add(buf.get_mut().unwrap(), &Message::default());
        assert_eq!(read(&buf), Some(Message::default()));
    }
}
