//! The `seq` packet handler: fixed-format custom packets (FPGA streams) numbered by a
//! sequence counter.
//!
//! Every packet is one message: its counter, read at a fixed byte offset with a fixed
//! width and byte order, places it at `index = n mod N` of chunk `n / N`, where
//! `n = (counter − start) / step` and `N` is the engine's slots per chunk. The payload is
//! the packet from `payload-offset` on (to the end, or `payload-size` bytes), written at
//! the start of its slot. A lost packet is a clear bit in the chunk's presence bitmap.
//!
//! Counters narrower than 8 bytes wrap; the handler extends them to 64 bits by taking
//! the value nearest to the last one seen (half the counter's range either way), so chunk
//! numbers keep increasing across wraps and a reordered packet is not mistaken for a
//! wrap. A packet from before the first one seen, when that crosses zero, or before
//! `start`, is dropped (`drops-handler`).
//!
//! Configuration (a `gst::Structure` named `seq`; see `docs/handlers.md`):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `offset` | 0 | byte offset of the counter |
//! | `width` | 4 | counter bytes, 1–8 |
//! | `endianness` | `big` | `big` or `little` |
//! | `payload-offset` | `offset + width` | byte offset of the payload |
//! | `payload-size` | 0 | payload bytes (0: to the end of the packet); longer packets are accepted, their tail ignored |
//! | `start` | 0 | counter value of slot 0 of chunk 0 |
//! | `step` | 1 | counter increment per packet; counters off the step grid are dropped |

use firehose_chunk::handler::{
    check_fields, config_u64, PacketFacts, PacketHandler, Placement, CONFIG_SLOTS_PER_CHUNK,
    CONFIG_SLOT_SIZE,
};

/// The handler's name in the registry.
pub const NAME: &str = "seq";

/// The `seq` handler's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqConfig {
    /// Byte offset of the counter.
    pub offset: usize,
    /// Counter bytes, 1–8.
    pub width: usize,
    /// Counter byte order.
    pub big_endian: bool,
    /// Byte offset of the payload.
    pub payload_offset: usize,
    /// Payload bytes (`None`: to the end of the packet).
    pub payload_size: Option<usize>,
    /// Counter value of slot 0 of chunk 0.
    pub start: u64,
    /// Counter increment per packet.
    pub step: u64,
    /// The engine's slots per chunk.
    pub slots_per_chunk: u64,
}

const FIELDS: &[&str] = &[
    "offset",
    "width",
    "endianness",
    "payload-offset",
    "payload-size",
    "start",
    "step",
];

impl SeqConfig {
    /// Reads the settings from a handler configuration (the host has set
    /// `slots-per-chunk` and `slot-size`).
    pub fn from_structure(s: &gst::StructureRef) -> Result<Self, String> {
        check_fields(s, FIELDS)?;
        let get = |k: &str, d: u64| config_u64(s, k).map(|v| v.unwrap_or(d));
        let to_usize = |v: u64| usize::try_from(v).map_err(|_| format!("seq: {v} is too large"));
        let offset = to_usize(get("offset", 0)?)?;
        let width = to_usize(get("width", 4)?)?;
        if !(1..=8).contains(&width) {
            return Err(format!("seq: width must be 1 to 8 bytes, not {width}"));
        }
        let big_endian = match s.get::<String>("endianness").ok().as_deref() {
            None | Some("big") => true,
            Some("little") => false,
            Some(other) => {
                return Err(format!(
                    "seq: endianness must be big or little, not '{other}'"
                ))
            }
        };
        let payload_offset = to_usize(get("payload-offset", (offset + width) as u64)?)?;
        let payload_size = match get("payload-size", 0)? {
            0 => None,
            n => Some(to_usize(n)?),
        };
        let step = get("step", 1)?;
        if step == 0 {
            return Err("seq: step must be at least 1".into());
        }
        let slots_per_chunk = get(CONFIG_SLOTS_PER_CHUNK, 1)?.max(1);
        if let (Some(p), Some(slot)) = (payload_size, config_u64(s, CONFIG_SLOT_SIZE)?) {
            if p as u64 > slot {
                return Err(format!(
                    "seq: payload-size {p} does not fit a slot of {slot} bytes (raise heap-size)"
                ));
            }
        }
        Ok(Self {
            offset,
            width,
            big_endian,
            payload_offset,
            payload_size,
            start: get("start", 0)?,
            step,
            slots_per_chunk,
        })
    }
}

