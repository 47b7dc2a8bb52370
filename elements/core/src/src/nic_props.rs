//! The properties of the sources that take one UDP stream off a NIC queue, into memory
//! the NIC writes (`fhxdpsrc`, `fhdpdksrc`, `fhibvsrc`), declared once for the three:
//! the receive filter (`port`, `address`, `endpoints`: [`FilterSettings`]) and the size of a receive
//! slot (`slot-size`: [`SlotSize`]).
//!
//! Why the element gives the blurbs, ranges and defaults ([`FilterProps`],
//! [`SlotProps`]): the idea is one, what it does on each transport is not (an XDP
//! program redirects the port, a DPDK port counts other traffic as filtered, a flow
//! rule steers it to a queue; a slot is a UMEM frame, an mbuf's data room, a slot of a
//! registered region).
//!
//! `slot-size` was three names for one idea (`frame-size` on `fhxdpsrc`, `mbuf-size` on
//! `fhdpdksrc`): now it is one, matching `pool-size` and the `pool-slots` stat, and the
//! old names are deprecated aliases ([`OldSlotName`]).

use gst::glib;
use gst::prelude::*;

use crate::property::{AsI32, OrDefault};

/// How an element describes its receive filter: the specs' words, range and defaults.
#[derive(Clone, Copy, Debug)]
pub struct FilterProps {
    /// The nick of `port`.
    pub port_nick: &'static str,
    /// The blurb of `port`: what the element does with that port.
    pub port_blurb: &'static str,
    /// The smallest `port` (0 where 0 means any, or is refused at start with a reason).
    pub port_min: i32,
    /// The default `port`.
    pub port_default: u32,
    /// The blurb of `address`.
    pub address_blurb: &'static str,
    /// The default `address` (also what NULL or a blank string sets); `None`: unset.
    pub address_default: Option<&'static str>,
}

impl FilterProps {
    fn port_spec(&self) -> glib::ParamSpec {
        glib::ParamSpecInt::builder("port")
            .nick(self.port_nick)
            .blurb(self.port_blurb)
            .minimum(self.port_min)
            .maximum(65535)
            .default_value(i32::try_from(self.port_default).unwrap_or(i32::MAX))
            .mutable_ready()
            .build()
    }

    fn address_spec(&self) -> glib::ParamSpec {
        glib::ParamSpecString::builder("address")
            .nick("Address")
            .blurb(self.address_blurb)
            .default_value(self.address_default)
            .mutable_ready()
            .build()
    }
}

/// The receive filter's settings: the UDP destination port and address to keep.
#[derive(Clone, Debug)]
pub struct FilterSettings {
    /// `port`: the UDP destination port (an `int` property, as stock `udpsrc`'s).
    pub port: u32,
    /// `address`: the destination IP as given; `None` only where the default is unset.
    pub address: Option<String>,
    /// `endpoints`: a list of addresses with ports to keep instead of `address`
    /// ([`crate::endpoint`]).
    pub endpoints: Option<String>,
    props: &'static FilterProps,
}

crate::property_group! {
    FilterSettings as s {
        port: AsI32 => s.props.port_spec();
        address: OrDefault => s.props.address_spec();
        endpoints: OrDefault => crate::endpoint::property_spec();
    }
}

impl FilterSettings {
    /// The defaults of `props`.
    pub fn new(props: &'static FilterProps) -> Self {
        Self {
            port: props.port_default,
            address: props.address_default.map(Into::into),
            endpoints: None,
            props,
        }
    }

    /// The endpoints to keep: `endpoints` if set, else `address`:`port`
    /// ([`crate::endpoint::from_properties`]), with `sources` for groups that name none.
    pub fn endpoint_list(
        &self,
        sources: &[std::net::IpAddr],
    ) -> Result<Vec<crate::endpoint::Endpoint>, String> {
        crate::endpoint::from_properties(
            self.endpoints.as_deref(),
            self.address.as_deref(),
            self.props.address_default,
            u16::try_from(self.port).unwrap_or(0),
            sources,
        )
    }
}

