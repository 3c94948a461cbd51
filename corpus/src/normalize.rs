//! Normalisation: the canonical text a skill is stored, hashed and counted as.
//!
//! - a UTF-8 byte order mark is removed; CRLF and lone CR become LF;
//! - YAML front matter (a first line `---`, up to the next line `---` or `...`) is split off;
//! - in the body, trailing whitespace is removed from every line, runs of blank lines become one
//!   blank line, and leading/trailing blank lines go;
//! - one-line fields (name, description) have every whitespace run collapsed to one space.

use std::borrow::Cow;

/// A SKILL.md split into its front matter (raw YAML, if any) and its normalised body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitDocument {
    pub front_matter: Option<String>,
    pub body: String,
}

pub fn unify_line_endings(text: &str) -> Cow<'_, str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Most texts have no carriage return: one scan for it, and no copy.
    if !text.contains('\r') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
}

pub fn normalize_body(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0usize;
    for line in text.split('\n') {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_run > 0 {
                out.push('\n');
            }
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}

pub fn normalize_inline(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits front matter from the body and normalises the body.
pub fn split_front_matter(raw: &str) -> SplitDocument {
    let text = unify_line_endings(raw);
    let mut lines = text.split_inclusive('\n');
    if let Some(first) = lines.next() {
        if first.trim_end() == "---" {
            let mut yaml = String::new();
            let mut consumed = first.len();
            for line in lines {
                consumed += line.len();
                let marker = line.trim_end();
                if marker == "---" || marker == "..." {
                    return SplitDocument {
                        front_matter: Some(yaml),
                        body: normalize_body(&text[consumed..]),
                    };
                }
                yaml.push_str(line);
            }
            // An opening marker without a closing one: not front matter, treat all as body.
        }
    }
    SplitDocument {
        front_matter: None,
        body: normalize_body(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_bom_and_trailing_space() {
        let raw = "\u{feff}---\r\nname: x\r\n---\r\n\r\n# Title  \r\n\r\n\r\n\r\nBody\t\r\n";
        let d = split_front_matter(raw);
        assert_eq!(d.front_matter.as_deref(), Some("name: x\n"));
        assert_eq!(d.body, "# Title\n\nBody");
    }

    #[test]
    fn no_front_matter_and_unclosed_marker() {
        assert_eq!(split_front_matter("# Hi\nthere").front_matter, None);
        let d = split_front_matter("---\nname: x\nno closing");
        assert_eq!(d.front_matter, None);
        assert_eq!(d.body, "---\nname: x\nno closing");
    }

    #[test]
    fn dots_close_front_matter_and_leading_spaces_kept() {
        let d = split_front_matter("---\na: 1\n...\n  indented code\n");
        assert_eq!(d.front_matter.as_deref(), Some("a: 1\n"));
        assert_eq!(d.body, "  indented code");
    }

    #[test]
    fn inline_collapses_whitespace() {
        assert_eq!(
            normalize_inline("  Use when\n  debugging\tRust  "),
            "Use when debugging Rust"
        );
    }

    #[test]
    fn normalisation_is_idempotent() {
        let raw = "a  \n\n\n b\r\n\r\nc";
        let once = normalize_body(&unify_line_endings(raw));
        assert_eq!(normalize_body(&once), once);
    }
}