/// The `seq` handler.
#[derive(Debug)]
pub struct SeqHandler {
    cfg: SeqConfig,
    /// Bits of the counter.
    bits: u32,
    /// The extended counter of the newest packet so far.
    last: Option<u64>,
}

impl SeqHandler {
    /// A handler with these settings.
    pub fn new(cfg: SeqConfig) -> Self {
        Self {
            bits: cfg.width as u32 * 8,
            cfg,
            last: None,
        }
    }

    /// Extends a raw counter to 64 bits. Narrow counters live one full range above zero
    /// internally, so a packet from just before the first one seen does not underflow.
    fn extend(&mut self, raw: u64) -> u64 {
        if self.bits == 64 {
            return raw;
        }
        let range = 1u64 << self.bits;
        let Some(last) = self.last else {
            self.last = Some(raw + range);
            return raw + range;
        };
        let ahead = raw.wrapping_sub(last) & (range - 1);
        let value = if ahead < range / 2 {
            last + ahead
        } else {
            last.saturating_sub(range - ahead)
        };
        self.last = Some(last.max(value));
        value
    }

    /// The counter as the handler saw it, back in the counter's own terms (`None`: from
    /// before the first counter seen, across zero).
    fn counter(&self, extended: u64) -> Option<u64> {
        if self.bits == 64 {
            Some(extended)
        } else {
            extended.checked_sub(1u64 << self.bits)
        }
    }
}

impl PacketHandler for SeqHandler {
    fn copies_payload_unchanged(&self) -> bool {
        true
    }

    fn parse(&mut self, packet: &[u8]) -> Option<PacketFacts> {
        let c = &self.cfg;
        let bytes = packet.get(c.offset..c.offset.checked_add(c.width)?)?;
        let raw = if c.big_endian {
            bytes.iter().fold(0u64, |v, &b| v << 8 | u64::from(b))
        } else {
            bytes.iter().rev().fold(0u64, |v, &b| v << 8 | u64::from(b))
        };
        let end = match c.payload_size {
            Some(n) => c.payload_offset.checked_add(n)?,
            None => packet.len(),
        };
        if c.payload_offset > end || end > packet.len() {
            return None;
        }
        let start = c.payload_offset;
        Some(PacketFacts {
            message_id: self.extend(raw),
            payload: start..end,
            message_offset: 0,
            message_len: Some(end - start),
        })
    }

    fn header(&mut self, _packet: &[u8], facts: &PacketFacts) -> Placement {
        let c = &self.cfg;
        let Some(delta) = self
            .counter(facts.message_id)
            .and_then(|v| v.checked_sub(c.start))
        else {
            return Placement::Drop;
        };
        if !delta.is_multiple_of(c.step) {
            return Placement::Drop;
        }
        let n = delta / c.step;
        Placement::Place {
            chunk_id: n / c.slots_per_chunk,
            index: (n % c.slots_per_chunk) as usize,
        }
    }
}

