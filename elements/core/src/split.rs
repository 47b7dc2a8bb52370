//! Datagram splitters by name: how a replayed capture record that holds several
//! packets back to back (a UDP GSO send captured before the kernel cut it) is cut into
//! them again.
//!
//! Why a registry: the replay source (`fhpcapsrc split=…`, in firehose-record) must
//! not depend on the protocol crates that know where their packets end. Each protocol
//! crate registers its splitter under a name when its elements are registered
//! (firehose-spead registers `spead`), and the replay source looks the name up at
//! start. No GStreamer types.
//!
//! ```
//! use firehose_core::split::{self, DatagramSplitter, Partial};
//!
//! /// Pieces of at most 4 bytes.
//! struct Fours;
//!
//! impl DatagramSplitter for Fours {
//!     fn packet(&self) -> &str {
//!         "four-byte"
//!     }
//!     fn split(&self, datagram: &[u8], lens: &mut Vec<u32>) -> Result<(), Partial> {
//!         lens.clear();
//!         lens.extend(datagram.chunks(4).map(|c| c.len() as u32));
//!         Ok(())
//!     }
//!     fn why(&self, rest: &[u8]) -> String {
//!         format!("{} byte(s) left", rest.len()) // never asked: fours never stop short
//!     }
//! }
//!
//! static FOURS: Fours = Fours;
//! split::register("fours-doc", &FOURS);
//! let s = split::lookup("fours-doc").unwrap();
//! let mut lens = Vec::new();
//! s.split(b"0123456789", &mut lens).unwrap();
//! assert_eq!(lens, [4, 4, 2]);
//! assert!(split::names().contains(&"fours-doc"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{PoisonError, RwLock};

/// Where a cut stopped short: `packets` whole packets, then bytes from offset `at` on
/// that are not one ([`DatagramSplitter::why`] says why). Plain numbers, so that a
/// flood of damaged records costs no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partial {
    /// Whole packets cut out before `at` (at least one).
    pub packets: usize,
    /// Where the bytes that do not parse start.
    pub at: usize,
}

/// Cuts a datagram into the packets it holds, by the packets' own lengths.
pub trait DatagramSplitter: Send + Sync {
    /// What one piece is, for messages ("SPEAD" in "3 SPEAD packet(s)").
    fn packet(&self) -> &str;

    /// Writes the length of each piece of `datagram`, in order, into `lens` (cleared
    /// first; the caller reuses it so that no datagram allocates). The lengths add up
    /// to `datagram.len()`. A datagram that does not start with a packet, or holds
    /// one, is one piece. `Err` when the cut stopped short: `lens` then holds the whole
    /// packets and, last, the rest of the datagram as one more piece.
    fn split(&self, datagram: &[u8], lens: &mut Vec<u32>) -> Result<(), Partial>;

    /// Why `rest` (a datagram's bytes from a [`Partial`]'s `at` on) is not a packet, in
    /// words (the protocol's decode error). Asked only to report one, so the cut
    /// itself allocates nothing.
    fn why(&self, rest: &[u8]) -> String;
}

impl fmt::Debug for dyn DatagramSplitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatagramSplitter({})", self.packet())
    }
}

type Registry = BTreeMap<&'static str, &'static dyn DatagramSplitter>;

static REGISTRY: RwLock<Registry> = RwLock::new(BTreeMap::new());

/// Registers `splitter` under `name` (what `fhpcapsrc split=` says), replacing one
/// registered under that name before: registering again is harmless.
pub fn register(name: &'static str, splitter: &'static dyn DatagramSplitter) {
    REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name, splitter);
}

/// The splitter registered under `name`.
pub fn lookup(name: &str) -> Option<&'static dyn DatagramSplitter> {
    REGISTRY
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied()
}

/// The names registered, sorted (for the error that names what could have been
/// chosen).
pub fn names() -> Vec<&'static str> {
    REGISTRY
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .keys()
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packets that start with their own length byte; a zero length is damage. The
    /// field is what [`DatagramSplitter::packet`] says, so two are told apart.
    struct LengthPrefixed(&'static str);

    impl DatagramSplitter for LengthPrefixed {
        fn packet(&self) -> &str {
            self.0
        }
        fn split(&self, d: &[u8], lens: &mut Vec<u32>) -> Result<(), Partial> {
            lens.clear();
            let mut at = 0;
            while at < d.len() {
                let n = d[at] as usize;
                if n == 0 || at + n > d.len() {
                    if lens.is_empty() {
                        break;
                    }
                    let packets = lens.len();
                    lens.push((d.len() - at) as u32);
                    return Err(Partial { packets, at });
                }
                lens.push(n as u32);
                at += n;
            }
            if lens.is_empty() {
                lens.push(d.len() as u32);
            }
            Ok(())
        }
        fn why(&self, rest: &[u8]) -> String {
            format!("length {}", rest[0])
        }
    }

    static LP: LengthPrefixed = LengthPrefixed("length-prefixed");
    static OTHER: LengthPrefixed = LengthPrefixed("other");

    #[test]
    fn a_registered_splitter_is_found_by_its_name_and_cuts() {
        register("test-lp", &LP);
        let s = lookup("test-lp").expect("registered");
        assert_eq!(s.packet(), "length-prefixed");
        let mut lens = vec![99];
        s.split(&[2, 0, 3, 0, 0], &mut lens).unwrap();
        assert_eq!(lens, [2, 3], "cleared first, then each piece");
        let e = s.split(&[2, 0, 0, 9], &mut lens).unwrap_err();
        let d = [2, 0, 0, 9];
        assert_eq!(
            (e.packets, e.at, s.why(&d[e.at..]).as_str()),
            (1, 2, "length 0")
        );
        assert_eq!(lens, [2, 2], "the rest is one more piece");
        assert!(names().contains(&"test-lp"));
        assert!(format!("{s:?}").contains("length-prefixed"));
    }

    #[test]
    fn an_unknown_name_is_none_and_registering_again_replaces() {
        assert!(lookup("test-never-registered").is_none());
        assert!(!names().contains(&"test-never-registered"));
        register("test-again", &LP);
        register("test-again", &OTHER);
        assert_eq!(lookup("test-again").unwrap().packet(), "other");
        assert_eq!(
            names().iter().filter(|n| **n == "test-again").count(),
            1,
            "one entry per name"
        );
    }
}
