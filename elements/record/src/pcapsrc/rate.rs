//! The `rate` property of `fhpcapsrc`: `original`, `max` or bits per second.

use std::fmt;

/// How fast a capture is replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rate {
    /// At the capture's own timing.
    #[default]
    Original,
    /// As fast as downstream accepts.
    Max,
    /// Payload bytes paced at this many bits per second.
    Bits(u64),
}

impl Rate {
    /// Parses `original`, `max`, or a rate in bits/s with an optional SI suffix
    /// (`k`, `M`, `G`), e.g. `500M`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t {
            "original" => return Ok(Rate::Original),
            "max" => return Ok(Rate::Max),
            _ => {}
        }
        let (num, mult) = match t.chars().last() {
            Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
            Some('M') => (&t[..t.len() - 1], 1e6),
            Some('G' | 'g') => (&t[..t.len() - 1], 1e9),
            _ => (t, 1.0),
        };
        match num.parse::<f64>() {
            Ok(v) if v.is_finite() && v * mult >= 1.0 => Ok(Rate::Bits((v * mult).round() as u64)),
            _ => Err(format!(
                "rate '{s}' is not 'original', 'max' or a rate in bits/s such as 500M or 2G"
            )),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Original => f.write_str("original"),
            Rate::Max => f.write_str("max"),
            Rate::Bits(b) => write!(f, "{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_words_and_si_rates() {
        assert_eq!(Rate::parse("original"), Ok(Rate::Original));
        assert_eq!(Rate::parse("max"), Ok(Rate::Max));
        assert_eq!(Rate::parse("1.5G"), Ok(Rate::Bits(1_500_000_000)));
        assert_eq!(Rate::parse("800k"), Ok(Rate::Bits(800_000)));
        assert_eq!(Rate::parse("1000"), Ok(Rate::Bits(1000)));
        assert!(Rate::parse("fast").unwrap_err().contains("500M"));
        assert!(Rate::parse("0").is_err());
        assert_eq!(Rate::parse(&Rate::Bits(42).to_string()), Ok(Rate::Bits(42)));
    }
}
