//! The pool properties of every element that owns a pool: `memory` and `pool-size`
//! (bytes), plus the deprecated aliases they replace (`hugepages`, and the old slot
//! count: `slots`, `frames`, `mbufs`); and `readable-metas`, which every such element
//! (a source of packet batches) has too.
//!
//! Why a size in bytes: it is what a user budgets, and it means the same on every
//! element; the slot count follows from the element's slot size (`slot-size`,
//! `frame-size`, `mbuf-size`, or the batch size) and is shown in `stats`
//! (`pool-slots`). An old count alias sets the count itself, so a pipeline that set
//! `frames=4096 frame-size=2048` still gets 4096 frames whatever the order.

use gst::glib;
use gst::prelude::*;

use crate::memory::HugepagePolicy;
use crate::props::Memory;

/// How big a pool was asked to be: in bytes (`pool-size`), or as a slot count through
/// a deprecated alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSize {
    /// Bytes: the count is these over the slot size.
    Bytes(u64),
    /// A slot count, set through an old count property.
    Count(u64),
}

/// The deprecated count property of an element whose pool was sized by count.
#[derive(Clone, Copy, Debug)]
pub struct CountAlias {
    /// Its name (`slots`, `frames`, `mbufs`).
    pub name: &'static str,
    /// Its smallest value.
    pub min: u32,
    /// Its largest value.
    pub max: u32,
}

/// The description of an element's pool properties: builds their `ParamSpec`s.
#[derive(Clone, Copy, Debug)]
pub struct PoolProps {
    /// What the pool is, for the blurbs ("pool", "UMEM", "receive region").
    pub what: &'static str,
    /// The blurb of `pool-size`: what the bytes become (e.g. "… divided into
    /// frame-size frames").
    pub size_blurb: &'static str,
    /// The default size.
    pub default: PoolSize,
    /// Bytes per slot with default settings: the `pool-size` default shown when the
    /// default is a count.
    pub default_slot_bytes: u64,
    /// Whether the element chooses its memory (`memory`; not for DPDK, whose EAL
    /// does).
    pub memory: bool,
    /// Whether the element had a `hugepages` property to keep as an alias.
    pub hugepages_alias: bool,
    /// The old count property to keep as an alias, if any.
    pub count_alias: Option<CountAlias>,
}

impl PoolProps {
    /// The default size in bytes.
    pub fn default_bytes(&self) -> u64 {
        match self.default {
            PoolSize::Bytes(b) => b,
            PoolSize::Count(n) => n * self.default_slot_bytes,
        }
    }

    /// `memory`, `pool-size`, then the deprecated aliases, then `readable-metas`
    /// (every element with a pool of batches attaches the batch meta).
    pub fn param_specs(&self) -> Vec<glib::ParamSpec> {
        let what = self.what;
        let mut v = vec![];
        let [memory, hugepages] = crate::props::memory_properties(what);
        if self.memory {
            v.push(memory);
        }
        v.push(
            glib::ParamSpecUInt64::builder("pool-size")
                .nick("Pool size")
                .blurb(self.size_blurb)
                .minimum(1)
                .default_value(self.default_bytes())
                .mutable_ready()
                .build(),
        );
        if self.hugepages_alias {
            v.push(hugepages);
        }
        if let Some(a) = self.count_alias {
            let default = match self.default {
                PoolSize::Count(n) => n,
                PoolSize::Bytes(b) => b / self.default_slot_bytes.max(1),
            };
            v.push(
                glib::ParamSpecUInt::builder(a.name)
                    .nick(a.name)
                    .blurb(&format!(
                        "Deprecated: use pool-size (bytes); sets the number of {} directly",
                        a.name
                    ))
                    .minimum(a.min)
                    .maximum(a.max)
                    .default_value(default.clamp(a.min.into(), a.max.into()) as u32)
                    .mutable_ready()
                    .build(),
            );
        }
        v.push(crate::meta::readable::param_spec());
        v
    }
}

/// An element's pool settings: set and read through the properties [`PoolProps`]
/// builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// What backs the pool.
    pub memory: Memory,
    /// How big it is.
    pub size: PoolSize,
    alias: Option<&'static str>,
    /// `readable-metas`: batches also carry the meta every language reads
    /// ([`crate::meta::readable`]). Here because every element with a pool of
    /// batches has it.
    pub readable_metas: bool,
}

impl PoolSettings {
    /// The defaults of `props`.
    pub fn new(props: &PoolProps) -> Self {
        Self {
            memory: Memory::Auto,
            size: props.default,
            alias: props.count_alias.map(|a| a.name),
            readable_metas: crate::meta::readable::DEFAULT,
        }
    }

