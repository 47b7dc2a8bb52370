//! Interop with GStreamer's CUDA library (`libgstcuda-1.0`, GStreamer 1.22 in Debian
//! 12), opened at run time with `dlopen`: the plugin neither links it nor needs it.
//!
//! Stock CUDA elements (`cudadownload`, the nvcodec encoders) take only `GstCudaMemory`
//! (they check `gst_is_cuda_memory`) under `video/x-raw(memory:CUDAMemory)` caps. 1.22
//! cannot wrap a foreign device pointer, so `fhcudaupload` does the reverse: it wraps
//! its own (cudarc's) context with `gst_cuda_context_new_wrapped`, takes `GstCudaMemory`
//! from libgstcuda's buffer pool, maps it with `GST_MAP_CUDA` to get the device
//! pointer, and makes that pointer the direct target of its host-to-device copy: no
//! extra copy. It answers the `gst.cuda.context` context query with the same context.
//!
//! 1.22's allocator takes a `GstVideoInfo` and knows only video formats (GRAY8 is not
//! one of them: an unknown format aborts in `gst_cuda_allocator_alloc`), so each
//! memory is a **RGBA frame [`VIEW_WIDTH`] pixels wide** ([`VIEW_ROW_BYTES`] bytes a
//! row): the bytes of a buffer fill it row after row from its start. The height is the
//! rows the bytes need, rounded up to a power of two, so that a stream of buffers of
//! varying sizes uses a few pools (and caps) rather than one per size. Bytes past the
//! data (the `size` of the `FirehoseCudaMeta`) are not written.
//!
//! Only these functions are bound, with 1.22's signatures (gst/cuda/*.h):
//! `gst_cuda_load_library`, `gst_cuda_memory_init_once`, `gst_cuda_context_new_wrapped`,
//! `gst_cuda_buffer_pool_new`, `gst_cuda_handle_context_query`, `gst_is_cuda_memory`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

use gst::glib;
use gst::glib::translate::{from_glib_full, ToGlibPtr};
use gst::prelude::*;

use crate::engine::{BackendError, BlockSource, DeviceBlock, DevicePtr};
use firehose_core::sync::lock;

/// The library opened (its soname in Debian 12).
pub const LIBRARY: &str = "libgstcuda-1.0.so.0";

/// An environment variable naming another file to open instead of [`LIBRARY`] (tests
/// set it to a path that does not exist, to run the fallback for real).
pub const LIBRARY_ENV: &str = "FIREHOSE_GSTCUDA_LIBRARY";

/// The video format of the view stock CUDA elements see.
pub const VIEW_FORMAT: &str = "RGBA";

/// Pixels in a row of the view.
pub const VIEW_WIDTH: u32 = 1024;

/// Bytes in a row of the view (4 bytes a pixel).
pub const VIEW_ROW_BYTES: usize = VIEW_WIDTH as usize * 4;

/// The caps feature of `GstCudaMemory`.
pub const CAPS_FEATURE: &str = "memory:CUDAMemory";

/// `GST_MAP_CUDA` (gstcudamemory.h: `GST_MAP_FLAG_LAST << 1`): map the device memory.
pub const GST_MAP_CUDA: gst::ffi::GstMapFlags = gst::ffi::GST_MAP_FLAG_LAST << 1;

/// How many pools (view heights) are kept at once; the oldest goes first.
const MAX_POOLS: usize = 6;

type GObj = *mut gst::ffi::GstObject;

type LoadLibrary = unsafe extern "C" fn() -> glib::ffi::gboolean;
type MemoryInitOnce = unsafe extern "C" fn();
type ContextNewWrapped = unsafe extern "C" fn(*mut c_void, c_int) -> GObj;
type BufferPoolNew = unsafe extern "C" fn(GObj) -> *mut gst::ffi::GstBufferPool;
type HandleContextQuery = unsafe extern "C" fn(
    *mut gst::ffi::GstElement,
    *mut gst::ffi::GstQuery,
    GObj,
) -> glib::ffi::gboolean;
type IsCudaMemory = unsafe extern "C" fn(*mut gst::ffi::GstMemory) -> glib::ffi::gboolean;

