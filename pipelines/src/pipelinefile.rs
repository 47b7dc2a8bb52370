//! `*.pipeline` files: a gst-launch description with `#` comment lines and `${KEY}` /
//! `${KEY:-default}` placeholders filled from `KEY=VALUE` arguments.
//!
//! Only the command line fills placeholders, not the environment: a file must not change
//! meaning because some unrelated variable (`PORT`, `HOST`…) happens to be exported.

use std::collections::BTreeMap;
use std::path::Path;

/// Values for placeholders, from `KEY=VALUE` arguments.
pub type Vars = BTreeMap<String, String>;

/// The result of filling a file in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled {
    /// The pipeline description, comments removed and lines joined with spaces.
    pub description: String,
    /// Keys given on the command line that the file never uses (probably typos).
    pub unused: Vec<String>,
}

fn is_key(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `KEY=VALUE` arguments.
pub fn parse_assignments<S: AsRef<str>>(args: &[S]) -> Result<Vars, String> {
    let mut vars = Vars::new();
    for arg in args {
        let arg = arg.as_ref();
        match arg.split_once('=') {
            Some((key, value)) if is_key(key) => {
                vars.insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(format!(
                    "expected KEY=VALUE after the pipeline file, got '{arg}' \
                     (keys are letters, digits and _, e.g. PORT=7148)"
                ))
            }
        }
    }
    Ok(vars)
}

/// Fills in `text` (the contents of a pipeline file called `origin`, for messages).
/// `${KEY:-default}` takes the default when KEY is not given or empty, as in the shell.
pub fn fill(text: &str, vars: &Vars, origin: &str) -> Result<Filled, String> {
    let mut used = std::collections::BTreeSet::new();
    let mut missing: Vec<String> = Vec::new();
    let mut parts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let lineno = index + 1;
        let mut out = String::new();
        let mut rest = line;
        while let Some(pos) = rest.find("${") {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 2..];
            let Some(end) = after.find('}') else {
                return Err(format!(
                    "{origin}:{lineno}: '${{' without a closing '}}' in: {}",
                    line.trim()
                ));
            };
            let inner = &after[..end];
            let (key, default) = match inner.split_once(":-") {
                Some((k, d)) => (k, Some(d)),
                None => (inner, None),
            };
            if !is_key(key) {
                return Err(format!(
                    "{origin}:{lineno}: bad placeholder '${{{inner}}}': use ${{KEY}} or \
                     ${{KEY:-default}} with KEY made of letters, digits and _"
                ));
            }
            used.insert(key.to_owned());
            match (vars.get(key).filter(|v| !v.is_empty()), default) {
                (Some(v), _) => out.push_str(v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => match vars.get(key) {
                    // Given but empty, no default: the user asked for empty.
                    Some(v) => out.push_str(v),
                    None => {
                        if !missing.iter().any(|m| m == key) {
                            missing.push(key.to_owned());
                        }
                    }
                },
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        parts.push(out);
    }
    if !missing.is_empty() {
        let example: Vec<String> = missing.iter().map(|k| format!("{k}=…")).collect();
        return Err(format!(
            "{origin} needs a value for {} (no default in the file): add {} after the file name",
            missing.join(", "),
            example.join(" ")
        ));
    }
    let description = parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if description.is_empty() {
        return Err(format!(
            "{origin} holds no pipeline (only comments or blank lines)"
        ));
    }
    let unused = vars
        .keys()
        .filter(|k| !used.contains(*k))
        .cloned()
        .collect();
    Ok(Filled {
        description,
        unused,
    })
}

/// Reads and fills in the pipeline file at `path`.
pub fn load(path: &Path, vars: &Vars) -> Result<Filled, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read pipeline file {}: {e}", path.display()))?;
    fill(&text, vars, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn substitutes_keys_defaults_and_skips_comments() {
        let text = "# capture\n  # indented comment\nfhudpsrc port=${PORT:-7148}\n  address=${ADDR}\n\n! fhcheck\n";
        let f = fill(text, &vars(&[("ADDR", "10.0.0.1"), ("EXTRA", "x")]), "t").unwrap();
        assert_eq!(
            f.description,
            "fhudpsrc port=7148 address=10.0.0.1 ! fhcheck"
        );
        assert_eq!(f.unused, vec!["EXTRA".to_string()]);
        let f = fill(text, &vars(&[("ADDR", "a"), ("PORT", "9")]), "t").unwrap();
        assert_eq!(f.description, "fhudpsrc port=9 address=a ! fhcheck");
    }

    #[test]
    fn empty_value_takes_default_like_the_shell() {
        let f = fill("x p=${P:-5}", &vars(&[("P", "")]), "t").unwrap();
        assert_eq!(f.description, "x p=5");
        let f = fill("x p=${P}", &vars(&[("P", "")]), "t").unwrap();
        assert_eq!(f.description, "x p=");
    }

    #[test]
    fn missing_keys_are_all_named() {
        let err = fill("a ${A} ${B} ${A} ${C:-1}", &Vars::new(), "f.pipeline").unwrap_err();
        assert!(err.contains("f.pipeline needs a value for A, B"), "{err}");
        assert!(err.contains("A=… B=…"), "{err}");
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = fill("ok\nbad ${A", &Vars::new(), "f").unwrap_err();
        assert!(err.starts_with("f:2:"), "{err}");
        let err = fill("bad ${A B}", &Vars::new(), "f").unwrap_err();
        assert!(err.contains("bad placeholder"), "{err}");
        assert!(fill("# only\n", &Vars::new(), "f").is_err());
    }

    #[test]
    fn assignments() {
        let v = parse_assignments(&["PORT=1", "A_B=x=y"]).unwrap();
        assert_eq!(v["PORT"], "1");
        assert_eq!(v["A_B"], "x=y");
        assert!(parse_assignments(&["nokey"]).is_err());
        assert!(parse_assignments(&["1A=2"]).is_err());
    }

    #[test]
    fn dollar_without_brace_is_literal() {
        let f = fill("a $HOME b", &Vars::new(), "f").unwrap();
        assert_eq!(f.description, "a $HOME b");
    }
}