/// The old name of `slot-size` on an element that had one, kept as a deprecated alias.
#[derive(Clone, Copy, Debug)]
pub struct OldSlotName {
    /// The old name (`frame-size`, `mbuf-size`).
    pub name: &'static str,
    /// Its nick.
    pub nick: &'static str,
    /// What it meant, for the alias's blurb ("bytes per UMEM frame").
    pub what: &'static str,
}

/// How an element describes `slot-size`: what a slot is, its range and default.
#[derive(Clone, Copy, Debug)]
pub struct SlotProps {
    /// The blurb: what a slot is on this transport.
    pub blurb: &'static str,
    /// The smallest size.
    pub min: u32,
    /// The largest size.
    pub max: u32,
    /// The default size.
    pub default: u32,
    /// The element's old name for it, if it had another.
    pub old: Option<OldSlotName>,
}

impl SlotProps {
    fn spec(&self, name: &str, nick: &str, blurb: &str) -> glib::ParamSpec {
        glib::ParamSpecUInt::builder(name)
            .nick(nick)
            .blurb(blurb)
            .minimum(self.min)
            .maximum(self.max)
            .default_value(self.default)
            .mutable_ready()
            .build()
    }

    /// The spec of the old name (only called when there is one: the entry's `when`).
    fn old_spec(&self) -> glib::ParamSpec {
        let old = self.old.expect("an element with an old name");
        self.spec(
            old.name,
            old.nick,
            &format!("Deprecated: use slot-size ({})", old.what),
        )
    }
}

/// `slot-size`, bytes per receive slot (and its old name, where the element had one).
#[derive(Clone, Copy, Debug)]
pub struct SlotSize {
    /// The size in bytes.
    pub bytes: u32,
    props: &'static SlotProps,
}

crate::property_group! {
    SlotSize as s {
        bytes => s.props.spec("slot-size", "Slot size", s.props.blurb);
        when(s.props.old.is_some()) deprecated("slot-size") bytes => s.props.old_spec();
    }
}

