//! A small command-line reader: flags with values (`--rate 200M` or `--rate=200M`) and
//! number formats with SI suffixes. Hand-rolled because the CLI has a handful of flags.

use std::collections::VecDeque;

/// The remaining arguments of a command.
#[derive(Debug)]
pub struct Args {
    items: VecDeque<String>,
}

/// One flag as read: its name and, for `--flag=value`, the inline value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The flag, e.g. `--rate`, or a plain argument.
    pub name: String,
    inline: Option<String>,
}

impl Args {
    /// Wraps the arguments that follow the subcommand.
    pub fn new<I: IntoIterator<Item = String>>(items: I) -> Self {
        Self {
            items: items.into_iter().collect(),
        }
    }

    /// The next argument, split as `--flag=value` when it has that form.
    pub fn next_flag(&mut self) -> Option<Flag> {
        let arg = self.items.pop_front()?;
        if arg.starts_with("--") {
            if let Some((name, value)) = arg.split_once('=') {
                return Some(Flag {
                    name: name.to_owned(),
                    inline: Some(value.to_owned()),
                });
            }
        }
        Some(Flag {
            name: arg,
            inline: None,
        })
    }

    /// The value of `flag`: inline, or the next argument.
    pub fn value(&mut self, flag: &Flag) -> Result<String, String> {
        if let Some(v) = &flag.inline {
            return Ok(v.clone());
        }
        self.items
            .pop_front()
            .ok_or_else(|| format!("{} needs a value", flag.name))
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> Vec<String> {
        self.items.drain(..).collect()
    }
}

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

/// Parses a comma-separated list with `item`.
pub fn parse_list<T>(s: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let v: Vec<T> = s
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| item(x.trim()))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(format!("'{s}' is an empty list"));
    }
    Ok(v)
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

    #[test]
    fn lists_and_flags() {
        assert_eq!(
            parse_list("0.5G, 1G", parse_rate).unwrap(),
            vec![500_000_000, 1_000_000_000]
        );
        let mut a = Args::new(["--rate=1G", "--seconds", "2", "x"].map(String::from));
        let f = a.next_flag().unwrap();
        assert_eq!(f.name, "--rate");
        assert_eq!(a.value(&f).unwrap(), "1G");
        let f = a.next_flag().unwrap();
        assert_eq!(a.value(&f).unwrap(), "2");
        assert_eq!(a.rest(), vec!["x".to_string()]);
        let f = Flag {
            name: "--out".into(),
            inline: None,
        };
        assert!(a.value(&f).unwrap_err().contains("--out needs a value"));
    }
}