/// The bound functions (1.22 signatures).
struct Fns {
    load_library: LoadLibrary,
    memory_init_once: MemoryInitOnce,
    context_new_wrapped: ContextNewWrapped,
    buffer_pool_new: BufferPoolNew,
    handle_context_query: HandleContextQuery,
    is_cuda_memory: IsCudaMemory,
}

/// Opens the library once per process; the error says what was missing.
fn fns() -> Result<&'static Fns, String> {
    static FNS: OnceLock<Result<Fns, String>> = OnceLock::new();
    FNS.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Fns, String> {
    let name = std::env::var(LIBRARY_ENV).unwrap_or_else(|_| LIBRARY.to_string());
    let c = CString::new(name.clone()).map_err(|_| format!("bad library name {name:?}"))?;
    // SAFETY: opens a library by name; it is never closed (its functions stay in use).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a message owned by the loader, or null.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                String::new()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!("{name} not found ({why})"));
    }
    let sym = |s: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: looks a symbol up in the handle opened above.
        let p = unsafe { libc::dlsym(h, s.as_ptr() as *const c_char) };
        if p.is_null() {
            Err(format!("{name} lacks {}", s.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the function of that name in GStreamer 1.22's
    // libgstcuda-1.0, whose C signature the type it is read as repeats (gst/cuda/*.h).
    unsafe {
        Ok(Fns {
            load_library: std::mem::transmute::<*mut c_void, LoadLibrary>(sym(
                c"gst_cuda_load_library",
            )?),
            memory_init_once: std::mem::transmute::<*mut c_void, MemoryInitOnce>(sym(
                c"gst_cuda_memory_init_once",
            )?),
            context_new_wrapped: std::mem::transmute::<*mut c_void, ContextNewWrapped>(sym(
                c"gst_cuda_context_new_wrapped",
            )?),
            buffer_pool_new: std::mem::transmute::<*mut c_void, BufferPoolNew>(sym(
                c"gst_cuda_buffer_pool_new",
            )?),
            handle_context_query: std::mem::transmute::<*mut c_void, HandleContextQuery>(sym(
                c"gst_cuda_handle_context_query",
            )?),
            is_cuda_memory: std::mem::transmute::<*mut c_void, IsCudaMemory>(sym(
                c"gst_is_cuda_memory",
            )?),
        })
    }
}

/// Whether libgstcuda can be opened here (opens it, once).
pub fn available() -> bool {
    fns().is_ok()
}

/// Whether `mem` is a `GstCudaMemory` (libgstcuda's own `gst_is_cuda_memory`); false
/// where the library is absent.
pub fn is_cuda_memory(mem: &gst::MemoryRef) -> bool {
    let Ok(f) = fns() else { return false };
    // SAFETY: a valid memory; the function only reads its allocator's type.
    unsafe { (f.is_cuda_memory)(mem.as_mut_ptr()) != glib::ffi::GFALSE }
}

/// The device pointer of a `GstCudaMemory` (its start, plus the memory's offset), as
/// `gst_memory_map(GST_MAP_READ | GST_MAP_CUDA)` gives it.
pub fn cuda_device_ptr(mem: &gst::MemoryRef) -> Option<DevicePtr> {
    if !is_cuda_memory(mem) {
        return None;
    }
    map_device(mem, gst::ffi::GST_MAP_READ)
}

/// Maps `mem` for CUDA with `flags` and unmaps it again: the device pointer (which
/// stays valid while the memory lives).
fn map_device(mem: &gst::MemoryRef, flags: gst::ffi::GstMapFlags) -> Option<DevicePtr> {
    // SAFETY: a zeroed GstMapInfo is what gst_memory_map fills; unmapped at once. A
    // CUDA map of a GstCudaMemory returns the device address and touches no host
    // memory (libgstcuda 1.22, cuda_mem_map).
    unsafe {
        let mut info: gst::ffi::GstMapInfo = std::mem::zeroed();
        if gst::ffi::gst_memory_map(mem.as_mut_ptr(), &mut info, flags | GST_MAP_CUDA)
            == glib::ffi::GFALSE
        {
            return None;
        }
        let p = info.data as DevicePtr;
        gst::ffi::gst_memory_unmap(mem.as_mut_ptr(), &mut info);
        Some(p)
    }
}

/// Rows of the view for `len` bytes: what they need, rounded up to a power of two.
pub fn view_height(len: usize) -> u32 {
    let rows = len.div_ceil(VIEW_ROW_BYTES).max(1);
    u32::try_from(rows.next_power_of_two()).unwrap_or(u32::MAX)
}

/// The caps of the view `height` rows high.
pub fn view_caps(height: u32) -> gst::Caps {
    gst::Caps::builder("video/x-raw")
        .features([CAPS_FEATURE])
        .field("format", VIEW_FORMAT)
        .field("width", VIEW_WIDTH as i32)
        .field("height", height.min(i32::MAX as u32) as i32)
        .field("framerate", gst::Fraction::new(0, 1))
        .build()
}

/// The view's caps, any height: what `fhcudaupload` offers stock CUDA elements.
pub fn view_template() -> gst::Caps {
    gst::Caps::builder("video/x-raw")
        .features([CAPS_FEATURE])
        .field("format", VIEW_FORMAT)
        .field("width", VIEW_WIDTH as i32)
        .field("height", gst::IntRange::new(1, i32::MAX))
        .field("framerate", gst::Fraction::new(0, 1))
        .build()
}

/// A wrapped context and the pools of `GstCudaMemory` made in it: the
/// [`BlockSource`] of `fhcudaupload` where libgstcuda is present.
pub struct Interop {
    fns: &'static Fns,
    /// The `GstCudaContext` wrapping our context (it does not own it).
    context: gst::Object,
    /// (height, pool), newest last.
    pools: Mutex<Vec<(u32, gst::BufferPool)>>,
}

impl std::fmt::Debug for Interop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interop")
            .field("context", &self.context)
            .finish()
    }
}

