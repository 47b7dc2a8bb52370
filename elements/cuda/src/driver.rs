//! The CUDA backend: cudarc's driver bindings (`cudarc::driver::sys`), loaded at run
//! time from `libcuda.so.1`.
//!
//! Only the raw driver calls are used, not cudarc's safe layer, for two reasons: the
//! safe layer's context makes calls we do not need (each one a symbol the driver must
//! export), and the upload needs exactly one stream, events made once, device blocks
//! freed from any thread, and host registration of memory we map ourselves.
//!
//! cudarc panics when the library or one of its symbols is missing. [`Cuda::open`]
//! checks for the library first and runs the opening calls under `catch_unwind`, so a
//! missing or too old driver is an error that says what to check, never a panic.

use std::ffi::c_void;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::engine::{Backend, BackendError, DevicePtr, Event};
use firehose_core::provider::Registrar;

/// The oldest driver API the bindings are generated for (CUDA 12.0, as
/// `cuDriverGetVersion` reports it).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// How a user checks the driver and the devices.
const CHECK: &str = "check with nvidia-smi";

fn check(r: sys::CUresult, what: &str) -> Result<(), BackendError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(BackendError(format!("{what} failed: {r:?}")))
    }
}

/// Whether the CUDA driver library can be opened here (no call into it).
pub fn library_present() -> bool {
    // SAFETY: only tries to open the library by its names, and closes it again.
    unsafe { sys::is_culib_present() }
}

/// A retained primary context of one device, released on drop.
struct Context {
    ctx: sys::CUcontext,
    device: sys::CUdevice,
}

// SAFETY: a CUDA context handle may be used from any thread (made current with
// push/pop around each use).
unsafe impl Send for Context {}
// SAFETY: as above; the driver synchronises its own state.
unsafe impl Sync for Context {}

impl Context {
    /// Runs `f` with the context current on this thread, then restores the previous one.
    fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: pushes a valid, retained context; popped below on this thread.
        let pushed = unsafe { sys::cuCtxPushCurrent_v2(self.ctx) } == sys::CUresult::CUDA_SUCCESS;
        let r = f();
        if pushed {
            let mut old = std::ptr::null_mut();
            // SAFETY: pops what was pushed above.
            unsafe { sys::cuCtxPopCurrent_v2(&mut old) };
        }
        r
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: releases the retain made in open.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// What [`Cuda::open`] found: the device's name, memory and the driver version.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The device index.
    pub index: i32,
    /// Its name (`NVIDIA H100 …`).
    pub name: String,
    /// Its memory, bytes.
    pub total_mem: usize,
    /// The driver API version (12080 for 12.8).
    pub driver_version: i32,
}

/// An opened device: its primary context and one non-blocking stream. The
/// [`Backend`] of `fhcudaupload`; also a [`Registrar`] for pinned host memory.
pub struct Cuda {
    ctx: Arc<Context>,
    stream: sys::CUstream,
    info: DeviceInfo,
}

// SAFETY: the stream and context handles are usable from any thread; every call makes
// the context current first.
unsafe impl Send for Cuda {}
// SAFETY: as above; the driver synchronises calls on one stream.
unsafe impl Sync for Cuda {}

impl fmt::Debug for Cuda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cuda").field("info", &self.info).finish()
    }
}

impl Cuda {
    /// Opens device `index`: loads the driver, checks its version and the device, and
    /// makes a stream. Each failure says what is missing and how to check.
    pub fn open(index: i32) -> Result<Arc<Self>, String> {
        if !library_present() {
            return Err(format!(
                "CUDA driver library (libcuda.so.1) not found: install the NVIDIA driver \
                 (or put its directory in LD_LIBRARY_PATH); {CHECK}"
            ));
        }
        match catch_unwind(AssertUnwindSafe(|| Self::open_loaded(index))) {
            Ok(r) => r,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(format!(
                    "the CUDA driver library lacks a function this element needs ({what}): \
                     the driver is too old; update it, {CHECK}"
                ))
            }
        }
    }

    fn open_loaded(index: i32) -> Result<Arc<Self>, String> {
        let err = |e: BackendError| format!("{e}; {CHECK}");
        // SAFETY: plain driver calls with valid out-pointers; results checked.
        unsafe {
            check(sys::cuInit(0), "cuInit").map_err(err)?;
            let mut version = 0;
            check(sys::cuDriverGetVersion(&mut version), "cuDriverGetVersion").map_err(err)?;
            if version < MIN_DRIVER_VERSION {
                return Err(format!(
                    "the CUDA driver supports CUDA {}.{}, older than the 12.0 this element \
                     needs: update the NVIDIA driver; {CHECK}",
                    version / 1000,
                    version % 1000 / 10
                ));
            }
            let mut count = 0;
            check(sys::cuDeviceGetCount(&mut count), "cuDeviceGetCount").map_err(err)?;
            if count == 0 {
                return Err(format!("no CUDA device found; {CHECK}"));
            }
            if index < 0 || index >= count {
                return Err(format!(
                    "device {index} does not exist: there are {count} CUDA devices (0 to {}); \
                     {CHECK} (nvidia-smi -L lists them)",
                    count - 1
                ));
            }
            let mut device = 0;
            check(sys::cuDeviceGet(&mut device, index), "cuDeviceGet").map_err(err)?;
            let mut name = [0 as std::ffi::c_char; 128];
            check(
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device),
                "cuDeviceGetName",
            )
            .map_err(err)?;
            let name = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let mut total_mem = 0;
            check(
                sys::cuDeviceTotalMem_v2(&mut total_mem, device),
                "cuDeviceTotalMem",
            )
            .map_err(err)?;
            let mut ctx = std::ptr::null_mut();
            check(
                sys::cuDevicePrimaryCtxRetain(&mut ctx, device),
                "cuDevicePrimaryCtxRetain",
            )
            .map_err(err)?;
            let ctx = Arc::new(Context { ctx, device });
            let mut stream = std::ptr::null_mut();
            ctx.with(|| {
                check(
                    sys::cuStreamCreate(
                        &mut stream,
                        sys::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as u32,
                    ),
                    "cuStreamCreate",
                )
            })
            .map_err(err)?;
            Ok(Arc::new(Self {
                ctx,
                stream,
                info: DeviceInfo {
                    index,
                    name,
                    total_mem,
                    driver_version: version,
                },
            }))
        }
    }

    /// What was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The raw handles of the primary context and its device (`CUcontext`, `CUdevice`),
    /// for libraries that wrap them (libgstcuda's `gst_cuda_context_new_wrapped`). The
    /// context stays retained while this `Cuda` lives.
    pub fn raw_context(&self) -> (*mut c_void, i32) {
        (self.ctx.ctx.cast(), self.ctx.device)
    }

    /// A [`Registrar`] that pins host memory for this device's context (portable: every
    /// context sees it as pinned).
    pub fn registrar(&self) -> Arc<dyn Registrar> {
        Arc::new(CudaRegistrar {
            ctx: self.ctx.clone(),
        })
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        self.ctx.with(|| {
            // SAFETY: our stream; synchronised first, so no copy still reads host memory.
            unsafe {
                sys::cuStreamSynchronize(self.stream);
                sys::cuStreamDestroy_v2(self.stream);
            }
        });
    }
}