impl SlotSize {
    /// The default of `props`.
    pub fn new(props: &'static SlotProps) -> Self {
        Self {
            bytes: props.default,
            props,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::property::PropertyGroup;

    static FILTER: FilterProps = FilterProps {
        port_nick: "Port",
        port_blurb: "UDP destination port to keep",
        port_min: 1,
        port_default: 7148,
        address_blurb: "Destination IP to keep; 0.0.0.0 = any",
        address_default: Some("0.0.0.0"),
    };
    static UNSET: FilterProps = FilterProps {
        port_min: 0,
        address_default: None,
        ..FILTER
    };
    static SLOT: SlotProps = SlotProps {
        blurb: "Bytes per frame",
        min: 2048,
        max: 4096,
        default: 4096,
        old: Some(OldSlotName {
            name: "frame-size",
            nick: "Frame size",
            what: "bytes per frame",
        }),
    };

    fn names(g: &impl PropertyGroup) -> Vec<String> {
        g.spec_vec().iter().map(|p| p.name().to_string()).collect()
    }

    #[test]
    fn the_filter_round_trips_and_a_blank_address_is_the_default() {
        gst::init().unwrap();
        let mut f = FilterSettings::new(&FILTER);
        crate::property::assert_round_trips(&mut f);
        assert_eq!((f.port, f.address.as_deref()), (7149, Some("0.0.0.0-test")));
        let mut f = FilterSettings::new(&FILTER);
        assert_eq!(names(&f), ["port", "address", "endpoints"]);
        assert_eq!(f.get_named("port").unwrap().get::<i32>().unwrap(), 7148);
        assert!(f.set_named("port", &9000i32.to_value()));
        assert_eq!(f.port, 9000);
        assert_eq!(f.get_named("port").unwrap().get::<i32>().unwrap(), 9000);
        assert!(f.set_named("address", &"239.1.2.3".to_value()));
        assert_eq!(f.address.as_deref(), Some("239.1.2.3"));
        assert_eq!(
            f.get_named("address").unwrap().get::<String>().unwrap(),
            "239.1.2.3"
        );
        for blank in [None, Some(""), Some("  ")] {
            assert!(f.set_named("address", &blank.to_value()));
            assert_eq!(f.address.as_deref(), Some("0.0.0.0"), "{blank:?}");
        }
        let (_, spec) = f.find("address").unwrap();
        assert!(!f.set(f.count(), &"x".to_value(), &spec), "past the group");
        assert!(f.get(f.count(), &spec).is_none());
    }

    #[test]
    fn the_endpoint_list_comes_from_endpoints_or_address_and_port() {
        gst::init().unwrap();
        let mut f = FilterSettings::new(&FILTER);
        let one = f.endpoint_list(&[]).unwrap();
        assert_eq!(one[0].socket_addr(), "0.0.0.0:7148".parse().unwrap());
        f.set_named("endpoints", &"239.2.0.0+3".to_value());
        let l = f.endpoint_list(&[]).unwrap();
        assert_eq!(l.len(), 4);
        assert!(l.iter().all(|e| e.port == 7148), "the port property");
        f.set_named("address", &"10.0.0.1".to_value());
        assert!(f.endpoint_list(&[]).unwrap_err().contains("both"));
    }

    #[test]
    fn an_address_without_a_default_is_unset_when_blank() {
        gst::init().unwrap();
        let mut f = FilterSettings::new(&UNSET);
        assert_eq!(f.address, None);
        assert!(f.set_named("address", &"10.0.0.1".to_value()));
        assert_eq!(f.address.as_deref(), Some("10.0.0.1"));
        assert!(f.set_named("address", &" ".to_value()));
        assert_eq!(f.address, None);
        assert_eq!(
            f.get_named("address")
                .unwrap()
                .get::<Option<String>>()
                .unwrap(),
            None
        );
        let port = f.find("port").unwrap().1;
        let port = port.downcast_ref::<glib::ParamSpecInt>().unwrap();
        assert_eq!((port.minimum(), port.maximum()), (0, 65535));
    }

    #[test]
    fn the_old_slot_name_sets_slot_size() {
        gst::init().unwrap();
        let mut s = SlotSize::new(&SLOT);
        crate::property::assert_round_trips(&mut s);
        assert_eq!(s.bytes, 4095);
        let mut s = SlotSize::new(&SLOT);
        assert_eq!(names(&s), ["slot-size", "frame-size"]);
        assert!(s.set_named("slot-size", &2048u32.to_value()));
        assert_eq!(s.bytes, 2048);
        assert_eq!(
            s.get_named("slot-size").unwrap().get::<u32>().unwrap(),
            2048
        );
        assert!(s.set_named("frame-size", &3000u32.to_value()));
        assert_eq!(s.bytes, 3000);
        assert_eq!(
            s.get_named("slot-size").unwrap().get::<u32>().unwrap(),
            3000
        );
        assert_eq!(
            s.get_named("frame-size").unwrap().get::<u32>().unwrap(),
            3000
        );
        let (_, old) = s.find("frame-size").unwrap();
        assert!(old
            .blurb()
            .unwrap()
            .starts_with("Deprecated: use slot-size"));
        let old = old.downcast_ref::<glib::ParamSpecUInt>().unwrap();
        assert_eq!(
            (old.minimum(), old.maximum(), old.default_value()),
            (2048, 4096, 4096)
        );
        assert!(!s.set(s.count(), &1u32.to_value(), old.upcast_ref()));

        static NEW: SlotProps = SlotProps { old: None, ..SLOT };
        assert_eq!(names(&SlotSize::new(&NEW)), ["slot-size"]);
    }
}
