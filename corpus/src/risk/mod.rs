//! Risk findings: what in a skill could hurt the user whose agent follows it.
//!
//! A skill is instructions an agent executes, so a `curl … | sh`, a read of `~/.aws/credentials`,
//! "do not tell the user" or invisible Unicode in it is a supply-chain risk. [`scan`] checks a
//! document against the documented rules ([`RULES`], docs/trust.md) and returns each finding with
//! its rule id, severity and line span; the skill's risk level is the highest severity found.
//!
//! The loader and the table's trigger call this same code (as they do for the content hash), and
//! every stored result names [`RULES_VERSION`], so changed rules are re-applied to stored skills.
//!
//! Precision matters as much as recall (a scanner that flags half of all skills gets ignored):
//! rules match what a command *does* (a read verb with a credential path, a download piped into a
//! shell), not words, and a match the text itself warns against ("never run …", a `# BAD:` line)
//! or quotes as an example is kept as a low finding instead of its rule's severity.

mod context;
mod gate;
mod rules;
mod sequence;
mod unicode;

use serde_json::{json, Value};

pub use rules::RULES;

/// Bumped whenever a rule, a pattern or a severity changes: stored findings with another version
/// are computed again (`skills.rescan_risk()`).
pub const RULES_VERSION: i32 = 1;

/// Severity of a finding, and a skill's risk level (its highest finding's severity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    None,
    Low,
    Medium,
    High,
    Critical,
}

impl Level {
    pub const ALL: [Level; 5] = [
        Level::None,
        Level::Low,
        Level::Medium,
        Level::High,
        Level::Critical,
    ];
    /// The levels at which a skill counts as flagged (`skills.flagged_skill`, the loader's
    /// summary).
    pub const FLAGGED: [Level; 3] = [Level::Medium, Level::High, Level::Critical];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
            Level::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// Which part of the document a finding is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Name,
    Description,
    Instructions,
}

impl Field {
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Description => "description",
            Field::Instructions => "instructions",
        }
    }
}

/// Why a match was kept at low severity instead of its rule's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mitigation {
    /// The text warns against it ("never run …", a `# BAD:` line just above).
    Warning,
    /// It is quoted as an example (a phrase inside quotes or backticks).
    Quoted,
    /// A checksum or signature is verified before the downloaded file runs.
    Verified,
    /// It names a disposable target (a test or temporary database) or asks for confirmation.
    Scoped,
}

impl Mitigation {
    pub fn as_str(self) -> &'static str {
        match self {
            Mitigation::Warning => "warning",
            Mitigation::Quoted => "quoted",
            Mitigation::Verified => "verified",
            Mitigation::Scoped => "scoped",
        }
    }
}

/// One match of a rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub rule: &'static str,
    pub severity: Level,
    pub field: Field,
    /// 1-based first and last line of the match within its field.
    pub lines: (usize, usize),
    /// The matched line(s), shortened, with invisible characters written as `\u{…}`.
    pub excerpt: String,
    pub mitigation: Option<Mitigation>,
}

impl Finding {
    pub fn to_json(&self) -> Value {
        json!({
            "rule": self.rule,
            "severity": self.severity.as_str(),
            "field": self.field.as_str(),
            "lines": [self.lines.0, self.lines.1],
            "excerpt": self.excerpt,
            "mitigation": self.mitigation.map(Mitigation::as_str),
        })
    }
}

/// A scanned document: its findings in document order and the highest severity.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub level: Level,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn findings_json(&self) -> Value {
        Value::Array(self.findings.iter().map(Finding::to_json).collect())
    }

    /// Rule ids found at `at_least` or above, sorted, each once.
    pub fn rules_at(&self, at_least: Level) -> Vec<&'static str> {
        let mut ids: Vec<&'static str> = self
            .findings
            .iter()
            .filter(|f| f.severity >= at_least)
            .map(|f| f.rule)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Findings of one skill document.
pub fn scan(name: &str, description: &str, instructions: &str) -> Report {
    scan_with(name, description, instructions, &mut || {})
}

/// [`scan`], calling `between_lines` every few hundred lines (a cancellation point in the server).
pub fn scan_with(
    name: &str,
    description: &str,
    instructions: &str,
    between_lines: &mut dyn FnMut(),
) -> Report {
    let mut findings = Vec::new();
    for (field, text) in [
        (Field::Name, name),
        (Field::Description, description),
        (Field::Instructions, instructions),
    ] {
        scan_field(field, text, &mut findings, between_lines);
    }
    let level = findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Level::None);
    Report { level, findings }
}

/// Every pattern tested on logical lines (the rules' commands, downloads, dropped databases)
/// in one gate: one search over a field's lines finds the lines any of them may match in.
fn line_gate() -> &'static gate::Gate {
    static G: std::sync::OnceLock<gate::Gate> = std::sync::OnceLock::new();
    G.get_or_init(|| {
        let mut sources: Vec<&str> = rules::line_sources().iter().map(String::as_str).collect();
        sources.extend(sequence::line_sources());
        gate::Gate::new(&sources)
    })
}

fn scan_field(
    field: Field,
    text: &str,
    findings: &mut Vec<Finding>,
    between_lines: &mut dyn FnMut(),
) {
    let lines = context::logical_lines(text);
    let paragraphs = context::paragraphs(&lines);
    let candidates = line_gate().lines(&lines, between_lines);
    rules::scan(field, &lines, &paragraphs, &candidates, findings, between_lines);
    for line in &lines {
        unicode::scan_line(field, line, findings);
    }
    sequence::scan(field, &lines, &paragraphs, &candidates, findings);
    findings.sort_by_key(|f| (f.field as u8, f.lines.0, f.rule));
}

#[cfg(test)]
mod tests;
