//! A skill as ingestion sees it, and how a SKILL.md becomes one.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::category::Category;
use crate::drop_reason::DropReason;
use crate::normalize::{normalize_body, normalize_inline, split_front_matter, unify_line_endings};

/// Descriptions longer than this (in characters) are cut when derived from a body.
const DERIVED_DESCRIPTION_CHARS: usize = 1024;

/// A normalised skill with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub instructions: String,
    /// A category given by the source (JSONL `category`); `None` means "classify".
    pub category: Option<Category>,
    /// The front-matter `license:` value, if any.
    pub license_field: Option<String>,
    /// Provenance entries (JSON objects, each with a stable `location`).
    pub provenance: Vec<Value>,
}

impl Skill {
    pub fn content_hash(&self) -> String {
        content_hash(&self.name, &self.description, &self.instructions)
    }

    pub fn category_or_classified(&self) -> Category {
        self.category.unwrap_or_else(|| {
            crate::category::classify(&self.name, &self.description, &self.instructions)
        })
    }

    pub fn byte_len(&self) -> usize {
        document_bytes(&self.name, &self.description, &self.instructions)
    }
}

/// The size bound `pg_skills.max_document_size` applies to.
pub fn document_bytes(name: &str, description: &str, instructions: &str) -> usize {
    name.len() + description.len() + instructions.len()
}

