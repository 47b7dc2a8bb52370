//! `fhcheck` implementation: a `BaseSink` feeding every packet to a [`SeqChecker`].

use firehose_core::sync::lock;
use std::sync::Mutex;
use std::time::Instant;

use firehose_core::batch::{for_each_packet, PacketBatchMeta};
use firehose_core::element::prelude::*;
use firehose_core::property::SettingsElement;
use firehose_core::stats::{names, StatsInterval, StatsTimer};

use crate::checker::SeqChecker;
use crate::pattern;

firehose_core::debug_category!(CAT, "fhcheck", "Firehose test packet checker");

/// Corruptions described in the log before going quiet (they are all counted).
const CORRUPTIONS_LOGGED: u32 = 10;

/// The properties of `fhcheck`, then `stats-interval`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    expected_packets: u64,
    first_seq: u64,
    stats_interval: StatsInterval,
}

firehose_core::property_group! {
    Settings as _s {
        expected_packets => glib::ParamSpecUInt64::builder("expected-packets")
            .nick("Expected packets")
            .blurb("Packets the source sends; those missing at EOS count as lost (0 = unknown)")
            .mutable_ready()
            .build();
        first_seq => glib::ParamSpecUInt64::builder("first-seq")
            .nick("First sequence number")
            .blurb("Sequence number of the first packet the source sends")
            .mutable_ready()
            .build();
        group stats_interval;
    }
}

#[derive(Debug)]
struct State {
    /// Allocated once with the element; `start` only resets it.
    checker: SeqChecker,
    expected: Option<u64>,
    /// Bytes of the packets counted in `received`.
    bytes: u64,
    timer: StatsTimer,
    corruptions_logged: u32,
}

impl Default for State {
    fn default() -> Self {
        Self {
            checker: SeqChecker::new(0),
            expected: None,
            bytes: 0,
            timer: StatsTimer::new(0),
            corruptions_logged: 0,
        }
    }
}

firehose_core::counters! {
    /// Mirrors of the checker's counters, so `stats` never waits for the streaming
    /// thread.
    struct Counters {
        packets: names::PACKETS,
        bytes: names::BYTES,
        lost: names::LOST,
        duplicated: names::DUPLICATED,
        reordered: names::REORDERED,
        corrupted: names::CORRUPTED,
        late: names::LATE,
    }
}

/// The `fhcheck` element.
#[derive(Default)]
pub struct FhCheck {
    settings: Mutex<Settings>,
    state: Mutex<State>,
    counters: Counters,
}

impl ElementStats for FhCheck {
    fn stats(&self) -> gst::Structure {
        self.counters.structure()
    }
}

impl FhCheck {
    /// Copies the checker's counters to the atomics; true when a stats message is due.
    fn publish(&self, state: &mut State) -> bool {
        let s = state.checker.stats();
        let c = &self.counters;
        c.packets.set(s.received);
        c.bytes.set(state.bytes);
        c.lost.set(s.lost);
        c.duplicated.set(s.duplicated);
        c.reordered.set(s.reordered);
        c.corrupted.set(s.corrupted);
        c.late.set(s.late);
        state.timer.due(Instant::now())
    }

    fn check_packet(&self, state: &mut State, bytes: &[u8]) {
        match pattern::verify(bytes) {
            Ok(seq) => {
                if state.checker.record(seq).is_new() {
                    state.bytes += bytes.len() as u64;
                }
            }
            Err(e) => {
                state.checker.record_corrupted();
                if state.corruptions_logged < CORRUPTIONS_LOGGED {
                    state.corruptions_logged += 1;
                    gst::warning!(CAT, imp = self, "corrupted packet: {e}");
                }
            }
        }
    }

    /// Checks every packet of `buf`: those its batch meta lists, or the buffer as one.
    fn check_buffer(&self, state: &mut State, buf: &gst::BufferRef) -> Result<(), gst::FlowError> {
        let listed = buf.meta::<PacketBatchMeta>().map(|m| m.packets().len());
        let checked = match listed {
            Some(_) => for_each_packet(buf, |_, bytes| self.check_packet(state, bytes)),
            None => buf.map_readable().ok().map(|map| {
                self.check_packet(state, &map);
                1
            }),
        };
        let Some(checked) = checked else {
            gst::element_imp_error!(
                self,
                gst::StreamError::Failed,
                ("cannot map a buffer for reading; fhcheck needs system-memory buffers (download GPU memory first)")
            );
            return Err(gst::FlowError::Error);
        };
        // Meta entries that point outside the buffer were skipped: count them as damage.
        for _ in checked..listed.unwrap_or(checked) {
            state.checker.record_corrupted();
        }
        Ok(())
    }
}

impl SettingsElement for FhCheck {
    type Settings = Settings;
    fn counters() -> String {
        Counters::describe("")
    }
    fn settings(&self) -> &Mutex<Settings> {
        &self.settings
    }
}

// No clock sync: a checker measures what arrives; waiting for the clock would only hide loss.
firehose_core::packet_sink! {
    FhCheck = "GstFhCheck";
    "Firehose test packet checker", "Sink/Network",
    "Verifies fhtestsrc packets byte by byte and counts lost, duplicated and reordered ones";
}

impl BaseSinkImpl for FhCheck {
    firehose_core::packet_sink_query!();

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = *lock(&self.settings);
        let mut state = lock(&self.state);
        state.checker.reset(settings.first_seq);
        state.expected = (settings.expected_packets > 0).then_some(settings.expected_packets);
        state.bytes = 0;
        state.timer = settings.stats_interval.timer();
        state.corruptions_logged = 0;
        self.publish(&mut state);
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut state = lock(&self.state);
        self.check_buffer(&mut state, buffer)?;
        let due = self.publish(&mut state);
        drop(state);
        self.post_stats_if(due);
        Ok(gst::FlowSuccess::Ok)
    }

    fn render_list(&self, list: &gst::BufferList) -> Result<gst::FlowSuccess, gst::FlowError> {
        // One lock and one publish for the whole list, not one per buffer.
        let mut state = lock(&self.state);
        for buf in list.iter() {
            self.check_buffer(&mut state, buf)?;
        }
        let due = self.publish(&mut state);
        drop(state);
        self.post_stats_if(due);
        Ok(gst::FlowSuccess::Ok)
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            let mut state = lock(&self.state);
            let expected = state.expected;
            let s = state.checker.finish(expected);
            self.publish(&mut state);
            drop(state);
            gst::info!(CAT, imp = self, "end of stream: {s:?}");
            // Before chaining up, which posts EOS: the final stats precede it on the bus.
            self.post_stats();
        }
        self.parent_event(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_round_trip() {
        gst::init().unwrap();
        let mut s = Settings::default();
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!((s.expected_packets, s.first_seq), (1, 1));
    }
}
