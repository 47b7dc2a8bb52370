//! The receive loop of a source that owns both a transport and the engine it feeds
//! (`fhudpchunksrc` with the chunk engine, `fhspeadsrc` with the SPEAD heap
//! reassembler): one [`LandingSource`] per element, no GStreamer types. The transport is
//! a kernel UDP socket whose payloads land straight in the engine ([`Input::Udp`]), or
//! any transport whose device writes into memory of its own, whose batches the engine
//! takes where they lie, one copy per payload ([`Input::InPlace`]: AF_XDP).
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
use std::sync::Arc;

use firehose_chunk::landing::LandingEngine;
use firehose_chunk::{ChunkAssembler, FinishedChunk, Flow};
use firehose_core::endpoint::EndpointCounters;
use firehose_core::transport::{self, InPlaceTransport, Received};
use firehose_core::wake::Waker;
use firehose_core::PacketInfo;

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
    /// Takes a batch of datagrams lying in a transport's memory (`packets` lists them in
    /// `data`; an entry outside it is counted as malformed, never read) into `out`:
    /// [`Flow::End`] once the engine ended the stream.
    fn feed_batch(&mut self, data: &[u8], packets: &[PacketInfo], out: &mut Self::Output) -> Flow;
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

    fn feed_batch(
        &mut self,
        data: &[u8],
        packets: &[PacketInfo],
        out: &mut Vec<FinishedChunk>,
    ) -> Flow {
        match transport::Engine::feed(self, data, packets, out) {
            true => Flow::Continue,
            false => Flow::End,
        }
    }
}

/// Where a [`LandingSource`]'s datagrams come from.
// One per running element, made at start and never moved on the hot path: boxing the
// socket would add an indirection per receive for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A kernel UDP socket: payloads land straight in the engine where it predicts them.
    Udp {
        /// The socket.
        rx: UdpReceiver,
        /// Receives from `rx` into the engine.
        direct: DirectReceiver,
    },
    /// A transport whose device writes into memory of its own (AF_XDP's UMEM): the
    /// engine copies each payload once from there.
    InPlace {
        /// The transport.
        transport: Box<dyn InPlaceTransport>,
        /// The waker that ends its waits (the element's unlock and EOS fire it).
        waker: Arc<Waker>,
        /// What it delivered (`landed` stays 0: every payload is copied once).
        counts: DirectCounts,
        /// The device's drops, as last read.
        device_drops: u64,
    },
}