impl Interop {
    /// Wraps the primary context of `cuda` and checks that a memory of the view is one
    /// block of contiguous rows (its pitch is [`VIEW_ROW_BYTES`]). Each failure says
    /// what is missing. `cuda` (which retains the context) is kept alive by the
    /// wrapping `GstCudaContext`, which every `GstCudaMemory` holds: memory still
    /// downstream after the element has stopped is freed in a live context.
    pub fn new(cuda: &std::sync::Arc<crate::driver::Cuda>) -> Result<Self, String> {
        let (ctx, device) = cuda.raw_context();
        let fns = fns()?;
        // SAFETY: plain calls into the library opened; load_library opens the CUDA
        // driver library itself (libcuda.so.1, already loaded by us).
        unsafe {
            if (fns.load_library)() == glib::ffi::GFALSE {
                return Err(format!(
                    "{LIBRARY} could not load the CUDA driver (libcuda.so.1)"
                ));
            }
            (fns.memory_init_once)();
        }
        // SAFETY: a retained context handle and its device; the wrapper does not own
        // the context (1.22: owns_context is false for a wrapped one).
        let raw = unsafe { (fns.context_new_wrapped)(ctx, device) };
        if raw.is_null() {
            return Err("gst_cuda_context_new_wrapped failed".into());
        }
        // SAFETY: new_wrapped returns a full reference (ref_sink'ed) to a GstObject.
        let context: gst::Object = unsafe { from_glib_full(raw) };
        // SAFETY: our own key on our own object, read by nobody: only dropped with it.
        unsafe { context.set_data("firehose-cuda-keeper", cuda.clone()) };
        let me = Self {
            fns,
            context,
            pools: Mutex::new(Vec::new()),
        };
        let buf = me.acquire(1)?;
        let mem = buf.peek_memory(0);
        if !is_cuda_memory(mem) {
            return Err("libgstcuda's pool gave a memory that is not GstCudaMemory".into());
        }
        let pitch = mem.size() / view_height(1) as usize;
        if pitch != VIEW_ROW_BYTES {
            return Err(format!(
                "the device pads rows of {VIEW_ROW_BYTES} bytes to {pitch}: the view's \
                 memory is not contiguous"
            ));
        }
        Ok(me)
    }

    /// The `GstCudaContext`.
    pub fn context(&self) -> &gst::Object {
        &self.context
    }

