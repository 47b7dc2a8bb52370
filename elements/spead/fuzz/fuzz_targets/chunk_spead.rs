//! The chunk engine with the `spead` handler on arbitrary packets: nothing may panic,
//! every chunk's presence and byte counts must hold together, every packet is counted.
//! Input: see `chunk_common.rs`; configuration bytes 2 and 3 set the handler's `offset`
//! and `step`.

#![no_main]

use firehose_spead::chunk::{SpeadChunkConfig, SpeadChunkHandler};
use libfuzzer_sys::fuzz_target;

#[path = "chunk_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let spc = 1 + usize::from(data[2] % 4);
    let h = SpeadChunkHandler::new(SpeadChunkConfig {
        place_item: firehose_spead::wire::ids::HEAP_CNT,
        step: 1 + u64::from(data[3] % 3),
        offset: u64::from(data[2] >> 4),
        slots_per_chunk: spc as u64,
        stop: true,
    });
    let e = common::engine(data, Box::new(h), spc, 256);
    common::run(e, &data[4..]);
});
