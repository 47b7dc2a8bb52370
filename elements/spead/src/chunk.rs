//! The `spead` packet handler: SPEAD heaps placed into chunks (spead2's chunk stream)
//! by the [`firehose_chunk`] engine, e.g. under `fhdepay handler=spead`.
//!
//! A message is a heap: HEAP_CNT identifies it, PAYLOAD_OFFSET places each packet's
//! payload in it and HEAP_LENGTH says when it is complete. On the first packet seen of a
//! heap the handler reads the placing value `v` (HEAP_CNT, or the immediate item chosen
//! with `place-item`, e.g. a timestamp) and computes `n = (v − place-offset) /
//! place-step`; the heap
//! goes to chunk `n / N`, slot `n mod N`, where `N` is the engine's slots per chunk.
//!
//! Heaps that carry no data for a chunk are dropped (`drops-handler`): heaps with
//! STREAM_CTRL (start, descriptor reissue or update) or DESCRIPTOR items, heaps whose
//! first packet lacks the `place-item` item, and values before `place-offset` or off
//! the `place-step` grid. A stop heap (STREAM_CTRL = 2) ends the stream: every open chunk is
//! emitted and the host sends EOS. Packets that are not valid SPEAD are `malformed`.
//!
//! Configuration (a `gst::Structure` named `spead`; see `docs/handlers.md`):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `place-item` | `0x1` (HEAP_CNT) | immediate item whose value places the heap |
//! | `place-step` | 1 | value increment from one heap to the next |
//! | `place-offset` | 0 | value of slot 0 of chunk 0 |
//!
//! The keys are `speaddepay`'s property names. The old keys `step` and `offset` still
//! work, with a warning (once per process) that they are deprecated.
//!
//! Like spead2, placement by an item needs that item in the first packet that arrives of
//! each heap (spead2 sends a heap's items in its first packet). With placement by
//! HEAP_CNT, send descriptors in heaps of their own (`ig.get_heap(descriptors='all',
//! data='none')`): a heap mixing descriptors and data is dropped, since its payload is
//! not just the data.

use firehose_chunk::handler::{
    check_fields, config_u64, PacketFacts, PacketHandler, Placement, CONFIG_SLOTS_PER_CHUNK,
};

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use gst::glib;

use crate::wire::{ctrl, ids, Packet};

/// The handler's name in the registry.
pub const NAME: &str = "spead";

/// The `spead` handler's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeadChunkConfig {
    /// Immediate item whose value places a heap (HEAP_CNT by default).
    pub place_item: u64,
    /// Value increment from one heap to the next (`place-step`).
    pub step: u64,
    /// Value of slot 0 of chunk 0 (`place-offset`).
    pub offset: u64,
    /// The engine's slots per chunk.
    pub slots_per_chunk: u64,
    /// A stop heap ends the stream (`stop=true`, spead2's behaviour). Anyone who can
    /// send to the port can send one: `stop=false` drops stop heaps instead.
    pub stop: bool,
}

impl SpeadChunkConfig {
    /// Reads the settings from a handler configuration (the host has set
    /// `slots-per-chunk`).
    pub fn from_structure(s: &gst::StructureRef) -> Result<Self, String> {
        check_fields(
            s,
            &[
                "place-item",
                PLACE_STEP,
                PLACE_OFFSET,
                "stop",
                OLD_STEP,
                OLD_OFFSET,
            ],
        )?;
        let get = |k: &str, d: u64| config_u64(s, k).map(|v| v.unwrap_or(d));
        let step = renamed(s, PLACE_STEP, OLD_STEP, 1)?;
        if step == 0 {
            return Err(format!("spead: {PLACE_STEP} must be at least 1"));
        }
        Ok(Self {
            place_item: get("place-item", ids::HEAP_CNT)?,
            step,
            offset: renamed(s, PLACE_OFFSET, OLD_OFFSET, 0)?,
            slots_per_chunk: get(CONFIG_SLOTS_PER_CHUNK, 1)?.max(1),
            stop: match s.value("stop") {
                Err(_) => true,
                Ok(v) => v
                    .get::<bool>()
                    .map_err(|_| "spead: stop must be a boolean (stop=false)".to_string())?,
            },
        })
    }
}

/// The key of the value increment from one heap to the next.
pub const PLACE_STEP: &str = "place-step";
/// The key of the value of slot 0 of chunk 0.
pub const PLACE_OFFSET: &str = "place-offset";
/// `place-step`'s old key (deprecated).
const OLD_STEP: &str = "step";
/// `place-offset`'s old key (deprecated).
const OLD_OFFSET: &str = "offset";

