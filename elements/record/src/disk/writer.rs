//! The writer thread: takes filled blocks from a bounded queue and writes them, so the
//! streaming thread never waits for the disk (unless asked to with `when-full=block`).
//!
//! The queue carries commands in file order: open a file, write a block, append index
//! bytes, close the file, report back (a barrier). Memory is bounded by the staging pool:
//! a block is a pool slot, and it returns to the pool when written. After a write error
//! (e.g. a full disk) the thread keeps draining the queue, so slots keep coming back and
//! nobody waits forever, but writes nothing more; the error is kept for the element.

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
}

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
        let thread = std::thread::Builder::new()
            .name("fhrecord-writer".into())
            .spawn({
                let shared = shared.clone();
                move || run(rx, config, &shared, &notify)
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

fn run(rx: Receiver<Cmd>, config: WriterConfig, shared: &WriterShared, notify: &Notify) {
    let mut open: Option<Open> = None;
    let mut ring: VecDeque<(PathBuf, Option<PathBuf>)> = VecDeque::new();
    let mut refused_told = false;
    let mut tell_refused = |p: &Path| {
        if !refused_told {
            refused_told = true;
            notify(Notice::DirectRefused(p.to_owned()));
        }
    };
    for cmd in rx {
        let failed = shared.failed.load(Ordering::Acquire);
        match cmd {
            Cmd::Barrier(reply) => {
                let _ = reply.send(());
            }
            _ if failed => {} // drain: slots go back to the pool, nothing is written
            Cmd::Open { path, index } => {
                if let Some(o) = open.take() {
                    close(o, &config, shared);
                }
                match open_file(&path, index, &config) {
                    Ok((o, refused)) => {
                        if refused {
                            tell_refused(&path);
                        }
                        shared.files.add(1);
                        let idx_path = o.index.as_ref().map(|(_, p)| p.clone());
                        open = Some(o);
                        ring.push_back((path, idx_path));
                        while config.ring > 0 && ring.len() > config.ring as usize {
                            let (old, old_idx) = ring.pop_front().expect("non-empty");
                            for p in std::iter::once(old).chain(old_idx) {
                                if let Err(e) = std::fs::remove_file(&p) {
                                    notify(Notice::RemoveFailed(p, e.to_string()));
                                }
                            }
                        }
                    }
                    Err(e) => shared.fail(&path, e),
                }
            }
            Cmd::Block(mut slot, len) => {
                let Some(o) = open.as_mut() else { continue };
                let before = o.file.real_size();
                let t0 = Instant::now();
                match o.file.write_block(slot.as_mut_full(), len) {
                    Ok(refused) => {
                        let ns = t0.elapsed().as_nanos() as u64;
                        shared.latency_max_ns.fetch_max(ns, Ordering::Relaxed);
                        shared.bytes_written.add(len as u64);
                        if let Some(r) = refused {
                            tell_refused(&r.path);
                        }
                        o.unsynced += len as u64;
                        if let FsyncPolicy::Bytes(n) = config.fsync {
                            if o.unsynced >= n.max(1) {
                                o.unsynced = 0;
                                if let Err(e) = o.file.sync() {
                                    shared.fail(o.file.path(), e);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        // What did reach the file before the error stays there.
                        let path = o.file.path().to_owned();
                        shared.bytes_written.add(o.file.real_size() - before);
                        shared.fail(&path, e);
                        if let Some(o) = open.take() {
                            let _ = o.file.finish(false);
                        }
                    }
                }
            }
            Cmd::Index(bytes) => {
                if let Some(Open {
                    index: Some((f, p)),
                    ..
                }) = open.as_mut()
                {
                    if let Err(e) = f.write_all(&bytes) {
                        let p = p.clone();
                        shared.fail(&p, e);
                    }
                }
            }
            Cmd::Close => {
                if let Some(o) = open.take() {
                    close(o, &config, shared);
                }
            }
        }
    }
    if let Some(o) = open.take() {
        close(o, &config, shared);
    }
}

fn open_file(
    path: &Path,
    index: Option<(PathBuf, Vec<u8>)>,
    config: &WriterConfig,
) -> io::Result<(Open, bool)> {
    let (file, refused) = DiskFile::create(path, config.direct, config.preallocate)?;
    let index = match index {
        Some((p, header)) => {
            let mut f = File::create(&p)?;
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
