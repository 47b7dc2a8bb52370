//! The `socket-path` and `abstract` properties both elements have: where the producer
//! listens and its consumers connect, as one property group
//! ([`firehose_core::property_group!`]) whose descriptions say which side it is on.

use firehose_core::property::OrDefault;
use gst::glib;
use gst::prelude::*;

use crate::wire::Address;

/// Where a producer listens when nothing else is set.
pub const DEFAULT_PATH: &str = "/tmp/firehose-shm.sock";

/// Which end of the socket an element is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `fhshmsink`: listens.
    Producer,
    /// `fhshmsrc`: connects.
    Consumer,
}

/// `socket-path` and `abstract`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `socket-path`: a file, or a name in the abstract namespace.
    pub socket_path: String,
    /// `abstract`: `socket_path` is in Linux's abstract namespace.
    pub abstract_ns: bool,
    side: Side,
}

impl Endpoint {
    /// The defaults of `side`'s element.
    pub fn new(side: Side) -> Self {
        Self {
            socket_path: DEFAULT_PATH.into(),
            abstract_ns: false,
            side,
        }
    }

    /// The socket address these settings name.
    pub fn address(&self) -> Address {
        Address::new(&self.socket_path, self.abstract_ns)
    }

    fn path_blurb(&self) -> &'static str {
        match self.side {
            Side::Producer => {
                "Unix socket consumers connect to (a name in the abstract namespace when \
                 abstract=true)"
            }
            Side::Consumer => "The fhshmsink's unix socket (an abstract name when abstract=true)",
        }
    }

    fn abstract_blurb(&self) -> &'static str {
        match self.side {
            Side::Producer => {
                "Listen on socket-path in Linux's abstract namespace: no file, no \
                 permissions (only the uid check guards it)"
            }
            Side::Consumer => "socket-path is a name in Linux's abstract namespace",
        }
    }
}

firehose_core::property_group! {
    Endpoint as s {
        socket_path: OrDefault => glib::ParamSpecString::builder("socket-path")
            .nick("Socket path")
            .blurb(s.path_blurb())
            .default_value(Some(DEFAULT_PATH))
            .mutable_ready()
            .build();
        abstract_ns => glib::ParamSpecBoolean::builder("abstract")
            .nick("Abstract namespace")
            .blurb(s.abstract_blurb())
            .default_value(false)
            .mutable_ready()
            .build();
    }
}

#[cfg(test)]
#[test]
fn both_properties_round_trip_on_either_side() {
    use firehose_core::property::{assert_round_trips, PropertyGroup};
    for side in [Side::Producer, Side::Consumer] {
        let mut e = Endpoint::new(side);
        assert_round_trips(&mut e);
        assert!(e.abstract_ns);
        assert_eq!(e.socket_path, format!("{DEFAULT_PATH}-test"));
        // NULL is the default path again, not an empty one.
        assert!(e.set_named("socket-path", &None::<String>.to_value()));
        assert_eq!(e.socket_path, DEFAULT_PATH);
    }
    let blurb = |side| {
        let (_, p) = Endpoint::new(side).find("socket-path").unwrap();
        p.blurb().unwrap().to_owned()
    };
    assert_ne!(blurb(Side::Producer), blurb(Side::Consumer));
}
