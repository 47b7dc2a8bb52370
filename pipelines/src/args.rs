//! The number formats of the command line (SI suffixes, rates, seconds, payload sizes):
//! value parsers for clap, which reads the flags.

/// Parses a number with an optional SI suffix (k, M, G, T; decimal), e.g. "200M",
/// "1.5G", "2e8", "500000".
pub fn parse_si(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G' | 'g') => (&t[..t.len() - 1], 1e9),
        Some('T') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a number (examples: 200M, 1.5G, 500000)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' must be a positive number"));
    }
    Ok(v * mult)
}

/// Parses a rate in bits per second ("200M", "1.5G"). Plain numbers below 1000 are
/// refused: `--rate 2` almost certainly meant 2G, not 2 bits/s.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let v = parse_si(s)?;
    if v < 1000.0 {
        return Err(format!(
            "rate '{s}' is {v} bits/s; rates are in bits/s, did you mean {s}G or {s}M?"
        ));
    }
    Ok(v.round() as u64)
}

/// Parses a duration in seconds (> 0, fractions allowed).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("seconds must be above 0, got '{s}'"));
    }
    Ok(v)
}

/// Parses a UDP payload size in bytes (1..=65507, the IPv4 maximum).
pub fn parse_size(s: &str) -> Result<u32, String> {
    let v = parse_si(s)?;
    if !(1.0..=65507.0).contains(&v) || v.fract() != 0.0 {
        return Err(format!(
            "payload size '{s}' must be a whole number of bytes from 1 to 65507"
        ));
    }
    Ok(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_numbers() {
        assert_eq!(parse_rate("200M").unwrap(), 200_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("2e8").unwrap(), 200_000_000);
        assert!(parse_rate("2").unwrap_err().contains("did you mean 2G"));
        assert!(parse_rate("fast").is_err());
        assert_eq!(parse_size("8972").unwrap(), 8972);
        assert!(parse_size("70000").is_err());
        assert_eq!(parse_seconds("2.5").unwrap(), 2.5);
        assert!(parse_seconds("0").is_err());
    }
}
