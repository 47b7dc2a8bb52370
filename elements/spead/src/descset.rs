//! The descriptors known on a stream, bounded and shared without copies.
//!
//! Every heap carries the descriptors known when it was finished, as spead2's
//! `ItemGroup` holds them. A sender (or anyone who can reach the port) decides how many
//! descriptors there are and how often they change, so the table must cost the same
//! whatever it is sent: a new or repeated descriptor costs one hash lookup, never a copy
//! of what is already held, and a heap takes the table in O(1).
//!
//! The table is an append-only log of fixed capacity (`max-descriptors`), shared by
//! `Arc`: a heap's [`DescriptorSet`] is the log and how many entries existed then. A
//! changed descriptor is appended as a new version and marks the old one superseded from
//! that position on, so older sets still read what they saw. When the log is full,
//! further new or changed descriptors are refused and counted; the ones already known
//! stay.
//!
//! From the wire ([`DescriptorTable::upsert_bytes`]) a descriptor is first looked up by
//! its id and a keyed hash of its bytes: a repeat of the bytes held costs that lookup
//! and no parse or copy, and once the log is full a descriptor of an id not held is
//! refused unparsed (counted as refused even if it would not have parsed).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, OnceLock};

use crate::descriptor::{self, Descriptor, DescriptorError};

/// The default capacity of the log: descriptors, counting each change as one more.
pub const DEFAULT_MAX_DESCRIPTORS: usize = 1024;

/// One version of a descriptor.
#[derive(Debug)]
struct Entry {
    desc: Descriptor,
    /// Where a later version of the same id was appended, once one was.
    superseded_at: OnceLock<usize>,
}

/// The shared log: entries are written once, in order, by the stream's engine.
struct Log {
    entries: Box<[OnceLock<Entry>]>,
}

/// The descriptors known at one moment of a stream (cheap to clone; see the module
/// documentation).
#[derive(Clone)]
pub struct DescriptorSet {
    log: Arc<Log>,
    /// Entries of the log that existed at that moment.
    entries: usize,
    /// Distinct ids among them.
    distinct: usize,
}

impl DescriptorSet {
    /// Distinct descriptors (ids).
    pub fn len(&self) -> usize {
        self.distinct
    }

    /// True when no descriptor was known.
    pub fn is_empty(&self) -> bool {
        self.distinct == 0
    }

    /// The latest version of each descriptor, in the order they last changed.
    pub fn iter(&self) -> impl Iterator<Item = &Descriptor> + '_ {
        let len = self.entries;
        self.log.entries[..len].iter().filter_map(move |e| {
            let e = e.get()?;
            match e.superseded_at.get() {
                Some(&at) if at < len => None,
                _ => Some(&e.desc),
            }
        })
    }

    /// The descriptor of item `id`, if known.
    pub fn get(&self, id: u64) -> Option<&Descriptor> {
        self.iter().find(|d| d.id == id)
    }

    /// The descriptors as owned values.
    pub fn to_vec(&self) -> Vec<Descriptor> {
        self.iter().cloned().collect()
    }

    /// True when both are the same moment of the same stream (no comparison of
    /// contents: what a consumer checks before re-encoding them).
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.log, &other.log) && self.entries == other.entries
    }
}

impl Default for DescriptorSet {
    fn default() -> Self {
        DescriptorTable::new(0).snapshot()
    }
}

impl PartialEq for DescriptorSet {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other) || self.iter().eq(other.iter())
    }
}

impl Eq for DescriptorSet {}

impl fmt::Debug for DescriptorSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// What [`DescriptorTable::upsert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    /// Known already, unchanged: nothing to do.
    Same,
    /// New, or a new version of a known id.
    Added,
    /// The log is full: refused (counted by the caller).
    Full,
}

/// The engine's side: the log it writes, and where each id's latest version is.
pub struct DescriptorTable {
    log: Arc<Log>,
    /// Each id's latest version, and the hash of the bytes it was last seen in.
    latest: HashMap<u64, (usize, Option<u64>)>,
    len: usize,
    /// Keyed per table, so a sender cannot make other bytes hash the same.
    hasher: RandomState,
}

