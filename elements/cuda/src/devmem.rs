//! The device memory of `fhcudaupload`'s output buffers, as Rust and Python see it.
//!
//! Each output buffer holds one `GstMemory` of the `FirehoseCudaMemory` type, made by
//! this crate's allocator (`GstFhCudaAllocator`). It cannot be mapped on the host (it
//! is device memory: `GST_MEMORY_FLAG_NOT_MAPPABLE`, and a map fails); it owns one
//! device block, given back when the last reference to the memory goes.
//!
//! - From Rust: [`device_memory`] on the buffer's memory gives the device pointer, size,
//!   device and CUDA stream.
//! - From any language: each output buffer also carries a `GstCustomMeta` named
//!   [`META_NAME`] whose structure has `device-ptr`, `size`, `stream` (u64) and `device`
//!   (i32); under `layout=payloads` also `packets`, `payload-bytes` and `table-offset`
//!   (u32). Python wraps the pointer without a copy:
//!   ```text
//!   meta = buf.get_custom_meta("FirehoseCudaMeta")
//!   s = meta.get_structure()
//!   ptr = s.get_uint64("device-ptr")[1]; size = s.get_uint64("size")[1]
//!   mem = cupy.cuda.UnownedMemory(ptr, size, owner=buf)   # keep buf alive
//!   arr = cupy.ndarray((size,), cupy.uint8, cupy.cuda.MemoryPointer(mem, 0))
//!   ```
//!   (examples/cuda_upload.py). The copy has completed when the buffer is pushed, so
//!   any stream may read the memory at once.

use std::sync::LazyLock;

use gst::glib;
use gst::glib::translate::ToGlibPtr;
use gst::prelude::*;
use gst::subclass::prelude::*;

use crate::engine::{DeviceBlock, DevicePtr, PayloadTable};

/// The memory type of output memories (`gst_memory_is_type`).
pub const MEMORY_TYPE: &str = "FirehoseCudaMemory";
const MEMORY_TYPE_C: &std::ffi::CStr = c"FirehoseCudaMemory";

/// The custom meta every output buffer carries, readable from every language.
pub const META_NAME: &str = "FirehoseCudaMeta";

/// The caps feature of output caps.
pub const CAPS_FEATURE: &str = "memory:CUDAMemory";

/// A device memory as Rust sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceView {
    /// The device address of the data.
    pub ptr: DevicePtr,
    /// Bytes of data.
    pub size: usize,
    /// The CUDA stream (`CUstream`) the copy ran on (complete before the push).
    pub stream: u64,
    /// The device index.
    pub device: i32,
}

/// The C struct behind a device memory: the `GstMemory` header, then ours.
#[repr(C)]
struct DevMem {
    mem: gst::ffi::GstMemory,
    block: Option<DeviceBlock>,
    device: i32,
}

mod imp {
    use super::*;

    #[derive(Default)]
    pub struct DeviceAllocator;

    #[glib::object_subclass]
    impl ObjectSubclass for DeviceAllocator {
        const NAME: &'static str = "GstFhCudaAllocator";
        type Type = super::DeviceAllocator;
        type ParentType = gst::Allocator;
    }

    impl ObjectImpl for DeviceAllocator {
        fn constructed(&self) {
            self.parent_constructed();
            let a: *mut gst::ffi::GstAllocator =
                self.obj().upcast_ref::<gst::Allocator>().to_glib_none().0;
            // SAFETY: our own allocator, being constructed: its vfuncs and type name
            // are set once, before any memory exists. Device memory cannot be mapped,
            // shared or copied on the host, so those functions refuse.
            unsafe {
                (*a).mem_type = MEMORY_TYPE_C.as_ptr();
                (*a).mem_map = Some(no_map);
                (*a).mem_unmap = Some(no_unmap);
                (*a).mem_copy = Some(no_copy);
                (*a).mem_share = Some(no_share);
                (*a).mem_is_span = Some(no_span);
                (*a).object.flags |= gst::ffi::GST_ALLOCATOR_FLAG_CUSTOM_ALLOC;
            }
        }
    }

    impl GstObjectImpl for DeviceAllocator {}

    // SAFETY: `alloc` refuses (device memories come only from `wrap`); `free` frees the
    // DevMem that `wrap` boxed, once, as GStreamer calls it for the last reference.
    unsafe impl AllocatorImpl for DeviceAllocator {
        unsafe fn alloc(
            &self,
            _size: usize,
            _params: &gst::AllocationParams,
        ) -> *mut gst::ffi::GstMemory {
            std::ptr::null_mut()
        }

        unsafe fn free(&self, memory: *mut gst::ffi::GstMemory) {
            // SAFETY: every memory of this allocator is a boxed DevMem from `wrap`.
            drop(unsafe { Box::from_raw(memory as *mut DevMem) });
        }
    }

    unsafe extern "C" fn no_map(
        _mem: *mut gst::ffi::GstMemory,
        _maxsize: usize,
        _flags: gst::ffi::GstMapFlags,
    ) -> glib::ffi::gpointer {
        std::ptr::null_mut()
    }

    unsafe extern "C" fn no_unmap(_mem: *mut gst::ffi::GstMemory) {}

