//! The writer thread: takes filled blocks from a bounded queue and writes them, so the
//! streaming thread never waits for the disk (unless asked to with `when-full=block`).
//!
//! The queue carries commands in file order: open a file, write a block, append index
//! bytes, close the file, report back (a barrier). Memory is bounded by the staging pool:
//! a block is a pool slot, and it returns to the pool when written. After a write error
//! (e.g. a full disk) the thread keeps draining the queue, so slots keep coming back and
//! nobody waits forever, but writes nothing more; the error is kept for the element.
//!
//! Blocks are written in file order, one write at a time, each appended at the end of
//! the data ([`super::file`]), so a file never holds space that was not written. When
//! the disk falls behind, blocks queue up; the next write then takes up to `depth` of
//! the consecutive blocks waiting (the index bytes among them are written first)
//! in one vectored write, which keeps that many blocks' requests in the device at once.
//! A disk that keeps up gets one block per write: it has time to spare.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use firehose_core::stats::Counter;
use firehose_core::Slot;

use super::file::{DiskFile, MAX_GATHER};

/// When written data is flushed to the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Never: the kernel decides (a process crash loses nothing written, a power cut
    /// may).
    #[default]
    None,
    /// When a file is closed (rotation, EOS).
    OnRotate,
    /// Every `fsync-bytes` bytes, and when a file is closed.
    Bytes(u64),
}

/// How the writer writes.
#[derive(Clone, Debug, Default)]
pub struct WriterConfig {
    /// Try `O_DIRECT`.
    pub direct: bool,
    /// Bytes to reserve with fallocate when a file is opened (0: none).
    pub preallocate: u64,
    /// Flush policy.
    pub fsync: FsyncPolicy,
    /// Keep at most this many files (data files with their index), deleting the
    /// oldest this writer created (0: keep all).
    pub ring: u32,
    /// Most blocks one direct write carries when several are waiting (0 or 1: one
    /// block per write).
    pub depth: u32,
    /// Replace files that exist; otherwise opening one is an error (`EEXIST`).
    pub overwrite: bool,
}

/// A command for the writer thread.
pub enum Cmd {
    /// Closes nothing: opens `path` for the blocks that follow, and an index file
    /// beginning with `index.1` if `index` is set.
    Open {
        /// The data file.
        path: PathBuf,
        /// The bytes the data file begins with (its file header; also staged in its
        /// first block): the file appears with them in it.
        head: Vec<u8>,
        /// The index file and its header.
        index: Option<(PathBuf, Vec<u8>)>,
    },
    /// Writes the first `len` bytes of the slot (a short block ends the file).
    Block(Slot, usize),
    /// Appends bytes to the index file.
    Index(Vec<u8>),
    /// Finishes the open file (and index).
    Close,
    /// Answers once everything before it is done.
    Barrier(mpsc::Sender<()>),
}

/// A write failure, kept for the element to report.
#[derive(Clone, Debug)]
pub struct WriteError {
    /// The file being written.
    pub path: PathBuf,
    /// What went wrong.
    pub error: Arc<io::Error>,
}

impl WriteError {
    /// True when the filesystem is full (ENOSPC or EDQUOT).
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self.error.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        )
    }
}

/// Something the element should tell the user about (it posts a warning).
#[derive(Clone, Debug)]
pub enum Notice {
    /// `O_DIRECT` refused on this file's filesystem: buffered writes.
    DirectRefused(PathBuf),
    /// A file of the ring could not be removed.
    RemoveFailed(PathBuf, String),
}

/// Counters shared with the element.
#[derive(Debug, Default)]
pub struct WriterShared {
    /// Real bytes written (padding not counted).
    pub bytes_written: Counter,
    /// Files opened.
    pub files: Counter,
    /// Longest single write, ns.
    pub latency_max_ns: AtomicU64,
    /// A write failed; nothing more is written.
    pub failed: AtomicBool,
    error: Mutex<Option<WriteError>>,
}

