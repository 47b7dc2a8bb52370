//! Median and range of a benchmark's repeated runs: every report quotes these.

/// Median, smallest and largest of some values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (mean of the middle two for an even count).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    /// "1.23 (1.10–1.40)" with `digits` decimals; the median alone when the range is
    /// nothing at that precision.
    pub fn text(&self, digits: usize) -> String {
        let m = self.median;
        if (self.max - self.min).abs() < 10f64.powi(-(digits as i32)) / 2.0 {
            format!("{m:.digits$}")
        } else {
            format!("{m:.digits$} ({:.digits$}–{:.digits$})", self.min, self.max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(s.text(2), "2.00 (1.00–3.00)");
        assert_eq!(Spread::of(&[1.0]).unwrap().text(2), "1.00");
    }
}
