//! Why an input is not ingested: every skipped file or record is reported with one of these
//! reasons (a stable key for counting, and a message for the report).

use std::fmt;

/// Why an input was skipped. Every skipped input is reported with one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    Io(String),
    InvalidUtf8,
    Binary,
    TooLarge {
        bytes: u64,
        limit: u64,
    },
    BadYaml(String),
    BadJson(String),
    MissingName(String),
    Empty,
    NotCodeRelated,
    /// A second, different content claims a place (location) already read in this load.
    DuplicateLocation(String),
}

impl DropReason {
    /// A stable short key, used to group the summary.
    pub fn key(&self) -> &'static str {
        match self {
            DropReason::Io(_) => "io_error",
            DropReason::InvalidUtf8 => "invalid_utf8",
            DropReason::Binary => "binary",
            DropReason::TooLarge { .. } => "too_large",
            DropReason::BadYaml(_) => "bad_yaml",
            DropReason::BadJson(_) => "bad_json",
            DropReason::MissingName(_) => "missing_name",
            DropReason::Empty => "empty",
            DropReason::NotCodeRelated => "not_code_related",
            DropReason::DuplicateLocation(_) => "duplicate_location",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Io(e) => write!(f, "io_error: {e}"),
            DropReason::InvalidUtf8 => f.write_str("invalid_utf8: not valid UTF-8"),
            DropReason::Binary => f.write_str("binary: contains NUL bytes"),
            DropReason::TooLarge { bytes, limit } => {
                write!(f, "too_large: {bytes} bytes > limit {limit}")
            }
            DropReason::BadYaml(e) => write!(f, "bad_yaml: {}", first_line(e)),
            DropReason::BadJson(e) => write!(f, "bad_json: {}", first_line(e)),
            DropReason::MissingName(e) => write!(f, "missing_name: {e}"),
            DropReason::Empty => f.write_str("empty: no description and no instructions"),
            DropReason::NotCodeRelated => {
                f.write_str("not_code_related: no code block and too few programming terms")
            }
            DropReason::DuplicateLocation(l) => write!(
                f,
                "duplicate_location: {l} already holds other content in this load"
            ),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_keys_are_stable() {
        assert_eq!(
            DropReason::TooLarge { bytes: 2, limit: 1 }.key(),
            "too_large"
        );
        assert_eq!(
            DropReason::BadYaml("a\nb".into()).to_string(),
            "bad_yaml: a"
        );
    }
}
