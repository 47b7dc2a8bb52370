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
//!
//! Blocks are written one at a time ([`DiskFile::write_block`]) or, once the file has
//! taken a direct write, several at once by [`super::inflight`]: [`DiskFile::plan`]
//! places a block and [`DiskFile::completed`] / [`DiskFile::failed`] account for it in
//! file order. Writes in flight must lie inside the file's size: a write past the end
//! of an ext4 file is synchronous and takes the inode lock exclusively, so only writes
//! inside it overlap. [`DiskFile::plan`] therefore moves the size ahead of the data in
//! steps (`ahead`), and [`DiskFile::finish`] cuts it back to the data.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Alignment of `O_DIRECT` offsets, lengths and memory: the page size, a multiple of
/// every logical block size in use (512 B or 4 KiB).
pub const ALIGN: usize = 4096;

/// An open output file.
#[derive(Debug)]
pub struct DiskFile {
    /// Shared with the I/O threads that write blocks in flight.
    file: Arc<File>,
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
    /// The file's size as set by [`DiskFile::plan`] (0: never moved ahead).
    size_end: u64,
}

/// Where a block planned by [`DiskFile::plan`] goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// File offset.
    pub offset: u64,
    /// Bytes to write (the data padded to [`ALIGN`]).
    pub padded: usize,
    /// Bytes of real data.
    pub len: usize,
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

/// `O_DIRECT` was asked for but the filesystem refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectRefused {
    /// The file concerned.
    pub path: PathBuf,
}

impl DiskFile {
    /// Creates `path` ([`open_for_writing`]: a file that exists is an error unless
    /// `overwrite`, a symbolic link always is). With `direct`, tries `O_DIRECT` first.
    /// With `preallocate > 0`, keeps that many bytes reserved on disk ahead of the write
    /// position (see [`DiskFile::write_block`]).
    pub fn create(
        path: &Path,
        direct: bool,
        preallocate: u64,
        overwrite: bool,
    ) -> io::Result<(Self, Option<DirectRefused>)> {
        // Created (or truncated) first without O_DIRECT: a filesystem that refuses
        // O_DIRECT (ramfs) creates the file before it fails the open, and the buffered
        // retry would then find it there. O_DIRECT goes on a second open of the same
        // file, through its descriptor (the magic link cannot be swapped for another).
        let plain = open_for_writing(path, overwrite, 0)?;
        let (file, direct, refused) = if direct {
            use std::os::fd::AsRawFd;
            let same = format!("/proc/self/fd/{}", plain.as_raw_fd());
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&same)
            {
                Ok(f) => (f, true, None),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                    plain,
                    false,
                    Some(DirectRefused {
                        path: path.to_owned(),
                    }),
                ),
                Err(e) => return Err(e),
            }
        } else {
            (plain, false, None)
        };
        Ok((
            Self {
                file: Arc::new(file),
                path: path.to_owned(),
                direct,
                pos: 0,
                real: 0,
                tail_written: false,
                prealloc_step: preallocate.min(i64::MAX as u64 / 2),
                prealloc_end: 0,
                size_end: 0,
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
        match write_at(&self.file, &block[..padded], self.pos) {
            Ok(()) => {}
            Err((0, e)) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                self.set_buffered()?;
                refused = Some(DirectRefused {
                    path: self.path.clone(),
                });
                return self.write_block(block, len).map(|_| refused);
            }
            Err((done, e)) => {
                self.cut_back(done.min(len) as u64);
                return Err(e);
            }
        }
        self.pos += padded as u64;
        self.real += len as u64;
        if !len.is_multiple_of(ALIGN) {
            self.tail_written = true;
        }
        Ok(refused)
    }

    /// Whether blocks may now be written in flight: the file writes directly and has
    /// taken a write (so `O_DIRECT` is known to be accepted) that was not its last.
    pub fn can_overlap(&self) -> bool {
        self.direct && self.pos > 0 && !self.tail_written
    }

    /// Places the next block (its first `len` bytes, padded with zeros in `block` to
    /// [`ALIGN`]) for a write in flight, reserving disk space and moving the file's size
    /// to at least `ahead` bytes past the block's end when the block would pass it. The
    /// size moves in steps because moving it waits for the writes in flight.
    /// Account for the write, in file order, with [`DiskFile::completed`] or
    /// [`DiskFile::failed`].
    pub fn plan(&mut self, block: &mut [u8], len: usize, ahead: u64) -> io::Result<Placed> {
        if self.tail_written {
            return Err(io::Error::other(
                "internal: a block was written after the last one of the file",
            ));
        }
        let padded = len.next_multiple_of(ALIGN).min(block.len());
        block[len..padded].fill(0);
        self.preallocate_for(padded);
        let offset = self.pos;
        let end = offset + padded as u64;
        if end > self.size_end {
            let size = end + ahead;
            self.file.set_len(size)?;
            self.size_end = size;
        }
        self.pos = end;
        if !len.is_multiple_of(ALIGN) {
            self.tail_written = true;
        }
        Ok(Placed {
            offset,
            padded,
            len,
        })
    }

    /// The file, for I/O threads to write planned blocks into.
    pub fn shared(&self) -> Arc<File> {
        self.file.clone()
    }

    /// A planned block is written (called in file order).
    pub fn completed(&mut self, p: &Placed) {
        debug_assert_eq!(p.offset, self.real.next_multiple_of(ALIGN as u64));
        self.real += p.len as u64;
    }

    /// A planned block failed after `done` bytes (called in file order, every block
    /// before it completed): the file keeps the data that reached it and nothing after,
    /// whatever later blocks in flight did.
    pub fn failed(&mut self, p: &Placed, done: usize) {
        self.cut_back(done.min(p.len) as u64);
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
        // Also when the size is right: truncating releases unused preallocated space and
        // the size moved ahead of the data for writes in flight.
        if self.pos != self.real || self.prealloc_end > self.real || self.size_end > self.real {
            self.file.set_len(self.real)?;
        }
        if sync {
            self.file.sync_all()?;
        }
        Ok(self.real)
    }
}

/// Writes all of `buf` at `offset`, retrying interrupted and short writes; on failure
/// returns how many bytes did reach the file.
pub fn write_at(file: &File, buf: &[u8], offset: u64) -> Result<(), (usize, io::Error)> {
    let mut done = 0usize;
    while done < buf.len() {
        match file.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err((
                    done,
                    io::Error::new(io::ErrorKind::WriteZero, "write returned 0"),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(())
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
        let (mut f, _) = DiskFile::create(&path, true, 1 << 20, true).unwrap();
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
