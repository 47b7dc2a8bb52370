//! The live statistics line and the final summary, built from "firehose-stats" structures.
//!
//! Structures come from element messages (posted every `stats-interval`) and from the
//! elements' `stats` property (polled when an element is silent, and read once at the end).
//! Rates are computed from counter deltas between samples at least [`MIN_RATE_WINDOW`]
//! apart, using arrival times, because the structures carry no timestamp.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use firehose_core::stats::names;
use gst::prelude::*;

/// Shortest window a rate is computed over; shorter ones are mostly jitter.
pub const MIN_RATE_WINDOW: Duration = Duration::from_millis(200);

/// Counters that mean something went missing or wrong; shown on the live line when nonzero.
pub const PROBLEM_COUNTERS: &[&str] = &[
    names::DROPS_KERNEL,
    names::DROPS_POOL,
    names::TRUNCATED,
    names::MALFORMED,
    names::SEND_ERRORS,
    // A paced sender that fell behind its rate (late input or a stalled thread).
    names::PACING_SLIP_NS,
    names::LOST,
    names::DUPLICATED,
    names::REORDERED,
    names::CORRUPTED,
    names::HEAPS_INCOMPLETE,
    "late",
];

/// Latest figures of one element.
#[derive(Debug)]
struct ElementStats {
    name: String,
    last: gst::Structure,
    last_update: Instant,
    /// Reference sample the next rate is computed against: (time, bytes, packets).
    reference: (Instant, u64, u64),
    /// Bits per second and packets per second, once two samples were far enough apart.
    rate: Option<(f64, f64)>,
}

/// The per-element statistics of one pipeline, in the order elements first reported.
#[derive(Debug)]
pub struct StatsBoard {
    elements: Vec<ElementStats>,
    start: Instant,
}

impl Default for StatsBoard {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads an integer counter from a stats structure, whatever integer type it was stored as.
pub fn counter(s: &gst::StructureRef, name: &str) -> u64 {
    if let Ok(v) = s.get::<u64>(name) {
        return v;
    }
    if let Ok(v) = s.get::<u32>(name) {
        return v.into();
    }
    if let Ok(v) = s.get::<i64>(name) {
        return v.max(0) as u64;
    }
    if let Ok(v) = s.get::<i32>(name) {
        return v.max(0) as u64;
    }
    0
}

/// The (bytes, packets) counters that measure throughput: senders count `bytes-sent`,
/// everything else `bytes` (or `bytes-written` for writers).
pub fn throughput(s: &gst::StructureRef) -> (u64, u64) {
    if s.has_field(names::BYTES_SENT) {
        (
            counter(s, names::BYTES_SENT),
            counter(s, names::PACKETS_SENT),
        )
    } else if s.has_field(names::BYTES) {
        (counter(s, names::BYTES), counter(s, names::PACKETS))
    } else {
        (counter(s, names::BYTES_WRITTEN), counter(s, names::PACKETS))
    }
}

/// "1.98 Gb/s" from bits per second.
pub fn format_gbps(bits_per_s: f64) -> String {
    format!("{:.2} Gb/s", bits_per_s / 1e9)
}

/// "168.2 kpkt/s" / "1.23 Mpkt/s" from packets per second.
pub fn format_pps(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2} Mpkt/s", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1} kpkt/s", pps / 1e3)
    } else {
        format!("{pps:.0} pkt/s")
    }
}

impl StatsBoard {
    /// An empty board; elapsed times count from now.
    pub fn new() -> Self {
        Self {
            elements: Vec::new(),
            start: Instant::now(),
        }
    }

    /// Restarts the clock elapsed times are counted from (e.g. when PLAYING is reached).
    pub fn restart_clock(&mut self, now: Instant) {
        self.start = now;
    }

