//! Staging: the streaming thread copies formatted records into aligned pool blocks and
//! hands each full block to the writer thread.
//!
//! Space for a whole buffer is reserved before any of it is formatted, so a buffer is
//! either recorded entirely or dropped entirely (never a half-written record in the
//! file), and formatting itself never waits. Index bytes (format=raw) are staged beside
//! the data and sent with each block.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use firehose_core::{Slot, SlotPool};

use super::writer::{Cmd, Writer};

/// How often a blocked reservation re-checks its cancel flag.
const POLL: Duration = Duration::from_millis(100);

/// What a reservation got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// The space is there.
    Ok,
    /// No free block now (the disk is behind) and the caller would not wait.
    Full,
    /// The wait was cancelled (flushing / state change).
    Cancelled,
    /// More than the whole pool can ever hold at once.
    TooLarge,
}

/// The staging area of one recording.
pub struct Stage {
    pool: SlotPool,
    block: usize,
    cur: Option<Slot>,
    fill: usize,
    spare: Vec<Slot>,
    index: Vec<u8>,
    /// Bytes staged into the current file so far (its size once written).
    file_bytes: u64,
}

impl Stage {
    /// Stages into blocks of `pool` (each slot one block).
    pub fn new(pool: SlotPool) -> Self {
        let block = pool.slot_size();
        let slots = pool.stats().slots;
        Self {
            pool,
            block,
            cur: None,
            fill: 0,
            spare: Vec::with_capacity(slots),
            index: Vec::new(),
            file_bytes: 0,
        }
    }

    /// Bytes staged into the current file (header included).
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// The pool the blocks come from.
    pub fn pool(&self) -> &SlotPool {
        &self.pool
    }

    /// Largest reservation that can ever succeed: every block but one may be in the
    /// writer's hands when a partly filled one is current.
    pub fn max_reservation(&self) -> usize {
        (self.pool.stats().slots.saturating_sub(1)) * self.block
    }

    fn available(&self) -> usize {
        let cur = if self.cur.is_some() {
            self.block - self.fill
        } else {
            0
        };
        cur + self.spare.len() * self.block
    }

    /// Makes sure `bytes` can be staged without waiting: takes free blocks now, or
    /// (with `wait`) waits for the writer to return them until `cancel` is raised.
    pub fn reserve(&mut self, bytes: usize, wait: bool, cancel: &AtomicBool) -> Reserve {
        if bytes > self.max_reservation() {
            return Reserve::TooLarge;
        }
        while self.available() < bytes {
            let slot = if wait {
                self.pool.acquire_blocking(cancel, POLL)
            } else {
                self.pool.try_acquire()
            };
            match slot {
                Some(s) => self.spare.push(s),
                None if wait => return Reserve::Cancelled,
                None => return Reserve::Full,
            }
        }
        Reserve::Ok
    }

    /// Copies `data` into the staged stream, sending every block it fills. Only call
    /// within a successful reservation.
    pub fn put(&mut self, data: &[u8], writer: &Writer) {
        let mut data = data;
        while !data.is_empty() {
            if self.cur.is_none() {
                // The reservation guarantees a spare; the fallback only guards misuse.
                match self.spare.pop().or_else(|| self.pool.try_acquire()) {
                    Some(s) => self.cur = Some(s),
                    None => {
                        debug_assert!(false, "put() beyond the reservation");
                        return;
                    }
                }
                self.fill = 0;
            }
            let block = self.cur.as_mut().expect("set above").as_mut_full();
            let n = data.len().min(self.block - self.fill);
            block[self.fill..self.fill + n].copy_from_slice(&data[..n]);
            self.fill += n;
            self.file_bytes += n as u64;
            data = &data[n..];
            if self.fill == self.block {
                self.send_block(writer);
            }
        }
    }

    /// Appends index bytes (sent with the next block).
    pub fn put_index(&mut self, entry: &[u8]) {
        self.index.extend_from_slice(entry);
    }

    fn send_block(&mut self, writer: &Writer) {
        if let Some(slot) = self.cur.take() {
            writer.send(Cmd::Block(slot, self.fill));
            self.fill = 0;
        }
        self.send_index(writer);
    }

    fn send_index(&mut self, writer: &Writer) {
        if !self.index.is_empty() {
            let cap = self.index.capacity();
            let bytes = std::mem::replace(&mut self.index, Vec::with_capacity(cap));
            writer.send(Cmd::Index(bytes));
        }
    }

    /// Starts a new file: what is staged for the previous one must have been ended
    /// with [`Stage::end_file`].
    pub fn begin_file(&mut self, cmd: Cmd, writer: &Writer) {
        debug_assert!(self.cur.is_none());
        self.file_bytes = 0;
        writer.send(cmd);
    }

    /// Ends the current file: sends its last, partly filled block and closes it.
    pub fn end_file(&mut self, writer: &Writer) {
        if self.cur.is_some() && self.fill > 0 {
            self.send_block(writer);
        } else {
            // An empty current block stays for the next file.
            self.send_index(writer);
        }
        if let Some(s) = self.cur.take() {
            self.spare.push(s);
        }
        writer.send(Cmd::Close);
    }

    /// Returns every block held for staging to the pool.
    pub fn release(&mut self) {
        self.cur = None;
        self.fill = 0;
        self.spare.clear();
        self.index.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::writer::WriterConfig;
    use firehose_core::{HugepagePolicy, PoolConfig};

    #[test]
    fn staged_bytes_reach_the_file_in_order_across_blocks() {
        let dir = std::env::temp_dir().join(format!("fhrec-stage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: 4096,
            slots: 4,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let mut writer = Writer::spawn(
            WriterConfig {
                direct: true,
                overwrite: true,
                ..Default::default()
            },
            16,
            Box::new(|_| {}),
        )
        .unwrap();
        let mut stage = Stage::new(pool);
        let cancel = AtomicBool::new(false);
        let path = dir.join("s.bin");
        stage.begin_file(
            Cmd::Open {
                path: path.clone(),
                index: None,
            },
            &writer,
        );
        let mut expect = Vec::new();
        for i in 0..100u32 {
            let rec = vec![i as u8; 300 + i as usize];
            assert_eq!(stage.reserve(rec.len(), true, &cancel), Reserve::Ok);
            stage.put(&rec, &writer);
            expect.extend_from_slice(&rec);
        }
        assert_eq!(stage.file_bytes(), expect.len() as u64);
        assert_eq!(stage.reserve(1 << 20, true, &cancel), Reserve::TooLarge);
        stage.end_file(&writer);
        writer.barrier();
        assert_eq!(std::fs::read(&path).unwrap(), expect);
        assert_eq!(writer.shared().bytes_written.get(), expect.len() as u64);
        writer.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