impl DescriptorTable {
    /// An empty table that holds up to `capacity` versions.
    pub fn new(capacity: usize) -> Self {
        let entries = (0..capacity).map(|_| OnceLock::new()).collect();
        Self {
            log: Arc::new(Log { entries }),
            latest: HashMap::with_capacity(capacity.min(4096)),
            len: 0,
            hasher: RandomState::new(),
        }
    }

    /// Adds `d`, or a new version of its id if it differs from the one held.
    pub fn upsert(&mut self, d: Descriptor) -> Upsert {
        self.upsert_hashed(d, None)
    }

    /// Adds the descriptor a DESCRIPTOR item's `value` holds, as [`Self::upsert`]: the
    /// same bytes as the version held cost one hash lookup (no parse, no copy); with
    /// the log full, an id not held is refused without being parsed. An error when the
    /// value is parsed and is not a descriptor.
    pub fn upsert_bytes(&mut self, value: &[u8]) -> Result<Upsert, DescriptorError> {
        let id = descriptor::peek_id(value);
        if id.is_some_and(|id| !self.latest.contains_key(&id)) && self.len >= self.log.entries.len()
        {
            return Ok(Upsert::Full);
        }
        let hash = self.hasher.hash_one(value);
        if let Some(&(_, Some(h))) = id.and_then(|id| self.latest.get(&id)) {
            if h == hash {
                return Ok(Upsert::Same);
            }
        }
        Ok(self.upsert_hashed(descriptor::parse(value)?, Some(hash)))
    }

    fn upsert_hashed(&mut self, d: Descriptor, hash: Option<u64>) -> Upsert {
        let prev = self.latest.get(&d.id).map(|&(i, _)| i);
        if let Some(i) = prev {
            if self.entry(i).is_some_and(|e| e.desc == d) {
                // The same descriptor, perhaps in other bytes: these are the ones to
                // recognise next time.
                if hash.is_some() {
                    self.latest.insert(d.id, (i, hash));
                }
                return Upsert::Same;
            }
        }
        let Some(slot) = self.log.entries.get(self.len) else {
            return Upsert::Full;
        };
        let at = self.len;
        let id = d.id;
        // Written once: `len` only grows, and only this table writes the log.
        let _ = slot.set(Entry {
            desc: d,
            superseded_at: OnceLock::new(),
        });
        if let Some(i) = prev {
            if let Some(e) = self.entry(i) {
                let _ = e.superseded_at.set(at);
            }
        }
        self.latest.insert(id, (at, hash));
        self.len += 1;
        Upsert::Added
    }

    /// The descriptors known now (O(1)).
    pub fn snapshot(&self) -> DescriptorSet {
        DescriptorSet {
            log: self.log.clone(),
            entries: self.len,
            distinct: self.latest.len(),
        }
    }

    /// Distinct descriptors known.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// True when none is known.
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    fn entry(&self, i: usize) -> Option<&Entry> {
        self.log.entries.get(i).and_then(OnceLock::get)
    }
}

