//! libibverbs loaded at run time with `dlopen`, so the plugin loads (and `fhibvsrc`
//! fails at start with a clear message) on machines without rdma-core, and nothing of
//! rdma-core is needed to build it.
//!
//! The exported (non-inline) verbs are resolved with `dlvsym(…, "IBVERBS_1.1")`: the
//! library also exports `IBVERBS_1.0` compatibility versions of most of them with a
//! different ABI, and `IBVERBS_1.1` is the version a program compiled against
//! `verbs.h` binds to. The `static inline` verbs of the header (`ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_create_flow`, `ibv_destroy_flow`) have no symbol; they are
//! re-implemented in [`crate::sys`] over the mirrored struct layouts.
//!
//! The library is loaded once per process ([`library`]) and never closed: libibverbs
//! keeps process-wide state (providers, fork handling) that outlives any one element.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::sys::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_mr, ibv_pd, ibv_qp, ibv_qp_attr,
    ibv_qp_init_attr,
};

/// What loading libibverbs and calling `ibv_get_device_list` gave, before any judgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawOutcome {
    /// `dlopen` or `dlsym` failed: rdma-core's libibverbs is not installed (or broken).
    LibraryMissing {
        /// The library asked for.
        library: String,
        /// `dlerror()` text.
        detail: String,
    },
    /// `ibv_get_device_list` returned NULL with this `errno` (0 if none was set).
    ListFailed {
        /// `errno` after the call.
        errno: i32,
    },
    /// `ibv_get_device_list` succeeded with these device names (possibly none).
    Listed(Vec<String>),
}

/// The shared object name of libibverbs (package `libibverbs1`, from rdma-core).
pub const LIBIBVERBS: &CStr = c"libibverbs.so.1";

/// The symbol version a program built against `verbs.h` links to.
const VERSION: &CStr = c"IBVERBS_1.1";

type GetDeviceList = unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
type FreeDeviceList = unsafe extern "C" fn(list: *mut *mut ibv_device);
type GetDeviceName = unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut ibv_context,
    c_int,
    *mut c_void,
    *mut ibv_comp_channel,
    c_int,
) -> *mut ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;

/// The resolved entry points of one loaded libibverbs. Each field is the verb of the
/// same name, with the C signature from `verbs.h` quoted on it.
pub struct Verbs {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    /// `struct ibv_context *ibv_open_device(struct ibv_device *device);`
    pub open_device: OpenDevice,
    /// `int ibv_close_device(struct ibv_context *context);`
    pub close_device: CloseDevice,
    /// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);`
    pub alloc_pd: AllocPd,
    /// `int ibv_dealloc_pd(struct ibv_pd *pd);`
    pub dealloc_pd: DeallocPd,
    /// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);`
    /// (the exported function; the header's `ibv_reg_mr` macro calls it when no
    /// optional access flag is given, which is our case).
    pub reg_mr: RegMr,
    /// `int ibv_dereg_mr(struct ibv_mr *mr);`
    pub dereg_mr: DeregMr,
    /// `struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
    /// struct ibv_comp_channel *channel, int comp_vector);`
    pub create_cq: CreateCq,
    /// `int ibv_destroy_cq(struct ibv_cq *cq);`
    pub destroy_cq: DestroyCq,
    /// `struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);`
    pub create_qp: CreateQp,
    /// `int ibv_destroy_qp(struct ibv_qp *qp);`
    pub destroy_qp: DestroyQp,
    /// `int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);`
    pub modify_qp: ModifyQp,
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

/// Loads `library` and resolves every verb used. The library is never closed (see the
/// module documentation).
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
        // SAFETY: `handle` is a live handle from dlopen (never closed); `name` and
        // VERSION are NUL-terminated.
        let p = unsafe { libc::dlvsym(handle, name.as_ptr(), VERSION.as_ptr()) };
        if p.is_null() {
            Err(RawOutcome::LibraryMissing {
                library: library.to_string_lossy().into_owned(),
                detail: format!(
                    "{}@{} not found: {}",
                    name.to_string_lossy(),
                    VERSION.to_string_lossy(),
                    dl_error("dlvsym failed")
                ),
            })
        } else {
            Ok(p)
        }
    };
    macro_rules! resolve {
        ($name:literal, $ty:ty) => {{
            let p = sym($name)?;
            // SAFETY: `p` is libibverbs' exported function of this name at version
            // IBVERBS_1.1, whose C signature (quoted on the `Verbs` field it is stored
            // in) is `$ty`.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }};
    }
    Ok(Verbs {
        get_device_list: resolve!(c"ibv_get_device_list", GetDeviceList),
        free_device_list: resolve!(c"ibv_free_device_list", FreeDeviceList),
        get_device_name: resolve!(c"ibv_get_device_name", GetDeviceName),
        open_device: resolve!(c"ibv_open_device", OpenDevice),
        close_device: resolve!(c"ibv_close_device", CloseDevice),
        alloc_pd: resolve!(c"ibv_alloc_pd", AllocPd),
        dealloc_pd: resolve!(c"ibv_dealloc_pd", DeallocPd),
        reg_mr: resolve!(c"ibv_reg_mr", RegMr),
        dereg_mr: resolve!(c"ibv_dereg_mr", DeregMr),
        create_cq: resolve!(c"ibv_create_cq", CreateCq),
        destroy_cq: resolve!(c"ibv_destroy_cq", DestroyCq),
        create_qp: resolve!(c"ibv_create_qp", CreateQp),
        destroy_qp: resolve!(c"ibv_destroy_qp", DestroyQp),
        modify_qp: resolve!(c"ibv_modify_qp", ModifyQp),
    })
}

/// libibverbs, loaded once per process.
pub fn library() -> Result<&'static Verbs, RawOutcome> {
    static VERBS: OnceLock<Result<Verbs, RawOutcome>> = OnceLock::new();
    VERBS
        .get_or_init(|| load(LIBIBVERBS))
        .as_ref()
        .map_err(Clone::clone)
}

