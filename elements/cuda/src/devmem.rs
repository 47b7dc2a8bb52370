//! The device memory of `fhcudaupload`'s output buffers, as Rust and Python see it.
//!
//! Where libgstcuda is present, each output buffer holds one `GstCudaMemory` of
//! GStreamer's CUDA library ([`crate::gstcuda`]). Elsewhere it holds one `GstMemory` of
//! the `FirehoseCudaMemory` type, made by this crate's allocator
//! (`GstFhCudaAllocator`), which cannot be mapped on the host (it is device memory:
//! `GST_MEMORY_FLAG_NOT_MAPPABLE`, and a map fails) and owns one device block, given
//! back when the last reference to the memory goes.
//!
//! - From Rust: [`buffer_device_memory`] gives the device pointer, size, device and
//!   CUDA stream, whichever the memory.
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
            // are set once, before any memory exists. Device memory cannot be mapped or
            // copied on the host, so those functions refuse; a share is a view of a
            // range of its parent's block.
            unsafe {
                (*a).mem_type = MEMORY_TYPE_C.as_ptr();
                (*a).mem_map = Some(no_map);
                (*a).mem_unmap = Some(no_unmap);
                (*a).mem_copy = Some(no_copy);
                (*a).mem_share = Some(share);
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

    /// A sub-memory over `offset..offset + size` of `mem` (size -1: to its end): no
    /// block of its own, its parent (which it holds) has it.
    unsafe extern "C" fn share(
        mem: *mut gst::ffi::GstMemory,
        offset: isize,
        size: isize,
    ) -> *mut gst::ffi::GstMemory {
        // SAFETY: `mem` is a live DevMem of our allocator (GStreamer calls mem_share on
        // its own memories only); the new one is initialised by gst_memory_init, which
        // takes a reference to the parent, released before our `free` runs.
        unsafe {
            let m = &*mem;
            let parent = if m.parent.is_null() { mem } else { m.parent };
            let size = if size < 0 {
                m.size as isize - offset
            } else {
                size
            };
            if offset < 0 || size < 0 || (offset + size) as usize > m.size {
                return std::ptr::null_mut();
            }
            let device = (*(mem as *const DevMem)).device;
            let sub = Box::into_raw(Box::new(DevMem {
                mem: std::mem::zeroed(),
                block: None,
                device,
            }));
            gst::ffi::gst_memory_init(
                sub as *mut gst::ffi::GstMemory,
                gst::ffi::GST_MEMORY_FLAG_NOT_MAPPABLE | gst::ffi::GST_MEMORY_FLAG_READONLY,
                m.allocator,
                parent,
                m.maxsize,
                m.align,
                m.offset + offset as usize,
                size as usize,
            );
            sub as *mut gst::ffi::GstMemory
        }
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
    // SAFETY: memories of our allocator are DevMem (checked just above), and so is the
    // parent of a share, which the share keeps alive.
    let m = unsafe { &*(mem.as_ptr() as *const DevMem) };
    let block = match m.block.as_ref() {
        Some(b) => b,
        // SAFETY: as above.
        None => unsafe { (*(m.mem.parent as *const DevMem)).block.as_ref()? },
    };
    Some(DeviceView {
        ptr: block.ptr() + mem.offset() as u64,
        size: mem.size(),
        stream: block.stream_handle(),
        device: m.device,
    })
}

/// The device memory of an output buffer: [`device_memory`] of its only memory, or,
/// for a `GstCudaMemory` (where libgstcuda is present, see [`crate::gstcuda`]), what
/// its [`META_NAME`] meta says (pointer, data size, stream, device).
pub fn buffer_device_memory(buf: &gst::BufferRef) -> Option<DeviceView> {
    if buf.n_memory() != 1 {
        return None;
    }
    device_memory(buf.peek_memory(0)).or_else(|| {
        crate::gstcuda::is_cuda_memory(buf.peek_memory(0))
            .then(|| read_meta(buf).map(|(v, _)| v))?
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig, Layout};
    use crate::testing::HostBackend;
    use firehose_core::provider::Anonymous;
    use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};
    use std::sync::Arc;

    #[test]
    fn device_memory_is_unmappable_shares_its_block_and_frees_it_last() {
        gst::init().unwrap();
        let backend = HostBackend::new(100, 3);
        let mut engine: Engine<firehose_core::Slot, ()> = Engine::new(
            backend.clone(),
            &EngineConfig {
                max_in_flight: 2,
                bounce_provider: Arc::new(Anonymous(HugepagePolicy::Off)),
                stats: Arc::default(),
            },
        )
        .unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 4096,
            slots: 1,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut slot = pool.try_acquire().unwrap();
        slot.as_mut_full()[..100].copy_from_slice(&[5u8; 100]);
        slot.set_len(100);
        engine.submit(slot, Layout::Whole, ()).unwrap();
        engine.drain().unwrap();
        let u = engine.pop_ready().unwrap().unwrap();
        drop(engine);
        let base = u.block.ptr();
        let mem = wrap(u.block, u.size, 0);
        assert!(mem.map_readable().is_err(), "device memory is not mappable");
        let v = device_memory(&mem).unwrap();
        assert_eq!((v.ptr, v.size, v.stream), (base, 100, 0x5eed));
        let sub = mem.share(10..30);
        let sv = device_memory(&sub).expect("a share is device memory too");
        assert_eq!((sv.ptr, sv.size), (base + 10, 20));
        let subsub = sub.share(5..);
        assert_eq!(device_memory(&subsub).unwrap().ptr, base + 15);
        assert_eq!(device_memory(&subsub).unwrap().size, 15);
        drop(mem);
        assert_eq!(backend.live_blocks(), 1, "the shares hold the block");
        drop((sub, subsub));
        assert_eq!(backend.live_blocks(), 0);
    }
}
