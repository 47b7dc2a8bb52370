//! When UDP GRO pays, learned from the stream.
//!
//! With GRO on, one received message may carry up to 64 KiB of coalesced datagrams, so
//! every message of a batch needs 64 KiB of room and a batch of `batch-bytes` holds few
//! messages (4 in 256 KiB). That pays when the kernel does coalesce (a GSO sender, a NIC
//! with GRO). A plain sender's datagrams arrive one per message on loopback and from
//! NICs that do not coalesce: then each batch carries 4 datagrams, and the per-batch
//! costs (a `recvmmsg`, a push downstream) are paid every 4 datagrams — measured at
//! 1.5× the receiver's CPU per GB of the same socket without GRO (docs/benchmarks.md).
//!
//! So the receiver watches: after [`PLAIN_AFTER`] messages in a row that each held one
//! datagram, it turns GRO off on the socket and, once no coalesced message from before
//! the switch can be left — a read has emptied the socket queue, or as much payload has
//! been read as the queue held at the switch ([`GroAdapt::queued_at_switch`]) — sizes
//! messages for one datagram each. Waiting for an empty queue alone is not enough: a
//! receiver that is behind (held to a CPU quota, or just loaded) may never see one, and
//! would take its whole stream in batches sized for 64 KiB messages (4 datagrams per
//! `recvmmsg` at the default `batch-bytes`), at several times the cost per datagram —
//! which keeps it behind.
//!
//! A limit of the switch: the kernel reports a coalesced message's segment size only
//! while GRO is on, so a coalesced message still queued at the switch (the stream began
//! coalescing right after [`PLAIN_AFTER`] plain ones) is read without it and dropped as
//! `truncated`, counted. Every [`PROBE_EVERY`] it turns GRO on again (message room first,
//! then the socket option, so a coalesced message never meets a small slot) and looks
//! whether the stream coalesces now; turning GRO back on loses nothing.

use std::time::{Duration, Instant};

/// Messages in a row holding one datagram each before GRO is turned off.
pub const PLAIN_AFTER: u64 = 256;
/// How long GRO stays off before the receiver looks again.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// The receiver's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// GRO was not asked for or not granted: one datagram per message, always.
    Never,
    /// GRO on, watching whether messages are coalesced.
    On,
    /// GRO turned off; messages keep their 64 KiB of room until a read empties the
    /// queue, or until what was queued at the switch has been read.
    Draining,
    /// GRO off, one datagram per message, until the next probe.
    Off,
    /// GRO on for good: turning it off failed.
    Always,
}

/// What the socket must do after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Keep,
    /// `setsockopt(UDP_GRO, 0)`; report the result with [`GroAdapt::switched`].
    TurnOff,
    /// `setsockopt(UDP_GRO, 1)`; report the result with [`GroAdapt::switched`].
    TurnOn,
}

/// The state machine (no socket: the receiver applies its [`Action`]s).
#[derive(Debug, Clone)]
pub struct GroAdapt {
    mode: Mode,
    plain_run: u64,
    since: Instant,
    plain_after: u64,
    probe_every: Duration,
    /// While draining: payload bytes still to read before everything queued at the
    /// switch has been (`None`: not known; wait for an empty read).
    drain_left: Option<u64>,
}

impl GroAdapt {
    /// Starts in [`Mode::On`] when the socket has GRO, else [`Mode::Never`].
    pub fn new(gro: bool, now: Instant) -> Self {
        Self::with_limits(gro, now, PLAIN_AFTER, PROBE_EVERY)
    }

    /// As [`GroAdapt::new`] with other thresholds (tests).
    pub fn with_limits(gro: bool, now: Instant, plain_after: u64, probe_every: Duration) -> Self {
        Self {
            mode: if gro { Mode::On } else { Mode::Never },
            plain_run: 0,
            since: now,
            plain_after,
            probe_every,
            drain_left: None,
        }
    }

    /// After [`Action::TurnOff`] was applied: the socket held `bytes` of receive buffer
    /// then (SO_MEMINFO `rmem_alloc`, which charges each datagram at least its
    /// payload). Datagrams are read in the order they were queued, so once that much
    /// payload has been read ([`GroAdapt::read`]) every message from before the switch
    /// has been, and messages are sized for one datagram even if the queue never ran
    /// empty.
    pub fn queued_at_switch(&mut self, bytes: u64) {
        if self.mode == Mode::Draining {
            self.drain_left = Some(bytes);
        }
    }

