//! One output file that only ever holds data that reached it, in order.
//!
//! Blocks are appended at the end of the data, one write at a time, so the file's size
//! is at every moment exactly the data written so far: a recording killed at any moment
//! (SIGKILL, a crash, the OOM killer) leaves whole blocks and nothing else, never space
//! that was not written (zeros) inside the file. On ext4 a direct write past the end of
//! a file also takes the inode lock exclusively and completes before the next may start;
//! writes overlap only inside the file's size, which would mean moving the size ahead of
//! the data (the design before this one, which left up to 2 × io-depth blocks of zeros
//! after a kill). Instead one write may carry several consecutive blocks
//! ([`DiskFile::write`], a `pwritev`), which keeps that many blocks' requests in the
//! device at once.
//!
//! Whole blocks are [`ALIGN`]-byte multiples of page-aligned pool memory written with
//! `O_DIRECT` (no page-cache copy, no write-back storms). A file's last, short block goes
//! through the page cache at its exact length: `O_DIRECT` takes only whole units, and a
//! padded block would leave zeros in the file until it was cut back. Where the
//! filesystem refuses `O_DIRECT` (`EINVAL` at open or at the first write, as ramfs and
//! some FUSE filesystems do) every write goes through the page cache, and the caller is
//! told once so it can warn.
//!
//! A file appears under its name with its header already in it ([`create_with`]), so a
//! crash never leaves one that no reader can open.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Alignment of `O_DIRECT` offsets, lengths and memory: the page size, a multiple of
/// every logical block size in use (512 B or 4 KiB).
pub const ALIGN: usize = 4096;

/// The most blocks one write carries (`IOV_MAX` is far above; this bounds the
/// caller's arrays).
pub const MAX_GATHER: usize = 64;

/// An open output file.
#[derive(Debug)]
pub struct DiskFile {
    /// The file opened with `O_DIRECT`, while direct writes are on.
    direct: Option<File>,
    /// The same file through the page cache: its header at creation, a short last
    /// block, and every write once direct writes are off.
    plain: File,
    path: PathBuf,
    /// Bytes of data in the file: its size, and where the next block goes.
    real: u64,
    /// Bytes the file was created with (its header, written again by the first block).
    head: u64,
    /// A direct write has succeeded (so `O_DIRECT` is accepted here).
    direct_proven: bool,
    /// A block shorter than a whole number of ALIGN units was written: no more may be.
    tail_written: bool,
    /// Disk space is reserved this far ahead of the write position (0: not at all).
    prealloc_step: u64,
    /// End of the space reserved so far.
    prealloc_end: u64,
}

/// Opens `path` for writing a capture, never through a symbolic link (`O_NOFOLLOW`:
/// `ELOOP`, so a link planted where a capture will go cannot point the recording at
/// another file). Without `overwrite` the file must not exist (`O_EXCL`: `EEXIST`, so
/// an earlier capture is never lost); with it, an existing file is truncated. `flags`
/// are added (`O_DIRECT`).
pub fn open_for_writing(path: &Path, overwrite: bool, flags: i32) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | flags);
    if overwrite {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(path)
}

/// Creates `path` as [`open_for_writing`] does, so that it appears under its name with
/// `head` already in it: without `overwrite` the header goes into an unnamed file in the
/// same directory (`O_TMPFILE`), which is then linked under the name (`EEXIST` if the
/// name exists, a symbolic link included: nothing is replaced or followed). A kill
/// between creating the file and writing its header therefore leaves no empty capture,
/// which tcpdump and capinfos would refuse. With `overwrite`, or where the filesystem
/// has no `O_TMPFILE`, the file is created by name and the header written at once.
pub fn create_with(path: &Path, overwrite: bool, head: &[u8]) -> io::Result<File> {
    if !overwrite {
        if let Some(f) = create_unnamed(path, head)? {
            return Ok(f);
        }
    }
    let f = open_for_writing(path, overwrite, 0)?;
    f.write_all_at(head, 0)?;
    Ok(f)
}

/// [`create_with`] by `O_TMPFILE` and a link; `None` where the filesystem cannot.
fn create_unnamed(path: &Path, head: &[u8]) -> io::Result<Option<File>> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let f = match OpenOptions::new()
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
    {
        Ok(f) => f,
        // No O_TMPFILE on this filesystem (EOPNOTSUPP) or kernel (EISDIR).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    f.write_all_at(head, 0)?;
    // Linking by the descriptor's magic link needs no capability (AT_EMPTY_PATH would
    // need CAP_DAC_READ_SEARCH).
    let from = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).expect("no NUL");
    let to = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the file name"))?;
    // SAFETY: linkat with two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(f))
}

/// `O_DIRECT` was asked for but the filesystem refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectRefused {
    /// The file concerned.
    pub path: PathBuf,
}

