//! The writer thread: takes filled blocks from a bounded queue and writes them, so the
//! streaming thread never waits for the disk (unless asked to with `when-full=block`).
//!
//! The queue carries commands in file order: open a file, write a block, append index
//! bytes, close the file, report back (a barrier). Memory is bounded by the staging pool:
//! a block is a pool slot, and it returns to the pool when written. After a write error
//! (e.g. a full disk) the thread keeps draining the queue, so slots keep coming back and
//! nobody waits forever, but writes nothing more; the error is kept for the element.
//!
//! With `depth` above 1 and `O_DIRECT`, up to `depth` blocks of a file are in flight at
//! once ([`super::inflight`]), and are accounted for in file order: index bytes are
//! written only once the blocks before them are, and everything in flight is finished
//! before a file is closed, another opened, a barrier answered or a block written the
//! plain way.

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

use super::file::DiskFile;
use super::inflight::{Done, InFlight};

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
    /// Direct writes in flight at once (0 or 1: one at a time).
    pub depth: u32,
    /// Replace files that exist; otherwise opening one is an error (`EEXIST`).
    pub overwrite: bool,
}

/// How far past the end of the blocks in flight a file's size is moved, in blocks per
/// write in flight. Moving the size waits for the writes in flight (it takes the inode
/// lock they hold shared), so it is done in steps; a killed recording's open file can
/// end with up to about twice this many blocks per write in flight that were not
/// written (zeros).
pub const AHEAD_BLOCKS_PER_DEPTH: u64 = 1;

