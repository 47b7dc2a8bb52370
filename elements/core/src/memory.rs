//! Page-aligned, pre-faulted memory regions: system pages or hugepages, and the regions
//! other memory providers make ([`crate::provider`]: shared segments, pinned memory).
//!
//! Pool memory is faulted in when the region is created (`MAP_POPULATE`), so the first
//! packets of a capture do not pay for page faults: with 4 KiB pages a first-touch copy
//! runs about 8x slower than a copy into memory that is already mapped.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::RwLock;

/// Whether a region is backed by hugepages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HugepagePolicy {
    /// Try hugepages; fall back to normal pages with one warning.
    #[default]
    Auto,
    /// Hugepages or fail with the command that reserves them.
    Require,
    /// Normal pages only.
    Off,
}

impl HugepagePolicy {
    /// Parses `auto`, `require` or `off`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Self::Auto),
            "require" => Some(Self::Require),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The name used in properties and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Require => "require",
            Self::Off => "off",
        }
    }
}

/// The kind of memory behind a region (and so behind every buffer cut from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Anonymous memory in normal (4 KiB) pages.
    System,
    /// Anonymous memory in hugepages (`MAP_HUGETLB`).
    Hugepage,
    /// A shared-memory segment (a memfd mapped `MAP_SHARED`) another process can map.
    Shared,
    /// Memory registered with a device driver for direct access (pinned for DMA, e.g.
    /// CUDA host-registered memory).
    Pinned,
}

impl MemoryKind {
    /// The name reported in stats and by [`crate::gstmem::memory_kind`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Hugepage => "hugepage",
            Self::Shared => "shared",
            Self::Pinned => "pinned",
        }
    }
}

/// Why a region could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionError {
    /// `hugepages=require` and the kernel could not provide them.
    NoHugepages {
        /// Bytes asked for.
        bytes: usize,
        /// Hugepages of the default size needed for that.
        pages_needed: usize,
        /// Free hugepages when we asked.
        pages_free: usize,
        /// The default hugepage size in bytes.
        page_size: usize,
    },
    /// mmap failed for another reason.
    Mmap {
        /// Bytes asked for.
        bytes: usize,
        /// The OS error text.
        error: String,
    },
    /// A zero-sized region was asked for.
    Empty,
    /// More than the machine has available: refused before mapping (pre-faulting it
    /// would push the machine into swap or the OOM killer first).
    TooLarge {
        /// Bytes asked for.
        bytes: usize,
        /// `MemAvailable` when we asked.
        available: usize,
    },
    /// More memory to pin (AF_XDP UMEM, an RDMA memory region) than the locked-memory
    /// limit allows this process (`RLIMIT_MEMLOCK`, without `CAP_IPC_LOCK`): refused
    /// before mapping, where the kernel would refuse it after the pre-fault.
    MemlockLimit {
        /// Bytes asked for.
        bytes: usize,
        /// The soft `RLIMIT_MEMLOCK`, in bytes.
        limit: usize,
    },
    /// A memory provider other than anonymous memory failed (shared segment, device
    /// registration): what it was, and what to do.
    Provider {
        /// The provider's message, naming the cause and the fix.
        reason: String,
    },
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionError::NoHugepages {
                bytes,
                pages_needed,
                pages_free,
                page_size,
            } => write!(
                f,
                "hugepages=require, but the kernel could not provide {pages_needed} hugepages of \
                 {} KiB for {bytes} bytes ({pages_free} free). Reserve them as root: \
                 echo {} > /proc/sys/vm/nr_hugepages (or set hugepages=auto)",
                page_size / 1024,
                (*pages_needed).max(1) + hugepages_total().saturating_sub(*pages_free),
            ),
            RegionError::Mmap { bytes, error } => {
                write!(f, "could not map {bytes} bytes of pool memory: {error}")
            }
            RegionError::Empty => write!(f, "a memory region of 0 bytes was requested"),
            RegionError::TooLarge { bytes, available } => write!(
                f,
                "{bytes} bytes of pool memory asked for, but only {available} are available \
                 (MemAvailable in /proc/meminfo): lower pool-size (or the sizes it is made of), \
                 or free memory first"
            ),
            RegionError::MemlockLimit { bytes, limit } => write!(
                f,
                "{bytes} bytes of memory to pin asked for, but the locked-memory limit \
                 (RLIMIT_MEMLOCK) allows {limit}: raise it (ulimit -l unlimited in the shell; \
                 '* - memlock unlimited' in /etc/security/limits.d/ for logins; \
                 LimitMEMLOCK=infinity for a systemd service), run with CAP_IPC_LOCK, or \
                 lower pool-size (or the sizes it is made of)"
            ),
            RegionError::Provider { reason } => f.write_str(reason),
        }
    }
}

