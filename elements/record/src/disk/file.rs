//! One output file written in whole aligned blocks, with `O_DIRECT` when the filesystem
//! allows it.
//!
//! Every block but a file's last is a whole number of [`ALIGN`]-byte units from
//! page-aligned pool memory, so `O_DIRECT` accepts it and the page cache is bypassed (no
//! double copy, no write-back storms). The last block is padded with zeros to the
//! alignment, written, and the file is then truncated to its real size.
//!
//! Where the filesystem refuses `O_DIRECT` (`EINVAL` at open or at the first write, as
//! ramfs and some FUSE filesystems do) the file is written through the page cache
//! instead, and the caller is told once so it can warn.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Alignment of `O_DIRECT` offsets, lengths and memory: the page size, a multiple of
/// every logical block size in use (512 B or 4 KiB).
pub const ALIGN: usize = 4096;

/// An open output file.
#[derive(Debug)]
pub struct DiskFile {
    file: File,
    path: PathBuf,
    direct: bool,
    /// Where the next block goes: the real size, rounded up to ALIGN while direct.
    pos: u64,
    /// Bytes of real data in the file.
    real: u64,
    /// A block shorter than a whole number of ALIGN units was written: no more may be.
    tail_written: bool,
    /// Disk space is reserved this far ahead of the write position (0: not at all).
    prealloc_step: u64,
    /// End of the space reserved so far.
    prealloc_end: u64,
}

/// `O_DIRECT` was asked for but the filesystem refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectRefused {
    /// The file concerned.
    pub path: PathBuf,
}

impl DiskFile {
    /// Creates (or truncates) `path`. With `direct`, tries `O_DIRECT` first. With
    /// `preallocate > 0`, keeps that many bytes reserved on disk ahead of the write
    /// position (see [`DiskFile::write_block`]).
    pub fn create(
        path: &Path,
        direct: bool,
        preallocate: u64,
    ) -> io::Result<(Self, Option<DirectRefused>)> {
        let open = |flags: i32| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o644)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct, refused) = if direct {
            match open(libc::O_DIRECT) {
                Ok(f) => (f, true, None),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                    open(0)?,
                    false,
                    Some(DirectRefused {
                        path: path.to_owned(),
                    }),
                ),
                Err(e) => return Err(e),
            }
        } else {
            (open(0)?, false, None)
        };
        Ok((
            Self {
                file,
                path: path.to_owned(),
                direct,
                pos: 0,
                real: 0,
                tail_written: false,
                prealloc_step: preallocate.min(i64::MAX as u64 / 2),
                prealloc_end: 0,
            },
            refused,
        ))
    }

    /// Reserves the next `prealloc_step` bytes when a write of `len` at `pos` would pass
    /// the space reserved so far. The space is allocated without changing the file's
    /// size (`FALLOC_FL_KEEP_SIZE`): extents are laid out ahead of the data (as fio
    /// does), yet a crash never leaves unwritten space inside the file, and closing the
    /// file releases what was not used. Where it fails (no support, or the disk nearly
    /// full) the file goes on without it: preallocation is an optimisation only, and a
    /// full disk is reported by the write itself.
    fn preallocate_for(&mut self, len: usize) {
        if self.prealloc_step == 0 || self.pos + len as u64 <= self.prealloc_end {
            return;
        }
        let start = self.prealloc_end.max(self.pos);
        let step = self.prealloc_step.max(len as u64);
        // SAFETY: fallocate on a file descriptor we own; arguments are plain values.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
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

    /// Whether writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Bytes of real data written so far.
    pub fn real_size(&self) -> u64 {
        self.real
    }

    /// Writes the first `len` bytes of `block`, a whole pool slot (page-aligned, its
    /// capacity a multiple of [`ALIGN`]). A `len` that is not a multiple of ALIGN ends
    /// the file: it is padded with zeros in `block` and cut back by [`DiskFile::finish`].
    /// Returns `Some` the first time `O_DIRECT` writes are refused (then buffered).
    ///
    /// On error the file is cut back to the data that did reach it.
    pub fn write_block(
        &mut self,
        block: &mut [u8],
        len: usize,
    ) -> io::Result<Option<DirectRefused>> {
        if self.tail_written {
            return Err(io::Error::other(
                "internal: a block was written after the last one of the file",
            ));
        }
        let mut refused = None;
        let padded = if self.direct {
            len.next_multiple_of(ALIGN).min(block.len())
        } else {
            len
        };
        block[len..padded].fill(0);
        self.preallocate_for(padded);
        let mut done = 0usize;
        while done < padded {
            // SAFETY: writes bytes of `block`, which outlives the call; the offset is
            // ours to choose.
            let rc = unsafe {
                libc::pwrite(
                    self.file.as_raw_fd(),
                    block[done..padded].as_ptr().cast(),
                    padded - done,
                    (self.pos + done as u64) as libc::off_t,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EINVAL) if self.direct && done == 0 => {
                        self.set_buffered()?;
                        refused = Some(DirectRefused {
                            path: self.path.clone(),
                        });
                        return self.write_block(block, len).map(|_| refused);
                    }
                    _ => {
                        self.cut_back(done.min(len) as u64);
                        return Err(e);
                    }
                }
            }
            if rc == 0 {
                self.cut_back(done.min(len) as u64);
                return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
            }
            done += rc as usize;
        }
        self.pos += padded as u64;
        self.real += len as u64;
        if !len.is_multiple_of(ALIGN) {
            self.tail_written = true;
        }
        Ok(refused)
    }

    /// After a failed write: keep only whole data (no padding, nothing past it).
    fn cut_back(&mut self, written: u64) {
        self.real += written;
        self.pos = self.real;
        self.tail_written = true;
        let _ = self.file.set_len(self.real);
    }

    fn set_buffered(&mut self) -> io::Result<()> {
        let fd = self.file.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        let rc = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT)
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.direct = false;
        Ok(())
    }

    /// Flushes written data to the device (`fdatasync`).
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Cuts the file to its real size (dropping the last block's padding and unused
    /// preallocated space) and, with
    /// `sync`, flushes it. The file is closed when this returns.
    pub fn finish(self, sync: bool) -> io::Result<u64> {
        // Also when the size is right: truncating releases unused preallocated space.
        if self.pos != self.real || self.prealloc_end > self.real {
            self.file.set_len(self.real)?;
        }
        if sync {
            self.file.sync_all()?;
        }
        Ok(self.real)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};

    #[test]
    fn blocks_then_a_padded_tail_give_the_exact_bytes() {
        let dir = std::env::temp_dir().join(format!("fhrec-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.bin");
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 2 * ALIGN,
            slots: 1,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut slot = pool.try_acquire().unwrap();
        let (mut f, _) = DiskFile::create(&path, true, 1 << 20).unwrap();
        let block = slot.as_mut_full();
        block.fill(b'a');
        f.write_block(block, 2 * ALIGN).unwrap();
        block.fill(b'b');
        f.write_block(block, 100).unwrap();
        assert!(f.write_block(block, 100).is_err(), "nothing after the tail");
        assert_eq!(f.finish(true).unwrap(), 2 * ALIGN as u64 + 100);
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len(), 2 * ALIGN + 100);
        use std::os::unix::fs::MetadataExt;
        let on_disk = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            on_disk < 1 << 19,
            "unused preallocation released: {on_disk} bytes"
        );
        assert!(data[..2 * ALIGN].iter().all(|&b| b == b'a'));
        assert!(data[2 * ALIGN..].iter().all(|&b| b == b'b'));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
