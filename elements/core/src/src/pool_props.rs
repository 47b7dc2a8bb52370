//! The pool properties of every element that owns a pool: `memory` and `pool-size`
//! (bytes), plus the deprecated aliases they replace (`hugepages`, and the old slot
//! count: `slots`, `frames`, `mbufs`); and `readable-metas`, which every such element
//! (a source of packet batches) has too.
//!
//! Why a size in bytes: it is what a user budgets, and it means the same on every
//! element; the slot count follows from the element's slot size (`slot-size`, or the
//! batch size) and is shown in `stats` (`pool-slots`). An old count alias sets the
//! count itself, so a pipeline that set `frames=4096 slot-size=2048` still gets 4096
//! frames whatever the order.

use gst::glib;
use gst::prelude::*;

use crate::memory::HugepagePolicy;
use crate::property::Convert;
use crate::props::{HugepagesAlias, Memory};

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
    /// slot-size frames").
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

    /// The spec of `pool-size`.
    fn size_spec(&self) -> glib::ParamSpec {
        glib::ParamSpecUInt64::builder("pool-size")
            .nick("Pool size")
            .blurb(self.size_blurb)
            .minimum(1)
            .default_value(self.default_bytes())
            .mutable_ready()
            .build()
    }

    /// The spec of the old count property, `a`.
    fn count_spec(&self, a: CountAlias) -> glib::ParamSpec {
        let default = match self.default {
            PoolSize::Count(n) => n,
            PoolSize::Bytes(b) => b / self.default_slot_bytes.max(1),
        };
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
            .build()
    }
}

/// How big a pool is, and the slot size that converts between bytes and counts (set by
/// the element before a property is read: it follows other properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// As asked.
    pub size: PoolSize,
    /// Bytes per slot now.
    pub slot_bytes: u64,
}

/// `pool-size` in bytes over a [`Sizing`].
#[derive(Debug)]
pub struct Bytes;

impl Convert<Sizing> for Bytes {
    fn set(field: &mut Sizing, value: &glib::Value, _: &glib::ParamSpec) {
        field.size = PoolSize::Bytes(value.get().expect("GObject checks the type first"));
    }
    fn get(field: &Sizing, _: &glib::ParamSpec) -> glib::Value {
        field.bytes().to_value()
    }
}

/// An old slot-count property over a [`Sizing`]: sets the count itself.
#[derive(Debug)]
pub struct Count;

impl Convert<Sizing> for Count {
    fn set(field: &mut Sizing, value: &glib::Value, _: &glib::ParamSpec) {
        field.size = PoolSize::Count(value.get::<u32>().expect("GObject checks the type").into());
    }
    fn get(field: &Sizing, _: &glib::ParamSpec) -> glib::Value {
        (field.count().min(u32::MAX.into()) as u32).to_value()
    }
}

impl Sizing {
    /// Slots of [`Sizing::slot_bytes`]: the count set through an alias, or the bytes
    /// over the slot size (rounded down).
    pub fn count(&self) -> u64 {
        match self.size {
            PoolSize::Bytes(b) => b / self.slot_bytes.max(1),
            PoolSize::Count(n) => n,
        }
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        match self.size {
            PoolSize::Bytes(b) => b,
            PoolSize::Count(n) => n.saturating_mul(self.slot_bytes),
        }
    }
}

/// An element's pool settings: the properties [`PoolProps`] describes — `memory`,
/// `pool-size`, the deprecated aliases, `readable-metas` — declared once.
#[derive(Clone, Copy, Debug)]
pub struct PoolSettings {
    /// What backs the pool.
    pub memory: Memory,
    /// How big it is.
    pub sizing: Sizing,
    /// `readable-metas`: batches also carry the meta every language reads
    /// ([`crate::meta::readable`]). Here because every element with a pool of
    /// batches has it.
    pub readable_metas: bool,
    props: &'static PoolProps,
}

