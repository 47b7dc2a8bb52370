//! Buffer metas that carry plain Rust data, declared with [`rust_meta!`].
//!
//! GStreamer metas are C structs registered at run time. Every Firehose meta (packet
//! batches, heaps, chunks) is the same thing: a `GstMeta` header followed by one Rust
//! value, dropped when the meta is freed and cloned (or rebased) when a buffer is copied.
//! The macro writes that FFI once.
//!
//! [`chunk`] holds the chunk meta; [`dest`] each datagram's destination and frame
//! headers. [`message`] is the exception: a `GstCustomMeta` every language can read, which
//! says which message a buffer holds and whether all of it arrived. [`readable`] repeats
//! the batch and chunk metas as such custom metas (the SPEAD crate does the same for
//! heaps), with [`custom`]'s plumbing.

pub mod chunk;
pub mod custom;
pub mod dest;
pub mod message;
pub mod readable;

/// How a meta's data follows a buffer copy: `region` is `None` for a full copy, or the
/// `(offset, size)` byte range a region copy keeps. Return `None` to leave the meta off
/// the copy.
pub type TransformFn<T> = fn(&T, Option<(usize, usize)>) -> Option<T>;

/// Declares a buffer meta type holding one value of a Rust type.
///
/// ```text
/// firehose_core::rust_meta! {
///     /// Doc comment.
///     pub struct MyMeta(MyData), api = c"MyMetaAPI", name = c"MyMeta", transform = my_transform;
/// }
/// ```
/// generates `MyMeta::add(&mut BufferRef, MyData)`, `MyMeta::data(&self) -> &MyData` and
/// the `gst::MetaAPI` impl, so `buffer.meta::<MyMeta>()` works.
#[macro_export]
macro_rules! rust_meta {
    ($(#[$attr:meta])* $vis:vis struct $name:ident($data:ty), api = $api:expr, name = $impl_name:expr, transform = $transform:expr;) => {
        $(#[$attr])*
        #[repr(C)]
        $vis struct $name {
            parent: $crate::__gst::ffi::GstMeta,
            data: $data,
        }

        // SAFETY: the meta owns its data, which is Send + Sync (checked below).
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}

        impl $name {
            /// Attaches `data` to `buffer` as this meta.
            pub fn add(
                buffer: &mut $crate::__gst::BufferRef,
                data: $data,
            ) -> $crate::__gst::MetaRefMut<'_, Self, $crate::__gst::meta::Standalone> {
                fn _assert_send_sync<T: Send + Sync + 'static>() {}
                _assert_send_sync::<$data>();
                let mut params = std::mem::ManuallyDrop::new(data);
                // SAFETY: init takes ownership of the value behind `params` (ptr::read),
                // so it is neither leaked nor dropped twice.
                unsafe {
                    let meta = $crate::__gst::ffi::gst_buffer_add_meta(
                        buffer.as_mut_ptr(),
                        Self::meta_info(),
                        &mut *params as *mut $data as $crate::__gst::glib::ffi::gpointer,
                    ) as *mut Self;
                    <Self as $crate::__gst::meta::MetaAPIExt>::from_mut_ptr(buffer, meta)
                }
            }

            /// The meta's data.
            pub fn data(&self) -> &$data {
                &self.data
            }

            fn api_type() -> $crate::__gst::glib::Type {
                use $crate::__gst::glib::translate::from_glib;
                static TYPE: std::sync::LazyLock<$crate::__gst::glib::Type> = std::sync::LazyLock::new(|| {
                    let api: &std::ffi::CStr = $api;
                    // SAFETY: looks the API type up by its NUL-terminated name, or
                    // registers it with an empty, NULL-terminated tag list, once. Each
                    // plugin links its own copy of this crate; the copy loaded second
                    // finds the first one's type (same name, same layout: one rlib).
                    unsafe {
                        let existing = $crate::__gst::glib::gobject_ffi::g_type_from_name(api.as_ptr());
                        if existing != $crate::__gst::glib::gobject_ffi::G_TYPE_INVALID {
                            return from_glib(existing);
                        }
                        let mut tags: [*const std::os::raw::c_char; 1] = [std::ptr::null()];
                        let t: $crate::__gst::glib::Type = from_glib($crate::__gst::ffi::gst_meta_api_type_register(
                            api.as_ptr(),
                            tags.as_mut_ptr(),
                        ));
                        assert_ne!(t, $crate::__gst::glib::Type::INVALID);
                        t
                    }
                });
                *TYPE
            }

            fn meta_info() -> *const $crate::__gst::ffi::GstMetaInfo {
                use $crate::__gst::glib::translate::{from_glib, IntoGlib};
                use $crate::__gst::{ffi, glib};
                struct Info(std::ptr::NonNull<ffi::GstMetaInfo>);
                // SAFETY: a GstMetaInfo is immutable after registration.
                unsafe impl Send for Info {}
                // SAFETY: as above.
                unsafe impl Sync for Info {}

                unsafe extern "C" fn init(
                    meta: *mut ffi::GstMeta,
                    params: glib::ffi::gpointer,
                    _buffer: *mut ffi::GstBuffer,
                ) -> glib::ffi::gboolean {
                    // SAFETY: GStreamer hands us uninitialised storage of our size; params
                    // is the value passed by `add` (or by `transform`), moved out here.
                    unsafe {
                        assert!(!params.is_null(), "metas are only added through add()");
                        let meta = &mut *(meta as *mut $name);
                        std::ptr::write(&mut meta.data, std::ptr::read(params as *const $data));
                    }
                    true.into_glib()
                }

                unsafe extern "C" fn free(meta: *mut ffi::GstMeta, _buffer: *mut ffi::GstBuffer) {
                    // SAFETY: init wrote a valid value; free runs once.
                    unsafe {
                        let meta = &mut *(meta as *mut $name);
                        std::ptr::drop_in_place(&mut meta.data);
                    }
                }

                unsafe extern "C" fn transform(
                    dest: *mut ffi::GstBuffer,
                    meta: *mut ffi::GstMeta,
                    _buffer: *mut ffi::GstBuffer,
                    type_: glib::ffi::GQuark,
                    data: glib::ffi::gpointer,
                ) -> glib::ffi::gboolean {
                    let f: $crate::meta::TransformFn<$data> = $transform;
                    let info = $name::meta_info();
                    // SAFETY: called by GStreamer with a valid source meta of our type; for
                    // the copy transform `data` is a GstMetaTransformCopy.
                    unsafe { transform_with(dest, meta, type_, data, f, info) }
                }

                /// The body of `transform`, generic so that no macro argument expands
                /// inside `unsafe`.
                unsafe fn transform_with<T>(
                    dest: *mut ffi::GstBuffer,
                    meta: *const ffi::GstMeta,
                    type_: glib::ffi::GQuark,
                    data: glib::ffi::gpointer,
                    f: $crate::meta::TransformFn<T>,
                    info: *const ffi::GstMetaInfo,
                ) -> glib::ffi::gboolean {
                    // SAFETY: `meta` is a `#[repr(C)] { GstMeta, T }` (the caller's type);
                    // the data field sits right after the header, aligned for T.
                    unsafe {
                        if from_glib::<_, glib::Quark>(type_) != glib::Quark::from_str("gst-copy") {
                            return false.into_glib();
                        }
                        let header = std::mem::size_of::<ffi::GstMeta>();
                        let offset = header.next_multiple_of(std::mem::align_of::<T>());
                        let src = &*((meta as *const u8).add(offset) as *const T);
                        let copy = &*(data as *const ffi::GstMetaTransformCopy);
                        let region = (copy.region != glib::ffi::GFALSE).then_some((copy.offset, copy.size));
                        let Some(value) = f(src, region) else {
                            return true.into_glib();
                        };
                        let mut params = std::mem::ManuallyDrop::new(value);
                        let m = ffi::gst_buffer_add_meta(dest, info, &mut *params as *mut T as glib::ffi::gpointer);
                        (!m.is_null()).into_glib()
                    }
                }

                static INFO: std::sync::LazyLock<Info> = std::sync::LazyLock::new(|| {
                    let api = $name::api_type().into_glib();
                    let impl_name: &std::ffi::CStr = $impl_name;
                    let size = std::mem::size_of::<$name>();
                    // SAFETY: finds the implementation already registered under this
                    // name (by the other plugin's copy of this crate, with the same
                    // layout and functions from the same source), or registers it once,
                    // with functions matching this struct's layout.
                    unsafe {
                        if let Some(info) = std::ptr::NonNull::new(ffi::gst_meta_get_info(impl_name.as_ptr()) as *mut ffi::GstMetaInfo) {
                            return Info(info);
                        }
                        Info(
                            std::ptr::NonNull::new(ffi::gst_meta_register(
                                api,
                                impl_name.as_ptr(),
                                size,
                                Some(init),
                                Some(free),
                                Some(transform),
                            ) as *mut ffi::GstMetaInfo)
                            .expect("gst_meta_register failed"),
                        )
                    }
                });
                INFO.0.as_ptr()
            }
        }

        // SAFETY: the struct is repr(C) with a GstMeta first, and meta_api() is the API
        // type registered for it.
        unsafe impl $crate::__gst::MetaAPI for $name {
            type GstType = $name;

            fn meta_api() -> $crate::__gst::glib::Type {
                Self::api_type()
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}
