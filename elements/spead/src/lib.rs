//! SPEAD for Firehose.
//!
//! The engine (no GStreamer types): [`wire`] decodes and encodes SPEAD-64-* packets
//! without allocating. Reassembly, descriptors, chunk placement and the elements build
//! on it.

pub mod wire;
