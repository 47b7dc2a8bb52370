//! The properties `fhdpdksrc` and `fhdpdksink` share, declared once: `eal-args` and
//! `dpdk-port`, what a DPDK element needs before it can touch a port ([`EalSettings`]).
//! Each element gives only its examples ([`EalProps`]): the source's and the sink's
//! blurbs name the devices of a loopback test, one end each.

use firehose_core::property::OrDefault;
use gst::glib;
use gst::prelude::*;

/// The default `dpdk-port`: the first port the EAL probed.
pub const DEFAULT_DPDK_PORT: &str = "0";

/// The examples in an element's blurbs.
#[derive(Clone, Copy, Debug)]
pub struct EalProps {
    /// A `--vdev` argument for `eal-args` ("net_af_packet0,iface=eth1").
    pub vdev_example: &'static str,
    /// A device name for `dpdk-port` ("net_af_packet0").
    pub port_example: &'static str,
}

impl EalProps {
    fn eal_args_spec(&self) -> glib::ParamSpec {
        glib::ParamSpecString::builder("eal-args")
            .nick("EAL arguments")
            .blurb(&format!(
                "DPDK EAL arguments, e.g. \"--no-huge --vdev={}\". The EAL starts once per \
                 process: later elements must give the same arguments apart from --vdev \
                 (devices are hot-plugged)",
                self.vdev_example
            ))
            .mutable_ready()
            .build()
    }

    fn dpdk_port_spec(&self) -> glib::ParamSpec {
        glib::ParamSpecString::builder("dpdk-port")
            .nick("DPDK port")
            .blurb(&format!(
                "Port index or device name (e.g. {})",
                self.port_example
            ))
            .default_value(Some(DEFAULT_DPDK_PORT))
            .mutable_ready()
            .build()
    }
}

/// The EAL and the port an element opens. A blank value is the default (no arguments,
/// port 0), as leaving the property alone.
#[derive(Clone, Debug)]
pub struct EalSettings {
    /// `eal-args`: the EAL's arguments ("" = none).
    pub eal_args: String,
    /// `dpdk-port`: a port index or device name.
    pub dpdk_port: String,
    props: &'static EalProps,
}

firehose_core::property_group! {
    EalSettings as s {
        eal_args: OrDefault => s.props.eal_args_spec();
        dpdk_port: OrDefault => s.props.dpdk_port_spec();
    }
}

impl EalSettings {
    /// The defaults, with the blurbs of `props`.
    pub fn new(props: &'static EalProps) -> Self {
        Self {
            eal_args: String::new(),
            dpdk_port: DEFAULT_DPDK_PORT.into(),
            props,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firehose_core::property::PropertyGroup;

    static PROPS: EalProps = EalProps {
        vdev_example: "net_af_packet0,iface=eth1",
        port_example: "net_af_packet0",
    };

    #[test]
    fn the_eal_settings_round_trip_and_blank_is_the_default() {
        gst::init().unwrap();
        let mut s = EalSettings::new(&PROPS);
        firehose_core::property::assert_round_trips(&mut s);
        assert_eq!(
            (s.eal_args.as_str(), s.dpdk_port.as_str()),
            ("value-test", "0-test")
        );
        assert!(s.set_named("eal-args", &"--no-huge".to_value()));
        assert!(s.set_named("dpdk-port", &"net_af_packet0".to_value()));
        assert_eq!(
            (s.eal_args.as_str(), s.dpdk_port.as_str()),
            ("--no-huge", "net_af_packet0")
        );
        assert!(s.set_named("eal-args", &" ".to_value()));
        assert!(s.set_named("dpdk-port", &None::<String>.to_value()));
        assert_eq!((s.eal_args.as_str(), s.dpdk_port.as_str()), ("", "0"));
        let blurb = s.find("dpdk-port").unwrap().1.blurb().unwrap().to_string();
        assert_eq!(blurb, "Port index or device name (e.g. net_af_packet0)");
    }
}
