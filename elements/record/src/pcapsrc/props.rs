//! The properties of `fhpcapsrc` (all read at start, READY → PAUSED), declared once.
//! The base appends `batch-size`, the output, pool and stats ones after these.

use firehose_core::property::{Convert, OrDefault};
use gst::glib;
use gst::prelude::*;

use super::{Pace, Rate, Split};

/// How fast to replay: `pace` and `bitrate`, which the deprecated `rate` sets both of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pacing {
    pub pace: Pace,
    /// Payload bits/s for `pace=bitrate`.
    pub bitrate: u64,
    /// Why the last value of the deprecated `rate` did not parse: a start error, not a
    /// silent default.
    pub bad_rate: Option<String>,
}

impl Pacing {
    /// The `rate` these settings amount to.
    fn rate(&self) -> Rate {
        match self.pace {
            Pace::Original => Rate::Original,
            Pace::Max => Rate::Max,
            Pace::Bitrate => Rate::Bits(self.bitrate),
        }
    }
}

/// The deprecated `rate` string behind [`Pacing`]: `original`, `max` or bits/s.
#[derive(Debug)]
pub struct RateAlias;

impl Convert<Pacing> for RateAlias {
    fn set(p: &mut Pacing, value: &glib::Value, _: &glib::ParamSpec) {
        let text: Option<String> = value.get().expect("GObject checks the type first");
        match Rate::parse(text.as_deref().unwrap_or("original")) {
            Ok(r) => {
                p.bad_rate = None;
                (p.pace, p.bitrate) = match r {
                    Rate::Original => (Pace::Original, p.bitrate),
                    Rate::Max => (Pace::Max, p.bitrate),
                    Rate::Bits(b) => (Pace::Bitrate, b),
                };
            }
            Err(e) => p.bad_rate = Some(e),
        }
    }

    fn get(p: &Pacing, _: &glib::ParamSpec) -> glib::Value {
        p.rate().to_string().to_value()
    }
}

/// The element's own settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub location: Option<String>,
    pub port: u32,
    pub address: Option<String>,
    pub pacing: Pacing,
    pub split: Split,
    pub loops: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            location: None,
            port: 0,
            address: None,
            pacing: Pacing::default(),
            split: Split::Spead,
            loops: 1,
        }
    }
}

firehose_core::property_group! {
    Settings as _s {
        location: OrDefault => glib::ParamSpecString::builder("location")
            .nick("Location")
            .blurb("The pcap or pcapng file to replay")
            .mutable_ready()
            .build();
        port => glib::ParamSpecUInt::builder("port")
            .nick("Port")
            .blurb("Only UDP datagrams to this destination port (0 = any)")
            .maximum(65535)
            .mutable_ready()
            .build();
        address: OrDefault => glib::ParamSpecString::builder("address")
            .nick("Address")
            .blurb("Only datagrams to this destination address (empty = any)")
            .mutable_ready()
            .build();
        pacing.pace => glib::ParamSpecEnum::builder_with_default("pace", Pace::Original)
            .nick("Pace")
            .blurb("How fast to replay: the capture's own timing, as fast as downstream takes it, or the bitrate property")
            .mutable_ready()
            .build();
        pacing.bitrate => glib::ParamSpecUInt64::builder("bitrate")
            .nick("Bitrate")
            .blurb("Payload bits per second when pace=bitrate (0 = not set)")
            .mutable_ready()
            .build();
        deprecated("pace") pacing: RateAlias => glib::ParamSpecString::builder("rate")
            .nick("Rate")
            .blurb("Deprecated: use pace and bitrate. original, max, or payload bits/s such as 500M or 2G (sets pace and bitrate)")
            .default_value(Some("original"))
            .mutable_ready()
            .build();
        split => glib::ParamSpecEnum::builder_with_default("split", Split::Spead)
            .nick("Split")
            .blurb("Cut records holding several SPEAD packets back to back (UDP GSO sends captured on loopback) into their packets")
            .mutable_ready()
            .build();
        loops => glib::ParamSpecUInt::builder("loop")
            .nick("Loop")
            .blurb("Times to play the file (0 = forever)")
            .default_value(1)
            .mutable_ready()
            .build();
    }
}

#[cfg(test)]
#[test]
fn every_property_round_trips_and_the_deprecated_rate_sets_pace_and_bitrate() {
    use firehose_core::property::{assert_round_trips, PropertyGroup};
    let mut s = Settings::default();
    assert_round_trips(&mut s);
    assert_eq!(
        (s.location.as_deref(), s.port, s.pacing.pace, s.loops),
        (Some("value-test"), 1, Pace::Max, 2)
    );
    assert_eq!(s.split, Split::None);
    // Empty strings are unset, as leaving the property alone is.
    assert!(s.set_named("address", &"".to_value()));
    assert_eq!(s.address, None);

    let mut s = Settings::default();
    let rate = |s: &Settings| s.get_named("rate").unwrap().get::<String>().unwrap();
    assert!(s.set_named("rate", &"4M".to_value()));
    assert_eq!(
        (s.pacing.pace, s.pacing.bitrate),
        (Pace::Bitrate, 4_000_000)
    );
    assert_eq!(rate(&s), "4000000");
    assert!(s.set_named("rate", &"max".to_value()));
    assert_eq!(s.pacing.pace, Pace::Max);
    assert_eq!(s.pacing.bitrate, 4_000_000, "max keeps the bitrate");
    assert_eq!(rate(&s), "max");
    assert!(s.set_named("rate", &"fast".to_value()));
    assert!(s.pacing.bad_rate.as_deref().unwrap().contains("500M"));
    assert!(s.set_named("rate", &None::<String>.to_value()));
    assert_eq!(
        (s.pacing.pace, s.pacing.bad_rate.as_deref()),
        (Pace::Original, None)
    );
}