impl Backend for Cuda {
    fn alloc(&self, len: usize) -> Result<DevicePtr, BackendError> {
        let mut p = 0;
        // SAFETY: a valid out-pointer; the context is current.
        self.ctx
            .with(|| check(unsafe { sys::cuMemAlloc_v2(&mut p, len) }, "cuMemAlloc"))
            .map_err(|e| BackendError(format!("{e} ({len} bytes of device memory)")))?;
        Ok(p)
    }

    fn free(&self, ptr: DevicePtr, _len: usize) {
        // SAFETY: a block from alloc, no longer used (its last holder dropped it).
        self.ctx.with(|| unsafe { sys::cuMemFree_v2(ptr) });
    }

    unsafe fn copy_to_device(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller keeps `src..src + len` alive until the next event recorded
        // on this stream completes, and `dst` holds `len` bytes.
        self.ctx.with(|| {
            check(
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), len, self.stream) },
                "cuMemcpyHtoDAsync",
            )
        })
    }

    fn create_event(&self) -> Result<Event, BackendError> {
        let mut e = std::ptr::null_mut();
        // Blocking sync: a stalled upload sleeps instead of spinning a core.
        let flags = sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32
            | sys::CUevent_flags_enum::CU_EVENT_BLOCKING_SYNC as u32;
        // SAFETY: a valid out-pointer; the context is current.
        self.ctx.with(|| {
            check(
                unsafe { sys::cuEventCreate(&mut e, flags) },
                "cuEventCreate",
            )
        })?;
        Ok(Event(e as u64))
    }

    fn destroy_event(&self, event: Event) {
        // SAFETY: an event from create_event, not pending (the engine waited for it).
        self.ctx
            .with(|| unsafe { sys::cuEventDestroy_v2(event.0 as sys::CUevent) });
    }

    fn record(&self, event: Event) -> Result<(), BackendError> {
        // SAFETY: our event on our stream.
        self.ctx.with(|| {
            check(
                unsafe { sys::cuEventRecord(event.0 as sys::CUevent, self.stream) },
                "cuEventRecord",
            )
        })
    }

    fn is_complete(&self, event: Event) -> Result<bool, BackendError> {
        // SAFETY: our event.
        let r = self
            .ctx
            .with(|| unsafe { sys::cuEventQuery(event.0 as sys::CUevent) });
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(BackendError(format!("cuEventQuery failed: {r:?}"))),
        }
    }

    fn wait(&self, event: Event) -> Result<(), BackendError> {
        // SAFETY: our event.
        self.ctx.with(|| {
            check(
                unsafe { sys::cuEventSynchronize(event.0 as sys::CUevent) },
                "cuEventSynchronize",
            )
        })
    }

    fn stream_handle(&self) -> u64 {
        self.stream as u64
    }
}

/// Pins host memory with `cuMemHostRegister(PORTABLE)`, for the `Registered` provider.
#[derive(Clone)]
struct CudaRegistrar {
    ctx: Arc<Context>,
}

impl fmt::Debug for CudaRegistrar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CudaRegistrar")
    }
}

impl Registrar for CudaRegistrar {
    fn register(&self, ptr: *mut u8, len: usize) -> Result<(), String> {
        // SAFETY: the caller hands a mapping of `len` bytes it owns until unregister.
        let r = self.ctx.with(|| unsafe {
            sys::cuMemHostRegister_v2(ptr.cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE)
        });
        check(r, "cuMemHostRegister").map_err(|e| {
            format!(
                "{e} for {len} bytes: page-locking is limited by RLIMIT_MEMLOCK (ulimit -l; \
                 raise memlock in /etc/security/limits.conf or LimitMEMLOCK= for a service)"
            )
        })
    }

    fn unregister(&self, ptr: *mut u8, _len: usize) {
        // SAFETY: unregisters what register registered, before the unmap.
        self.ctx
            .with(|| unsafe { sys::cuMemHostUnregister(ptr.cast()) });
    }
}