    unsafe extern "C" fn no_copy(
        _mem: *mut gst::ffi::GstMemory,
        _offset: isize,
        _size: isize,
    ) -> *mut gst::ffi::GstMemory {
        std::ptr::null_mut()
    }

    unsafe extern "C" fn no_share(
        _mem: *mut gst::ffi::GstMemory,
        _offset: isize,
        _size: isize,
    ) -> *mut gst::ffi::GstMemory {
        std::ptr::null_mut()
    }

    unsafe extern "C" fn no_span(
        _a: *mut gst::ffi::GstMemory,
        _b: *mut gst::ffi::GstMemory,
        _offset: *mut usize,
    ) -> glib::ffi::gboolean {
        glib::ffi::GFALSE
    }
}

glib::wrapper! {
    /// The allocator of device memories (`GstFhCudaAllocator`, memory type
    /// [`MEMORY_TYPE`]).
    pub struct DeviceAllocator(ObjectSubclass<imp::DeviceAllocator>) @extends gst::Allocator, gst::Object;
}

static ALLOCATOR: LazyLock<DeviceAllocator> = LazyLock::new(glib::Object::new);

/// The allocator every device memory belongs to.
pub fn allocator() -> &'static DeviceAllocator {
    &ALLOCATOR
}

/// Wraps `block`'s first `size` bytes, on device `device`, as a `gst::Memory` that owns
/// it.
pub fn wrap(block: DeviceBlock, size: usize, device: i32) -> gst::Memory {
    let size = size.min(block.capacity());
    let maxsize = block.capacity();
    let a: *mut gst::ffi::GstAllocator =
        allocator().upcast_ref::<gst::Allocator>().to_glib_none().0;
    // SAFETY: a zeroed GstMemory header is what gst_memory_init expects to fill; the
    // box is handed to GStreamer, which frees it through our allocator's `free`.
    unsafe {
        let m = Box::into_raw(Box::new(DevMem {
            mem: std::mem::zeroed(),
            block: Some(block),
            device,
        }));
        gst::ffi::gst_memory_init(
            m as *mut gst::ffi::GstMemory,
            gst::ffi::GST_MEMORY_FLAG_NOT_MAPPABLE,
            a,
            std::ptr::null_mut(),
            maxsize,
            0,
            0,
            size,
        );
        glib::translate::from_glib_full(m as *mut gst::ffi::GstMemory)
    }
}

/// The device pointer, size, stream and device of `mem`, if it is a device memory of
/// ours.
pub fn device_memory(mem: &gst::MemoryRef) -> Option<DeviceView> {
    if !mem.is_type(MEMORY_TYPE) || mem.allocator()?.type_() != DeviceAllocator::static_type() {
        return None;
    }
    // SAFETY: memories of our allocator are DevMem (checked just above).
    let m = unsafe { &*(mem.as_ptr() as *const DevMem) };
    let block = m.block.as_ref()?;
    Some(DeviceView {
        ptr: block.ptr() + mem.offset() as u64,
        size: mem.size(),
        stream: block.stream_handle(),
        device: m.device,
    })
}

/// [`device_memory`] of the buffer's only memory.
pub fn buffer_device_memory(buf: &gst::BufferRef) -> Option<DeviceView> {
    (buf.n_memory() == 1).then(|| device_memory(buf.peek_memory(0)))?
}

/// Registers [`META_NAME`] (idempotent).
pub fn register_meta() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if !gst::meta::CustomMeta::is_registered(META_NAME) {
            gst::meta::CustomMeta::register(META_NAME, &[]);
        }
    });
}

/// Adds the [`META_NAME`] meta describing `view` (and `table`) to `buf`.
pub fn add_meta(buf: &mut gst::BufferRef, view: &DeviceView, table: Option<&PayloadTable>) {
    register_meta();
    let Ok(mut meta) = gst::meta::CustomMeta::add(buf, META_NAME) else {
        return;
    };
    let s = meta.mut_structure();
    s.set("device-ptr", view.ptr);
    s.set("size", view.size as u64);
    s.set("stream", view.stream);
    s.set("device", view.device);
    if let Some(t) = table {
        s.set("packets", t.packets);
        s.set("payload-bytes", t.payload_bytes);
        s.set("table-offset", t.table_offset);
    }
}

/// Reads the [`META_NAME`] meta of `buf`: what a consumer in another language reads.
pub fn read_meta(buf: &gst::BufferRef) -> Option<(DeviceView, Option<PayloadTable>)> {
    let meta = gst::meta::CustomMeta::from_buffer(buf, META_NAME).ok()?;
    let s = meta.structure();
    let view = DeviceView {
        ptr: s.get("device-ptr").ok()?,
        size: s.get::<u64>("size").ok()? as usize,
        stream: s.get("stream").ok()?,
        device: s.get("device").ok()?,
    };
    let table = s.get::<u32>("packets").ok().map(|packets| PayloadTable {
        packets,
        payload_bytes: s.get("payload-bytes").unwrap_or(0),
        table_offset: s.get("table-offset").unwrap_or(0),
    });
    Some((view, table))
}
