//! An element's counters declared once ([`counters!`](crate::counters)), and the pool
//! counters every pool owner appends to its `stats` ([`append_pool`]).

use crate::memory::MemoryKind;
use crate::pool::{PoolStats, SlotPool};
use crate::stats::names;

/// Declares a set of [`Counter`](crate::stats::Counter)s and the stats name of each;
/// generates the struct (every field `pub`, `Default`) and
/// - `NAMES`: the names in declaration order,
/// - `fields()`: `(name, value)` pairs, for [`crate::stats::structure`],
/// - `structure()`: the `firehose-stats` structure of these counters,
/// - `reset()`: every counter back to zero (at start),
/// - `describe(extra)`: the names joined by commas, then `extra` (for the blurb of the
///   `stats` property, [`crate::stats::stats_spec`]).
///
/// ```
/// use firehose_core::stats::names;
/// firehose_core::counters! {
///     /// What a receiver counts.
///     pub struct RxCounters {
///         packets: names::PACKETS,
///         bytes: names::BYTES,
///         completion_errors: "completion-errors",
///     }
/// }
/// let c = RxCounters::default();
/// c.packets.add(3);
/// assert_eq!(c.fields()[0], ("packets", 3));
/// assert_eq!(RxCounters::describe("pool-*"), "packets, bytes, completion-errors, pool-*");
/// ```
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $key:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $name {
            $( $(#[$fmeta])* #[doc = concat!("The `", stringify!($field), "` counter.")] pub $field: $crate::stats::Counter, )*
        }

        #[allow(dead_code)]
        impl $name {
            /// The stats names of the counters, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($key),*];

            /// `(name, value)` of every counter, in declaration order.
            pub fn fields(&self) -> ::std::vec::Vec<(&'static str, u64)> {
                ::std::vec![$(($key, self.$field.get())),*]
            }

            /// The `firehose-stats` structure of these counters.
            pub fn structure(&self) -> $crate::__gst::Structure {
                $crate::stats::structure(&self.fields())
            }

            /// Every counter back to zero (at start).
            pub fn reset(&self) {
                $( self.$field.reset(); )*
            }

            /// The names joined by commas, then `extra` if not empty: the description
            /// of the `stats` property.
            pub fn describe(extra: &str) -> ::std::string::String {
                let mut s = Self::NAMES.join(", ");
                if !extra.is_empty() {
                    s.push_str(", ");
                    s.push_str(extra);
                }
                s
            }
        }
    };
}

/// Appends a pool's counters to `s`: `pool-slots`, `pool-in-use`, `pool-high-water`,
/// `pool-exhausted`, and `memory` (the kind: `hugepages` or `system`; `none` until
/// known).
pub fn append_pool(s: &mut gst::Structure, pool: &PoolStats, memory: Option<MemoryKind>) {
    s.set(names::POOL_SLOTS, pool.slots as u64);
    s.set(names::POOL_IN_USE, pool.in_use as u64);
    s.set(names::POOL_HIGH_WATER, pool.high_water as u64);
    s.set(names::POOL_EXHAUSTED, pool.exhausted);
    s.set(
        "memory",
        memory.map_or(crate::stats::NOT_KNOWN, |m| m.as_str()),
    );
}

/// [`append_pool`] for a [`SlotPool`], or zeros (and `memory` `none`) before the first
/// start.
pub fn append_slot_pool(s: &mut gst::Structure, pool: Option<&SlotPool>) {
    let stats = pool.map(SlotPool::stats).unwrap_or_default();
    append_pool(s, &stats, pool.map(SlotPool::kind));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{field, STRUCTURE_NAME};

    crate::counters! {
        /// A test set.
        struct TestCounters {
            packets: names::PACKETS,
            drops_pool: names::DROPS_POOL,
            /// An element-local name.
            local: "local-thing",
        }
    }

    #[test]
    fn the_structure_holds_every_name_and_reset_zeroes_all() {
        gst::init().unwrap();
        let c = TestCounters::default();
        c.packets.add(5);
        c.drops_pool.add(2);
        c.local.set(9);
        let s = c.structure();
        assert_eq!(s.name(), STRUCTURE_NAME);
        for name in TestCounters::NAMES {
            assert!(s.has_field(*name), "{name} missing");
        }
        assert_eq!(s.n_fields(), 3);
        assert_eq!(field(&s, "local-thing"), 9);
        assert_eq!(field(&s, names::DROPS_POOL), 2);
        c.reset();
        assert!(c.fields().iter().all(|&(_, v)| v == 0));
        assert_eq!(
            TestCounters::describe("pool-*"),
            "packets, drops-pool, local-thing, pool-*"
        );
        assert_eq!(
            TestCounters::describe(""),
            "packets, drops-pool, local-thing"
        );
    }

    #[test]
    fn pool_counters_are_appended() {
        gst::init().unwrap();
        let mut s = TestCounters::default().structure();
        append_slot_pool(&mut s, None);
        assert_eq!(field(&s, names::POOL_SLOTS), 0);
        assert_eq!(s.get::<&str>("memory").unwrap(), "none");
        let pool = SlotPool::new(&crate::PoolConfig {
            slot_size: 64,
            slots: 3,
            hugepages: crate::HugepagePolicy::Off,
        })
        .unwrap();
        let _held = pool.try_acquire();
        let mut s = TestCounters::default().structure();
        append_slot_pool(&mut s, Some(&pool));
        assert_eq!(field(&s, names::POOL_SLOTS), 3);
        assert_eq!(field(&s, names::POOL_IN_USE), 1);
        assert_eq!(field(&s, names::POOL_HIGH_WATER), 1);
        assert_eq!(field(&s, names::POOL_EXHAUSTED), 0);
        assert_eq!(s.get::<&str>("memory").unwrap(), "system");
    }
}
