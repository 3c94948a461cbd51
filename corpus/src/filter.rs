//! Why a file is not ingested, and the filter that keeps skills that produce or guide code.
//!
//! The code filter (documented in the README, "Ingestion"): a skill is kept when
//! 1. its instructions contain a fenced code block (three backticks or tildes), or
//! 2. its name, description and instructions together use at least
//!    [`MIN_DISTINCT_CODE_CUES`] distinct words from [`CODE_CUES`] (programming vocabulary).
//!
//! Everything else (brand guidelines, writing style guides, office etiquette) is dropped with the
//! reason `not_code_related`. Benchmark loads turn the filter off.

use std::collections::HashSet;
use std::fmt;

use crate::skill::Skill;

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

pub const MIN_DISTINCT_CODE_CUES: usize = 3;

pub const CODE_CUES: &[&str] = &[
    "code",
    "coding",
    "function",
    "functions",
    "api",
    "apis",
    "script",
    "scripts",
    "cli",
    "command",
    "commands",
    "library",
    "libraries",
    "package",
    "packages",
    "programming",
    "python",
    "rust",
    "javascript",
    "typescript",
    "java",
    "golang",
    "kotlin",
    "swift",
    "ruby",
    "php",
    "csharp",
    "cpp",
    "sql",
    "bash",
    "shell",
    "git",
    "github",
    "compile",
    "compiler",
    "build",
    "deploy",
    "test",
    "tests",
    "debug",
    "bug",
    "refactor",
    "repository",
    "repo",
    "class",
    "module",
    "framework",
    "sdk",
    "json",
    "yaml",
    "http",
    "endpoint",
    "database",
    "docker",
    "npm",
    "pip",
    "cargo",
    "import",
    "variable",
    "syntax",
    "runtime",
    "server",
    "frontend",
    "backend",
    "react",
    "node",
    "terminal",
    // infrastructure and operations guide code and configuration too
    "nginx",
    "openssl",
    "linux",
    "config",
    "configuration",
    "kubernetes",
    "cluster",
    "deployment",
    "index",
    "indexing",
    "query",
    "queries",
    "vector",
    "latency",
    "throughput",
    "scaling",
    "logging",
    "logs",
    "certificate",
    "tls",
    "ssl",
    "systemd",
    "html",
    "css",
    "browser",
    "playwright",
    "automation",
    "migration",
    "schema",
    "pr",
    "commit",
    "ci",
    "workflow",
    "i18n",
    "locale",
];

/// Whether the skill produces or guides code (see the module documentation).
pub fn is_code_related(skill: &Skill) -> bool {
    if skill.instructions.contains("```") || skill.instructions.contains("~~~") {
        return true;
    }
    let cues: HashSet<&str> = CODE_CUES.iter().copied().collect();
    let mut found = HashSet::new();
    for text in [&skill.name, &skill.description, &skill.instructions] {
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            let lower = word.to_lowercase();
            if let Some(cue) = cues.get(lower.as_str()) {
                found.insert(*cue);
                if found.len() >= MIN_DISTINCT_CODE_CUES {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str, instructions: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            instructions: instructions.into(),
            category: None,
            license_field: None,
            provenance: vec![],
        }
    }

    #[test]
    fn code_block_keeps() {
        assert!(is_code_related(&skill("x", "y", "Run:\n```\nls\n```")));
    }

    #[test]
    fn vocabulary_keeps_only_at_threshold() {
        assert!(is_code_related(&skill(
            "api-client",
            "Call the HTTP API",
            "from Python"
        )));
        assert!(!is_code_related(&skill(
            "api-client",
            "Call the HTTP thing",
            ""
        )));
    }

    #[test]
    fn prose_is_dropped() {
        assert!(!is_code_related(&skill(
            "brand-guidelines",
            "Apply the company's colours and typography to slides",
            "Use the primary palette. Headings in serif.",
        )));
    }

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
