//! File-name templates: `capture-%05d.pcap`, `/data/%F/cap-%H%M%S-%03d.raw`.
//!
//! `%d` (with optional `0` flag and width, as in printf and multifilesink) is the file
//! number, counting from 0. Time conversions follow strftime, in local time, for the
//! moment the file is opened: `%Y %y %m %H %M %S %j %s %F %T`. `%d` being the number,
//! the day of the month is written with `%F` (YYYY-MM-DD). `%%` is a percent sign.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Index { width: usize, zero: bool },
    Time(char),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

const TIME_CONVERSIONS: &str = "YymHMSjsFT";

impl Template {
    /// Parses `s`; errors name the offending conversion.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                lit.push(c);
                continue;
            }
            let mut zero = false;
            let mut width = 0usize;
            if chars.peek() == Some(&'0') {
                zero = true;
                chars.next();
            }
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                width = width * 10 + d as usize;
                chars.next();
            }
            match chars.next() {
                Some('%') if !zero && width == 0 => lit.push('%'),
                Some('d') => {
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Index {
                        width: width.min(20),
                        zero,
                    });
                }
                Some(t) if !zero && width == 0 && TIME_CONVERSIONS.contains(t) => {
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Time(t));
                }
                other => {
                    return Err(format!(
                        "location '{s}': unknown conversion '%{}'; use %d (file number, \
                         e.g. %05d), strftime's %Y %y %m %H %M %S %j %s %F %T, or %% \
                         (the day of the month is in %F)",
                        other.map(String::from).unwrap_or_default()
                    ))
                }
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        if parts.is_empty() {
            return Err("location is empty: give a file name".into());
        }
        Ok(Self { parts })
    }

    /// True when the name contains the file number, so successive files differ.
    pub fn has_index(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Index { .. }))
    }

    /// The name of file number `index`, opened at `now`.
    pub fn render(&self, index: u64, now: SystemTime) -> String {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as libc::time_t;
        let tm = self
            .parts
            .iter()
            .any(|p| matches!(p, Part::Time(_)))
            .then(|| local_time(secs));
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Index { width, zero: true } => {
                    out.push_str(&format!("{index:0width$}"));
                }
                Part::Index { width, zero: false } => {
                    out.push_str(&format!("{index:width$}"));
                }
                Part::Time(c) => {
                    let tm = tm.as_ref().expect("computed when a time part exists");
                    let (y, mo, d) = (tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
                    let (h, mi, s) = (tm.tm_hour, tm.tm_min, tm.tm_sec);
                    let text = match c {
                        'Y' => format!("{y:04}"),
                        'y' => format!("{:02}", y % 100),
                        'm' => format!("{mo:02}"),
                        'H' => format!("{h:02}"),
                        'M' => format!("{mi:02}"),
                        'S' => format!("{s:02}"),
                        'j' => format!("{:03}", tm.tm_yday + 1),
                        's' => secs.to_string(),
                        'F' => format!("{y:04}-{mo:02}-{d:02}"),
                        'T' => format!("{h:02}:{mi:02}:{s:02}"),
                        _ => unreachable!("checked by parse"),
                    };
                    out.push_str(&text);
                }
            }
        }
        out
    }
}

fn local_time(secs: libc::time_t) -> libc::tm {
    // SAFETY: localtime_r writes only into the zeroed tm we own; on failure it stays
    // zeroed (1900-01-00), which still renders.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_widths_and_literals() {
        let t = Template::parse("cap-%05d.pcap").unwrap();
        assert!(t.has_index());
        assert_eq!(t.render(42, UNIX_EPOCH), "cap-00042.pcap");
        let t = Template::parse("a%3d%%b").unwrap();
        assert_eq!(t.render(7, UNIX_EPOCH), "a  7%b");
        assert!(!Template::parse("plain.pcap").unwrap().has_index());
    }

    #[test]
    fn time_fields_follow_strftime() {
        let t = Template::parse("%Y|%F|%T|%s|%j").unwrap();
        let now = SystemTime::now();
        let out = t.render(0, now);
        let secs = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert!(out.contains(&format!("|{secs}|")), "{out}");
        assert_eq!(out.split('|').next().unwrap().len(), 4);
        assert_eq!(out.split('|').nth(1).unwrap().len(), 10);
    }

    #[test]
    fn bad_conversions_are_explained() {
        let e = Template::parse("x-%q").unwrap_err();
        assert!(e.contains("%q") && e.contains("%05d"), "{e}");
        assert!(Template::parse("").is_err());
    }
}