/// The value of key `new`, or of its deprecated old name `old` (warned about once per
/// process), or `default`; both at once is an error, since they could disagree.
fn renamed(s: &gst::StructureRef, new: &str, old: &str, default: u64) -> Result<u64, String> {
    match (config_u64(s, new)?, config_u64(s, old)?) {
        (Some(_), Some(_)) => Err(format!(
            "spead: give {new} only ({old} is its deprecated name)"
        )),
        (Some(v), None) => Ok(v),
        (None, Some(v)) => {
            warn_old_key(old, new);
            Ok(v)
        }
        (None, None) => Ok(default),
    }
}

/// Warns once per process and old key that `old` is deprecated: a `g_warning`, so a
/// gst-launch or Python user sees it, as for a deprecated property.
fn warn_old_key(old: &str, new: &str) {
    static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = WARNED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(old.to_string());
    if first {
        glib::g_warning!(
            "firehose",
            "handler-config spead: key '{}' is deprecated and will be removed; use '{}'",
            old,
            new
        );
    }
}

/// The `spead` handler.
#[derive(Debug)]
pub struct SpeadChunkHandler {
    cfg: SpeadChunkConfig,
}

impl SpeadChunkHandler {
    /// A handler with these settings.
    pub fn new(cfg: SpeadChunkConfig) -> Self {
        Self { cfg }
    }
}

impl PacketHandler for SpeadChunkHandler {
    fn copies_payload_unchanged(&self) -> bool {
        true
    }

    fn parse(&mut self, packet: &[u8]) -> Option<PacketFacts> {
        let p = Packet::parse(packet).ok()?;
        // Packet::parse checks the payload ends the packet exactly.
        facts(&p, packet.len() - p.payload.len(), packet.len())
    }

    fn parses_header_alone(&self) -> bool {
        // Everything a packet is placed by (HEAP_CNT, PAYLOAD_OFFSET, HEAP_LENGTH, the
        // place-item immediate, STREAM_CTRL, DESCRIPTOR pointers) is in its header.
        true
    }

    fn parse_header(&mut self, header: &[u8], packet_len: usize) -> Option<PacketFacts> {
        let (p, payload_start) = Packet::parse_head(header, packet_len).ok()?;
        // The payload must start right after `header`, where the host put it apart.
        (payload_start == header.len()).then_some(())?;
        facts(&p, payload_start, packet_len)
    }

    fn predict_placement(&self, message_id: u64) -> Option<Placement> {
        // Only placement by HEAP_CNT follows from the id; an item's value is in the packet.
        (self.cfg.place_item == ids::HEAP_CNT).then(|| self.place(message_id))
    }

    fn header(&mut self, packet: &[u8], facts: &PacketFacts) -> Placement {
        // Parsed again (it validated in `parse` or `parse_header`): only a heap's first
        // packet pays for it. `packet` may be the header alone, so only that is read.
        let Ok((p, _)) = Packet::parse_head(packet, facts.payload.end) else {
            return Placement::Drop;
        };
        match p.stream_ctrl {
            Some(ctrl::STOP) if self.cfg.stop => return Placement::End,
            // Not trusted: reported nowhere, held against no heap.
            Some(ctrl::STOP) => return Placement::Ignore,
            Some(_) => return Placement::Drop,
            None => {}
        }
        let f = p.flavour;
        if p.items().any(|ip| ip.id(f) == ids::DESCRIPTOR) {
            return Placement::Drop;
        }
        let value = if self.cfg.place_item == ids::HEAP_CNT {
            Some(p.heap_cnt)
        } else {
            p.immediate(self.cfg.place_item)
        };
        match value {
            Some(v) => self.place(v),
            None => Placement::Drop,
        }
    }
}