    /// Sets the property `pspec` if it is one of these; false if it is not.
    pub fn set(&mut self, value: &glib::Value, pspec: &glib::ParamSpec) -> bool {
        if crate::props::set_memory(&mut self.memory, pspec.name(), value) {
            return true;
        }
        match pspec.name() {
            "pool-size" => self.size = PoolSize::Bytes(value.get().expect("type checked upstream")),
            crate::meta::readable::PROPERTY => {
                self.readable_metas = value.get().expect("type checked upstream")
            }
            n if Some(n) == self.alias => {
                self.size =
                    PoolSize::Count(value.get::<u32>().expect("type checked upstream").into())
            }
            _ => return false,
        }
        true
    }

    /// The value of property `pspec` if it is one of these, with slots of `slot_bytes`
    /// (to convert between bytes and counts).
    pub fn get(&self, pspec: &glib::ParamSpec, slot_bytes: u64) -> Option<glib::Value> {
        if let Some(v) = crate::props::memory_value(self.memory, pspec.name()) {
            return Some(v);
        }
        Some(match pspec.name() {
            "pool-size" => self.bytes(slot_bytes).to_value(),
            crate::meta::readable::PROPERTY => self.readable_metas.to_value(),
            n if Some(n) == self.alias => {
                (self.count(slot_bytes).min(u32::MAX.into()) as u32).to_value()
            }
            _ => return None,
        })
    }

    /// Slots of `slot_bytes` bytes: the count set through an alias, or the bytes over
    /// the slot size (rounded down).
    pub fn count(&self, slot_bytes: u64) -> u64 {
        match self.size {
            PoolSize::Bytes(b) => b / slot_bytes.max(1),
            PoolSize::Count(n) => n,
        }
    }

    /// The size in bytes, with slots of `slot_bytes` bytes.
    pub fn bytes(&self, slot_bytes: u64) -> u64 {
        match self.size {
            PoolSize::Bytes(b) => b,
            PoolSize::Count(n) => n.saturating_mul(slot_bytes),
        }
    }

    /// The hugepage policy of [`PoolSettings::memory`].
    pub fn policy(&self) -> HugepagePolicy {
        self.memory.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::props::Hugepages;

    const PROPS: PoolProps = PoolProps {
        what: "UMEM",
        size_blurb: "Bytes of UMEM",
        default: PoolSize::Count(16384),
        default_slot_bytes: 4096,
        memory: true,
        hugepages_alias: true,
        count_alias: Some(CountAlias {
            name: "frames",
            min: 64,
            max: 1 << 20,
        }),
    };

    fn spec(name: &str) -> glib::ParamSpec {
        PROPS
            .param_specs()
            .into_iter()
            .find(|p| p.name() == name)
            .unwrap()
    }

    #[test]
    fn the_deprecated_aliases_set_the_new_properties() {
        gst::init().unwrap();
        let mut s = PoolSettings::new(&PROPS);
        assert!(s.set(&Hugepages::Off.to_value(), &spec("hugepages")));
        assert_eq!(s.memory, Memory::System);
        assert_eq!(s.policy(), HugepagePolicy::Off);
        assert_eq!(
            s.get(&spec("memory"), 4096)
                .unwrap()
                .get::<Memory>()
                .unwrap(),
            Memory::System
        );
        assert!(s.set(&Memory::Hugepages.to_value(), &spec("memory")));
        assert_eq!(
            s.get(&spec("hugepages"), 4096)
                .unwrap()
                .get::<Hugepages>()
                .unwrap(),
            Hugepages::Require
        );
        // The count alias sets the count; pool-size reads back in bytes.
        assert!(s.set(&4096u32.to_value(), &spec("frames")));
        assert_eq!(s.count(2048), 4096);
        assert_eq!(
            s.get(&spec("pool-size"), 2048)
                .unwrap()
                .get::<u64>()
                .unwrap(),
            8 << 20
        );
        // Not ours.
        let other = glib::ParamSpecUInt::builder("queue").build();
        assert!(!s.set(&1u32.to_value(), &other));
        assert!(s.get(&other, 1).is_none());
    }

    #[test]
    fn pool_size_in_bytes_derives_the_count() {
        gst::init().unwrap();
        let mut s = PoolSettings::new(&PROPS);
        // Default: today's 16384 frames of 4096 B, shown as 64 MiB.
        assert_eq!(
            spec("pool-size").default_value().get::<u64>().unwrap(),
            64 << 20
        );
        assert_eq!(spec("frames").default_value().get::<u32>().unwrap(), 16384);
        assert_eq!(s.count(4096), 16384);
        assert!(s.set(&(16u64 << 20).to_value(), &spec("pool-size")));
        assert_eq!(s.count(4096), 4096);
        assert_eq!(s.count(2048), 8192);
        assert_eq!(
            s.get(&spec("frames"), 4096).unwrap().get::<u32>().unwrap(),
            4096
        );
        assert!(spec("hugepages")
            .blurb()
            .unwrap()
            .starts_with("Deprecated: use memory"));
        assert!(spec("frames")
            .blurb()
            .unwrap()
            .starts_with("Deprecated: use pool-size"));
    }
}
