//! Several block writes in flight, accounted for in file order.
//!
//! One `pwrite` at a time leaves the device idle between the end of a write and the
//! start of the next, and a single large write has fewer and fewer requests in flight
//! as it drains; fio's `--ioengine=libaio --iodepth=4` never does. A small pool of I/O
//! threads keeps up to `depth` blocks in flight instead (portable, no io_uring or AIO
//! setup, and on ext4 as fast: a direct write inside the file's size is submitted under
//! a shared inode lock, so the threads' writes overlap in the device).
//!
//! Writes complete in any order; [`Reorder`] hands their results back in the order the
//! blocks were submitted, so the file's real size, `bytes-written` and a failure's cut
//! back always describe a prefix of the data. Each block's slot goes back to the pool as
//! soon as its write returns.

use std::fs::File;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use firehose_core::Slot;

use super::file::{write_at, Placed};

/// The outcome of one write.
#[derive(Debug)]
pub struct Done {
    /// Submission number.
    pub seq: u64,
    /// Where the block went.
    pub placed: Placed,
    /// `Err((bytes that reached the file, error))` on failure.
    pub result: Result<(), (usize, io::Error)>,
    /// How long the write took, ns.
    pub ns: u64,
}

/// Puts completions back in submission order. Holds at most `depth` of them: no
/// allocation after creation.
#[derive(Debug)]
pub struct Reorder {
    ring: Vec<Option<Done>>,
    /// The next submission number to hand out.
    next: u64,
}

impl Reorder {
    /// For at most `depth` completions outstanding at once.
    pub fn new(depth: usize) -> Self {
        Self {
            ring: (0..depth.max(1)).map(|_| None).collect(),
            next: 0,
        }
    }

    /// Takes a completion, in any order. Its `seq` must be within `depth` of the next
    /// one due.
    pub fn push(&mut self, d: Done) {
        assert!(
            d.seq >= self.next && d.seq < self.next + self.ring.len() as u64,
            "completion {} outside the window {}..+{}",
            d.seq,
            self.next,
            self.ring.len()
        );
        let i = (d.seq % self.ring.len() as u64) as usize;
        debug_assert!(self.ring[i].is_none());
        self.ring[i] = Some(d);
    }

    /// The next completion in submission order, once it is there.
    pub fn pop(&mut self) -> Option<Done> {
        let i = (self.next % self.ring.len() as u64) as usize;
        let d = self.ring[i].take()?;
        self.next += 1;
        Some(d)
    }
}

struct Job {
    seq: u64,
    file: Arc<File>,
    slot: Slot,
    placed: Placed,
}

/// The I/O threads and the writes in flight.
pub struct InFlight {
    depth: usize,
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    reorder: Reorder,
    /// Submitted so far; `seq` of the next submission.
    submitted: u64,
    /// Handed back so far (in order).
    finished: u64,
}

