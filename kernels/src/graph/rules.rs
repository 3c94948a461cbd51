//! Dependency and workflow edges read from skill documents, by these documented rules.
//!
//! A document's sections are found by their markdown headings (any level; a section runs to the
//! next heading of the same or a higher level) or by a line that starts with a label and a colon
//! (`Requires: ...`, `**Outputs:** ...`, that line only). A heading or label names a section kind
//! by its first words, case-insensitive:
//!
//! | kind     | headings / labels starting with                                               |
//! |----------|-------------------------------------------------------------------------------|
//! | needs    | prerequisite, requirement, requires, dependencies, depends on, input, before you |
//! | produces | output, produces, deliverable, artifact                                       |
//! | next     | next step, follow-up, then use, what's next                                   |
//! | related  | related skill, see also                                                       |
//!
//! Within a section, a *mention* of another skill is its name (case-insensitive) as a code span
//! (`` `name` ``), as a link text (`[name](...)`), as a link path segment (`](../name/)`), or as a
//! bare word when the name contains `-` or `_` (plain words like "docker" are too common to mean a
//! skill). Names under 3 characters are never matched. Then:
//!
//! 1. a needs section of B that mentions A: **dependency A → B**, weight 1 (rule `needs-mention`);
//! 2. a next section of A that mentions B: **workflow A → B**, weight 1 (rule `next-mention`);
//! 3. a related section of A that mentions B: **workflow A → B**, weight 0.5 (rule `related-mention`);
//! 4. an *artifact* (a file name: a word with a dot and a 1-5 letter extension such as
//!    `openapi.yaml`, or `Dockerfile` / `Makefile` / `Jenkinsfile`) in a produces section of A and
//!    in a needs section of B: **dependency A → B**, weight 1 (rule `artifact`). Artifacts that more
//!    than [`MAX_PRODUCERS`] skills produce (`README.md`) say nothing and are ignored.
//!
//! A skill never gets an edge to itself; a repeated (from, to, type) keeps its largest weight.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::EdgeType;

/// An artifact more skills than this produce links nothing.
pub const MAX_PRODUCERS: usize = 10;

/// A skill document as the rules read it.
#[derive(Clone, Copy, Debug)]
pub struct Document<'a> {
    pub id: i64,
    pub name: &'a str,
    pub text: &'a str,
}

/// An edge a rule found.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleEdge {
    pub from: i64,
    pub to: i64,
    pub kind: EdgeType,
    pub weight: f64,
    pub rule: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum SectionKind {
    Needs,
    Produces,
    Next,
    Related,
}

fn section_kind(title: &str) -> Option<SectionKind> {
    let t: String = title
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| t.starts_with(p));
    if starts(&[
        "prerequisite",
        "requirement",
        "requires",
        "dependencies",
        "depends on",
        "input",
        "before you",
    ]) {
        Some(SectionKind::Needs)
    } else if starts(&["output", "produces", "deliverable", "artifact"]) {
        Some(SectionKind::Produces)
    } else if starts(&[
        "next step",
        "follow-up",
        "follow up",
        "then use",
        "what's next",
    ]) {
        Some(SectionKind::Next)
    } else if starts(&["related skill", "see also"]) {
        Some(SectionKind::Related)
    } else {
        None
    }
}

/// The level and title of a markdown heading line.
fn heading(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    let level = trimmed.bytes().take_while(|&b| b == b'#').count();
    if (1..=6).contains(&level) && trimmed[level..].starts_with(' ') {
        Some((level, trimmed[level..].trim()))
    } else {
        None
    }
}

/// A `Label: rest` line (the label may be bold or a list item): its kind and the rest.
fn labelled_line(line: &str) -> Option<(SectionKind, &str)> {
    let trimmed = line.trim_start().trim_start_matches(['-', '*', ' ']);
    let colon = trimmed.find(':')?;
    if colon > 40 {
        return None;
    }
    let label = trimmed[..colon].trim_matches(['*', '_', ' ']);
    if label.split_whitespace().count() > 4 {
        return None;
    }
    let kind = section_kind(label)?;
    Some((
        kind,
        trimmed[colon + 1..].trim_start_matches(['*', '_', ' ']),
    ))
}

/// The text of each section kind of a document (sections of one kind concatenated).
fn sections(text: &str) -> BTreeMap<SectionKind, String> {
    let mut out: BTreeMap<SectionKind, String> = BTreeMap::new();
    let mut open: Option<(usize, SectionKind)> = None;
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence {
            if let Some((level, title)) = heading(line) {
                match open {
                    Some((open_level, _)) if level > open_level => {}
                    _ => open = section_kind(title).map(|k| (level, k)),
                }
                continue;
            }
            if let Some((kind, rest)) = labelled_line(line) {
                let s = out.entry(kind).or_default();
                s.push_str(rest);
                s.push('\n');
                continue;
            }
        }
        if let Some((_, kind)) = open {
            let s = out.entry(kind).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

/// Candidate names mentioned in `text`, lowercased: code spans, link texts, link path segments
/// and bare words containing `-` or `_`.
fn mentions(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut add = |s: &str| {
        let s = s
            .trim()
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        if s.len() >= 3 {
            out.insert(s);
        }
    };
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 1 && !span.contains('\n') {
            add(span);
        }
    }
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        add(&after[..close]);
        if let Some(target) = after[close + 1..].strip_prefix('(') {
            if let Some(end) = target.find(')') {
                for segment in target[..end].split('/') {
                    add(segment.trim_end_matches(".md"));
                }
            }
        }
        rest = &after[close + 1..];
    }
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_')) {
        let word = word.trim_matches(['-', '_']);
        if word.contains(['-', '_']) {
            add(word);
        }
    }
    out
}