impl std::error::Error for RegionError {}

/// Runs right before a region is unmapped (a device driver's unregistration).
pub type ReleaseHook = Box<dyn FnOnce(*mut u8, usize) + Send + Sync>;

/// A page-aligned, pre-faulted mapping, unmapped on drop.
pub struct MemoryRegion {
    ptr: NonNull<u8>,
    len: usize,
    kind: MemoryKind,
    fallback: Option<String>,
    /// The segment's descriptor, for a shared region.
    fd: Option<OwnedFd>,
    /// Runs before the unmap.
    release: Option<ReleaseHook>,
}

// SAFETY: the region is plain memory owned by this value; access to its bytes is
// coordinated by the pool that hands out disjoint slots.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; shared references only expose the pointer and metadata.
unsafe impl Sync for MemoryRegion {}

/// Live regions, so that a pointer into any of them can be mapped back to its kind
/// (a buffer's memory does not otherwise say where it came from).
static REGIONS: RwLock<Vec<(usize, usize, MemoryKind)>> = RwLock::new(Vec::new());

impl MemoryRegion {
    /// Maps `len` bytes (rounded up to the page size) under `policy`.
    pub fn allocate(len: usize, policy: HugepagePolicy) -> Result<Self, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        let huge = hugepage_size();
        let mut fallback = None;
        if policy != HugepagePolicy::Off {
            let hlen = round_up(len, huge);
            let free = hugepages_free();
            if policy == HugepagePolicy::Require && hlen / huge > free {
                // Known short before asking: no mapping is tried.
                return Err(RegionError::NoHugepages {
                    bytes: len,
                    pages_needed: hlen / huge,
                    pages_free: free,
                    page_size: huge,
                });
            }
            match map(hlen, true) {
                Ok(ptr) => return Ok(Self::register(ptr, hlen, MemoryKind::Hugepage, None)),
                Err(err) => {
                    let free = hugepages_free();
                    if policy == HugepagePolicy::Require {
                        return Err(RegionError::NoHugepages {
                            bytes: len,
                            pages_needed: hlen / huge,
                            pages_free: free,
                            page_size: huge,
                        });
                    }
                    fallback = Some(format!(
                        "no hugepages for {len} bytes ({err}; {free} free of {} KiB): using \
                         normal pages. Reserve them with: echo {} > /proc/sys/vm/nr_hugepages",
                        huge / 1024,
                        hlen / huge + hugepages_total().saturating_sub(free),
                    ));
                }
            }
        }
        let plen = round_up(len, page_size());
        check_available(plen)?;
        let ptr = map(plen, false).map_err(|e| RegionError::Mmap {
            bytes: plen,
            error: e.to_string(),
        })?;
        Ok(Self::register(ptr, plen, MemoryKind::System, fallback))
    }

    fn register(ptr: NonNull<u8>, len: usize, kind: MemoryKind, fallback: Option<String>) -> Self {
        let start = ptr.as_ptr() as usize;
        REGIONS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((start, start + len, kind));
        Self {
            ptr,
            len,
            kind,
            fallback,
            fd: None,
            release: None,
        }
    }

    /// A region over a mapping a provider made: `len` bytes at `ptr` (from `mmap`, so
    /// that drop can `munmap` them), of `kind`, with the segment's descriptor if any.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be a live mapping from `mmap` that nothing else unmaps.
    pub(crate) unsafe fn from_mapping(
        ptr: NonNull<u8>,
        len: usize,
        kind: MemoryKind,
        fd: Option<OwnedFd>,
    ) -> Self {
        let mut r = Self::register(ptr, len, kind, None);
        r.fd = fd;
        r
    }

    /// The same region, now of `kind`, with `release` run before it is unmapped (a
    /// provider that registers memory with a driver unregisters it there).
    pub(crate) fn rekind(mut self, kind: MemoryKind, release: ReleaseHook) -> Self {
        self.kind = kind;
        let start = self.ptr.as_ptr() as usize;
        if let Some(r) = REGIONS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
            .find(|r| r.0 == start)
        {
            r.2 = kind;
        }
        self.release = Some(release);
        self
    }

    /// The same region, with `hook` also run right before it is unmapped (after any
    /// hook it already had): how an element that hands the region's descriptor to
    /// another process learns that the region is gone, so that it stops naming it.
    pub fn on_release(mut self, hook: ReleaseHook) -> Self {
        self.release = Some(match self.release.take() {
            None => hook,
            Some(first) => Box::new(move |ptr, len| {
                first(ptr, len);
                hook(ptr, len);
            }),
        });
        self
    }

    /// The shared segment's descriptor (a [`MemoryKind::Shared`] region), to pass to
    /// another process.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Start of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What backs the region.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// With `hugepages=auto`, why hugepages were not used (to warn about once).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let start = self.ptr.as_ptr() as usize;
        REGIONS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|r| r.0 != start);
        if let Some(release) = self.release.take() {
            release(self.ptr.as_ptr(), self.len);
        }
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the region any
        // more because slots hold an Arc to the pool that owns it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The kind of the live region containing `ptr`, if any.
