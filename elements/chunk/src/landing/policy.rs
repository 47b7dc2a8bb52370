//! When landing pays, and the `landing` property that chooses it.

use gst::glib;

/// Receiving straight into chunks ([`super::LandingEngine::plan`]) is on by default only for
/// chunks of at most this size: ones that stay in this core's share of the caches (the
/// development VM's L2 is 2 MiB) between uses of their memory. Into larger chunks the
/// kernel's copy, which cannot use streaming stores, reads every destination line from
/// memory first, and costs as much as or more than a copy into a cached batch plus the
/// engine's copy into the chunk: at 10 Gb/s of 8972-byte packets, 8 MiB chunks 0.20–0.26
/// against 0.17–0.22 s/GB, 4 MiB chunks 0.14–0.26 against 0.17–0.21 (mostly worse), 1
/// and 2 MiB chunks 0.13–0.19 against 0.15–0.21 (cheaper in every run but one, level).
/// Figures in docs/benchmarks.md.
pub const LANDING_MAX_CHUNK_BYTES: usize = 2 << 20;

/// Streams whose packets carry less payload than this are not received into place:
/// each landed datagram costs the kernel two scatter entries (header, payload), each a
/// copy of its own, and for small datagrams that costs more than the copy it saves. With
/// 1472-byte SPEAD packets (1432-byte payloads) landing cost 0.36–0.41 s/GB against
/// 0.31–0.36 copied; with 8972-byte ones (8928) it cost 10–25 % less (docs/benchmarks.md).
pub const LANDING_MIN_PAYLOAD_BYTES: usize = 4096;

firehose_core::property_enum! {
    /// `landing=auto|on|off`: whether payloads are received straight into chunks or heaps
    /// (`fhudpchunksrc`, `fhspeadsrc`).
    pub enum Mode = "GstFhLanding" {
        /// Into chunks or heaps of at most 2 MiB, which stay in the CPU caches between uses
        /// of their memory ([`LANDING_MAX_CHUNK_BYTES`]); larger ones are copied into.
        #[default]
        Auto = 0, "auto", "Auto: land payloads in chunks or heaps of at most 2 MiB, copy into larger ones";
        /// Whatever their size.
        On = 1, "on", "On: land payloads straight in the chunks or heaps";
        /// Never: every payload is copied once, from a receive batch.
        Off = 2, "off", "Off: copy every payload once, from a receive batch";
    }
}

impl Mode {
    /// The largest chunk or heap payloads land in, or `None` for never.
    pub fn max_bytes(self) -> Option<usize> {
        match self {
            Mode::Auto => Some(LANDING_MAX_CHUNK_BYTES),
            Mode::On => Some(usize::MAX),
            Mode::Off => None,
        }
    }
}
