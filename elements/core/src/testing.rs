//! Helpers for tests of the engines, here and in other crates.

/// Deterministic pseudo-random numbers (xorshift64), so that a perturbed stream is the
/// same on every run. Not for anything else.
#[derive(Clone, Debug)]
pub struct Xorshift(pub u64);

impl Xorshift {
    /// The next number (a nonzero seed gives a nonzero sequence).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// Initialises GStreamer and registers `elements` (factory name, type) without a
/// plugin, for a test that builds them by name. Safe to call from every test: GStreamer
/// keeps one registration per name (registering it again with no plugin updates it).
pub fn register_elements(elements: &[(&str, gst::glib::Type)]) {
    gst::init().expect("GStreamer initialises");
    for (name, t) in elements {
        gst::Element::register(None, name, gst::Rank::NONE, *t)
            .unwrap_or_else(|e| panic!("registering {name}: {e}"));
    }
}