pub fn kind_of_ptr(ptr: *const u8) -> Option<MemoryKind> {
    let p = ptr as usize;
    REGIONS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|r| p >= r.0 && p < r.1)
        .map(|r| r.2)
}

fn map(len: usize, huge: bool) -> std::io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: anonymous mapping with no fixed address; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"))
}

pub(crate) fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// Asks the CPU to start loading `bytes` into its caches, one request per 64-byte line,
/// and returns at once. A hint: it changes no data and faults on nothing; targets other
/// than x86-64 ignore it.
///
/// The chunk engine and the SPEAD reassembler call it for where the next packet of a
/// message will most likely land, so that copy finds its cache lines on hand instead of
/// waiting on memory for each. On the development VM it cut the copy of each payload of
/// an 8972-byte packet into 8 MiB chunks from about 1 100 to about 420 cycles
/// (docs/benchmarks.md has the receiver-level figures).
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing into the program and cannot fault; the address
        // is inside `bytes` anyway. SSE (prefetcht0) is part of x86-64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// [`prefetch`] of up to `len` bytes of `buf` from `from`, cut at the end of `buf`: where
/// the next packet of a message lands when it follows the one just written at
/// `from - len .. from`.
pub fn prefetch_following(buf: &[u8], from: usize, len: usize) {
    let end = buf.len().min(from.saturating_add(len));
    prefetch(&buf[from.min(end)..end]);
}