/// sha256 (hex) of the normalised name, description and instructions, NUL-separated.
/// The extension computes the same function, so the loader and SQL inserts agree.
pub fn content_hash(name: &str, description: &str, instructions: &str) -> String {
    let mut h = Sha256::new();
    h.update(normalize_inline(name).as_bytes());
    h.update([0u8]);
    h.update(normalize_inline(description).as_bytes());
    h.update([0u8]);
    h.update(normalize_body(&unify_line_endings(instructions)).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The text a prompt receives for a skill; token counts are measured on it.
pub fn prompt_text(name: &str, description: &str, instructions: &str) -> String {
    format!("{name}\n{description}\n\n{instructions}")
}

/// LLM prompt tokens (OpenAI o200k_base BPE) of [`prompt_text`].
pub fn token_count(name: &str, description: &str, instructions: &str) -> usize {
    prompt_tokens(&prompt_text(name, description, instructions))
}

/// [`token_count`], calling `between_chunks` between the pieces of a long text.
pub fn token_count_with(
    name: &str,
    description: &str,
    instructions: &str,
    between_chunks: &mut dyn FnMut(),
) -> usize {
    prompt_tokens_with(
        &prompt_text(name, description, instructions),
        between_chunks,
    )
}

/// LLM prompt tokens (OpenAI o200k_base BPE) of any text.
pub fn prompt_tokens(text: &str) -> usize {
    prompt_tokens_with(text, &mut || {})
}

/// [`prompt_tokens`], calling `between_chunks` after each run of about 64 kB of the text (the
/// count is exact wherever the runs end: they end between the pre-tokenizer's pieces).
pub fn prompt_tokens_with(text: &str, between_chunks: &mut dyn FnMut()) -> usize {
    crate::o200k::O200k::get().count_with(text, between_chunks)
}

/// Fields of a SKILL.md front matter that ingestion uses.
#[derive(Debug, Default)]
struct FrontMatter {
    name: Option<Result<String, String>>,
    description: Option<String>,
    license: Option<String>,
}

fn scalar_to_string(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_front_matter(yaml: &str) -> Result<FrontMatter, DropReason> {
    if yaml.trim().is_empty() {
        return Ok(FrontMatter::default());
    }
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(yaml).map_err(|e| DropReason::BadYaml(e.to_string()))?;
    let map = match value {
        serde_yaml_ng::Value::Mapping(m) => m,
        serde_yaml_ng::Value::Null => return Ok(FrontMatter::default()),
        other => {
            return Err(DropReason::BadYaml(format!(
                "front matter is not a mapping but {other:?}"
            )))
        }
    };
    let get = |key: &str| map.get(serde_yaml_ng::Value::String(key.into()));
    Ok(FrontMatter {
        name: get("name")
            .map(|v| scalar_to_string(v).ok_or_else(|| format!("name is not a string: {v:?}"))),
        description: get("description").and_then(scalar_to_string),
        license: get("license").and_then(scalar_to_string),
    })
}

/// The first ATX heading (`#` to `######` then a space) outside fenced code blocks.
fn first_heading(body: &str) -> Option<String> {
    let mut in_fence = false;
    for line in body.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            let h = t[hashes..].trim();
            if !h.is_empty() {
                return Some(h.to_owned());
            }
        }
    }
    None
}

/// First paragraph of the body that is not a heading, as one line.
fn first_paragraph(body: &str) -> Option<String> {
    let para = body
        .split("\n\n")
        .map(str::trim)
        .find(|p| !p.is_empty() && !p.starts_with('#') && !p.starts_with("```"))?;
    Some(
        normalize_inline(para)
            .chars()
            .take(DERIVED_DESCRIPTION_CHARS)
            .collect(),
    )
}

/// Parses a SKILL.md. `fallback_name` (the folder name) is used when there is no front matter
/// and no heading; front matter that exists but lacks a usable `name` is an error, since that
/// marks a template or a broken file rather than a plain markdown skill.
pub fn parse_skill_md(raw: &str, fallback_name: Option<&str>) -> Result<Skill, DropReason> {
    let doc = split_front_matter(raw);
    let fm = match &doc.front_matter {
        Some(yaml) => Some(parse_front_matter(yaml)?),
        None => None,
    };
    let name = match fm.as_ref().map(|f| f.name.clone()) {
        Some(Some(Ok(n))) => normalize_inline(&n),
        Some(Some(Err(why))) => return Err(DropReason::MissingName(why)),
        Some(None) => return Err(DropReason::MissingName("front matter has no name".into())),
        None => first_heading(&doc.body)
            .or_else(|| fallback_name.map(str::to_owned))
            .map(|n| normalize_inline(&n))
            .unwrap_or_default(),
    };
    if name.is_empty() {
        return Err(DropReason::MissingName("empty name".into()));
    }
    let description = fm
        .as_ref()
        .and_then(|f| f.description.as_deref())
        .map(normalize_inline)
        .or_else(|| first_paragraph(&doc.body))
        .unwrap_or_default();
    if doc.body.is_empty() && description.is_empty() {
        return Err(DropReason::Empty);
    }
    Ok(Skill {
        name,
        description,
        instructions: doc.body,
        category: None,
        license_field: fm.and_then(|f| f.license).map(|l| normalize_inline(&l)),
        provenance: Vec::new(),
    })
}

/// Builds a provenance entry from key/value pairs, dropping empty values.
pub fn provenance_entry(pairs: &[(&str, Option<String>)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            m.insert((*k).to_owned(), Value::String(v.clone()));
        }
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_front_matter_skill() {
        let s = parse_skill_md(
            "---\nname: rust-tests\ndescription: |\n  Write tests\n  for Rust\nlicense: MIT\n---\n# Rust tests\n\nUse cargo test.\n",
            Some("folder"),
        )
        .unwrap();
        assert_eq!(s.name, "rust-tests");
        assert_eq!(s.description, "Write tests for Rust");
        assert_eq!(s.instructions, "# Rust tests\n\nUse cargo test.");
        assert_eq!(s.license_field.as_deref(), Some("MIT"));
    }

    #[test]
    fn no_front_matter_takes_heading_then_folder() {
        let s = parse_skill_md(
            "# Parallel Processing\n\nSplit work across cores.\n",
            Some("pp"),
        )
        .unwrap();
        assert_eq!(s.name, "Parallel Processing");
        assert_eq!(s.description, "Split work across cores.");
        let s = parse_skill_md("Just text without heading.", Some("folder-name")).unwrap();
        assert_eq!(s.name, "folder-name");
        let s = parse_skill_md(
            "```bash\n#!/usr/bin/env bash\n# comment\n```\n#hashtag\n\n## Real Title\n",
            Some("f"),
        )
        .unwrap();
        assert_eq!(s.name, "Real Title");
    }

    #[test]
    fn malformed_front_matter_is_reported() {
        assert!(matches!(
            parse_skill_md("---\nname: [unclosed\n---\nbody", None),
            Err(DropReason::BadYaml(_))
        ));
        assert!(matches!(
            parse_skill_md("---\n- a\n- b\n---\nbody", None),
            Err(DropReason::BadYaml(_))
        ));
        assert!(matches!(
            parse_skill_md("---\nname: [TODO: lowercase-name]\n---\nbody", None),
            Err(DropReason::MissingName(_))
        ));
        assert!(matches!(
            parse_skill_md("---\ndescription: x\n---\nbody", None),
            Err(DropReason::MissingName(_))
        ));
        assert!(matches!(
            parse_skill_md("---\nname: x\n---\n", None),
            Err(DropReason::Empty)
        ));
    }

    #[test]
    fn hash_ignores_whitespace_noise_but_not_content() {
        let a = content_hash("n", "d  e", "line\r\n\r\n\r\nnext  ");
        assert_eq!(a, content_hash(" n ", "d e", "line\n\nnext"));
        assert_ne!(a, content_hash("n", "d e", "line\n\nnext!"));
        assert_ne!(content_hash("ab", "", ""), content_hash("a", "b", ""));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn long_texts_count_alike_in_pieces() {
        // Many pieces, with boundaries after newlines before words, punctuation, digits and
        // non-ASCII letters: the sum must equal one pass over the whole text.
        let paragraph = "Run `cargo test` first.\n## Step 2\n1. Ünïcode wörds, then /paths\n\n  indented\n(see: a.b)\n";
        let text = paragraph.repeat(4000);
        let mut pieces = 0;
        let counted = prompt_tokens_with(&text, &mut || pieces += 1);
        let whole = tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(&text)
            .len();
        assert!(pieces >= 3, "{pieces} pieces");
        assert_eq!(counted, whole);
        // No newline at all: one word of 200 kB, counted whole and exactly.
        let flat = "ü".repeat(100_000);
        let mut flat_pieces = 0;
        let n = prompt_tokens_with(&flat, &mut || flat_pieces += 1);
        assert_eq!(flat_pieces, 1);
        let whole = tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(&flat)
            .len();
        assert_eq!(n, whole);
    }

    #[test]
    fn token_count_is_o200k() {
        // "hello\nworld\n\n" -> o200k: "hello", "\n", "world", "\n\n" = 4 tokens
        assert_eq!(token_count("hello", "world", ""), 4);
        assert!(token_count("n", "d", &"word ".repeat(100)) >= 100);
    }
}
