//! Descriptor parsing never panics, and whatever parses survives a round trip through
//! `encode` in the flavour it came in.

#![no_main]

use firehose_spead::descriptor;
use firehose_spead::wire::Packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = descriptor::parse(data) else {
        return;
    };
    let flavour = Packet::parse(data)
        .expect("a parsed descriptor is a packet")
        .flavour;
    let again = descriptor::parse(&descriptor::encode(&d, flavour)).expect("re-encoded parses");
    assert_eq!(again, d);
});
