//! The plumbing of the metas every language reads: a `GstCustomMeta` (a named meta whose
//! only content is a `GstStructure`), registered once per process, with its fields set
//! by quark; and [`Arrays`], numeric arrays packed into one `GBytes` allocation and
//! handed out as `GBytes` views, which numpy reads without a loop
//! (`numpy.frombuffer(s.get_value("offsets").get_data(), dtype="=u4")`).
//!
//! [`super::message`] predates this module and does the same by hand; [`super::readable`]
//! (batches, chunks) and the SPEAD crate's heap meta use it.

use gst::glib;
use gst::glib::translate::{from_glib, IntoGlib};

/// A registered custom meta: its `GstMetaInfo` and the quarks of its fields.
pub struct CustomMetaType {
    name: &'static str,
    info: *const gst::ffi::GstMetaInfo,
    quarks: Vec<glib::Quark>,
}

// SAFETY: a GstMetaInfo is immutable after registration and lives as long as the
// process; quarks are plain integers.
unsafe impl Send for CustomMetaType {}
// SAFETY: as above.
unsafe impl Sync for CustomMetaType {}

impl CustomMetaType {
    /// Registers the custom meta `name` unless it is registered already (each Firehose
    /// plugin links its own copy of this crate, and a second registration of a name
    /// fails with criticals), and looks up the quarks of `fields` once: setting fields
    /// by quark skips GLib's global quark lock that a field name string takes each time.
    /// Needs `gst::init`; keep the result in a `static` (`LazyLock`).
    pub fn register(name: &'static str, fields: &[&str]) -> Self {
        if !gst::meta::CustomMeta::is_registered(name) {
            gst::meta::CustomMeta::register(name, &[]);
        }
        let cname = std::ffi::CString::new(name).expect("no NUL in a meta name");
        // SAFETY: a NUL-terminated name; the info returned is owned by GStreamer for the
        // life of the process.
        let info = unsafe { gst::ffi::gst_meta_get_info(cname.as_ptr()) };
        assert!(!info.is_null(), "{name} is registered");
        Self {
            name,
            info,
            quarks: fields.iter().map(|f| glib::Quark::from_str(*f)).collect(),
        }
    }

    /// The meta's registered name, as C and Python ask for it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The meta's API type (what `gst_meta_api_type_has_tag`, `meta.api()` compare).
    pub fn api(&self) -> glib::Type {
        // SAFETY: `info` is a registered GstMetaInfo, immutable and alive for ever.
        unsafe { from_glib((*self.info).api) }
    }

    /// The quark of field `i` (in the order given to [`Self::register`]).
    pub fn quark(&self, i: usize) -> glib::Quark {
        self.quarks[i]
    }

    /// Adds the meta to `buffer` and returns its (empty) structure to fill.
    pub fn add<'a>(&self, buffer: &'a mut gst::BufferRef) -> &'a mut gst::StructureRef {
        // SAFETY: `info` is a registered custom meta's; a custom meta's init ignores the
        // params and makes its empty structure, which the returned meta owns.
        let meta = unsafe {
            gst::ffi::gst_buffer_add_meta(buffer.as_mut_ptr(), self.info, std::ptr::null_mut())
                as *mut gst::ffi::GstCustomMeta
        };
        assert!(!meta.is_null(), "adding a custom meta cannot fail");
        // SAFETY: the meta was just added to a buffer we hold mutably (for 'a); its
        // structure is owned by the meta and nothing else refers to it yet.
        unsafe {
            gst::StructureRef::from_glib_borrow_mut(gst::ffi::gst_custom_meta_get_structure(meta))
        }
    }

    /// The structure of this meta on `buffer`, if it has one.
    pub fn get<'a>(&self, buffer: &'a gst::BufferRef) -> Option<&'a gst::StructureRef> {
        // SAFETY: `info` is the registered custom meta's; the meta found (if any) and its
        // structure live as long as `buffer`.
        unsafe {
            let api: glib::Type = from_glib((*self.info).api);
            let meta = gst::ffi::gst_buffer_get_meta(buffer.as_mut_ptr(), api.into_glib());
            if meta.is_null() {
                return None;
            }
            Some(gst::StructureRef::from_glib_borrow(
                gst::ffi::gst_custom_meta_get_structure(meta as *mut gst::ffi::GstCustomMeta),
            ))
        }
    }

    /// Sets field `i` of `s` to `v`.
    pub fn set(&self, s: &mut gst::StructureRef, i: usize, v: impl glib::value::ToSendValue) {
        #[allow(deprecated)] // The quark setter is the one that skips the quark lock on 1.22.
        s.set_value_by_quark(self.quarks[i], v.to_send_value());
    }

    /// Sets field `i` of `s` to `v`, handing `v` itself to the structure: for a boxed
    /// value (a `GBytes`) no reference taken for the field and dropped after, as
    /// [`Self::set`] does. The arrays of [`Arrays::finish`] go in this way.
    pub fn set_owned(&self, s: &mut gst::StructureRef, i: usize, v: impl Into<glib::Value> + Send) {
        #[allow(deprecated)] // As in `set`.
        s.set_value_by_quark(self.quarks[i], glib::SendValue::from_owned(v));
    }
}

