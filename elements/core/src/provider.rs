//! Memory kinds: who provides the regions that pools are cut from.
//!
//! Every pool ([`crate::SlotPool`]) is cut from one [`MemoryRegion`]; a
//! [`MemoryProvider`] makes that region. The element that owns a pool holds anonymous
//! memory by default ([`Anonymous`]: hugepages or normal pages, what every pool used
//! before providers existed); an element further down that needs another kind of memory
//! offers its provider in the allocation query ([`crate::alloc`]) and the source cuts
//! its pool from it, so the kernel (or the NIC) writes straight into that memory:
//! - [`SharedSegment`]: a memfd segment mapped `MAP_SHARED`, whose descriptor another
//!   process can map (the shared-memory transport);
//! - [`Registered`]: any provider's regions, registered with a device driver after
//!   mapping and unregistered before unmapping through a [`Registrar`] (CUDA pinned host
//!   memory: `cuMemHostRegister`, for the GPU upload).
//!
//! No GStreamer types: providers are tested and used by engines alone.

use std::ffi::CString;
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::memory::{page_size, round_up, HugepagePolicy, MemoryKind, MemoryRegion, RegionError};

/// Makes the regions pools are cut from.
pub trait MemoryProvider: Send + Sync + fmt::Debug {
    /// The kind of memory it provides (reported in stats and by
    /// [`crate::gstmem::memory_kind`]).
    fn kind(&self) -> MemoryKind;

    /// A pre-faulted region of at least `len` bytes.
    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError>;
}

/// Anonymous memory under a hugepage policy: every pool's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anonymous(pub HugepagePolicy);

impl MemoryProvider for Anonymous {
    /// Hugepage under `require`; under `auto` the region may fall back to system
    /// pages (the region says which: [`MemoryRegion::kind`]).
    fn kind(&self) -> MemoryKind {
        match self.0 {
            HugepagePolicy::Off => MemoryKind::System,
            _ => MemoryKind::Hugepage,
        }
    }

    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError> {
        MemoryRegion::allocate(len, self.0)
    }
}

/// Shared memory: each region is a new memfd segment (named `name` in
/// `/proc/<pid>/fd`), sized, sealed against any change of size and further seals
/// ([`SEGMENT_SEALS`]), and mapped `MAP_SHARED | MAP_POPULATE`. The region keeps the
/// descriptor ([`MemoryRegion::fd`]) to hand to another process.
///
/// Why the seals: a process that maps a descriptor it was given faults (`SIGBUS`) on
/// any page past the file's end; with `F_SEAL_SHRINK` nobody, the producer included,
/// can cut the file, so a consumer that checks the seal (`F_GET_SEALS`) knows its
/// mapping stays backed. `F_SEAL_SEAL` keeps a consumer from adding seals of its own
/// (`F_SEAL_FUTURE_WRITE` would stop the producer's `write`s).
#[derive(Clone, Debug)]
pub struct SharedSegment {
    name: CString,
}

/// The seals every [`SharedSegment`] carries before its descriptor leaves the process:
/// its size can neither shrink nor grow, and no seal can be added.
pub const SEGMENT_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

impl SharedSegment {
    /// Segments named `name` (a NUL in it is replaced).
    pub fn new(name: &str) -> Self {
        let name = CString::new(name.replace('\0', "_")).expect("NULs replaced");
        Self { name }
    }
}

impl MemoryProvider for SharedSegment {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Shared
    }

    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        let len = round_up(len, page_size());
        crate::memory::check_available(len)?;
        let fail = |what: &str| RegionError::Provider {
            reason: format!(
                "could not make a {len}-byte shared memory segment ({what}: {}); check \
                 the memory limit of /dev/shm and of this process (ulimit -v)",
                std::io::Error::last_os_error()
            ),
        };
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                self.name.as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(fail("memfd_create"));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        use std::os::fd::AsRawFd;
        // SAFETY: sizes our own descriptor; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(fail("ftruncate"));
        }
        // SAFETY: seals our own descriptor; no pointers; the result is checked.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEGMENT_SEALS) } != 0 {
            return Err(fail("fcntl F_ADD_SEALS"));
        }
        // SAFETY: maps our own descriptor with no fixed address; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail("mmap"));
        }
        let ptr = NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED");
        // SAFETY: `ptr..ptr + len` was just mapped and is owned by the region from here.
        Ok(unsafe { MemoryRegion::from_mapping(ptr, len, MemoryKind::Shared, Some(fd)) })
    }
}

/// Registers memory with a device driver (e.g. `cuMemHostRegister`), so the device
/// reads it directly.
pub trait Registrar: Send + Sync + fmt::Debug {
    /// Registers `len` bytes at `ptr`; an error names the cause and the fix.
    fn register(&self, ptr: *mut u8, len: usize) -> Result<(), String>;
    /// Unregisters what [`Registrar::register`] registered (before the unmap).
    fn unregister(&self, ptr: *mut u8, len: usize);
}