/// File names in `text`, lowercased.
fn artifacts(text: &str) -> HashSet<String> {
    const NAMED: [&str; 4] = ["dockerfile", "makefile", "jenkinsfile", "procfile"];
    let mut out = HashSet::new();
    for word in text.split(|c: char| c.is_whitespace() || "`'\"()[]{},;<>|*".contains(c)) {
        let word = word.trim_end_matches(['.', ':']).to_lowercase();
        if NAMED.contains(&word.as_str()) {
            out.insert(word);
            continue;
        }
        let Some(dot) = word.rfind('.') else { continue };
        let (stem, ext) = (&word[..dot], &word[dot + 1..]);
        let stem = stem.rsplit('/').next().unwrap_or(stem);
        let file_like = !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_alphanumeric() || "-_.".contains(c))
            && stem.chars().any(|c| c.is_alphabetic())
            && (1..=5).contains(&ext.len())
            && ext.chars().all(|c| c.is_ascii_alphabetic());
        if file_like {
            out.insert(format!("{stem}.{ext}"));
        }
    }
    out
}

/// The edges the rules find among `documents`, in a deterministic order.
pub fn extract(documents: &[Document<'_>]) -> Vec<RuleEdge> {
    let mut rules = RuleExtractor::new(documents.iter().map(|d| (d.id, d.name)));
    for d in documents {
        rules.add_document(d.id, d.text);
    }
    rules.finish()
}

/// The rules over a library read one document at a time: every skill's name first (the
/// rules that name another skill look it up), then each text once. Between documents it keeps
/// only what the rules found (edges, each document's needed and produced artifacts), never a
/// text, so a library's texts need not be in memory at once.
pub struct RuleExtractor {
    by_name: HashMap<String, Vec<i64>>,
    /// (from, to, kind) → the best (weight, rule).
    found: BTreeMap<(i64, i64, &'static str), (f64, &'static str)>,
    produced: HashMap<String, Vec<i64>>,
    needed: Vec<(i64, HashSet<String>)>,
}

fn add_edge(
    found: &mut BTreeMap<(i64, i64, &'static str), (f64, &'static str)>,
    (from, to): (i64, i64),
    kind: EdgeType,
    weight: f64,
    rule: &'static str,
) {
    if from == to {
        return;
    }
    let slot = found
        .entry((from, to, kind.as_str()))
        .or_insert((weight, rule));
    if weight > slot.0 {
        *slot = (weight, rule);
    }
}

impl RuleExtractor {
    /// `names`: (id, name) of every skill of the library.
    pub fn new<'a>(names: impl IntoIterator<Item = (i64, &'a str)>) -> RuleExtractor {
        let mut by_name: HashMap<String, Vec<i64>> = HashMap::new();
        for (id, name) in names {
            let name = name.trim().to_lowercase();
            if name.len() >= 3 {
                by_name.entry(name).or_default().push(id);
            }
        }
        RuleExtractor {
            by_name,
            found: BTreeMap::new(),
            produced: HashMap::new(),
            needed: Vec::new(),
        }
    }

    /// Reads document `id`'s text (description and instructions).
    pub fn add_document(&mut self, id: i64, text: &str) {
        crate::interrupt::check();
        let RuleExtractor {
            by_name,
            found,
            produced,
            needed,
        } = self;
        for (kind, text) in sections(text) {
            let named = || {
                mentions(&text)
                    .into_iter()
                    .filter_map(|m| by_name.get(&m))
                    .flatten()
                    .copied()
                    .collect::<Vec<i64>>()
            };
            match kind {
                SectionKind::Needs => {
                    for other in named() {
                        add_edge(
                            found,
                            (other, id),
                            EdgeType::Dependency,
                            1.0,
                            "needs-mention",
                        );
                    }
                    needed.push((id, artifacts(&text)));
                }
                SectionKind::Next => {
                    for other in named() {
                        add_edge(found, (id, other), EdgeType::Workflow, 1.0, "next-mention");
                    }
                }
                SectionKind::Related => {
                    for other in named() {
                        add_edge(
                            found,
                            (id, other),
                            EdgeType::Workflow,
                            0.5,
                            "related-mention",
                        );
                    }
                }
                SectionKind::Produces => {
                    for a in artifacts(&text) {
                        produced.entry(a).or_default().push(id);
                    }
                }
            }
        }
    }

    /// The edges, in a deterministic order: the mentions found, and each needed artifact's
    /// producers (unless too many documents produce it).
    pub fn finish(mut self) -> Vec<RuleEdge> {
        for (consumer, wanted) in &self.needed {
            crate::interrupt::check();
            for a in wanted {
                match self.produced.get(a) {
                    Some(producers) if producers.len() <= MAX_PRODUCERS => {
                        for &p in producers {
                            add_edge(
                                &mut self.found,
                                (p, *consumer),
                                EdgeType::Dependency,
                                1.0,
                                "artifact",
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
        self.found
            .into_iter()
            .map(|((from, to, kind), (weight, rule))| RuleEdge {
                from,
                to,
                kind: EdgeType::parse(kind).expect("a kind we wrote"),
                weight,
                rule,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc<'a>(id: i64, name: &'a str, text: &'a str) -> Document<'a> {
        Document { id, name, text }
    }

    fn edges(docs: &[Document<'_>]) -> Vec<(i64, i64, &'static str, f64, &'static str)> {
        extract(docs)
            .into_iter()
            .map(|e| (e.from, e.to, e.kind.as_str(), e.weight, e.rule))
            .collect()
    }

    #[test]
    fn prerequisite_sections_make_dependency_edges() {
        let docs = [
            doc(1, "docker-build", "Build images.\n## Outputs\n- an image\n"),
            doc(
                2,
                "k8s-deploy",
                "Deploy.\n\n## Prerequisites\n- an image built with `docker-build`\n- a cluster\n\n## Steps\nUse docker-build again here, no edge.\n",
            ),
            doc(3, "Docker", "## Requirements\nInstall docker first.\n"),
        ];
        // "docker" (no hyphen) as a bare word is not a mention; docker-build in Steps is outside.
        assert_eq!(
            edges(&docs),
            vec![(1, 2, "dependency", 1.0, "needs-mention")]
        );
    }

    #[test]
    fn next_and_related_sections_make_workflow_edges() {
        let docs = [
            doc(
                1,
                "write-tests",
                "## Next steps\nRun [coverage-report](../coverage-report/SKILL.md).\n",
            ),
            doc(
                2,
                "coverage-report",
                "### See also\n- [Writing tests](../write-tests/)\n",
            ),
            doc(3, "lint", "**Related skills:** write-tests, format_code\n"),
            doc(4, "format_code", "nothing"),
        ];
        assert_eq!(
            edges(&docs),
            vec![
                (1, 2, "workflow", 1.0, "next-mention"),
                (2, 1, "workflow", 0.5, "related-mention"),
                (3, 1, "workflow", 0.5, "related-mention"),
                (3, 4, "workflow", 0.5, "related-mention"),
            ]
        );
    }

    #[test]
    fn artifacts_link_producers_to_consumers() {
        let mut docs = vec![
            doc(
                1,
                "openapi-design",
                "## Output\nWrites `openapi.yaml` and a Dockerfile.\n",
            ),
            doc(
                2,
                "client-codegen",
                "## Inputs\n- openapi.yaml (from the design step)\n",
            ),
            doc(
                3,
                "container",
                "Requires: a Dockerfile in the repository root.\n",
            ),
            doc(4, "docs", "## Inputs\nversion 1.2 and e.g. nothing\n"),
        ];
        assert_eq!(
            edges(&docs),
            vec![
                (1, 2, "dependency", 1.0, "artifact"),
                (1, 3, "dependency", 1.0, "artifact"),
            ]
        );
        // An artifact every skill produces links nothing.
        let texts: Vec<String> = (0..=MAX_PRODUCERS)
            .map(|_| "## Output\nREADME.md\n".to_string())
            .collect();
        docs = texts
            .iter()
            .enumerate()
            .map(|(i, t)| doc(100 + i as i64, "writer", t))
            .collect();
        docs.push(doc(1, "reader", "## Input\nREADME.md\n"));
        assert!(edges(&docs).is_empty());
    }

    #[test]
    fn sections_end_at_the_next_heading_and_code_fences_are_not_headings() {
        let text = "## Prerequisites\n- `alpha-one`\n### Details\n- `beta-two`\n## Usage\n- `gamma-three`\n```\n# Inputs\n`delta-four`\n```\n";
        let docs = [
            doc(1, "me", text),
            doc(2, "alpha-one", ""),
            doc(3, "beta-two", ""),
            doc(4, "gamma-three", ""),
            doc(5, "delta-four", ""),
        ];
        // The subsection stays inside Prerequisites; Usage ends it; "# Inputs" in a fence is code.
        assert_eq!(
            edges(&docs),
            vec![
                (2, 1, "dependency", 1.0, "needs-mention"),
                (3, 1, "dependency", 1.0, "needs-mention"),
            ]
        );
    }

    #[test]
    fn no_self_edges_and_duplicates_keep_the_largest_weight() {
        let docs = [
            doc(
                1,
                "alpha-one",
                "## See also\n`beta-two`, `alpha-one`\n## Next steps\n`beta-two`\n",
            ),
            doc(2, "beta-two", ""),
        ];
        assert_eq!(edges(&docs), vec![(1, 2, "workflow", 1.0, "next-mention")]);
    }
}