impl InFlight {
    /// Starts `depth` I/O threads (none for a depth of 1: writes then stay on the
    /// caller's thread).
    pub fn spawn(depth: usize) -> io::Result<Self> {
        let depth = depth.max(1);
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let mut threads = Vec::new();
        if depth > 1 {
            for i in 0..depth {
                let jobs_rx = jobs_rx.clone();
                let done_tx = done_tx.clone();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("fhrecord-io{i}"))
                        .spawn(move || io_thread(&jobs_rx, &done_tx))?,
                );
            }
        }
        Ok(Self {
            depth,
            jobs: Some(jobs_tx),
            done,
            threads,
            reorder: Reorder::new(depth),
            submitted: 0,
            finished: 0,
        })
    }

    /// Whether blocks may go in flight at all (depth above 1).
    pub fn enabled(&self) -> bool {
        self.depth > 1
    }

    /// Writes submitted and not yet handed back.
    pub fn outstanding(&self) -> usize {
        (self.submitted - self.finished) as usize
    }

    /// Submission number the next [`InFlight::submit`] gets.
    pub fn next_seq(&self) -> u64 {
        self.submitted
    }

    /// Whether another write may be submitted now.
    pub fn has_room(&self) -> bool {
        self.outstanding() < self.depth
    }

    /// Hands a planned block to an I/O thread; there must be room.
    pub fn submit(&mut self, file: Arc<File>, slot: Slot, placed: Placed) {
        debug_assert!(self.has_room() && self.enabled());
        let seq = self.submitted;
        self.submitted += 1;
        let job = Job {
            seq,
            file,
            slot,
            placed,
        };
        let sent = self.jobs.as_ref().map(|tx| tx.send(job));
        if let Some(Err(mpsc::SendError(job))) = sent {
            // Every I/O thread is gone (a panic): fail the write rather than hang.
            self.reorder.push(Done {
                seq: job.seq,
                placed: job.placed,
                result: Err((0, io::Error::other("the disk I/O threads died"))),
                ns: 0,
            });
        }
    }

    /// The next completion in order: waits for it when `wait`, else only takes what
    /// has already come back. `None` when nothing is outstanding (or, without `wait`,
    /// the next one in order is not back yet).
    pub fn next(&mut self, wait: bool) -> Option<Done> {
        loop {
            if let Some(d) = self.reorder.pop() {
                self.finished += 1;
                return Some(d);
            }
            if self.outstanding() == 0 {
                return None;
            }
            let d = if wait {
                match self.done.recv() {
                    Ok(d) => d,
                    Err(_) => return self.lost(),
                }
            } else {
                match self.done.try_recv() {
                    Ok(d) => d,
                    Err(mpsc::TryRecvError::Empty) => return None,
                    Err(mpsc::TryRecvError::Disconnected) => return self.lost(),
                }
            };
            self.reorder.push(d);
        }
    }

    /// The completion channel closed with writes outstanding: report the next one as
    /// failed so the caller stops writing.
    fn lost(&mut self) -> Option<Done> {
        let seq = self.finished;
        self.finished += 1;
        Some(Done {
            seq,
            placed: Placed {
                offset: 0,
                padded: 0,
                len: 0,
            },
            result: Err((0, io::Error::other("the disk I/O threads died"))),
            ns: 0,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn io_thread(jobs: &Mutex<Receiver<Job>>, done: &Sender<Done>) {
    loop {
        // The lock is held only while waiting for the next job, once per block.
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let Job {
            seq,
            file,
            mut slot,
            placed,
        } = job;
        let t0 = Instant::now();
        let result = write_at(&file, &slot.as_mut_full()[..placed.padded], placed.offset);
        let ns = t0.elapsed().as_nanos() as u64;
        // Back to the pool at once: the streaming thread may be waiting for it.
        drop(slot);
        drop(file);
        if done
            .send(Done {
                seq,
                placed,
                result,
                ns,
            })
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(seq: u64) -> Done {
        Done {
            seq,
            placed: Placed {
                offset: seq * 4096,
                padded: 4096,
                len: 4096,
            },
            result: Ok(()),
            ns: 0,
        }
    }

    #[test]
    fn completions_come_back_in_submission_order() {
        let mut r = Reorder::new(4);
        for s in [2, 1, 3] {
            r.push(done(s));
        }
        assert!(r.pop().is_none(), "0 is not back: nothing may pass it");
        r.push(done(0));
        let order: Vec<u64> = std::iter::from_fn(|| r.pop()).map(|d| d.seq).collect();
        assert_eq!(order, [0, 1, 2, 3]);
        // The window slides on.
        r.push(done(5));
        r.push(done(4));
        assert_eq!(r.pop().map(|d| d.seq), Some(4));
        assert_eq!(r.pop().map(|d| d.seq), Some(5));
        assert!(r.pop().is_none());
    }

    #[test]
    #[should_panic(expected = "outside the window")]
    fn a_completion_beyond_the_window_is_a_bug() {
        let mut r = Reorder::new(2);
        r.push(done(2));
    }
}