/// Whether [`copy_streaming`] can copy on this CPU (AVX-512F, checked at run time).
pub fn has_streaming_stores() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Copies `src` into `dest` (the same length) with streaming (non-temporal) stores for
/// the whole 64-byte lines of `dest`, which go to memory without being read first or kept
/// in the cache; the partial lines at either end are copied as usual. Only for memory
/// nothing reads soon: the chunk engine uses it for chunks too large to stay in cache.
/// Returns false and copies nothing where the CPU lacks AVX-512F (checked at run time).
/// Call [`store_fence`] before another thread reads `dest`.
///
/// Panics if the lengths differ.
pub fn copy_streaming(dest: &mut [u8], src: &[u8]) -> bool {
    assert_eq!(dest.len(), src.len(), "copy_streaming: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if has_streaming_stores() {
        let head = dest.as_ptr().align_offset(64).min(dest.len());
        let lines = (dest.len() - head) / 64;
        let tail = head + lines * 64;
        dest[..head].copy_from_slice(&src[..head]);
        // SAFETY: AVX-512F is present (checked above); `dest[head..tail]` and
        // `src[head..tail]` hold `lines` whole lines and `dest + head` is 64-byte aligned.
        unsafe { stream_lines(dest[head..].as_mut_ptr(), src[head..].as_ptr(), lines) };
        dest[tail..].copy_from_slice(&src[tail..]);
        return true;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (dest, src);
    false
}

/// One 64-byte load and one 64-byte streaming store per line: a whole line per store,
/// so each write-combining buffer leaves complete (with 16-byte stores this was no faster
/// than cached copies on the development VM; see docs/benchmarks.md).
///
/// # Safety
/// The CPU has AVX-512F; `dest` (64-byte aligned) and `src` hold `lines × 64` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_lines(dest: *mut u8, src: *const u8, lines: usize) {
    use core::arch::x86_64::{_mm512_loadu_si512, _mm512_stream_si512};
    for i in 0..lines {
        // SAFETY: per the function contract, line `i` is inside both buffers and the
        // store address is 64-byte aligned, as `_mm512_stream_si512` requires.
        unsafe {
            let v = _mm512_loadu_si512(src.add(i * 64).cast());
            _mm512_stream_si512(dest.add(i * 64).cast(), v);
        }
    }
}

/// Orders every earlier store, streaming ones included, before any later one: streaming
/// stores are weakly ordered, so memory written by [`copy_streaming`] must pass through
/// this before it is handed to another thread.
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no preconditions; SSE is part of x86-64.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

fn meminfo_field(name: &str) -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Refuses `bytes` of normal pages when the kernel says fewer are available
/// (`MemAvailable`), before anything is mapped or faulted. Where /proc does not say,
/// the mapping itself decides.
pub fn check_available(bytes: usize) -> Result<(), RegionError> {
    match meminfo_field("MemAvailable").map(|kib| kib.saturating_mul(1024)) {
        Some(available) if bytes > available => Err(RegionError::TooLarge { bytes, available }),
        _ => Ok(()),
    }
}

/// Refuses `bytes` of memory to be pinned (locked) when this process may not lock that
/// much: above its soft `RLIMIT_MEMLOCK` and without `CAP_IPC_LOCK` (root has it), the
/// kernel refuses AF_XDP UMEM registration and RDMA memory regions. Called before the
/// memory is allocated, so that the refusal costs nothing and names the limit and its
/// fix. Where /proc does not say, the registration itself decides.
pub fn check_lockable(bytes: usize) -> Result<(), RegionError> {
    match memlock_limit() {
        Some(limit) if bytes > limit && !has_cap_ipc_lock() => {
            Err(RegionError::MemlockLimit { bytes, limit })
        }
        _ => Ok(()),
    }
}

/// The soft `RLIMIT_MEMLOCK` of this process in bytes (`None`: unlimited or unknown).
pub fn memlock_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_memlock(&text)
}

/// The soft limit on the "Max locked memory" line of a `/proc/<pid>/limits` text.
fn parse_memlock(limits: &str) -> Option<usize> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// True when this process has `CAP_IPC_LOCK` in its effective set (no lock limit).
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The default hugepage size in bytes (2 MiB when /proc does not say).
pub fn hugepage_size() -> usize {
    meminfo_field("Hugepagesize").map_or(2 << 20, |kib| kib * 1024)
}

