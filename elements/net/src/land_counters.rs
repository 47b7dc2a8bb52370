//! [`LandingCounters`]: the receive counters of a source built on a [`LandingSource`]
//! (`fhudpchunksrc`, `fhspeadsrc`), mirrored for its `stats`.

use std::time::Instant;

use firehose_core::stats::{names, StatsTimer};

use crate::direct::DirectCounts;
use crate::landsrc::{LandingSource, SourceEngine};

firehose_core::counters! {
    /// The receiver's counters, mirrored once per receive so that `stats` (read from
    /// any thread) never waits for the streaming thread.
    pub struct LandingCounters {
        datagrams: names::DATAGRAMS,
        landed: names::PACKETS_LANDED,
        copied: names::PACKETS_COPIED,
        truncated: names::TRUNCATED,
        empty: names::EMPTY,
        /// Datagrams to a destination not in the endpoint list.
        filtered: names::FILTERED,
        batches: names::BATCHES,
        /// Read from the kernel (a system call) only when stats are posted, and at stop.
        kernel_drops: names::DROPS_KERNEL,
    }
}

impl LandingCounters {
    /// Copies the receiver's counts; with `kernel`, also reads the kernel's drop count.
    pub fn update<E: SourceEngine>(&self, src: &mut LandingSource<E>, kernel: bool) {
        let c: DirectCounts = src.counts();
        self.datagrams.set(c.datagrams);
        self.landed.set(c.landed);
        self.copied.set(c.copied);
        self.truncated.set(c.truncated);
        self.empty.set(c.empty);
        self.filtered.set(c.filtered);
        self.batches.set(c.batches);
        if kernel {
            self.kernel_drops.set(src.kernel_drops());
        }
    }

    /// After a receive: copies the counts, and says whether stats are due (by `timer`,
    /// or `force`d at the end of the stream), reading the kernel's drops if so.
    pub fn mirror<E: SourceEngine>(
        &self,
        src: &mut LandingSource<E>,
        timer: &mut StatsTimer,
        force: bool,
    ) -> bool {
        let due = timer.due(Instant::now()) || force;
        self.update(src, due);
        due
    }

    /// The `stats` keys of a landing source, for its blurb: its engine's (`engine`), the
    /// receiver's, then the per-endpoint field.
    pub fn stats_keys(engine: &str) -> String {
        format!(
            "{engine}, {}, {}",
            Self::describe(""),
            firehose_core::endpoint::STATS_FIELD
        )
    }

    /// Adds these counters to an element's stats structure.
    pub fn append_to(&self, s: &mut gst::Structure) {
        for (name, value) in self.fields() {
            s.set(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_after_the_engine_counters_in_order() {
        gst::init().unwrap();
        let c = LandingCounters::default();
        c.landed.set(4);
        c.kernel_drops.set(2);
        let mut s = gst::Structure::new_empty("firehose-stats");
        s.set(names::PACKETS, 9u64);
        c.append_to(&mut s);
        assert_eq!(s.n_fields(), 1 + LandingCounters::NAMES.len());
        assert_eq!(s.get::<u64>(names::PACKETS_LANDED), Ok(4));
        assert_eq!(s.get::<u64>(names::DROPS_KERNEL), Ok(2));
        assert_eq!(
            s.nth_field_name(1).map(|n| n.as_str()),
            Some(names::DATAGRAMS)
        );
    }
}