    /// Time since the board's clock started.
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.start)
    }

    /// Records a stats structure from element `name`, received at `now`.
    pub fn update(&mut self, name: &str, s: &gst::StructureRef, now: Instant) {
        let (bytes, packets) = throughput(s);
        let e = match self.elements.iter().position(|e| e.name == name) {
            Some(i) => &mut self.elements[i],
            None => {
                // Counters start at zero when the pipeline starts, so the first sample
                // already gives a rate against the board's start.
                self.elements.push(ElementStats {
                    name: name.to_owned(),
                    last: s.to_owned(),
                    last_update: now,
                    reference: (self.start, 0, 0),
                    rate: None,
                });
                self.elements.last_mut().expect("just pushed")
            }
        };
        let (last_bytes, last_packets) = throughput(&e.last);
        e.last = s.to_owned();
        e.last_update = now;
        let (t0, b0, p0) = e.reference;
        let dt = now.saturating_duration_since(t0);
        if bytes < last_bytes || packets < last_packets {
            // Counters went backwards: the element restarted. Start a new window.
            e.reference = (now, bytes, packets);
            e.rate = None;
        } else if dt >= MIN_RATE_WINDOW {
            let secs = dt.as_secs_f64();
            e.rate = Some((
                (bytes - b0) as f64 * 8.0 / secs,
                (packets - p0) as f64 / secs,
            ));
            e.reference = (now, bytes, packets);
        }
    }

    /// When element `name` last reported, if ever.
    pub fn last_update(&self, name: &str) -> Option<Instant> {
        self.elements
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.last_update)
    }

    /// The latest stats structure of element `name`.
    pub fn get(&self, name: &str) -> Option<&gst::StructureRef> {
        self.elements
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.last.as_ref())
    }

    /// True when no element has reported yet.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// The once-a-second line: elapsed time, then per element its rate and any nonzero
    /// problem counter. `None` until some element has reported.
    pub fn line(&self, now: Instant) -> Option<String> {
        let body = self.body()?;
        Some(format!("[{:7.1}s] {body}", self.elapsed(now).as_secs_f64()))
    }

    /// The per-element part of [`StatsBoard::line`], without the elapsed time.
    pub fn body(&self) -> Option<String> {
        if self.elements.is_empty() {
            return None;
        }
        let mut line = String::new();
        for (i, e) in self.elements.iter().enumerate() {
            if i > 0 {
                line.push_str(" | ");
            }
            line.push_str(&e.name);
            match e.rate {
                Some((bps, pps)) => {
                    let _ = write!(line, " {} {}", format_gbps(bps), format_pps(pps));
                }
                None => line.push_str(" -"),
            }
            for name in PROBLEM_COUNTERS {
                let v = counter(&e.last, name);
                if v > 0 {
                    let _ = write!(line, " {name}={v}");
                }
            }
        }
        Some(line)
    }

    /// The final summary: per element its totals (packets and bytes always, other counters
    /// when nonzero) and the average rate over `elapsed`.
    pub fn summary(&self, elapsed: Duration) -> String {
        let mut out = String::new();
        let width = self
            .elements
            .iter()
            .map(|e| e.name.len())
            .max()
            .unwrap_or(0);
        for e in &self.elements {
            let (bytes, packets) = throughput(&e.last);
            let secs = elapsed.as_secs_f64().max(1e-9);
            let _ = write!(
                out,
                "  {:width$}  {} packets, {} bytes, avg {} {}",
                e.name,
                packets,
                bytes,
                format_gbps(bytes as f64 * 8.0 / secs),
                format_pps(packets as f64 / secs),
            );
            let mut others = Vec::new();
            for (field, value) in e.last.iter() {
                if [
                    names::PACKETS,
                    names::BYTES,
                    names::PACKETS_SENT,
                    names::BYTES_SENT,
                ]
                .contains(&field.as_str())
                {
                    continue;
                }
                let text = value.serialize().map(|s| s.to_string()).unwrap_or_default();
                if text != "0" && !text.is_empty() {
                    others.push(format!("{field}={text}"));
                }
            }
            if !others.is_empty() {
                let _ = write!(out, "; {}", others.join(" "));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::stats::structure;

    #[test]
    fn rate_from_deltas_and_problem_counters_on_line() {
        gst::init().unwrap();
        let mut b = StatsBoard::new();
        let t0 = b.start;
        b.update(
            "fhudpsrc0",
            &structure(&[(names::PACKETS, 0), (names::BYTES, 0)]),
            t0,
        );
        assert!(b.line(t0).unwrap().contains("fhudpsrc0 -"));
        b.update(
            "fhudpsrc0",
            &structure(&[
                (names::PACKETS, 1000),
                (names::BYTES, 125_000_000),
                (names::DROPS_KERNEL, 3),
                (names::TRUNCATED, 0),
            ]),
            t0 + Duration::from_secs(1),
        );
        let line = b.line(t0 + Duration::from_secs(1)).unwrap();
        assert!(line.contains("fhudpsrc0 1.00 Gb/s 1.0 kpkt/s"), "{line}");
        assert!(line.contains("drops-kernel=3"), "{line}");
        assert!(!line.contains("truncated"), "{line}");
    }

    #[test]
    fn senders_use_sent_counters_and_summary_lists_nonzero() {
        gst::init().unwrap();
        let mut b = StatsBoard::new();
        let t0 = b.start;
        let s = structure(&[
            (names::PACKETS_SENT, 10),
            (names::BYTES_SENT, 250_000_000),
            (names::BATCHES, 2),
            (names::SEND_ERRORS, 0),
            (names::PACING_SLIP_NS, 0),
        ]);
        b.update("fhudpsink0", &s, t0);
        let sum = b.summary(Duration::from_secs(2));
        assert!(sum.contains("fhudpsink0  10 packets, 250000000 bytes, avg 1.00 Gb/s"));
        assert!(sum.contains("batches=2"), "{sum}");
        assert!(!sum.contains("send-errors"), "{sum}");
        assert!(!b.line(t0).unwrap().contains("pacing-slip-ns"));
        // A sender that fell behind says so on the live line.
        let mut late = s.clone();
        late.set(names::PACING_SLIP_NS, 25_000_000u64);
        b.update("fhudpsink0", &late, t0 + Duration::from_secs(1));
        let line = b.line(t0 + Duration::from_secs(1)).unwrap();
        assert!(line.contains("pacing-slip-ns=25000000"), "{line}");
    }

    #[test]
    fn restart_resets_rate() {
        gst::init().unwrap();
        let mut b = StatsBoard::new();
        let t0 = b.start;
        b.update("x", &structure(&[(names::BYTES, 100)]), t0);
        b.update(
            "x",
            &structure(&[(names::BYTES, 10)]),
            t0 + Duration::from_secs(1),
        );
        assert!(b.line(t0).unwrap().contains("x -"));
    }

    #[test]
    fn pps_units() {
        assert_eq!(format_pps(12.0), "12 pkt/s");
        assert_eq!(format_pps(168_200.0), "168.2 kpkt/s");
        assert_eq!(format_pps(1_230_000.0), "1.23 Mpkt/s");
    }
}