/// Free hugepages of the default size.
pub fn hugepages_free() -> usize {
    meminfo_field("HugePages_Free").unwrap_or(0)
}

/// Reserved hugepages of the default size.
pub fn hugepages_total() -> usize {
    meminfo_field("HugePages_Total").unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_the_machine_has_is_refused_before_mapping() {
        let available = meminfo_field("MemAvailable").expect("Linux has MemAvailable") * 1024;
        let asked = available.saturating_mul(4).max(1 << 40);
        let t0 = std::time::Instant::now();
        match MemoryRegion::allocate(asked, HugepagePolicy::Off) {
            Err(RegionError::TooLarge { bytes, .. }) => assert!(bytes >= asked),
            other => panic!("{:?}", other.map(|r| r.len())),
        }
        // Nothing was pre-faulted on the way.
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        let text = RegionError::TooLarge {
            bytes: 10,
            available: 5,
        }
        .to_string();
        assert!(text.contains("lower pool-size"), "{text}");
    }

    #[test]
    fn the_locked_memory_limit_is_read_and_named_with_its_fix() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n\
                      Max locked memory         8388608              8388608              bytes\n";
        assert_eq!(parse_memlock(limits), Some(8 << 20));
        let unlimited =
            "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock(unlimited), None);
        // This process: asking for more than its limit is refused unless it may lock
        // anything (CAP_IPC_LOCK, unlimited).
        let refused = check_lockable(usize::MAX).is_err();
        assert_eq!(
            refused,
            memlock_limit().is_some() && !has_cap_ipc_lock(),
            "{:?}",
            check_lockable(usize::MAX)
        );
        assert!(check_lockable(0).is_ok());
        let text = RegionError::MemlockLimit {
            bytes: 1 << 30,
            limit: 8 << 20,
        }
        .to_string();
        assert!(
            text.contains("1073741824 bytes")
                && text.contains("allows 8388608")
                && text.contains("ulimit -l")
                && text.contains("limits.d")
                && text.contains("LimitMEMLOCK"),
            "{text}"
        );
    }

    /// Run by [`a_pool_above_the_lock_limit_is_refused_before_any_allocation`] in a child
    /// without CAP_IPC_LOCK and with a 1 MiB lock limit (does nothing otherwise).
    #[test]
    fn lock_limit_child() {
        if std::env::var_os("FIREHOSE_LOCK_LIMIT_CHILD").is_none() {
            return;
        }
        assert!(!has_cap_ipc_lock());
        assert_eq!(memlock_limit(), Some(1 << 20));
        assert!(check_lockable(1 << 20).is_ok());
        match check_lockable(64 << 20) {
            Err(RegionError::MemlockLimit { bytes, limit }) => {
                assert_eq!((bytes, limit), (64 << 20, 1 << 20));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pool_above_the_lock_limit_is_refused_before_any_allocation() {
        // setpriv (util-linux) drops CAP_IPC_LOCK even for root; prlimit sets the limit.
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--"])
            .args(["prlimit", "--memlock=1048576:1048576", "--"])
            .arg(exe)
            .args([
                "--exact",
                "memory::tests::lock_limit_child",
                "--test-threads=1",
            ])
            .env("FIREHOSE_LOCK_LIMIT_CHILD", "1")
            .output()
            .expect("setpriv and prlimit (util-linux) run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn streaming_copy_copies_every_byte_and_no_other() {
        let src: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut buf = vec![0u8; 16384 + 64];
        let at = buf.as_ptr().align_offset(64);
        let dest = &mut buf[at..at + 16384];
        let avx512 = has_streaming_stores();
        // Aligned whole lines, a ragged start and end, shorter than a line, empty.
        for (at, n) in [(64, 8192), (67, 8000), (130, 50), (5, 0)] {
            dest.fill(0);
            let done = copy_streaming(&mut dest[at..at + n], &src[..n]);
            store_fence();
            assert_eq!(done, avx512);
            if done {
                assert_eq!(&dest[at..at + n], &src[..n], "at {at} n {n}");
                assert!(dest[..at].iter().all(|&b| b == 0));
                assert!(dest[at + n..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn prefetch_takes_any_range_and_changes_nothing() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let before = bytes.clone();
        for (from, to) in [(0, 0), (0, 1), (3, 64), (63, 65), (1, 9_999), (0, 10_000)] {
            prefetch(&bytes[from..to]);
            // Past the end and over it: cut, never a panic.
            prefetch_following(&bytes, from, to);
            prefetch_following(&bytes, 10_000 + from, to);
        }
        assert_eq!(bytes, before);
    }

    #[test]
    fn system_region_is_page_aligned_and_writable() {
        let r = MemoryRegion::allocate(10_000, HugepagePolicy::Off).unwrap();
        assert_eq!(r.kind(), MemoryKind::System);
        assert_eq!(r.len() % page_size(), 0);
        assert!(r.len() >= 10_000);
        assert_eq!(r.as_ptr() as usize % page_size(), 0);
        // SAFETY: the region is at least 10_000 bytes and exclusively ours.
        let s = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), 10_000) };
        s.fill(0xab);
        assert_eq!(s[9_999], 0xab);
        assert_eq!(kind_of_ptr(r.as_ptr()), Some(MemoryKind::System));
    }

    #[test]
    fn region_is_forgotten_after_drop() {
        let r = MemoryRegion::allocate(4096, HugepagePolicy::Off).unwrap();
        let p = r.as_ptr();
        drop(r);
        // Another test may map the same address meanwhile; only check ours went away
        // when nothing else claims it.
        if let Some(k) = kind_of_ptr(p) {
            assert_eq!(k, MemoryKind::System);
        }
    }

    #[test]
    fn release_hooks_run_once_each_in_order_before_the_unmap() {
        use std::sync::{Arc, Mutex};
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (log.clone(), log.clone());
        let r = MemoryRegion::allocate(4096, HugepagePolicy::Off)
            .unwrap()
            .on_release(Box::new(move |p, l| {
                a.lock().unwrap().push((1, p as usize, l))
            }))
            .on_release(Box::new(move |p, l| {
                b.lock().unwrap().push((2, p as usize, l))
            }));
        let (p, l) = (r.as_ptr() as usize, r.len());
        assert!(log.lock().unwrap().is_empty());
        drop(r);
        assert_eq!(*log.lock().unwrap(), vec![(1, p, l), (2, p, l)]);
    }

    #[test]
    fn require_without_enough_hugepages_names_the_sysctl() {
        // Ask for more than is free, whatever is reserved on this machine.
        let want = (hugepages_free() + 4) * hugepage_size();
        let err = MemoryRegion::allocate(want, HugepagePolicy::Require)
            .err()
            .expect("more hugepages than are free must fail");
        let msg = err.to_string();
        assert!(msg.contains("/proc/sys/vm/nr_hugepages"), "{msg}");
        assert!(matches!(err, RegionError::NoHugepages { .. }));
    }

    #[test]
    fn auto_falls_back_with_a_reason() {
        let want = (hugepages_free() + 4) * hugepage_size();
        let r = MemoryRegion::allocate(want, HugepagePolicy::Auto).unwrap();
        assert_eq!(r.kind(), MemoryKind::System);
        assert!(r.fallback_reason().unwrap().contains("nr_hugepages"));
    }

    #[test]
    fn policy_names_round_trip() {
        for p in [
            HugepagePolicy::Auto,
            HugepagePolicy::Require,
            HugepagePolicy::Off,
        ] {
            assert_eq!(HugepagePolicy::parse(p.as_str()), Some(p));
        }
        assert_eq!(HugepagePolicy::parse("maybe"), None);
    }
}