    /// A batch read `bytes` of payload (counted only while draining).
    pub fn read(&mut self, bytes: u64) {
        if let Some(left) = self.drain_left.as_mut() {
            *left = left.saturating_sub(bytes);
        }
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// True while a message may hold coalesced datagrams (it needs 64 KiB of room).
    pub fn coalescing(&self) -> bool {
        matches!(self.mode, Mode::On | Mode::Draining | Mode::Always)
    }

    /// Learns from one batch of `messages`, `coalesced` of which held several datagrams;
    /// `drained` when the read took fewer messages than it had room for (the socket
    /// queue was empty). `now` is read only when the answer depends on the time (while
    /// GRO is off), so a batch with GRO on costs no clock read.
    pub fn after_batch(
        &mut self,
        messages: usize,
        coalesced: usize,
        drained: bool,
        now: impl FnOnce() -> Instant,
    ) -> Action {
        match self.mode {
            Mode::Never | Mode::Always => Action::Keep,
            Mode::On => {
                if coalesced > 0 {
                    self.plain_run = 0;
                    return Action::Keep;
                }
                self.plain_run += messages as u64;
                if self.plain_run >= self.plain_after {
                    self.mode = Mode::Draining;
                    return Action::TurnOff;
                }
                Action::Keep
            }
            Mode::Draining => {
                if drained || self.drain_left == Some(0) {
                    self.mode = Mode::Off;
                    self.drain_left = None;
                    self.since = now();
                }
                Action::Keep
            }
            Mode::Off => {
                if now().duration_since(self.since) >= self.probe_every {
                    self.mode = Mode::On;
                    self.plain_run = 0;
                    return Action::TurnOn;
                }
                Action::Keep
            }
        }
    }

    /// Reports whether the socket took the last [`Action`]; a refusal is undone.
    pub fn switched(&mut self, action: Action, ok: bool, now: Instant) {
        if ok {
            return;
        }
        match action {
            // GRO stays on: receive as before, and stop trying.
            Action::TurnOff => self.mode = Mode::Always,
            // GRO stays off: try again at the next probe.
            Action::TurnOn => {
                self.mode = Mode::Off;
                self.since = now;
            }
            Action::Keep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapt(now: Instant) -> GroAdapt {
        GroAdapt::with_limits(true, now, 10, Duration::from_secs(1))
    }

    #[test]
    fn a_plain_stream_turns_gro_off_once_the_queue_is_drained() {
        let t = Instant::now();
        let mut a = adapt(t);
        assert!(a.coalescing());
        assert_eq!(a.after_batch(4, 0, false, || t), Action::Keep);
        assert_eq!(a.after_batch(4, 0, false, || t), Action::Keep);
        // 12 plain messages in a row: off.
        assert_eq!(a.after_batch(4, 0, false, || t), Action::TurnOff);
        assert_eq!(a.mode(), Mode::Draining);
        // Still room for coalesced messages until a read empties the queue.
        assert!(a.coalescing());
        assert_eq!(a.after_batch(4, 0, false, || t), Action::Keep);
        assert!(a.coalescing());
        assert_eq!(a.after_batch(2, 0, true, || t), Action::Keep);
        assert_eq!(a.mode(), Mode::Off);
        assert!(!a.coalescing());
    }

    #[test]
    fn draining_ends_once_what_was_queued_at_the_switch_is_read() {
        let t = Instant::now();
        let mut a = adapt(t);
        assert_eq!(a.after_batch(12, 0, false, || t), Action::TurnOff);
        a.queued_at_switch(10_000);
        // The queue never runs empty (a receiver behind its stream).
        a.read(6_000);
        assert_eq!(a.after_batch(4, 0, false, || t), Action::Keep);
        assert_eq!(
            a.mode(),
            Mode::Draining,
            "4 000 bytes of the old queue left"
        );
        a.read(6_000);
        assert_eq!(a.after_batch(4, 0, false, || t), Action::Keep);
        assert_eq!(a.mode(), Mode::Off);
        assert!(!a.coalescing());
        // Not draining: neither call changes anything.
        a.queued_at_switch(5);
        a.read(1);
        assert_eq!(a.after_batch(64, 0, false, || t), Action::Keep);
        assert_eq!(a.mode(), Mode::Off);
        // Without a count, only an empty read ends the draining.
        let mut b = adapt(t);
        b.after_batch(12, 0, false, || t);
        b.read(1 << 30);
        assert_eq!(b.after_batch(4, 0, false, || t), Action::Keep);
        assert_eq!(b.mode(), Mode::Draining);
    }

    #[test]
    fn a_coalesced_message_resets_the_count() {
        let t = Instant::now();
        let mut a = adapt(t);
        assert_eq!(a.after_batch(8, 0, false, || t), Action::Keep);
        assert_eq!(a.after_batch(4, 1, false, || t), Action::Keep);
        assert_eq!(a.after_batch(8, 0, false, || t), Action::Keep);
        assert_eq!(
            a.mode(),
            Mode::On,
            "8 plain since the coalesced one, not 16"
        );
        // With GRO on a batch needs no clock.
        let no_clock = || -> Instant { panic!("the clock was read with GRO on") };
        assert_eq!(a.after_batch(1, 1, true, no_clock), Action::Keep);
    }

    #[test]
    fn gro_is_probed_again_after_a_while() {
        let t = Instant::now();
        let mut a = adapt(t);
        a.after_batch(10, 0, false, || t);
        a.after_batch(1, 0, true, || t);
        assert_eq!(a.mode(), Mode::Off);
        assert_eq!(
            a.after_batch(64, 0, false, || t + Duration::from_millis(500)),
            Action::Keep
        );
        let later = t + Duration::from_secs(2);
        assert_eq!(a.after_batch(64, 0, false, || later), Action::TurnOn);
        // Room for coalesced messages from the next batch on, before any arrives.
        assert!(a.coalescing());
        assert_eq!(a.mode(), Mode::On);
    }

    #[test]
    fn refusals_are_undone() {
        let t = Instant::now();
        let mut a = adapt(t);
        let act = a.after_batch(10, 0, false, || t);
        a.switched(act, false, t);
        assert_eq!(a.mode(), Mode::Always);
        assert_eq!(a.after_batch(100, 0, true, || t), Action::Keep);
        assert!(a.coalescing());
        let mut a = adapt(t);
        a.after_batch(10, 0, false, || t);
        a.after_batch(1, 0, true, || t);
        let later = t + Duration::from_secs(2);
        let act = a.after_batch(1, 0, false, || later);
        assert_eq!(act, Action::TurnOn);
        a.switched(act, false, later);
        assert_eq!(a.mode(), Mode::Off);
        assert!(!a.coalescing());
    }

    #[test]
    fn without_gro_nothing_changes() {
        let t = Instant::now();
        let mut a = GroAdapt::new(false, t);
        assert!(!a.coalescing());
        assert_eq!(a.after_batch(1000, 0, true, || t), Action::Keep);
    }
}
