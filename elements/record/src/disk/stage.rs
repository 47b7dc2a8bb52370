//! Staging: the streaming thread copies formatted records into aligned pool blocks and
//! hands each full block to the writer thread.
//!
//! Space for a whole buffer is reserved before any of it is formatted, so a buffer is
//! either recorded entirely or dropped entirely (never a half-written record in the
//! file), and formatting itself never waits. Index bytes (format=raw) are staged beside
//! the data and sent just before the block their records begin in, so that the index
//! is never behind the data: after a kill every whole record in the data file has its
//! entry (entries whose records did not reach the data file are ignored by readers).
//!
//! Where the CPU has them, bytes go into a block with streaming (non-temporal) stores,
//! in whole 64-byte lines only ([`put_lines`]): a block is written to disk by `O_DIRECT`
//! and never read by the CPU again, so a cached copy would first read every destination
//! line from memory for nothing. That read cost most where the destination is not
//! aligned like the source, as in pcap, whose 16-byte record header and synthesized frame
//! headers shift each payload: on the development VM the cached copy of 8 KiB payloads
//! into pcap blocks ran at about half the speed of the same copy into raw blocks
//! (docs/benchmarks.md, `bench record`). Lines shared by two records (a payload's end, the
//! next record's headers) are assembled first and stored whole, so that no line is ever
//! read.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use firehose_core::memory::{copy_streaming, has_streaming_stores, store_fence};
use firehose_core::{Slot, SlotPool};

use super::writer::{Cmd, Writer};

/// How often a blocked reservation re-checks its cancel flag.
const POLL: Duration = Duration::from_millis(100);

/// One cache line of a block being assembled before it is stored whole.
#[repr(C, align(64))]
struct Line([u8; 64]);

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
    /// Copy with streaming stores, whole lines only ([`put_lines`]).
    streaming: bool,
    /// With `streaming`: the bytes of the current block's last, incomplete line
    /// (`fill % 64` of them), not in the block yet. Boxed: an element's instance (which
    /// holds the stage) may not be aligned beyond 16 bytes (GObject).
    line: Box<Line>,
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
            streaming: has_streaming_stores(),
            line: Box::new(Line([0; 64])),
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
            if self.streaming {
                put_lines(block, self.fill, &mut self.line, &data[..n]);
            } else {
                block[self.fill..self.fill + n].copy_from_slice(&data[..n]);
            }
            self.fill += n;
            self.file_bytes += n as u64;
            data = &data[n..];
            if self.fill == self.block {
                self.send_block(writer);
            }
        }
    }

    /// Appends index bytes (sent before the next block).
    pub fn put_index(&mut self, entry: &[u8]) {
        self.index.extend_from_slice(entry);
    }

    fn send_block(&mut self, writer: &Writer) {
        self.send_index(writer);
        if let Some(mut slot) = self.cur.take() {
            let part = self.fill % 64;
            if self.streaming && part > 0 {
                // The last, incomplete line (only the end of a file has one).
                let at = self.fill - part;
                slot.as_mut_full()[at..self.fill].copy_from_slice(&self.line.0[..part]);
            }
            // Streaming stores are weakly ordered: every one into this block must be
            // visible before another thread (the writer, the kernel)
            // may read it.
            store_fence();
            writer.send(Cmd::Block(slot, self.fill));
            self.fill = 0;
        }
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

/// Writes `data` into `block` from `fill` as whole 64-byte lines only, with streaming
/// stores: a line's bytes wait in `line` (which holds the `fill % 64` bytes already
/// given of the line at `fill`) until the line is complete, so no line of the block is
/// ever read from memory (a cached store into part of a line first reads it; with
/// streaming stores in flight that read stalls every later store). The block must be
/// 64-byte aligned for the lines to be cache lines (pool slots are); the bytes are right
/// either way. The caller writes out the last, incomplete line before the block leaves.
fn put_lines(block: &mut [u8], fill: usize, line: &mut Line, data: &[u8]) {
    let mut pos = fill;
    let mut data = data;
    let part = pos % 64;
    if part != 0 || data.len() < 64 {
        let k = (64 - part).min(data.len());
        line.0[part..part + k].copy_from_slice(&data[..k]);
        pos += k;
        data = &data[k..];
        if pos.is_multiple_of(64) {
            store(&mut block[pos - 64..pos], &line.0);
        }
    }
    // Here `pos` starts a line (the one above was completed), or nothing is left.
    let whole = data.len() / 64 * 64;
    if whole > 0 {
        store(&mut block[pos..pos + whole], &data[..whole]);
    }
    // The rest starts the next line.
    let rest = &data[whole..];
    line.0[..rest.len()].copy_from_slice(rest);
}

/// Copies with streaming stores, or as usual where the CPU has none.
fn store(dest: &mut [u8], src: &[u8]) {
    if !copy_streaming(dest, src) {
        dest.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::writer::WriterConfig;
    use firehose_core::{HugepagePolicy, PoolConfig};

    /// A directory for the test, an O_DIRECT writer with up to `depth` blocks a write, and
    /// a stage over `slots` blocks of `block` bytes with its file `name` begun.
    fn staged(
        tag: &str,
        block: usize,
        slots: usize,
        depth: u32,
    ) -> (std::path::PathBuf, std::path::PathBuf, Writer, Stage) {
        let dir = std::env::temp_dir().join(format!("fhrec-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = SlotPool::new(&PoolConfig {
            slot_size: block,
            slots,
            hugepages: HugepagePolicy::Off,
        })
        .unwrap();
        let writer = Writer::spawn(
            WriterConfig {
                direct: true,
                overwrite: true,
                depth,
                ..Default::default()
            },
            16,
            Box::new(|_| {}),
        )
        .unwrap();
        let mut stage = Stage::new(pool);
        let path = dir.join(format!("{tag}.bin"));
        stage.begin_file(
            Cmd::Open {
                path: path.clone(),
                head: Vec::new(),
                index: None,
            },
            &writer,
        );
        (dir, path, writer, stage)
    }

    #[test]
    fn staged_bytes_reach_the_file_in_order_across_blocks() {
        let (dir, path, mut writer, mut stage) =
            staged("stage", 4096, 4, WriterConfig::default().depth);
        let cancel = AtomicBool::new(false);
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

    #[test]
    fn long_pieces_at_every_alignment_arrive_byte_exact() {
        // Pieces of 1 to 9000 bytes, each after a short one (0 to 66 bytes) that shifts
        // it (as pcap's record headers shift payloads), crossing lines and block
        // boundaries; several blocks a write; the file ends inside a line.
        let (dir, path, mut writer, mut stage) = staged("stage-nt", 16384, 8, 4);
        let cancel = AtomicBool::new(false);
        let mut expect = Vec::new();
        for i in 0..200usize {
            let short: Vec<u8> = (0..(i % 67)).map(|j| (j * 3 + i) as u8).collect();
            let long: Vec<u8> = (0..(i * 389) % 9000 + 1)
                .map(|j| (j * 7 + i * 13) as u8)
                .collect();
            assert_eq!(
                stage.reserve(short.len() + long.len(), true, &cancel),
                Reserve::Ok
            );
            stage.put(&short, &writer);
            // From a source offset that is not aligned either.
            let src = [&[0u8; 64][..i % 64], &long].concat();
            stage.put(&src[i % 64..], &writer);
            expect.extend_from_slice(&short);
            expect.extend_from_slice(&long);
        }
        stage.end_file(&writer);
        writer.barrier();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "bytes differ");
        writer.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