    /// Answers a `gst.cuda.context` context query with our context (libgstcuda's own
    /// `gst_cuda_handle_context_query`); false for another query.
    pub fn handle_context_query(&self, element: &gst::Element, query: &mut gst::QueryRef) -> bool {
        let e: *mut gst::ffi::GstElement = element.to_glib_none().0;
        let c: GObj = self.context.to_glib_none().0;
        // SAFETY: valid element, query and context; the function only reads the first
        // and the last and sets a GstContext on the query.
        unsafe { (self.fns.handle_context_query)(e, query.as_mut_ptr(), c) != glib::ffi::GFALSE }
    }

    /// A buffer of the pool for `len` bytes: one `GstCudaMemory` of the view
    /// [`view_height`]`(len)` rows high (and its `GstVideoMeta`).
    pub fn acquire(&self, len: usize) -> Result<gst::Buffer, String> {
        let height = view_height(len);
        let pool = self.pool(height)?;
        pool.acquire_buffer(None)
            .map_err(|e| format!("libgstcuda's pool gave no buffer: {e:?}"))
    }

    fn pool(&self, height: u32) -> Result<gst::BufferPool, String> {
        let mut pools = lock(&self.pools);
        if let Some(i) = pools.iter().position(|(h, _)| *h == height) {
            let entry = pools.remove(i);
            let pool = entry.1.clone();
            pools.push(entry);
            return Ok(pool);
        }
        let c: GObj = self.context.to_glib_none().0;
        // SAFETY: a valid GstCudaContext; returns a full (sunk) reference to a pool.
        let raw = unsafe { (self.fns.buffer_pool_new)(c) };
        if raw.is_null() {
            return Err("gst_cuda_buffer_pool_new failed".into());
        }
        // SAFETY: as above.
        let pool: gst::BufferPool = unsafe { from_glib_full(raw) };
        let mut config = pool.config();
        config.set_params(Some(&view_caps(height)), 0, 0, 0);
        pool.set_config(config)
            .map_err(|e| format!("libgstcuda's pool refused the view {height} rows high: {e}"))?;
        pool.set_active(true)
            .map_err(|e| format!("libgstcuda's pool did not start: {e}"))?;
        pools.push((height, pool.clone()));
        if pools.len() > MAX_POOLS {
            let (_, old) = pools.remove(0);
            // Buffers still downstream are freed when they come back.
            let _ = old.set_active(false);
        }
        Ok(pool)
    }
}

impl Drop for Interop {
    fn drop(&mut self) {
        for (_, pool) in lock(&self.pools).drain(..) {
            let _ = pool.set_active(false);
        }
    }
}

impl BlockSource for Interop {
    fn block(&self, len: usize) -> Result<Option<DeviceBlock>, BackendError> {
        let buf = self.acquire(len).map_err(BackendError)?;
        let mem = buf.peek_memory(0);
        let capacity = mem.size();
        // Mapped for writing by CUDA: libgstcuda marks the host copy stale.
        let ptr = map_device(mem, gst::ffi::GST_MAP_READ | gst::ffi::GST_MAP_WRITE)
            .ok_or_else(|| BackendError("could not map a GstCudaMemory for CUDA".into()))?;
        Ok(Some(DeviceBlock::external(ptr, capacity, Box::new(buf))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_covers_the_bytes_in_power_of_two_rows() {
        gst::init().unwrap();
        assert_eq!(view_height(0), 1);
        assert_eq!(view_height(1), 1);
        assert_eq!(view_height(VIEW_ROW_BYTES), 1);
        assert_eq!(view_height(VIEW_ROW_BYTES + 1), 2);
        assert_eq!(view_height(3 * VIEW_ROW_BYTES), 4);
        assert_eq!(view_height(64 << 20), 16384);
        for len in [1, 5000, 1 << 20, (1 << 20) + 1, 7 << 20] {
            let h = view_height(len) as usize;
            assert!(h * VIEW_ROW_BYTES >= len && (h / 2) * VIEW_ROW_BYTES < len.max(2));
        }
        let caps = view_caps(8);
        assert!(caps.is_fixed());
        assert!(caps.can_intersect(&view_template()));
        let s = caps.structure(0).unwrap();
        assert_eq!(s.get::<&str>("format").unwrap(), VIEW_FORMAT);
        assert_eq!(s.get::<i32>("width").unwrap() as usize * 4, VIEW_ROW_BYTES);
    }
}