crate::property_group! {
    PoolSettings as s {
        when(s.props.memory) memory => crate::props::memory_spec(s.props.what);
        sizing: Bytes => s.props.size_spec();
        when(s.props.hugepages_alias)
            deprecated("memory") memory: HugepagesAlias => crate::props::hugepages_spec();
        when(s.props.count_alias.is_some())
            deprecated("pool-size") sizing: Count => s.props.count_spec(s.props.count_alias.unwrap());
        readable_metas => crate::meta::readable::param_spec();
    }
}

impl PoolSettings {
    /// The defaults of `props`.
    pub fn new(props: &'static PoolProps) -> Self {
        Self {
            memory: Memory::Auto,
            sizing: Sizing {
                size: props.default,
                slot_bytes: props.default_slot_bytes,
            },
            readable_metas: crate::meta::readable::DEFAULT,
            props,
        }
    }

    /// How big the pool was asked to be.
    pub fn size(&self) -> PoolSize {
        self.sizing.size
    }

    /// Slots of `slot_bytes` bytes: the count set through an alias, or the bytes over
    /// the slot size (rounded down).
    pub fn count(&self, slot_bytes: u64) -> u64 {
        Sizing {
            slot_bytes,
            ..self.sizing
        }
        .count()
    }

    /// The size in bytes, with slots of `slot_bytes` bytes.
    pub fn bytes(&self, slot_bytes: u64) -> u64 {
        Sizing {
            slot_bytes,
            ..self.sizing
        }
        .bytes()
    }

    /// The hugepage policy of [`PoolSettings::memory`].
    pub fn policy(&self) -> HugepagePolicy {
        self.memory.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::property::PropertyGroup;
    use crate::props::Hugepages;

    static PROPS: PoolProps = PoolProps {
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
        PoolSettings::new(&PROPS).find(name).unwrap().1
    }

    fn get<T: for<'a> glib::value::FromValue<'a>>(s: &PoolSettings, name: &str, slot: u64) -> T {
        let mut s = *s;
        s.sizing.slot_bytes = slot;
        s.get_named(name).unwrap().get::<T>().unwrap()
    }

    #[test]
    fn the_deprecated_aliases_set_the_new_properties() {
        gst::init().unwrap();
        let mut s = PoolSettings::new(&PROPS);
        assert!(s.set_named("hugepages", &Hugepages::Off.to_value()));
        assert_eq!(s.memory, Memory::System);
        assert_eq!(s.policy(), HugepagePolicy::Off);
        assert_eq!(get::<Memory>(&s, "memory", 4096), Memory::System);
        assert!(s.set_named("memory", &Memory::Hugepages.to_value()));
        assert_eq!(get::<Hugepages>(&s, "hugepages", 4096), Hugepages::Require);
        // The count alias sets the count; pool-size reads back in bytes.
        assert!(s.set_named("frames", &4096u32.to_value()));
        assert_eq!(s.count(2048), 4096);
        assert_eq!(get::<u64>(&s, "pool-size", 2048), 8 << 20);
        // Not ours.
        assert!(!s.set_named("queue", &1u32.to_value()));
        assert!(s.get_named("queue").is_none());
        let n = PropertyGroup::count(&s);
        assert!(
            !s.set(n, &1u32.to_value(), &spec("frames")),
            "past the group"
        );
    }

    #[test]
    fn an_element_without_the_aliases_has_only_the_new_properties() {
        gst::init().unwrap();
        static BARE: PoolProps = PoolProps {
            memory: false,
            hugepages_alias: false,
            count_alias: None,
            ..PROPS
        };
        let names: Vec<_> = PoolSettings::new(&BARE)
            .spec_vec()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        assert_eq!(names, ["pool-size", "readable-metas"]);
        let full: Vec<_> = PoolSettings::new(&PROPS)
            .spec_vec()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        assert_eq!(
            full,
            [
                "memory",
                "pool-size",
                "hugepages",
                "frames",
                "readable-metas"
            ]
        );
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
        assert!(s.set_named("pool-size", &(16u64 << 20).to_value()));
        assert_eq!(s.count(4096), 4096);
        assert_eq!(s.count(2048), 8192);
        assert_eq!(get::<u32>(&s, "frames", 4096), 4096);
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