/// A command for the writer thread.
pub enum Cmd {
    /// Closes nothing: opens `path` for the blocks that follow, and an index file
    /// beginning with `index.1` if `index` is set.
    Open {
        /// The data file.
        path: PathBuf,
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
        let io = InFlight::spawn(config.depth as usize)?;
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
                        io,
                        pending_index: VecDeque::new(),
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
    /// A write in flight failed: later completions are ignored, and the file is cut
    /// back and closed once nothing is in flight.
    broken: bool,
}

/// The writer thread's state.
struct Run<'a> {
    config: &'a WriterConfig,
    shared: &'a WriterShared,
    notify: &'a Notify,
    open: Option<Open>,
    io: InFlight,
    /// Index bytes waiting for the blocks submitted before them: (blocks submitted
    /// when they came, bytes).
    pending_index: VecDeque<(u64, Vec<u8>)>,
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
        for cmd in rx {
            // Account for (and free the slots of) whatever came back meanwhile.
            self.reap(false);
            let failed = self.shared.failed.load(Ordering::Acquire);
            match cmd {
                Cmd::Barrier(reply) => {
                    self.reap(true);
                    let _ = reply.send(());
                }
                _ if failed => {} // drain: slots go back to the pool, nothing is written
                Cmd::Open { path, index } => {
                    self.close();
                    match open_file(&path, index, self.config) {
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
                Cmd::Block(slot, len) => self.block(slot, len),
                Cmd::Index(bytes) => {
                    if self.io.outstanding() == 0 {
                        self.write_index(&bytes);
                    } else {
                        self.pending_index.push_back((self.io.next_seq(), bytes));
                    }
                }
                Cmd::Close => self.close(),
            }
        }
        self.close();
    }

    /// Writes a block: in flight when the file allows it, else here and now.
    fn block(&mut self, mut slot: Slot, len: usize) {
        let overlap = self.io.enabled()
            && self
                .open
                .as_ref()
                .is_some_and(|o| !o.broken && o.file.can_overlap());
        if overlap {
            while !self.io.has_room() {
                self.reap_one();
            }
            let ahead = AHEAD_BLOCKS_PER_DEPTH * self.config.depth as u64;
            let Some(o) = self.open.as_mut().filter(|o| !o.broken) else {
                return; // a write in flight failed meanwhile
            };
            let block = slot.as_mut_full();
            let ahead = ahead * block.len() as u64;
            match o.file.plan(block, len, ahead) {
                Ok(placed) => {
                    let file = o.file.shared();
                    self.io.submit(file, slot, placed);
                }
                Err(e) => {
                    o.broken = true;
                    let path = o.file.path().to_owned();
                    self.shared.fail(&path, e);
                    self.settle();
                }
            }
            return;
        }
        // A plain write comes after every write in flight.
        self.reap(true);
        let Some(o) = self.open.as_mut() else { return };
        let before = o.file.real_size();
        let t0 = Instant::now();
        match o.file.write_block(slot.as_mut_full(), len) {
            Ok(refused) => {
                let ns = t0.elapsed().as_nanos() as u64;
                drop(slot);
                if let Some(r) = refused {
                    self.tell_refused(&r.path);
                }
                self.written(len, ns);
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
    fn written(&mut self, len: usize, ns: u64) {
        self.shared.latency_max_ns.fetch_max(ns, Ordering::Relaxed);
        self.shared.bytes_written.add(len as u64);
        let Some(o) = self.open.as_mut() else { return };
        o.unsynced += len as u64;
        if let FsyncPolicy::Bytes(n) = self.config.fsync {
            if o.unsynced >= n.max(1) {
                o.unsynced = 0;
                if let Err(e) = o.file.sync() {
                    self.shared.fail(o.file.path(), e);
                }
            }
        }
    }

    /// Accounts for one write that came back, in file order.
    fn account(&mut self, d: Done) {
        let Some(o) = self.open.as_mut() else { return };
        if o.broken {
            return; // its data is cut away with the file
        }
        match d.result {
            Ok(()) => {
                o.file.completed(&d.placed);
                self.written(d.placed.len, d.ns);
            }
            Err((done, e)) => {
                self.shared.bytes_written.add(done.min(d.placed.len) as u64);
                o.file.failed(&d.placed, done);
                o.broken = true;
                let path = o.file.path().to_owned();
                self.shared.fail(&path, e);
            }
        }
    }

    /// Waits for the next write in order and accounts for it.
    fn reap_one(&mut self) {
        if let Some(d) = self.io.next(true) {
            self.account(d);
        }
        self.settle();
    }

    /// Accounts for the writes that are back (`all`: waits for every one in flight).
    fn reap(&mut self, all: bool) {
        while let Some(d) = self.io.next(all) {
            self.account(d);
        }
        self.settle();
    }

    /// Writes the index bytes whose blocks are written; closes a broken file once
    /// nothing of it is in flight.
    fn settle(&mut self) {
        let finished = self.io.next_seq() - self.io.outstanding() as u64;
        while self
            .pending_index
            .front()
            .is_some_and(|(after, _)| *after <= finished)
        {
            let (_, bytes) = self.pending_index.pop_front().expect("checked");
            if !self.shared.failed.load(Ordering::Acquire) {
                self.write_index(&bytes);
            }
        }
        if self.open.as_ref().is_some_and(|o| o.broken) {
            // Later blocks may still land: cut the file back only after them.
            while self.io.next(true).is_some() {}
            self.pending_index.clear();
            if let Some(o) = self.open.take() {
                let _ = o.file.finish(false);
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

    /// Finishes the open file once everything in flight is written.
    fn close(&mut self) {
        self.reap(true);
        if let Some(o) = self.open.take() {
            close(o, self.config, self.shared);
        }
    }
}

fn open_file(
    path: &Path,
    index: Option<(PathBuf, Vec<u8>)>,
    config: &WriterConfig,
) -> io::Result<(Open, bool)> {
    let (file, refused) =
        DiskFile::create(path, config.direct, config.preallocate, config.overwrite)?;
    let index = match index {
        Some((p, header)) => {
            let mut f = super::file::open_for_writing(&p, config.overwrite, 0)?;
            f.write_all(&header)?;
            Some((f, p))
        }
        None => None,
    };
    Ok((
        Open {
            file,
            index,
            unsynced: 0,
            broken: false,
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
    fn blocks_in_flight_land_in_order_with_their_index_and_the_exact_size() {
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
