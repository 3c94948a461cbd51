//! The filter that keeps skills that produce or guide code.
//!
//! The code filter (documented in docs/ingestion.md, "Code filter"): a skill is kept when
//! 1. its instructions contain a fenced code block (three backticks or tildes), or
//! 2. its name, description and instructions together use at least
//!    [`MIN_DISTINCT_CODE_CUES`] distinct words from [`CODE_CUES`] (programming vocabulary).
//!
//! Everything else (brand guidelines, writing style guides, office etiquette) is dropped with the
//! reason `not_code_related`. Benchmark loads turn the filter off.

use std::collections::HashSet;

use crate::skill::Skill;

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
}
