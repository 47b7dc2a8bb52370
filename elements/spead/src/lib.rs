//! SPEAD for Firehose.
//!
//! The engine (no GStreamer types except the metas):
//! - [`wire`]: decode and encode SPEAD-64-* packets without allocating;
//! - [`coalesced`]: datagrams holding several packets back to back (GSO captures) cut
//!   into their packets;
//! - [`descriptor`]: item descriptors, byte-identical to spead2's;
//! - [`reassembly`]: heaps from packets (windows per substream, out-of-order, bounds,
//!   incomplete-heap policy), payloads in pooled memory;
//! - [`send`]: heaps into packets, as spead2's sender cuts them;
//! - [`chunk`]: the `spead` packet handler, placing heaps into chunks;
//! - [`heap`]: what a reassembled heap carries downstream;
//! - [`hostile`]: bad packets on purpose, for the hostile-traffic suite.
//!
//! Elements: `speaddepay` ([`depay`]: heaps, or chunks with `mode=chunks`),
//! `fhspeadsrc` ([`speadsrc`]: a UDP socket and the reassembler in one element, payloads
//! received straight into heaps) and `speadpay` ([`pay`]).

use gst::glib;

pub mod chunk;
pub mod coalesced;
pub mod depay;
pub mod descriptor;
pub mod descset;
pub mod heap;
mod heapout;
pub mod hostile;
pub mod pay;
pub mod readable;
pub mod reassembly;
pub mod send;
pub mod speadsrc;
pub mod wire;

/// Registers the SPEAD elements, the `spead` packet handler and the `spead` datagram
/// splitter (`fhpcapsrc split=spead`).
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    firehose_chunk::handler::register_handler(chunk::NAME, chunk::factory);
    firehose_core::split::register(coalesced::SPLITTER_NAME, &coalesced::SPLITTER);
    pay::register(plugin)?;
    depay::register(plugin)?;
    speadsrc::register(plugin)?;
    Ok(())
}