impl WriterShared {
    /// The first write error, if any.
    pub fn error(&self) -> Option<WriteError> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn fail(&self, path: &Path, error: io::Error) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(WriteError {
                path: path.to_owned(),
                error: Arc::new(error),
            });
        }
        self.failed.store(true, Ordering::Release);
    }
}

/// Where notices go (called on the writer thread).
pub type Notify = Box<dyn Fn(Notice) + Send>;

/// The sending end, owned by the streaming side.
pub struct Writer {
    tx: Option<SyncSender<Cmd>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<WriterShared>,
}

impl Writer {
    /// Starts the thread with a queue of `capacity` commands.
    pub fn spawn(config: WriterConfig, capacity: usize, notify: Notify) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(capacity.max(4));
        let shared = Arc::new(WriterShared::default());
        let thread = std::thread::Builder::new()
            .name("fhrecord-writer".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    Run {
                        config: &config,
                        shared: &shared,
                        notify: &notify,
                        open: None,
                        gather: Vec::with_capacity(MAX_GATHER),
                        gathered_index: Vec::with_capacity(MAX_GATHER),
                        refused_told: false,
                    }
                    .run(rx)
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            shared,
        })
    }

    /// The counters.
    pub fn shared(&self) -> &Arc<WriterShared> {
        &self.shared
    }

    /// Queues `cmd` (waits only while the queue holds `capacity` commands).
    pub fn send(&self, cmd: Cmd) {
        if let Some(tx) = &self.tx {
            // A send fails only if the thread is gone (a panic): the slot in `cmd` then
            // returns to its pool as it is dropped, and the error shows in `failed`.
            if tx.send(cmd).is_err() {
                self.shared.fail(
                    Path::new("(writer thread)"),
                    io::Error::other("the writer thread died"),
                );
            }
        }
    }

    /// Waits until everything queued so far is written.
    pub fn barrier(&self) {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Barrier(tx));
        let _ = rx.recv();
    }

    /// Finishes the queue and joins the thread.
    pub fn shutdown(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Open {
    file: DiskFile,
    index: Option<(File, PathBuf)>,
    unsynced: u64,
}

/// The writer thread's state.
struct Run<'a> {
    config: &'a WriterConfig,
    shared: &'a WriterShared,
    notify: &'a Notify,
    open: Option<Open>,
    /// The blocks of the next write (at most `depth`, allocated once).
    gather: Vec<(Slot, usize)>,
    /// Index bytes that came between them, written before them.
    gathered_index: Vec<Vec<u8>>,
    refused_told: bool,
}

