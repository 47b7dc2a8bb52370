//! Frame decoding (`firehose_core::frame::datagram`, what pcap replay and the
//! kernel-bypass sources use) on arbitrary frames of every link type: nothing may panic,
//! the payload found lies inside the frame where `payload_offset` says, and the UDP
//! filter (`accept`) agrees with it.
//! Input: a big-endian u16 link type, then the frame.

#![no_main]

use firehose_core::frame::{self, accept::accept, accept::UdpFilter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    // Mostly the link types the decoder knows, sometimes any.
    let raw = u16::from_be_bytes([data[0], data[1]]);
    let known = [1u16, 101, 108, 113, 228, 229, 276, 0];
    let linktype = if raw & 0x8000 != 0 {
        raw
    } else {
        known[usize::from(raw) % known.len()]
    };
    let f = &data[2..];
    let Ok(d) = frame::datagram(linktype, f) else {
        return;
    };
    let at = d.payload_offset(f).expect("the payload lies in the frame");
    assert_eq!(&f[at..at + d.payload.len()], d.payload);
    if linktype == frame::LINKTYPE_ETHERNET && !d.payload.is_empty() {
        let a = accept(f, &UdpFilter::port(d.dst.port(), None)).expect("accepted");
        assert_eq!(a.payload_offset, at);
        assert_eq!(a.len as usize, d.payload.len());
    }
});