/// `errno` of the calling thread.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clears `errno`, so that "NULL with errno set" can be told from "NULL, no reason".
pub fn clear_errno() {
    // SAFETY: errno is thread-local; __errno_location always returns a valid pointer.
    unsafe { *libc::__errno_location() = 0 };
}

impl Verbs {
    /// Calls `ibv_get_device_list` and copies out the device names.
    fn list(&self) -> RawOutcome {
        let mut n: c_int = 0;
        clear_errno();
        // SAFETY: `n` is a valid out-pointer.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return RawOutcome::ListFailed { errno: errno() };
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

impl Verbs {
    /// Opens the device named `name`: `ibv_get_device_list`, `ibv_open_device` on the
    /// match, `ibv_free_device_list` (an opened device stays valid after the list is
    /// freed). Err is `(call, errno)`; `ENODEV` when no device has that name.
    pub fn open_by_name(&self, name: &str) -> Result<*mut ibv_context, (&'static str, i32)> {
        let mut n: c_int = 0;
        clear_errno();
        // SAFETY: `n` is a valid out-pointer.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(("ibv_get_device_list", errno()));
        }
        let mut result = Err(("ibv_open_device", libc::ENODEV));
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: `list` holds `n` device pointers until freed below; the name is
            // a NUL-terminated string owned by the device.
            let (dev, this) = unsafe {
                let dev = *list.add(i);
                if dev.is_null() {
                    break;
                }
                let p = (self.get_device_name)(dev);
                (dev, (!p.is_null()).then(|| CStr::from_ptr(p)))
            };
            if this.is_some_and(|c| c.to_bytes() == name.as_bytes()) {
                clear_errno();
                // SAFETY: `dev` is a device of the live list.
                let ctx = unsafe { (self.open_device)(dev) };
                result = if ctx.is_null() {
                    Err(("ibv_open_device", errno()))
                } else {
                    Ok(ctx)
                };
                break;
            }
        }
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
        unsafe { (self.free_device_list)(list) };
        result
    }
}

/// Loads `library` (normally [`LIBIBVERBS`]) and lists its devices, as a raw outcome
/// for `probe::decide`.
pub fn raw_probe_with(library: &CStr) -> RawOutcome {
    match load(library) {
        Ok(v) => v.list(),
        Err(e) => e,
    }
}

/// [`raw_probe_with`] on libibverbs, loaded once per process.
pub fn raw_probe() -> RawOutcome {
    match library() {
        Ok(v) => v.list(),
        Err(e) => e,
    }
}

/// The system's text for `errno` ("Operation not permitted"), without Rust's
/// " (os error N)" suffix, for messages that give the number themselves.
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