impl Run<'_> {
    fn tell_refused(&mut self, p: &Path) {
        if !self.refused_told {
            self.refused_told = true;
            (self.notify)(Notice::DirectRefused(p.to_owned()));
        }
    }

    fn run(mut self, rx: Receiver<Cmd>) {
        let mut ring: VecDeque<(PathBuf, Option<PathBuf>)> = VecDeque::new();
        // A command taken while gathering blocks, to be handled after their write.
        let mut next: Option<Cmd> = None;
        loop {
            let Some(cmd) = next.take().or_else(|| rx.recv().ok()) else {
                break;
            };
            let failed = self.shared.failed.load(Ordering::Acquire);
            match cmd {
                Cmd::Barrier(reply) => {
                    let _ = reply.send(());
                }
                _ if failed => {} // drain: slots go back to the pool, nothing is written
                Cmd::Open { path, head, index } => {
                    self.close();
                    match open_file(&path, &head, index, self.config) {
                        Ok((o, refused)) => {
                            if refused {
                                self.tell_refused(&path);
                            }
                            self.shared.files.add(1);
                            let idx_path = o.index.as_ref().map(|(_, p)| p.clone());
                            self.open = Some(o);
                            ring.push_back((path, idx_path));
                            while self.config.ring > 0 && ring.len() > self.config.ring as usize {
                                let (old, old_idx) = ring.pop_front().expect("non-empty");
                                for p in std::iter::once(old).chain(old_idx) {
                                    if let Err(e) = std::fs::remove_file(&p) {
                                        (self.notify)(Notice::RemoveFailed(p, e.to_string()));
                                    }
                                }
                            }
                        }
                        Err(e) => self.shared.fail(&path, e),
                    }
                }
                Cmd::Block(slot, len) => {
                    self.gather.push((slot, len));
                    next = self.gather_more(&rx);
                    self.write_gathered();
                }
                Cmd::Index(bytes) => self.write_index(&bytes),
                Cmd::Close => self.close(),
            }
        }
        self.close();
    }

    /// After a whole block: takes the blocks already waiting behind it (up to `depth`
    /// in all, the last of them possibly the file's short last one) and the index bytes
    /// that came with them, when the open file may write several at once. Returns the first
    /// other command it took.
    fn gather_more(&mut self, rx: &Receiver<Cmd>) -> Option<Cmd> {
        let depth = (self.config.depth as usize).clamp(1, MAX_GATHER);
        let whole = |slot: &Slot, len: usize| len == slot.capacity();
        let can = self.open.as_ref().is_some_and(|o| o.file.can_gather());
        if !can || !self.gather.last().is_some_and(|(s, l)| whole(s, *l)) {
            return None;
        }
        while self.gather.len() < depth {
            match rx.try_recv() {
                Ok(Cmd::Block(slot, len)) => {
                    let ends_file = !whole(&slot, len);
                    self.gather.push((slot, len));
                    if ends_file {
                        break;
                    }
                }
                Ok(Cmd::Index(bytes)) => self.gathered_index.push(bytes),
                Ok(other) => return Some(other),
                Err(_) => break,
            }
        }
        None
    }

    /// Writes the index bytes that came with the gathered blocks, then the blocks (one
    /// write).
    fn write_gathered(&mut self) {
        // Index bytes first: they name records of these blocks, and an index ahead of
        // the data is harmless (readers ignore entries past it), one behind loses them.
        let mut index = std::mem::take(&mut self.gathered_index);
        for bytes in index.drain(..) {
            self.write_index(&bytes);
        }
        self.gathered_index = index;
        let Some(o) = self.open.as_mut() else {
            self.gather.clear();
            return;
        };
        let before = o.file.real_size();
        let t0 = Instant::now();
        let result = {
            let n = self.gather.len();
            let mut bufs: [&[u8]; MAX_GATHER] = [&[]; MAX_GATHER];
            for (b, (slot, len)) in bufs.iter_mut().zip(self.gather.iter_mut()) {
                *b = &slot.as_mut_full()[..*len];
            }
            o.file.write(&bufs[..n])
        };
        let ns = t0.elapsed().as_nanos() as u64;
        // Back to the pool at once: the streaming thread may be waiting for them.
        self.gather.clear();
        match result {
            Ok(refused) => {
                let written = o.file.real_size() - before;
                if let Some(r) = refused {
                    self.tell_refused(&r.path);
                }
                self.written(written, ns);
            }
            Err(e) => {
                // What did reach the file before the error stays there.
                let path = o.file.path().to_owned();
                self.shared.bytes_written.add(o.file.real_size() - before);
                self.shared.fail(&path, e);
                if let Some(o) = self.open.take() {
                    let _ = o.file.finish(false);
                }
            }
        }
    }

    /// Counts `len` bytes written to the open file, and flushes when it is time.
    fn written(&mut self, len: u64, ns: u64) {
        self.shared.latency_max_ns.fetch_max(ns, Ordering::Relaxed);
        self.shared.bytes_written.add(len);
        let Some(o) = self.open.as_mut() else { return };
        o.unsynced += len;
        if let FsyncPolicy::Bytes(n) = self.config.fsync {
            if o.unsynced >= n.max(1) {
                o.unsynced = 0;
                let index = o.index.as_ref().map(|(f, _)| f.sync_data());
                if let Err(e) = o.file.sync().and(index.unwrap_or(Ok(()))) {
                    self.shared.fail(o.file.path(), e);
                }
            }
        }
    }

    fn write_index(&mut self, bytes: &[u8]) {
        if let Some(Open {
            index: Some((f, p)),
            ..
        }) = self.open.as_mut()
        {
            if let Err(e) = f.write_all(bytes) {
                let p = p.clone();
                self.shared.fail(&p, e);
            }
        }
    }

    /// Finishes the open file.
    fn close(&mut self) {
        if let Some(o) = self.open.take() {
            close(o, self.config, self.shared);
        }
    }
}