impl SpeadChunkHandler {
    /// Where a heap whose placing value is `value` goes.
    fn place(&self, value: u64) -> Placement {
        let c = &self.cfg;
        let Some(delta) = value.checked_sub(c.offset) else {
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

/// The engine's facts of a validated packet whose payload is `start..end` of it.
fn facts(p: &Packet<'_>, start: usize, end: usize) -> Option<PacketFacts> {
    Some(PacketFacts {
        message_id: p.heap_cnt,
        payload: start..end,
        message_offset: usize::try_from(p.payload_offset).ok()?,
        message_len: match p.heap_length {
            Some(l) => Some(usize::try_from(l).ok()?),
            None => None,
        },
    })
}

/// The registry factory for `spead`.
pub fn factory(config: &gst::StructureRef) -> Result<Box<dyn PacketHandler>, String> {
    Ok(Box::new(SpeadChunkHandler::new(
        SpeadChunkConfig::from_structure(config)?,
    )))
}

#[cfg(test)]
mod tests {
    use firehose_chunk::{ChunkAssembler, ChunkConfig, Flow};
    use firehose_core::HugepagePolicy;
    use firehose_core::SlotPool;

    use super::*;
    use crate::wire::{encode, packet_len, Flavour, ItemPointer};

    const F: Flavour = Flavour::SPEAD_64_48;
    const TS: u64 = 0x1600;

    fn handler(cfg: &str) -> SpeadChunkHandler {
        gst::init().unwrap();
        let s: gst::Structure = cfg.parse().unwrap();
        SpeadChunkHandler::new(SpeadChunkConfig::from_structure(&s).unwrap())
    }

    /// A packet of heap `cnt` (HEAP_LENGTH `len`) carrying `payload` at `off`, plus
    /// `extra` items.
    fn packet(cnt: u64, len: u64, off: u64, payload: &[u8], extra: &[ItemPointer]) -> Vec<u8> {
        let mut items = vec![
            ItemPointer::immediate(F, ids::HEAP_CNT, cnt),
            ItemPointer::immediate(F, ids::HEAP_LENGTH, len),
            ItemPointer::immediate(F, ids::PAYLOAD_OFFSET, off),
            ItemPointer::immediate(F, ids::PAYLOAD_LENGTH, payload.len() as u64),
        ];
        items.extend_from_slice(extra);
        let mut out = vec![0u8; packet_len(items.len(), payload.len())];
        encode(F, &items, payload, &mut out).unwrap();
        out
    }

    fn place(h: &mut SpeadChunkHandler, p: &[u8]) -> Placement {
        let f = h.parse(p).unwrap();
        h.header(p, &f)
    }

    fn at(chunk_id: u64, index: usize) -> Placement {
        Placement::Place { chunk_id, index }
    }

    #[test]
    fn facts_come_from_the_heap_items() {
        let mut h = handler("spead,slots-per-chunk=4");
        let p = packet(7, 24, 8, b"abcdefgh", &[]);
        let f = h.parse(&p).unwrap();
        assert_eq!(f.message_id, 7);
        assert_eq!((f.message_offset, f.message_len), (8, Some(24)));
        assert_eq!(&p[f.payload.clone()], b"abcdefgh");
        assert!(h.parse(&p[..p.len() - 1]).is_none(), "length mismatch");
        assert!(h.parse(b"not spead at all").is_none());
    }

    #[test]
    fn placement_by_heap_cnt_with_offset_and_step() {
        let mut h = handler("spead,place-offset=1,place-step=2,slots-per-chunk=4");
        assert_eq!(place(&mut h, &packet(1, 8, 0, b"x", &[])), at(0, 0));
        assert_eq!(place(&mut h, &packet(11, 8, 0, b"x", &[])), at(1, 1));
        assert_eq!(place(&mut h, &packet(12, 8, 0, b"x", &[])), Placement::Drop);
        assert_eq!(place(&mut h, &packet(0, 8, 0, b"x", &[])), Placement::Drop);
    }

    #[test]
    fn placement_by_a_timestamp_item() {
        let mut h =
            handler("spead,place-item=0x1600,place-step=2048,place-offset=4096,slots-per-chunk=4");
        let ts = |t| [ItemPointer::immediate(F, TS, t)];
        assert_eq!(
            place(&mut h, &packet(99, 8, 0, b"x", &ts(4096 + 2048 * 5))),
            at(1, 1)
        );
        // A later packet of a heap carries no item pointers of its own.
        assert_eq!(
            place(&mut h, &packet(100, 8, 4, b"x", &[])),
            Placement::Drop
        );
        assert_eq!(
            place(&mut h, &packet(101, 8, 0, b"x", &ts(100))),
            Placement::Drop
        );
    }

    #[test]
    fn control_and_descriptor_heaps_are_not_placed() {
        let mut h = handler("spead,slots-per-chunk=4");
        let ctrl_heap = |v| {
            packet(
                3,
                1,
                0,
                &[0],
                &[ItemPointer::immediate(F, ids::STREAM_CTRL, v)],
            )
        };
        assert_eq!(place(&mut h, &ctrl_heap(ctrl::STOP)), Placement::End);
        assert_eq!(place(&mut h, &ctrl_heap(ctrl::START)), Placement::Drop);
        let desc = packet(
            4,
            8,
            0,
            b"descript",
            &[ItemPointer::addressed(F, ids::DESCRIPTOR, 0)],
        );
        assert_eq!(place(&mut h, &desc), Placement::Drop);
    }

    #[test]
    fn a_header_alone_gives_the_same_facts_and_placement() {
        let mut h = handler("spead,place-offset=1,slots-per-chunk=4");
        assert!(h.parses_header_alone() && h.copies_payload_unchanged());
        let ts = [ItemPointer::immediate(F, TS, 9)];
        let p = packet(6, 48, 16, b"0123456789abcdef", &ts);
        let whole = h.parse(&p).unwrap();
        let head = &p[..whole.payload.start];
        assert_eq!(h.parse_header(head, p.len()), Some(whole.clone()));
        assert_eq!(h.header(head, &whole), h.header(&p, &whole));
        assert_eq!(h.header(head, &whole), at(1, 1));
        // A header guessed one item short or long, or the wrong packet length: None, so
        // the host gathers the packet and `parse` decides.
        assert_eq!(h.parse_header(&p[..head.len() - 8], p.len()), None);
        assert_eq!(h.parse_header(&p[..head.len() + 8], p.len()), None);
        assert_eq!(h.parse_header(head, p.len() + 1), None);
        assert_eq!(h.parse_header(b"not spead", 100), None);
    }

    #[test]
    fn placement_is_predicted_from_heap_cnt_only() {
        let h = handler("spead,place-offset=1,place-step=2,slots-per-chunk=4");
        assert_eq!(h.predict_placement(1 + 2 * 5), Some(at(1, 1)));
        assert_eq!(
            h.predict_placement(2),
            Some(Placement::Drop),
            "off the step grid"
        );
        let h = handler("spead,place-item=0x1600,slots-per-chunk=4");
        assert_eq!(
            h.predict_placement(7),
            None,
            "an item's value is in the packet"
        );
    }

    #[test]
    fn the_old_keys_still_place() {
        let old = handler("spead,offset=1,step=2,slots-per-chunk=4");
        let new = handler("spead,place-offset=1,place-step=2,slots-per-chunk=4");
        assert_eq!(old.cfg, new.cfg);
        assert_eq!((old.cfg.step, old.cfg.offset), (2, 1));
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        gst::init().unwrap();
        for (cfg, want) in [
            ("spead,place-step=0", "place-step must be at least 1"),
            ("spead,step=0", "place-step must be at least 1"),
            ("spead,place_item=5", "unknown field 'place_item'"),
            ("spead,place-offset=-3", "place-offset must be"),
            ("spead,place-step=2,step=2", "give place-step only"),
        ] {
            let s: gst::Structure = cfg.parse().unwrap();
            let err = factory(&s).err().unwrap();
            assert!(err.contains(want), "{cfg}: {err}");
        }
    }

    #[test]
    fn heaps_of_several_packets_fill_a_chunk_until_the_stop_heap() {
        gst::init().unwrap();
        let cfg = ChunkConfig {
            slots_per_chunk: 4,
            slot_size: 24,
            max_chunks: 2,
            ..Default::default()
        };
        let pool = SlotPool::new(&cfg.pool_config(4, HugepagePolicy::Off)).unwrap();
        let s: gst::Structure = "spead,slots-per-chunk=4".parse().unwrap();
        let mut e = ChunkAssembler::new(cfg, factory(&s).unwrap(), pool).unwrap();
        let mut out = Vec::new();
        // Heaps 0..6 of three 8-byte packets, each byte = heap cnt; heap 2 loses its
        // middle packet; a descriptor heap and a junk packet on the way.
        for cnt in 0u64..6 {
            for k in 0..3u64 {
                if (cnt, k) != (2, 1) {
                    let p = packet(cnt, 24, 8 * k, &[cnt as u8; 8], &[]);
                    assert_eq!(e.push(&p, &mut out), Flow::Continue);
                }
            }
        }
        let desc = packet(
            50,
            8,
            0,
            b"descript",
            &[ItemPointer::addressed(F, ids::DESCRIPTOR, 0)],
        );
        e.push(&desc, &mut out);
        e.push(b"junk", &mut out);
        let stop = packet(
            60,
            1,
            0,
            &[0],
            &[ItemPointer::immediate(F, ids::STREAM_CTRL, ctrl::STOP)],
        );
        assert_eq!(e.push(&stop, &mut out), Flow::End);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.info.chunk_id, c.info.missing().collect::<Vec<_>>()))
            .collect();
        assert_eq!(got, [(0, vec![2]), (1, vec![2, 3])]);
        let slot = &out[1].slot.as_ref()[out[1].info.slot_range(1)];
        assert_eq!(slot, &[5u8; 24]);
        let st = e.stats();
        assert_eq!((st.heaps, st.heaps_incomplete), (5, 1));
        // Dropped by the handler: the descriptor heap and the stop heap.
        assert_eq!((st.drops_handler, st.malformed, st.packets), (2, 1, 17));
    }
}
