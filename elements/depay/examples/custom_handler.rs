//! Writing your own packet handler and running it in `fhdepay`.
//!
//! The format (an imaginary camera FPGA): every UDP packet carries one line of a frame.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | frame number, big-endian `u32` |
//! | 4..6 | line number, big-endian `u16` |
//! | 6.. | the line: `line-bytes` bytes of big-endian 16-bit samples |
//!
//! A message is a frame (`lines` packets); a chunk holds `heaps-per-chunk` frames. The
//! handler converts the samples to little-endian while it copies them into the chunk, so
//! the consumer gets ready-to-use memory with no second pass.
//!
//! In a real pipeline the handler is registered once at start-up and used by name:
//! `fhudpsrc port=5000 ! fhdepay handler-config="frames,lines=1080,line-bytes=3840"
//! heaps-per-chunk=8 heap-size=4147200 ! …`. Here a test harness feeds hand-made packets
//! and prints what comes out; run it with `cargo run --example custom_handler -p
//! firehose-depay`.

use firehose_chunk::handler::{
    check_fields, config_u64, register_handler, PacketFacts, PacketHandler, Placement,
    CONFIG_SLOTS_PER_CHUNK,
};
use firehose_core::meta::chunk::ChunkMeta;
use firehose_core::stats::{self, names};
use gst::prelude::*;
use gst_check::Harness;

/// The handler: its configuration, read once, and nothing else. No allocation, no
/// system call: it runs for every packet on the receive path.
struct Frames {
    lines: usize,
    line_bytes: usize,
    frames_per_chunk: u64,
}

/// Builds the handler from `frames,lines=…,line-bytes=…` (plus the engine's
/// `slots-per-chunk`, which the host adds). Errors reach the user as an element error.
fn frames_factory(config: &gst::StructureRef) -> Result<Box<dyn PacketHandler>, String> {
    check_fields(config, &["lines", "line-bytes"])?;
    let get = |key: &str| -> Result<u64, String> {
        config_u64(config, key)?.ok_or_else(|| format!("frames: {key} is required"))
    };
    let (lines, line_bytes) = (get("lines")? as usize, get("line-bytes")? as usize);
    if !line_bytes.is_multiple_of(2) {
        return Err("frames: line-bytes must be even (16-bit samples)".into());
    }
    Ok(Box::new(Frames {
        lines,
        line_bytes,
        frames_per_chunk: get(CONFIG_SLOTS_PER_CHUNK)?,
    }))
}

impl PacketHandler for Frames {
    /// Which frame, where the line goes in it, and how long a frame is.
    fn parse(&mut self, p: &[u8]) -> Option<PacketFacts> {
        let frame = u32::from_be_bytes(p.get(0..4)?.try_into().ok()?);
        let line = usize::from(u16::from_be_bytes(p.get(4..6)?.try_into().ok()?));
        if line >= self.lines || p.len() != 6 + self.line_bytes {
            return None; // counted as malformed
        }
        Some(PacketFacts {
            message_id: frame.into(),
            payload: 6..p.len(),
            message_offset: line * self.line_bytes,
            message_len: Some(self.lines * self.line_bytes),
        })
    }

    /// On a frame's first packet: its chunk and slot.
    fn header(&mut self, _p: &[u8], facts: &PacketFacts) -> Placement {
        Placement::Place {
            chunk_id: facts.message_id / self.frames_per_chunk,
            index: (facts.message_id % self.frames_per_chunk) as usize,
        }
    }

    /// Copies one line into the chunk, big-endian samples to little-endian.
    fn payload(&mut self, p: &[u8], facts: &PacketFacts, dest: &mut [u8]) {
        for (d, s) in dest
            .chunks_exact_mut(2)
            .zip(p[facts.payload.clone()].chunks_exact(2))
        {
            d.copy_from_slice(&[s[1], s[0]]);
        }
    }
    // `completion` keeps its default: a frame is present when every line arrived.
}

const LINES: usize = 4;
const LINE_BYTES: usize = 8;

/// Line `line` of frame `frame`: samples `frame·256 + line·16 + k`, big-endian.
fn line_packet(frame: u32, line: u16) -> gst::Buffer {
    let mut p = frame.to_be_bytes().to_vec();
    p.extend(line.to_be_bytes());
    for k in 0..(LINE_BYTES / 2) as u16 {
        p.extend((frame as u16 * 256 + line * 16 + k).to_be_bytes());
    }
    gst::Buffer::from_mut_slice(p)
}

fn main() {
    gst::init().unwrap();
    firehose_depay::register_handlers();
    firehose_depay::depay::register(None).unwrap();
    // One line registers the format; fhdepay can now use it by name.
    register_handler("frames", frames_factory);

    let depay = gst::ElementFactory::make("fhdepay")
        .property("handler-config", "frames,lines=4,line-bytes=8")
        .property("heaps-per-chunk", 2u32)
        .property("heap-size", (LINES * LINE_BYTES) as u32)
        .property("packet-presence-size", LINE_BYTES as u32)
        .property_from_str("memory", "system")
        .build()
        .unwrap();
    let mut h = Harness::with_element(&depay, Some("sink"), Some("src"));
    h.play();
    h.set_src_caps_str("application/x-camera-lines");

    // Frames 0..4, line by line; line 2 of frame 1 is lost and frame 2 arrives
    // before frame 1 is finished (both are in the window).
    for frame in 0..4u32 {
        for line in 0..LINES as u16 {
            if (frame, line) != (1, 2) {
                h.push(line_packet(frame, line)).unwrap();
            }
        }
    }
    h.push_event(gst::event::Eos::new());

    let mut report = Vec::new();
    while let Some(buf) = h.try_pull() {
        let info = buf.meta::<ChunkMeta>().unwrap().info().clone();
        let map = buf.map_readable().unwrap();
        for slot in 0..info.slots {
            let frame = info.chunk_id * info.slots as u64 + slot as u64;
            let lost: Vec<usize> = (0..LINES)
                .filter(|&l| !info.is_packet_present(slot, l))
                .collect();
            let first = u16::from_le_bytes([
                map[info.slot_range(slot).start],
                map[info.slot_range(slot).start + 1],
            ]);
            let line = format!(
                "chunk {} frame {frame}: {}, first sample {first:#06x}{}",
                info.chunk_id,
                if info.is_present(slot) {
                    "complete"
                } else {
                    "incomplete"
                },
                if lost.is_empty() {
                    String::new()
                } else {
                    format!(", lines lost {lost:?}")
                },
            );
            println!("{line}");
            report.push(line);
        }
    }
    let s = depay.property::<gst::Structure>("stats");
    println!(
        "packets {} frames {} incomplete {} chunks {}",
        stats::field(&s, names::PACKETS),
        stats::field(&s, names::HEAPS),
        stats::field(&s, names::HEAPS_INCOMPLETE),
        stats::field(&s, names::CHUNKS)
    );
    // The run is its own check: exit non-zero if the output is not what the format
    // implies (frame 1 incomplete with line 2 lost; samples converted to little-endian).
    let expected = [
        "chunk 0 frame 0: complete, first sample 0x0000",
        "chunk 0 frame 1: incomplete, first sample 0x0100, lines lost [2]",
        "chunk 1 frame 2: complete, first sample 0x0200",
        "chunk 1 frame 3: complete, first sample 0x0300",
    ];
    assert_eq!(report, expected, "unexpected chunks");
    assert_eq!(stats::field(&s, names::PACKETS), 15);
}
