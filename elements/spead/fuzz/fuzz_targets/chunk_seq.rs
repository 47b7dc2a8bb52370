//! The chunk engine with the `seq` handler (fixed-format counters, wrap extension) on
//! arbitrary packets: nothing may panic, chunks hold together, every packet is counted.
//! Input: see `chunk_common.rs`; configuration bytes 2 and 3 set the counter's offset,
//! width, byte order, start and step.

#![no_main]

use firehose_depay::seq::{SeqConfig, SeqHandler};
use libfuzzer_sys::fuzz_target;

#[path = "chunk_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (a, b) = (data[2], data[3]);
    let offset = usize::from(a % 8);
    let width = 1 + usize::from((a >> 3) % 8);
    let spc = 4;
    let cfg = SeqConfig {
        offset,
        width,
        big_endian: a & 0x80 != 0,
        payload_offset: offset + width,
        payload_size: (b & 1 != 0).then_some(32),
        start: u64::from(b >> 4),
        step: 1 + u64::from((b >> 1) % 4),
        slots_per_chunk: spc as u64,
    };
    let e = common::engine(data, Box::new(SeqHandler::new(cfg)), spc, 64);
    common::run(e, &data[4..]);
});
