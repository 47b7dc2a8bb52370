//! The `transport` property of the sources that own an engine (`fhspeadsrc`,
//! `fhudpchunksrc`): which transport feeds the engine. Unset, it is the element's own
//! kernel UDP socket (its socket properties), whose payloads land straight in the
//! engine. Set, it is a Firehose packet source written as in a pipeline description —
//! `transport="fhxdpsrc interface=eth1 queue=2 port=7148"` — whose transport is opened
//! alone ([`PacketSrcExt::open_in_place`]): the engine takes each batch where the
//! device wrote it and copies each payload once, into its heap or chunk. The transport
//! keeps its own properties, defaults and errors: nothing of it is repeated here.

use std::sync::Arc;

use firehose_core::src::{PacketSrc, PacketSrcExt};
use firehose_core::transport::InPlaceTransport;
use firehose_core::wake::Waker;
use gst::glib;
use gst::prelude::*;

/// The property's name.
pub const NAME: &str = "transport";

/// The property's spec.
pub fn property() -> glib::ParamSpec {
    glib::ParamSpecString::builder(NAME)
        .nick("Transport")
        .blurb(
            "The packet source that feeds the engine, as in a pipeline description \
             (\"fhxdpsrc interface=eth1 port=7148\"): the engine takes each batch where the \
             device wrote it (one copy per payload). Unset: this element's own kernel UDP \
             socket (address, port and the other socket properties, which a transport \
             ignores), payloads received straight into the engine",
        )
        .mutable_ready()
        .build()
}

/// A transport opened for an engine.
pub struct Opened {
    /// The transport.
    pub transport: Box<dyn InPlaceTransport>,
    /// The waker that ends its waits (install it in the element's live control).
    pub waker: Arc<Waker>,
    /// What its device holds at most, in bytes (`pool-size`).
    pub ring_bytes: u64,
    /// The transport source's factory name, for logs.
    pub factory: String,
}

/// Opens the transport `desc` describes. The error says what to change: a description
/// that does not parse, one that is not a Firehose packet source, or the transport's own
/// start error (a missing interface, no AF_XDP, no permission).
pub fn open(desc: &str) -> Result<Opened, gst::ErrorMessage> {
    let bad = |m: String| gst::error_msg!(gst::ResourceError::Settings, ("{}", m));
    let el = gst::parse::launch(desc).map_err(|e| {
        bad(format!(
            "transport={desc:?} is not an element with properties: {e} \
             (e.g. transport=\"fhxdpsrc interface=eth1 port=7148\")"
        ))
    })?;
    let factory = el
        .factory()
        .map_or_else(|| el.type_().name().to_string(), |f| f.name().to_string());
    let src = el.downcast::<PacketSrc>().map_err(|el| {
        bad(format!(
            "transport={desc:?} is {}, not a Firehose packet source: give one element, \
             such as fhxdpsrc",
            el.type_().name()
        ))
    })?;
    let waker =
        Arc::new(Waker::new().map_err(|e| {
            gst::error_msg!(gst::ResourceError::OpenRead, ("eventfd failed: {}", e))
        })?);
    // Every packet source has it (the base class's): bytes, whatever the source counts in.
    let ring_bytes = src.property::<u64>("pool-size");
    let transport = src.open_in_place(waker.clone())?;
    Ok(Opened {
        transport,
        waker,
        ring_bytes,
        factory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: gst::ErrorMessage) -> String {
        format!("{e:?}")
    }

    #[test]
    fn a_description_that_does_not_parse_says_how_to_write_one() {
        gst::init().unwrap();
        let e = message(open("no-such-element-here x=1").err().unwrap());
        assert!(e.contains("is not an element with properties"), "{e}");
        assert!(e.contains("fhxdpsrc interface="), "{e}");
    }

    #[test]
    fn an_element_that_is_no_packet_source_is_refused() {
        gst::init().unwrap();
        let e = message(open("fakesrc").err().unwrap());
        assert!(e.contains("not a Firehose packet source"), "{e}");
    }

    #[test]
    fn a_packet_source_that_cannot_feed_in_place_says_so() {
        gst::init().unwrap();
        gst::Element::register(
            None,
            "fhudpsrc",
            gst::Rank::NONE,
            crate::udpsrc::UdpSrc::static_type(),
        )
        .unwrap();
        let e = message(open("fhudpsrc port=0").err().unwrap());
        assert!(e.contains("cannot feed an engine in place"), "{e}");
    }
}