impl Input {
    /// Receive counters (those the transport dropped itself included).
    fn counts(&self) -> DirectCounts {
        match self {
            Input::Udp { direct, .. } => direct.counts(),
            Input::InPlace {
                transport, counts, ..
            } => {
                let d = transport.discarded();
                DirectCounts {
                    truncated: d.truncated,
                    empty: d.empty,
                    ..*counts
                }
            }
        }
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

/// A transport, the engine it feeds, and what is finished but not pushed yet.
pub struct LandingSource<E: SourceEngine> {
    /// The transport.
    input: Input,
    /// The engine.
    pub engine: E,
    /// Where a receive puts what it finishes (kept for its capacity).
    out: E::Output,
    /// Finished, pushed one per `create`.
    pending: VecDeque<E::Item>,
    /// Socket buffer the kernel granted (or the transport's ring), in bytes: at the
    /// application's EOS, what is read beyond this much arrived after it.
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
        Self::with_input(Input::Udp { rx, direct }, engine, buffer_bytes, out)
    }

    /// A loop over a transport that hands batches in place (opened with `waker`, which
    /// ends its waits) and `engine`; `ring_bytes` is what its device holds at most (the
    /// EOS bound, as a socket buffer).
    pub fn in_place(
        transport: Box<dyn InPlaceTransport>,
        waker: Arc<Waker>,
        engine: E,
        ring_bytes: u64,
        out: E::Output,
    ) -> Self {
        let input = Input::InPlace {
            transport,
            waker,
            counts: DirectCounts::default(),
            device_drops: 0,
        };
        Self::with_input(input, engine, ring_bytes, out)
    }

    fn with_input(input: Input, engine: E, buffer_bytes: u64, out: E::Output) -> Self {
        Self {
            input,
            engine,
            out,
            pending: VecDeque::new(),
            buffer_bytes,
            ended: false,
        }
    }

    /// The receiver's counters.
    pub fn counts(&self) -> DirectCounts {
        self.input.counts()
    }

    /// Datagrams the kernel or device dropped before the transport saw them (a system
    /// call: read when stats are due).
    pub fn kernel_drops(&mut self) -> u64 {
        match &mut self.input {
            Input::Udp { rx, .. } => rx.kernel_drops(),
            Input::InPlace {
                transport,
                device_drops,
                ..
            } => {
                *device_drops = transport.device_drops();
                *device_drops
            }
        }
    }

    /// Packets and bytes per endpoint of the element's own socket (`None`: fed by a
    /// transport, which counts its own).
    pub fn endpoint_counters(&self) -> Option<Arc<EndpointCounters>> {
        match &self.input {
            Input::Udp { rx, .. } => Some(rx.endpoint_counters()),
            Input::InPlace { .. } => None,
        }
    }

    /// The waker that ends the transport's waits.
    pub fn waker(&self) -> Arc<Waker> {
        match &self.input {
            Input::Udp { rx, .. } => rx.waker(),
            Input::InPlace { waker, .. } => waker.clone(),
        }
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
            let got = self.receive(true, flushing, &clock, &mut received)?;
            if let (false, false, Input::Udp { rx, .. }) = (got, self.ended, &mut self.input) {
                rx.wait_for_data().map_err(Stop::Wait)?;
            }
        }
        Ok(self.pending.pop_front())
    }

    /// One receive; true when datagrams came. What it finished goes to `pending`. A UDP
    /// receive never waits (the loop waits between receives); an in-place one waits
    /// with `wait` (until datagrams come, `stop` is raised or the waker fires), and
    /// reads the clock when its batch is there, not before the wait.
    fn receive(
        &mut self,
        wait: bool,
        stop: &AtomicBool,
        clock: &impl Fn() -> Option<u64>,
        received: &mut impl FnMut(&mut Self, bool),
    ) -> Result<bool, Stop> {
        let (got, flow) = match &mut self.input {
            Input::Udp { rx, direct } => {
                self.engine.set_clock(&mut self.out, clock());
                let before = direct.counts().batches;
                let flow = match direct.recv(rx, &mut self.engine, &mut self.out, false) {
                    Ok(DirectRecv::Batch(flow)) => flow,
                    // Only a waiting receive is woken.
                    Ok(DirectRecv::Woken) => Flow::Continue,
                    Err(e) => return Err(Stop::Receive(e)),
                };
                (direct.counts().batches > before, flow)
            }
            Input::InPlace {
                transport, counts, ..
            } => {
                let (engine, out) = (&mut self.engine, &mut self.out);
                let mut flow = Flow::Continue;
                let r = transport.receive_in_place(stop, wait, &mut |data, packets| {
                    engine.set_clock(out, clock());
                    counts.batches += 1;
                    counts.datagrams += packets.len() as u64;
                    counts.copied += packets.len() as u64;
                    counts.bytes += packets.iter().map(|p| u64::from(p.len)).sum::<u64>();
                    flow = engine.feed_batch(data, packets, out);
                });
                match r {
                    Ok(Received::Batch { .. }) => (true, flow),
                    Ok(Received::Nothing | Received::Interrupted) => (false, flow),
                    Err(e) => return Err(Stop::Receive(e)),
                }
            }
        };
        E::take_finished(&mut self.out, &mut self.pending);
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
        let start = self.counts().bytes;
        let never = AtomicBool::new(false);
        while !self.ended
            && self.counts().bytes - start < self.buffer_bytes
            && self.receive(false, &never, clock, received)?
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