/// The registry factory for `seq`.
pub fn factory(config: &gst::StructureRef) -> Result<Box<dyn PacketHandler>, String> {
    Ok(Box::new(SeqHandler::new(SeqConfig::from_structure(
        config,
    )?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(cfg: &str) -> SeqHandler {
        gst::init().unwrap();
        let s: gst::Structure = cfg.parse().unwrap();
        SeqHandler::new(SeqConfig::from_structure(&s).unwrap())
    }

    fn place(h: &mut SeqHandler, p: &[u8]) -> Option<(PacketFacts, Placement)> {
        let f = h.parse(p)?;
        let pl = h.header(p, &f);
        Some((f, pl))
    }

    fn at(chunk_id: u64, index: usize) -> Placement {
        Placement::Place { chunk_id, index }
    }

    #[test]
    fn big_endian_counter_and_rest_of_packet_payload() {
        let mut h = handler("seq,offset=2,width=4,slots-per-chunk=8");
        let p = [0xAA, 0xBB, 0, 0, 0, 19, 1, 2, 3];
        let (f, pl) = place(&mut h, &p).unwrap();
        assert_eq!(pl, at(2, 3));
        assert_eq!((f.payload, f.message_len), (6..9, Some(3)));
    }

    #[test]
    fn little_endian_fixed_payload_start_and_step() {
        let mut h = handler(
            "seq,width=2,endianness=little,payload-offset=4,payload-size=2,start=100,step=10,slots-per-chunk=4",
        );
        // Counter 0x0096 = 150 → n = 5 → chunk 1, index 1; trailing bytes ignored.
        let (f, pl) = place(&mut h, &[0x96, 0x00, 9, 9, 7, 7, 0xEE]).unwrap();
        assert_eq!((pl, f.payload), (at(1, 1), 4..6));
        // Off the step grid, and before start: dropped.
        assert_eq!(
            place(&mut h, &[0x97, 0, 0, 0, 1, 1]).unwrap().1,
            Placement::Drop
        );
        assert_eq!(
            place(&mut h, &[0x5A, 0, 0, 0, 1, 1]).unwrap().1,
            Placement::Drop
        );
        // Too short for the payload.
        assert!(h.parse(&[0x96, 0, 0, 0, 7]).is_none());
        assert!(h.parse(&[0x96]).is_none());
    }

    #[test]
    fn eight_byte_counters_are_taken_as_they_are() {
        let mut h = handler("seq,width=8,slots-per-chunk=1000");
        let p = 123_456_789u64.to_be_bytes();
        assert_eq!(place(&mut h, &p).unwrap().1, at(123_456, 789));
    }

    #[test]
    fn narrow_counters_are_extended_across_wraps() {
        let mut h = handler("seq,width=1,slots-per-chunk=16");
        let mut got = Vec::new();
        // 250..=255, then 0..4 after the wrap, with a reordered 254 after the wrap.
        for raw in [250u8, 251, 252, 253, 255, 0, 254, 1, 2, 3] {
            match place(&mut h, &[raw]).unwrap().1 {
                Placement::Place { chunk_id, index } => got.push(chunk_id * 16 + index as u64),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, [250, 251, 252, 253, 255, 256, 254, 257, 258, 259]);
    }

    #[test]
    fn a_packet_from_before_the_first_across_zero_is_dropped() {
        let mut h = handler("seq,width=2,slots-per-chunk=4");
        assert_eq!(place(&mut h, &[0, 1]).unwrap().1, at(0, 1));
        assert_eq!(place(&mut h, &[0xFF, 0xFF]).unwrap().1, Placement::Drop);
        assert_eq!(place(&mut h, &[0, 0]).unwrap().1, at(0, 0));
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        gst::init().unwrap();
        for (cfg, want) in [
            ("seq,width=9", "width"),
            ("seq,width=0", "width"),
            ("seq,endianness=middle", "endianness"),
            ("seq,step=0", "step"),
            ("seq,wdith=4", "unknown field 'wdith'"),
            ("seq,payload-size=100,slot-size=64", "raise heap-size"),
            ("seq,offset=-1", "offset must be"),
        ] {
            let s: gst::Structure = cfg.parse().unwrap();
            let err = factory(&s).err().unwrap();
            assert!(err.contains(want), "{cfg}: {err}");
        }
    }
}