fn open_file(
    path: &Path,
    head: &[u8],
    index: Option<(PathBuf, Vec<u8>)>,
    config: &WriterConfig,
) -> io::Result<(Open, bool)> {
    // The index is created before its data file, so that a kill between the two leaves
    // at most an index of no entries (the newest file, holding nothing) and never a
    // data file without the index that says what is in it.
    let index = match index {
        Some((p, header)) => {
            let mut f = super::file::create_with(&p, config.overwrite, &header)?;
            // Entries are appended after the header.
            use std::io::Seek;
            f.seek(io::SeekFrom::End(0))?;
            Some((f, p))
        }
        None => None,
    };
    let (file, refused) = match DiskFile::create(
        path,
        config.direct,
        config.preallocate,
        config.overwrite,
        head,
    ) {
        Ok(f) => f,
        Err(e) => {
            // The index just created would name a capture that does not exist.
            if let Some((_, p)) = &index {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    Ok((
        Open {
            file,
            index,
            unsynced: 0,
        },
        refused.is_some(),
    ))
}

fn close(o: Open, config: &WriterConfig, shared: &WriterShared) {
    let sync = config.fsync != FsyncPolicy::None;
    let path = o.file.path().to_owned();
    if let Err(e) = o.file.finish(sync) {
        shared.fail(&path, e);
    }
    if let Some((f, p)) = o.index {
        if sync {
            if let Err(e) = f.sync_all() {
                shared.fail(&p, e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};

    #[test]
    fn gathered_blocks_land_in_order_with_their_index_and_the_exact_size() {
        let dir = std::env::temp_dir().join(format!("fhrec-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.bin");
        let idx = dir.join("w.bin.idx");
        const BLOCK: usize = 16384;
        let pool = SlotPool::new(&PoolConfig {
            slot_size: BLOCK,
            slots: 8,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let writer = Writer::spawn(
            WriterConfig {
                direct: true,
                depth: 4,
                overwrite: true,
                ..Default::default()
            },
            64,
            Box::new(|_| {}),
        )
        .unwrap();
        writer.send(Cmd::Open {
            path: path.clone(),
            head: Vec::new(),
            index: Some((idx.clone(), b"H".to_vec())),
        });
        let mut expect = Vec::new();
        let mut expect_idx = b"H".to_vec();
        for i in 0..100u32 {
            let mut slot = pool
                .acquire_blocking(
                    &AtomicBool::new(false),
                    std::time::Duration::from_millis(10),
                )
                .unwrap();
            // The last block is short: it ends the file and is padded, then cut back.
            let len = if i == 99 { 1000 } else { BLOCK };
            slot.as_mut_full()[..len].fill(i as u8);
            expect.extend(std::iter::repeat_n(i as u8, len));
            writer.send(Cmd::Block(slot, len));
            writer.send(Cmd::Index(i.to_le_bytes().to_vec()));
            expect_idx.extend_from_slice(&i.to_le_bytes());
        }
        writer.send(Cmd::Close);
        writer.barrier();
        assert!(writer.shared().error().is_none());
        assert_eq!(writer.shared().bytes_written.get(), expect.len() as u64);
        assert!(
            std::fs::read(&path).unwrap() == expect,
            "data in order, exact size"
        );
        assert_eq!(std::fs::read(&idx).unwrap(), expect_idx);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