/// Numeric arrays written one after the other into one allocation, each starting at a
/// multiple of 8 bytes, then shared as one `GBytes` with a `GBytes` view per array: two
/// allocations for the storage, one small one per array, whatever the element count.
///
/// Values are in native byte order (numpy dtype `=u4`, `=u8`, …). The block comes from
/// the system allocator (malloc: aligned for any type), so every array starts 8-byte
/// aligned and C may cast its pointer.
#[derive(Debug, Default)]
pub struct Arrays {
    buf: Vec<u8>,
    /// Each array's byte range in `buf` (the last one's end is set by `finish`).
    ranges: [(usize, usize); Arrays::MAX],
    count: usize,
}

impl Arrays {
    /// The most arrays one `Arrays` holds.
    pub const MAX: usize = 8;

    /// Storage for arrays of `bytes` bytes in all (padding included: give the sum of
    /// [`Arrays::room`] of each array).
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            buf: Vec::with_capacity(bytes),
            ..Self::default()
        }
    }

    /// Bytes an array of `n` elements of `size` bytes takes here, padding included.
    pub fn room(n: usize, size: usize) -> usize {
        (n * size).next_multiple_of(8)
    }

    /// Appends a whole array of `n` elements of `N` bytes each, element `i` being
    /// `f(i)` (one resize, then plain stores).
    pub fn array<const N: usize>(&mut self, n: usize, mut f: impl FnMut(usize) -> [u8; N]) {
        self.begin();
        let start = self.buf.len();
        self.buf.resize(start + n * N, 0);
        for (i, out) in self.buf[start..].chunks_exact_mut(N).enumerate() {
            out.copy_from_slice(&f(i));
        }
    }

    /// Starts the next array (ending the previous one). Panics past [`Arrays::MAX`]
    /// arrays (a fixed count per meta: a bug, not input).
    fn begin(&mut self) {
        self.end_current();
        self.buf.resize(self.buf.len().next_multiple_of(8), 0);
        self.ranges[self.count] = (self.buf.len(), self.buf.len());
        self.count += 1;
    }

    fn end_current(&mut self) {
        if let Some(r) = self.count.checked_sub(1).map(|i| &mut self.ranges[i]) {
            r.1 = self.buf.len();
        }
    }

    /// The arrays as `GBytes` views of one shared `GBytes`, in the order begun; `f` gets
    /// each one's index and bytes.
    pub fn finish(mut self, mut f: impl FnMut(usize, glib::Bytes)) {
        self.end_current();
        let whole = glib::Bytes::from_owned(self.buf);
        for (i, &(start, end)) in self.ranges[..self.count].iter().enumerate() {
            f(i, glib::Bytes::from_bytes(&whole, start..end));
        }
    }
}