/// Regions of `inner`, registered with `registrar` once mapped and unregistered before
/// they are unmapped: [`MemoryKind::Pinned`].
#[derive(Clone, Debug)]
pub struct Registered {
    inner: Arc<dyn MemoryProvider>,
    registrar: Arc<dyn Registrar>,
}

impl Registered {
    /// `inner`'s regions, registered with `registrar`.
    pub fn new(inner: Arc<dyn MemoryProvider>, registrar: Arc<dyn Registrar>) -> Self {
        Self { inner, registrar }
    }
}

impl MemoryProvider for Registered {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Pinned
    }

    fn allocate(&self, len: usize) -> Result<MemoryRegion, RegionError> {
        let region = self.inner.allocate(len)?;
        self.registrar
            .register(region.as_ptr(), region.len())
            .map_err(|reason| RegionError::Provider { reason })?;
        let registrar = self.registrar.clone();
        Ok(region.rekind(
            MemoryKind::Pinned,
            Box::new(move |ptr, len| registrar.unregister(ptr, len)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::kind_of_ptr;
    use std::os::fd::AsRawFd;
    use std::sync::Mutex;

    #[test]
    fn anonymous_is_todays_memory() {
        let r = Anonymous(HugepagePolicy::Off).allocate(10_000).unwrap();
        assert_eq!(r.kind(), MemoryKind::System);
        assert!(r.len() >= 10_000);
        assert!(r.fd().is_none());
    }

    #[test]
    fn a_shared_segment_is_seen_through_its_descriptor() {
        let r = SharedSegment::new("firehose-test").allocate(5000).unwrap();
        assert_eq!(r.kind(), MemoryKind::Shared);
        assert_eq!(r.len() % page_size(), 0);
        assert_eq!(kind_of_ptr(r.as_ptr()), Some(MemoryKind::Shared));
        // SAFETY: the region's own bytes, nothing else borrows them.
        unsafe { r.as_ptr().add(100).write(0xab) };
        // A second mapping of the descriptor (what another process does) sees the byte.
        let fd = r.fd().unwrap().as_raw_fd();
        // SAFETY: maps the segment read-only; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                r.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: reads within the mapping just made, then unmaps it.
        unsafe {
            assert_eq!(*(p as *const u8).add(100), 0xab);
            libc::munmap(p, r.len());
        }
        assert!(matches!(
            SharedSegment::new("x").allocate(0),
            Err(RegionError::Empty)
        ));
    }

    #[test]
    fn a_shared_segment_is_sealed_against_any_change_of_size() {
        let r = SharedSegment::new("firehose-test").allocate(8192).unwrap();
        let fd = r.fd().unwrap().as_raw_fd();
        // SAFETY: fcntl and ftruncate on the region's own descriptor; no pointers.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_GET_SEALS), SEGMENT_SEALS);
            assert_ne!(libc::ftruncate(fd, 4096), 0, "shrinking is sealed");
            assert_ne!(libc::ftruncate(fd, 1 << 20), 0, "growing is sealed");
            assert_ne!(
                libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_FUTURE_WRITE),
                0,
                "no further seal"
            );
        }
        // The producer still writes through its own mapping.
        // SAFETY: the region's own bytes, nothing else borrows them.
        unsafe { r.as_ptr().add(8191).write(1) };
    }

    #[derive(Debug, Default)]
    struct Log(Mutex<Vec<String>>, bool);

    impl Registrar for Log {
        fn register(&self, ptr: *mut u8, len: usize) -> Result<(), String> {
            if self.1 {
                return Err("no device: install the driver".into());
            }
            self.0.lock().unwrap().push(format!("reg {ptr:p} {len}"));
            Ok(())
        }
        fn unregister(&self, ptr: *mut u8, len: usize) {
            self.0.lock().unwrap().push(format!("unreg {ptr:p} {len}"));
        }
    }

    #[test]
    fn registered_regions_are_pinned_and_unregistered_before_the_unmap() {
        let log = Arc::new(Log::default());
        let p = Registered::new(Arc::new(Anonymous(HugepagePolicy::Off)), log.clone());
        let r = p.allocate(4096).unwrap();
        assert_eq!(r.kind(), MemoryKind::Pinned);
        let ptr = r.as_ptr();
        assert_eq!(kind_of_ptr(ptr), Some(MemoryKind::Pinned));
        drop(r);
        assert_eq!(kind_of_ptr(ptr), None);
        let l = log.0.lock().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].replace("reg", "unreg"), l[1]);
    }

    #[test]
    fn a_failed_registration_says_why() {
        let p = Registered::new(
            Arc::new(Anonymous(HugepagePolicy::Off)),
            Arc::new(Log(Mutex::default(), true)),
        );
        let e = p.allocate(4096).err().expect("registration fails");
        assert!(e.to_string().contains("install the driver"), "{e}");
    }
}
