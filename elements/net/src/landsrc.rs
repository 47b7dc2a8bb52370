//! The receive loop of a source that owns both a UDP socket and the engine its payloads
//! land in (`fhudpchunksrc` with the chunk engine, `fhspeadsrc` with the SPEAD heap
//! reassembler): one [`LandingSource`] per element, no GStreamer types.
//!
//! Why one element owns both: the kernel can put a payload straight where the engine
//! wants it only when the code that calls `recvmmsg` can ask the engine where that is
//! ([`DirectReceiver`]). Owning both keeps that a plain function call inside one
//! element, under one lock, instead of a source lending its socket to the element after
//! it.
//!
//! Every receive reads what is queued at once (no wait inside it): the engine's clock is
//! set right before, and what a receive opens records that clock, so a receive that
//! waited for a stream to resume would stamp its output with the time the wait began.
//! The loop waits itself, between receives.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use firehose_chunk::landing::LandingEngine;
use firehose_chunk::{ChunkAssembler, FinishedChunk, Flow};

use crate::direct::{DirectCounts, DirectReceiver, DirectRecv};
use crate::recv::UdpReceiver;

/// What a [`LandingSource`] needs of its engine besides [`LandingEngine`].
pub trait SourceEngine: LandingEngine {
    /// What the element pushes, one per `create` (a chunk, a heap).
    type Item;
    /// The time (running time, ns) what the next receive opens records.
    fn set_clock(&mut self, out: &mut Self::Output, now: Option<u64>);
    /// Moves what `out` holds finished to `pending`.
    fn take_finished(out: &mut Self::Output, pending: &mut VecDeque<Self::Item>);
    /// Ends everything still open (end of stream) into `out`.
    fn flush_all(&mut self, out: &mut Self::Output);
}

impl SourceEngine for ChunkAssembler {
    type Item = FinishedChunk;

    fn set_clock(&mut self, _out: &mut Vec<FinishedChunk>, now: Option<u64>) {
        ChunkAssembler::set_clock(self, now);
    }

    fn take_finished(out: &mut Vec<FinishedChunk>, pending: &mut VecDeque<FinishedChunk>) {
        pending.extend(out.drain(..));
    }

    fn flush_all(&mut self, out: &mut Vec<FinishedChunk>) {
        self.flush(out);
    }
}

/// Why [`LandingSource::next`] returned without an item.
#[derive(Debug)]
pub enum Stop {
    /// The element is flushing (`unlock`).
    Flushing,
    /// A receive failed.
    Receive(io::Error),
    /// Waiting for data failed.
    Wait(io::Error),
}

/// A socket, the engine its payloads land in, and what is finished but not pushed yet.
pub struct LandingSource<E: SourceEngine> {
    /// The socket.
    pub rx: UdpReceiver,
    /// The engine.
    pub engine: E,
    /// Receives from `rx` into `engine`.
    direct: DirectReceiver,
    /// Where a receive puts what it finishes (kept for its capacity).
    out: E::Output,
    /// Finished, pushed one per `create`.
    pending: VecDeque<E::Item>,
    /// Socket buffer the kernel granted, in bytes: at the application's EOS, what is read
    /// beyond this much arrived after it.
    buffer_bytes: u64,
    /// Nothing more will be added to `pending`: the engine ended the stream, or the
    /// application's EOS flushed it.
    ended: bool,
}

impl<E: SourceEngine> LandingSource<E> {
    /// A loop over `rx` and `engine`, receiving up to `batch` messages at once (clamped
    /// to what `rx` allows); `buffer_bytes` is the socket buffer the kernel granted;
    /// `out` the engine's empty output.
    pub fn new(
        rx: UdpReceiver,
        engine: E,
        batch: usize,
        buffer_bytes: u64,
        out: E::Output,
    ) -> Self {
        let direct = DirectReceiver::new(batch.clamp(1, rx.max_batch_len()));
        Self {
            rx,
            engine,
            direct,
            out,
            pending: VecDeque::new(),
            buffer_bytes,
            ended: false,
        }
    }

    /// The receiver's counters.
    pub fn counts(&self) -> DirectCounts {
        self.direct.counts()
    }

    /// The next item to push: receives (and waits) until one is finished; `None` once
    /// the stream has ended and everything was pushed. `flushing` (set by the element's
    /// `unlock`) stops it; `eos` (set by an application's EOS) has it take what the
    /// socket holds, flush the engine and end. `clock` reads the running time before
    /// each receive; `received(self, force)` runs after each receive that got data
    /// (`force`: the stream just ended) to mirror counters and post stats.
    pub fn next(
        &mut self,
        flushing: &AtomicBool,
        eos: &AtomicBool,
        clock: impl Fn() -> Option<u64>,
        mut received: impl FnMut(&mut Self, bool),
    ) -> Result<Option<E::Item>, Stop> {
        while self.pending.is_empty() && !self.ended {
            // The waker fires only after one of these flags is set, so a wake that
            // ends a wait is seen here.
            if flushing.load(Ordering::Acquire) {
                return Err(Stop::Flushing);
            }
            if eos.load(Ordering::Acquire) {
                self.finish(&clock, &mut received)?;
                continue;
            }
            if !self.receive(&clock, &mut received)? && !self.ended {
                self.rx.wait_for_data().map_err(Stop::Wait)?;
            }
        }
        Ok(self.pending.pop_front())
    }

    /// One receive that does not wait; true when datagrams came. What it finished goes
    /// to `pending`.
    fn receive(
        &mut self,
        clock: &impl Fn() -> Option<u64>,
        received: &mut impl FnMut(&mut Self, bool),
    ) -> Result<bool, Stop> {
        self.engine.set_clock(&mut self.out, clock());
        let before = self.direct.counts().batches;
        let flow = match self
            .direct
            .recv(&mut self.rx, &mut self.engine, &mut self.out, false)
        {
            Ok(DirectRecv::Batch(flow)) => flow,
            // Only a waiting receive is woken.
            Ok(DirectRecv::Woken) => Flow::Continue,
            Err(e) => return Err(Stop::Receive(e)),
        };
        E::take_finished(&mut self.out, &mut self.pending);
        let got = self.direct.counts().batches > before;
        if flow == Flow::End {
            self.ended = true;
        }
        if got || self.ended {
            let ended = self.ended;
            received(self, ended);
        }
        Ok(got)
    }

    /// The application's EOS: takes what the socket had already queued (at most a socket
    /// buffer's worth: anything beyond came after the EOS), then everything still open.
    fn finish(
        &mut self,
        clock: &impl Fn() -> Option<u64>,
        received: &mut impl FnMut(&mut Self, bool),
    ) -> Result<(), Stop> {
        let start = self.direct.counts().bytes;
        while !self.ended
            && self.direct.counts().bytes - start < self.buffer_bytes
            && self.receive(clock, received)?
        {}
        if !self.ended {
            self.engine.flush_all(&mut self.out);
            E::take_finished(&mut self.out, &mut self.pending);
            self.ended = true;
            received(self, true);
        }
        Ok(())
    }
}