impl fmt::Debug for DescriptorTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DescriptorTable")
            .field("known", &self.latest.len())
            .field("versions", &self.len)
            .field("capacity", &self.log.entries.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: u64, name: &str) -> Descriptor {
        Descriptor {
            id,
            name: name.into(),
            description: String::new(),
            shape: vec![],
            format: vec![(b'u', 8)],
            dtype: None,
        }
    }

    fn names(s: &DescriptorSet) -> Vec<String> {
        s.iter().map(|d| d.name.clone()).collect()
    }

    #[test]
    fn a_set_keeps_what_it_saw_while_the_table_changes() {
        let mut t = DescriptorTable::new(8);
        assert_eq!(t.upsert(d(1, "a")), Upsert::Added);
        assert_eq!(t.upsert(d(2, "b")), Upsert::Added);
        let before = t.snapshot();
        assert_eq!(t.upsert(d(1, "a")), Upsert::Same, "a repeat costs nothing");
        assert!(t.snapshot().same_as(&before));
        assert_eq!(t.upsert(d(1, "a2")), Upsert::Added);
        let after = t.snapshot();
        assert_eq!(names(&before), ["a", "b"]);
        assert_eq!(names(&after), ["b", "a2"]);
        assert_eq!((before.len(), after.len()), (2, 2));
        assert_eq!(after.get(1).unwrap().name, "a2");
        assert_ne!(before, after);
    }

    #[test]
    fn a_full_table_refuses_new_and_changed_ones_and_keeps_the_rest() {
        let mut t = DescriptorTable::new(3);
        for i in 0..3 {
            assert_eq!(t.upsert(d(i, "x")), Upsert::Added);
        }
        assert_eq!(t.upsert(d(9, "y")), Upsert::Full);
        assert_eq!(t.upsert(d(0, "changed")), Upsert::Full);
        assert_eq!(t.upsert(d(0, "x")), Upsert::Same);
        let s = t.snapshot();
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|d| d.name == "x"));
    }

    #[test]
    fn a_flood_of_distinct_ids_costs_no_copy_of_what_is_held() {
        let mut t = DescriptorTable::new(DEFAULT_MAX_DESCRIPTORS);
        let first = {
            t.upsert(d(0, "first"));
            t.snapshot()
        };
        let mut full = 0;
        for i in 1..100_000u64 {
            if t.upsert(d(i, "junk")) == Upsert::Full {
                full += 1;
            }
        }
        assert_eq!(full, 100_000 - DEFAULT_MAX_DESCRIPTORS as u64);
        assert_eq!(t.len(), DEFAULT_MAX_DESCRIPTORS);
        // The first set still reads one descriptor: the log is shared, not copied.
        assert_eq!(names(&first), ["first"]);
        assert!(Arc::ptr_eq(&first.log, &t.snapshot().log));
    }

    #[test]
    fn from_the_wire_a_repeat_is_a_lookup_and_a_full_table_refuses_unparsed() {
        use crate::wire::Flavour;
        let f = Flavour::SPEAD_64_40;
        let mut t = DescriptorTable::new(2);
        let a = descriptor::encode(&d(1, "a"), f);
        assert_eq!(t.upsert_bytes(&a), Ok(Upsert::Added));
        assert_eq!(t.upsert_bytes(&a), Ok(Upsert::Same));
        // The same descriptor in other bytes (another flavour) is the same, and its
        // bytes are then the ones recognised.
        let a48 = descriptor::encode(&d(1, "a"), Flavour::SPEAD_64_48);
        assert_eq!(t.upsert_bytes(&a48), Ok(Upsert::Same));
        assert_eq!(t.upsert_bytes(&a48), Ok(Upsert::Same));
        assert!(
            t.upsert_bytes(b"no descriptor").is_err(),
            "parsed while there is room"
        );
        assert_eq!(
            t.upsert_bytes(&descriptor::encode(&d(2, "b"), f)),
            Ok(Upsert::Added)
        );
        // Full: a new id is refused before its value is parsed (this one would not
        // parse: its NAME points beyond the payload), a changed known one after.
        use crate::wire::{ids, ItemPointer};
        let items = [
            ItemPointer::immediate(f, ids::HEAP_CNT, 1),
            ItemPointer::immediate(f, ids::HEAP_LENGTH, 4),
            ItemPointer::immediate(f, ids::PAYLOAD_OFFSET, 0),
            ItemPointer::immediate(f, ids::PAYLOAD_LENGTH, 4),
            ItemPointer::immediate(f, ids::DESCRIPTOR_ID, 3),
            ItemPointer::addressed(f, ids::DESCRIPTOR_NAME, 100),
        ];
        let mut broken = vec![0; crate::wire::packet_len(items.len(), 4)];
        crate::wire::encode(f, &items, b"name", &mut broken).unwrap();
        assert_eq!(descriptor::peek_id(&broken), Some(3));
        assert!(descriptor::parse(&broken).is_err());
        assert_eq!(t.upsert_bytes(&broken), Ok(Upsert::Full));
        assert_eq!(
            t.upsert_bytes(&descriptor::encode(&d(1, "a2"), f)),
            Ok(Upsert::Full)
        );
        assert_eq!(t.upsert_bytes(&a), Ok(Upsert::Same));
        assert_eq!(names(&t.snapshot()), ["a", "b"]);
    }

    #[test]
    fn an_empty_set_is_empty() {
        let s = DescriptorSet::default();
        assert!(s.is_empty());
        assert_eq!(s.iter().count(), 0);
        assert_eq!(s, DescriptorTable::new(4).snapshot());
    }
}