impl DiskFile {
    /// Creates `path` with `head` in it ([`create_with`]: a file that exists is an error
    /// unless `overwrite`, a symbolic link always is). The first block must begin with
    /// the same bytes. With `direct`, tries `O_DIRECT` for whole blocks. With
    /// `preallocate > 0`, keeps that many bytes reserved on disk ahead of the write
    /// position (see [`DiskFile::write`]).
    pub fn create(
        path: &Path,
        direct: bool,
        preallocate: u64,
        overwrite: bool,
        head: &[u8],
    ) -> io::Result<(Self, Option<DirectRefused>)> {
        // Created without O_DIRECT: a filesystem that refuses O_DIRECT (ramfs) creates
        // the file before it fails the open, and the buffered retry would then find it
        // there. O_DIRECT goes on a second open of the same file, through its descriptor
        // (the magic link cannot be swapped for another).
        let plain = create_with(path, overwrite, head)?;
        let (direct, refused) = if direct {
            let same = format!("/proc/self/fd/{}", plain.as_raw_fd());
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&same)
            {
                Ok(f) => (Some(f), None),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                    None,
                    Some(DirectRefused {
                        path: path.to_owned(),
                    }),
                ),
                Err(e) => return Err(e),
            }
        } else {
            (None, None)
        };
        Ok((
            Self {
                direct,
                plain,
                path: path.to_owned(),
                real: 0,
                head: head.len() as u64,
                direct_proven: false,
                tail_written: false,
                prealloc_step: preallocate.min(i64::MAX as u64 / 2),
                prealloc_end: 0,
            },
            refused,
        ))
    }

    /// Reserves the next `prealloc_step` bytes when a write of `len` would pass the
    /// space reserved so far. The space is allocated without changing the file's size
    /// (`FALLOC_FL_KEEP_SIZE`): extents are laid out ahead of the data (as fio does),
    /// yet the file's size only grows as data is written, and closing the file releases
    /// what was not used. Where it fails (no support, or the disk nearly full) the file
    /// goes on without it: preallocation is an optimisation only, and a full disk is
    /// reported by the write itself.
    fn preallocate_for(&mut self, len: u64) {
        if self.prealloc_step == 0 || self.real + len <= self.prealloc_end {
            return;
        }
        let start = self.prealloc_end.max(self.real);
        let step = self.prealloc_step.max(len);
        // SAFETY: fallocate on a file descriptor we own; arguments are plain values.
        let rc = unsafe {
            libc::fallocate(
                self.plain.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                start as libc::off_t,
                step as libc::off_t,
            )
        };
        if rc == 0 {
            self.prealloc_end = start + step;
        } else {
            self.prealloc_step = 0;
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether whole blocks bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Bytes of real data written so far.
    pub fn real_size(&self) -> u64 {
        self.real
    }

    /// Whether the next write may carry several blocks: direct writes are known to be
    /// accepted (a file's first block is written alone, since its write tells).
    pub fn can_gather(&self) -> bool {
        self.direct.is_some() && self.direct_proven && !self.tail_written
    }

    /// Appends `blocks` at the end of the data in one write: each is the first bytes
    /// of a pool slot (page-aligned memory). Every block but the last must be a whole
    /// number of [`ALIGN`] units; a last block that is not ends the file (it is written
    /// through the page cache at its exact length). At most [`MAX_GATHER`] blocks.
    /// Returns `Some` the first time `O_DIRECT` writes are refused (then buffered).
    ///
    /// On error the file keeps exactly the data that did reach it, and nothing after.
    pub fn write(&mut self, blocks: &[&[u8]]) -> io::Result<Option<DirectRefused>> {
        if self.tail_written {
            return Err(io::Error::other(
                "internal: a block was written after the last one of the file",
            ));
        }
        let (whole, short) = match blocks.split_last() {
            Some((last, rest)) if !last.len().is_multiple_of(ALIGN) => (rest, Some(*last)),
            _ => (blocks, None),
        };
        if whole.len() > MAX_GATHER || whole.iter().any(|b| !b.len().is_multiple_of(ALIGN)) {
            return Err(io::Error::other(
                "internal: only the last block of a write may be short",
            ));
        }
        let total: u64 = blocks.iter().map(|b| b.len() as u64).sum();
        self.preallocate_for(total);
        let mut refused = None;
        if !whole.is_empty() {
            let mut result = write_all_at(
                self.direct.as_ref().unwrap_or(&self.plain),
                whole,
                self.real,
            );
            if let Err((0, e)) = &result {
                if self.direct.is_some()
                    && !self.direct_proven
                    && e.raw_os_error() == Some(libc::EINVAL)
                {
                    // The filesystem takes O_DIRECT at open but not at write: buffered.
                    self.direct = None;
                    refused = Some(DirectRefused {
                        path: self.path.clone(),
                    });
                    result = write_all_at(&self.plain, whole, self.real);
                }
            }
            if let Err((done, e)) = result {
                self.cut_back(done as u64);
                return Err(e);
            }
            self.direct_proven |= self.direct.is_some();
            self.real += whole.iter().map(|b| b.len() as u64).sum::<u64>();
        }
        if let Some(s) = short {
            if let Err((done, e)) = write_all_at(&self.plain, &[s], self.real) {
                self.cut_back(done as u64);
                return Err(e);
            }
            self.real += s.len() as u64;
            self.tail_written = true;
        }
        Ok(refused)
    }

    /// After a failed write: keep only the data that reached the file (nothing past
    /// it), and write nothing more.
    fn cut_back(&mut self, written: u64) {
        self.real += written;
        self.tail_written = true;
        let _ = self.plain.set_len(self.real.max(self.head));
    }

    /// Flushes written data to the device (`fdatasync`).
    pub fn sync(&self) -> io::Result<()> {
        self.plain.sync_data()
    }

    /// Releases unused preallocated space (truncating at the file's own size does) and,
    /// with `sync`, flushes the file. The file is closed when this returns.
    pub fn finish(self, sync: bool) -> io::Result<u64> {
        let size = self.real.max(self.head);
        if self.prealloc_end > size {
            self.plain.set_len(size)?;
        }
        if sync {
            self.plain.sync_all()?;
        }
        Ok(size)
    }
}

/// Writes all of `bufs`, back to back, at `offset` (`pwritev`, retrying interrupted and
/// short writes); on failure returns how many bytes did reach the file.
pub fn write_all_at(file: &File, bufs: &[&[u8]], offset: u64) -> Result<(), (usize, io::Error)> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0usize;
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_GATHER + 1];
    while done < total {
        // The iovecs of what is left, from `done` on.
        let mut n = 0;
        let mut skip = done;
        for b in bufs {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            if n == iov.len() {
                break;
            }
            let rest = &b[skip..];
            iov[n] = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            n += 1;
            skip = 0;
        }
        // SAFETY: pwritev reads the n iovecs, each pointing into a live slice of `bufs`.
        let rc = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                n as libc::c_int,
                (offset + done as u64) as libc::off_t,
            )
        };
        match rc {
            0 => {
                return Err((
                    done,
                    io::Error::new(io::ErrorKind::WriteZero, "write returned 0"),
                ))
            }
            n if n > 0 => done += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err((done, e));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};
    use std::os::unix::fs::MetadataExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fhrec-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn blocks_then_a_short_tail_give_the_exact_bytes_at_every_step() {
        let d = dir("exact");
        let path = d.join("a.bin");
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 2 * ALIGN,
            slots: 3,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut a = pool.try_acquire().unwrap();
        let mut b = pool.try_acquire().unwrap();
        let mut c = pool.try_acquire().unwrap();
        a.as_mut_full().fill(b'a');
        a.as_mut_full()[..3].copy_from_slice(b"HDR");
        b.as_mut_full().fill(b'b');
        c.as_mut_full().fill(b'c');
        let (mut f, refused) = DiskFile::create(&path, true, 1 << 20, false, b"HDR").unwrap();
        assert!(refused.is_none() && f.is_direct());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"HDR",
            "there with its header"
        );
        assert!(!f.can_gather(), "the first block goes alone");
        f.write(&[a.as_mut_full()]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * ALIGN as u64);
        assert!(f.can_gather());
        // Two whole blocks and a short one in one write: the size is the data, exactly.
        f.write(&[b.as_mut_full(), &c.as_mut_full()[..100]])
            .unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            4 * ALIGN as u64 + 100
        );
        assert!(
            f.write(&[&c.as_mut_full()[..100]]).is_err(),
            "nothing after the tail"
        );
        assert_eq!(f.finish(true).unwrap(), 4 * ALIGN as u64 + 100);
        let data = std::fs::read(&path).unwrap();
        assert_eq!(&data[..3], b"HDR");
        assert!(data[3..2 * ALIGN].iter().all(|&x| x == b'a'));
        assert!(data[2 * ALIGN..4 * ALIGN].iter().all(|&x| x == b'b'));
        assert!(data[4 * ALIGN..].iter().all(|&x| x == b'c'));
        let on_disk = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            on_disk < 1 << 19,
            "unused preallocation released: {on_disk} bytes"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_appears_with_its_header_and_never_replaces_one() {
        let d = dir("create");
        let path = d.join("x.pcap");
        create_with(&path, false, b"0123").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"0123");
        let e = create_with(&path, false, b"9999").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(&path).unwrap(), b"0123");
        create_with(&path, true, b"77").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"77");
        // A link where the file would go is neither followed nor replaced.
        let target = d.join("precious");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.join("l.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            create_with(&link, false, b"h").unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        assert_eq!(
            create_with(&link, true, b"h").unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // Nothing but the files asked for (no unnamed file left a name).
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["l.pcap", "precious", "x.pcap"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn vectored_writes_put_more_buffers_than_one_call_takes_back_to_back() {
        // More buffers than one pwritev is given (MAX_GATHER + 1 iovecs): the rest go in
        // the next call, from where the first one ended.
        let d = dir("vec");
        let path = d.join("v.bin");
        let f = open_for_writing(&path, true, 0).unwrap();
        let parts: Vec<Vec<u8>> = (0..MAX_GATHER as u32 + 9)
            .map(|i| vec![i as u8; 100 + i as usize * 77])
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        write_all_at(&f, &refs, 10).unwrap();
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data[..10], [0; 10]);
        assert_eq!(data[10..], parts.concat()[..]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
