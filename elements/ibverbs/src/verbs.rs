//! libibverbs loaded at run time with `dlopen`, so the plugin loads (and `fhibvsrc`
//! fails at start with a clear message) on machines without rdma-core.
//!
//! Only the three functions the device probe needs are resolved:
//! `ibv_get_device_list`, `ibv_get_device_name` and `ibv_free_device_list`. The
//! `ibv_device` structure is used only as an opaque pointer, so no struct layout from
//! the C headers is assumed.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::probe::RawOutcome;

/// The shared object name of libibverbs (package `libibverbs1`, from rdma-core).
pub const LIBIBVERBS: &CStr = c"libibverbs.so.1";

type GetDeviceList = unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(list: *mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(device: *mut c_void) -> *const c_char;

/// The resolved entry points of one loaded libibverbs.
struct Verbs {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
}

/// The last `dlerror()` text, or `fallback`.
fn dl_error(fallback: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc, valid until
    // the next dl* call on this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            fallback.to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Loads `library` and resolves the probe's functions. The library is never closed:
/// libibverbs keeps process-wide state (providers, fork handling) that outlives a call.
fn load(library: &CStr) -> Result<Verbs, RawOutcome> {
    // SAFETY: `library` is NUL-terminated; dlopen has no other preconditions.
    let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(RawOutcome::LibraryMissing {
            library: library.to_string_lossy().into_owned(),
            detail: dl_error("dlopen failed"),
        });
    }
    let sym = |name: &CStr| -> Result<*mut c_void, RawOutcome> {
        // SAFETY: `handle` is a live handle from dlopen (never closed); `name` is
        // NUL-terminated.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if p.is_null() {
            Err(RawOutcome::LibraryMissing {
                library: library.to_string_lossy().into_owned(),
                detail: format!(
                    "{} not found: {}",
                    name.to_string_lossy(),
                    dl_error("dlsym failed")
                ),
            })
        } else {
            Ok(p)
        }
    };
    let list = sym(c"ibv_get_device_list")?;
    let free = sym(c"ibv_free_device_list")?;
    let name = sym(c"ibv_get_device_name")?;
    // SAFETY: the symbols are libibverbs' exported functions with exactly these C
    // signatures (verbs.h: `struct ibv_device **ibv_get_device_list(int *)`,
    // `void ibv_free_device_list(struct ibv_device **)`,
    // `const char *ibv_get_device_name(struct ibv_device *)`).
    unsafe {
        Ok(Verbs {
            get_device_list: std::mem::transmute::<*mut c_void, GetDeviceList>(list),
            free_device_list: std::mem::transmute::<*mut c_void, FreeDeviceList>(free),
            get_device_name: std::mem::transmute::<*mut c_void, GetDeviceName>(name),
        })
    }
}

impl Verbs {
    /// Calls `ibv_get_device_list` and copies out the device names.
    fn list(&self) -> RawOutcome {
        let mut n: c_int = 0;
        // SAFETY: errno is thread-local; clearing it tells "NULL with errno set" from
        // "NULL with no reason given". `n` is a valid out-pointer.
        let list = unsafe {
            *libc::__errno_location() = 0;
            (self.get_device_list)(&mut n)
        };
        if list.is_null() {
            return RawOutcome::ListFailed {
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            };
        }
        let count = usize::try_from(n).unwrap_or(0);
        let mut names = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `list` holds `n` valid device pointers (then NULL) until it is
            // freed below; ibv_get_device_name returns a string owned by the device,
            // copied at once.
            unsafe {
                let dev = *list.add(i);
                if dev.is_null() {
                    break;
                }
                let name = (self.get_device_name)(dev);
                if !name.is_null() {
                    names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
                }
            }
        }
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
        unsafe { (self.free_device_list)(list) };
        RawOutcome::Listed(names)
    }
}

/// Loads `library` (normally [`LIBIBVERBS`]) and lists its devices, as a raw outcome
/// for [`crate::probe::decide`].
pub fn raw_probe_with(library: &CStr) -> RawOutcome {
    match load(library) {
        Ok(v) => v.list(),
        Err(e) => e,
    }
}

/// [`raw_probe_with`] on libibverbs, loaded once per process.
pub fn raw_probe() -> RawOutcome {
    static VERBS: OnceLock<Result<Verbs, RawOutcome>> = OnceLock::new();
    match VERBS.get_or_init(|| load(LIBIBVERBS)) {
        Ok(v) => v.list(),
        Err(e) => e.clone(),
    }
}
