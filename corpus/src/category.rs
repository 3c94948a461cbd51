//! The seven capability pools and the deterministic classifier that assigns a skill to one.
//!
//! Rules (documented in docs/ingestion.md, "Categories"):
//! 1. Text is lowercased and split into words on anything that is not a letter or digit.
//! 2. Each category has a list of cue words and two-word phrases. A cue found in the name counts
//!    4, in the description 2, in the instructions 1; in the instructions a cue counts at most
//!    3 times, so one long document cannot drown the name and description.
//! 3. `code_generation` cues are generic programming vocabulary that every skill uses, so its
//!    total counts half: a specific activity wins unless the generic signal is twice as strong.
//! 4. The category with the highest total wins. Ties go to the earlier category in
//!    [`Category::TIE_ORDER`] (the more specific activity first). No cue at all means
//!    `code_generation`, the pool of last resort for skills that produce code.
//!
//! Same input, same category: no randomness, no model.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    CodeGeneration,
    Testing,
    Debugging,
    RefactoringReview,
    DataMl,
    DevopsInfra,
    DocsTooling,
}

impl Category {
    /// In the order of the SQL enum.
    pub const ALL: [Category; 7] = [
        Category::CodeGeneration,
        Category::Testing,
        Category::Debugging,
        Category::RefactoringReview,
        Category::DataMl,
        Category::DevopsInfra,
        Category::DocsTooling,
    ];

    /// Tie-break order: specific activities before the generic "writes code".
    pub const TIE_ORDER: [Category; 7] = [
        Category::Testing,
        Category::Debugging,
        Category::RefactoringReview,
        Category::DevopsInfra,
        Category::DataMl,
        Category::DocsTooling,
        Category::CodeGeneration,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::CodeGeneration => "code_generation",
            Category::Testing => "testing",
            Category::Debugging => "debugging",
            Category::RefactoringReview => "refactoring_review",
            Category::DataMl => "data_ml",
            Category::DevopsInfra => "devops_infra",
            Category::DocsTooling => "docs_tooling",
        }
    }

    fn cues(self) -> &'static [&'static str] {
        match self {
            Category::CodeGeneration => &[
                "implement",
                "implementation",
                "generate",
                "generator",
                "scaffold",
                "scaffolding",
                "boilerplate",
                "component",
                "components",
                "endpoint",
                "endpoints",
                "frontend",
                "backend",
                "react",
                "vue",
                "svelte",
                "angular",
                "nextjs",
                "typescript",
                "javascript",
                "function",
                "functions",
                "class",
                "library",
                "sdk",
                "app",
                "application",
                "ui",
                "web",
                "mobile",
                "api",
                "rest",
                "graphql",
                "grpc",
                "server",
                "handler",
                "crate",
                "module",
                "feature",
                "prototype",
                "codegen",
                "type safe",
                "build a",
                "write code",
                "new code",
                "cli",
                "websocket",
                "auth",
                "authentication",
                "orm",
                "schema",
                "goroutine",
                "goroutines",
                "concurrency",
                "worker pool",
                "channels",
                "form",
                "forms",
                "migration",
                "types",
            ],
            Category::Testing => &[
                "test",
                "tests",
                "testing",
                "tested",
                "pytest",
                "jest",
                "vitest",
                "unittest",
                "junit",
                "tdd",
                "assert",
                "assertion",
                "assertions",
                "fixture",
                "fixtures",
                "mock",
                "mocks",
                "mocking",
                "stub",
                "coverage",
                "e2e",
                "playwright",
                "cypress",
                "selenium",
                "snapshot",
                "flaky",
                "proptest",
                "hypothesis",
                "testcontainers",
                "qa",
                "property based",
                "unit test",
                "unit tests",
                "integration test",
                "integration tests",
                "test suite",
                "test cases",
                "red green",
            ],
            Category::Debugging => &[
                "debug",
                "debugging",
                "debugger",
                "bug",
                "bugs",
                "exception",
                "traceback",
                "backtrace",
                "crash",
                "crashes",
                "panic",
                "segfault",
                "gdb",
                "lldb",
                "pdb",
                "valgrind",
                "heaptrack",
                "leak",
                "leaks",
                "troubleshoot",
                "troubleshooting",
                "diagnose",
                "diagnosing",
                "diagnosis",
                "bisect",
                "failing",
                "failure",
                "failures",
                "investigate",
                "race condition",
                "root cause",
                "stack trace",
                "error message",
                "deadlock",
                "slow query",
                "explain analyze",
                "profiling",
                "profiler",
            ],
            Category::RefactoringReview => &[
                "refactor",
                "refactoring",
                "review",
                "reviews",
                "reviewer",
                "reviewing",
                "cleanup",
                "smell",
                "smells",
                "duplication",
                "duplicate",
                "rename",
                "renaming",
                "restructure",
                "modernize",
                "legacy",
                "maintainability",
                "readability",
                "simplify",
                "code review",
                "pull request",
                "pull requests",
                "clean code",
                "technical debt",
                "tech debt",
                "best practices",
                "anti patterns",
                "extract function",
                "async await",
                "security review",
                "checklist",
            ],
            Category::DataMl => &[
                "data",
                "dataset",
                "datasets",
                "pandas",
                "numpy",
                "dataframe",
                "dataframes",
                "csv",
                "parquet",
                "analytics",
                "analysis",
                "statistics",
                "statistical",
                "model",
                "models",
                "training",
                "pytorch",
                "torch",
                "tensorflow",
                "keras",
                "sklearn",
                "scikit",
                "ml",
                "embedding",
                "embeddings",
                "neural",
                "visualization",
                "plot",
                "plots",
                "matplotlib",
                "jupyter",
                "notebook",
                "etl",
                "scientific",
                "bioinformatics",
                "genomics",
                "chemistry",
                "protein",
                "spark",
                "ndcg",
                "cross validation",
                "machine learning",
                "deep learning",
                "feature engineering",
                "window functions",
                "data cleaning",
                "time series",
                "regression model",
                "classifier",
                "llm",
                "inference",
                "fine tuning",
            ],
            Category::DevopsInfra => &[
                "deploy",
                "deployment",
                "deployments",
                "docker",
                "dockerfile",
                "container",
                "containers",
                "kubernetes",
                "k8s",
                "helm",
                "terraform",
                "ansible",
                "ci",
                "infrastructure",
                "cloud",
                "aws",
                "gcp",
                "azure",
                "nginx",
                "monitoring",
                "observability",
                "prometheus",
                "grafana",
                "backup",
                "restore",
                "cluster",
                "serverless",
                "cloudflare",
                "vercel",
                "systemd",
                "tls",
                "ssl",
                "dns",
                "devops",
                "sre",
                "incident",
                "pipeline",
                "pipelines",
                "workflow",
                "workflows",
                "pg dump",
                "github actions",
                "reverse proxy",
                "load balancer",
                "ci cd",
                "multi stage",
                "production",
                "rollout",
                "secrets",
            ],
            Category::DocsTooling => &[
                "documentation",
                "docs",
                "readme",
                "docstring",
                "docstrings",
                "changelog",
                "markdown",
                "openapi",
                "swagger",
                "tutorial",
                "wiki",
                "adr",
                "diagram",
                "diagrams",
                "mermaid",
                "lint",
                "linter",
                "linters",
                "linting",
                "formatter",
                "prettier",
                "eslint",
                "hook",
                "hooks",
                "makefile",
                "tooling",
                "template",
                "templates",
                "pptx",
                "docx",
                "pdf",
                "xlsx",
                "presentation",
                "commit",
                "commits",
                "release",
                "releases",
                "versioning",
                "editorconfig",
                "pre commit",
                "conventional commits",
                "decision record",
                "architecture decision",
                "task runner",
                "style guide",
                "writing",
                "skill",
                "skills",
            ],
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Category {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim())
            .ok_or_else(|| {
                let valid: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown category \"{s}\"; valid categories: {}",
                    valid.join(", ")
                )
            })
    }
}

const NAME_WEIGHT: u32 = 4;
const DESCRIPTION_WEIGHT: u32 = 2;
const INSTRUCTIONS_WEIGHT: u32 = 1;
const INSTRUCTIONS_CAP: u32 = 3;

/// What the classifier knows of a lowercase word or two-word phrase.
#[derive(Clone, Copy, Default)]
struct Role {
    /// Its number in [`Cues::list`], if it is a cue.
    cue: Option<u16>,
    /// Whether it is the first word of a two-word cue (the phrase is looked up after it).
    starts_phrase: bool,
}

/// Every cue of every category, numbered: the only words and phrases [`scores`] looks up.
struct Cues {
    /// Each cue once.
    list: Vec<&'static str>,
    /// Words and phrases by their text: one lookup per word.
    roles: HashMap<&'static str, Role, rustc_hash::FxBuildHasher>,
    /// Each category's cues' numbers, in [`Category::ALL`] order.
    of_category: Vec<Vec<u16>>,
}

fn cues() -> &'static Cues {
    static CUES: OnceLock<Cues> = OnceLock::new();
    CUES.get_or_init(|| {
        let mut cues = Cues {
            list: Vec::new(),
            roles: HashMap::default(),
            of_category: Vec::new(),
        };
        for category in Category::ALL {
            let mut ids = Vec::new();
            for &cue in category.cues() {
                let id = match cues.roles.get(cue).and_then(|r| r.cue) {
                    Some(id) => id,
                    None => {
                        cues.list.push(cue);
                        let id =
                            u16::try_from(cues.list.len() - 1).expect("fewer than 65,536 cues");
                        cues.roles.entry(cue).or_default().cue = Some(id);
                        id
                    }
                };
                // A cue listed twice in a category counts twice, as it always has.
                ids.push(id);
                if let Some((first, _)) = cue.split_once(' ') {
                    cues.roles.entry(first).or_default().starts_phrase = true;
                }
            }
            cues.of_category.push(ids);
        }
        cues
    })
}

/// How often each cue (word or two-word phrase) occurs in `text`, by its number in
/// [`Cues::list`]. Only cues are counted, so memory stays small however long the text is.
fn cue_counts(text: &str) -> Vec<u32> {
    let cues = cues();
    let mut counts = vec![0u32; cues.list.len()];
    // One word's buffers, reused: most words are ASCII and lowercase in place.
    let mut word = String::new();
    let mut previous = String::new();
    let mut previous_starts_phrase = false;
    let mut phrase = String::new();
    for raw in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        word.clear();
        if raw.is_ascii() {
            word.push_str(raw);
            word.make_ascii_lowercase();
        } else {
            word.push_str(&raw.to_lowercase());
        }
        let role = cues.roles.get(word.as_str()).copied().unwrap_or_default();
        if let Some(cue) = role.cue {
            counts[cue as usize] += 1;
        }
        if previous_starts_phrase {
            phrase.clear();
            phrase.push_str(&previous);
            phrase.push(' ');
            phrase.push_str(&word);
            if let Some(cue) = cues.roles.get(phrase.as_str()).and_then(|r| r.cue) {
                counts[cue as usize] += 1;
            }
        }
        previous_starts_phrase = role.starts_phrase;
        std::mem::swap(&mut previous, &mut word);
    }
    counts
}

/// Per-category scores, in [`Category::ALL`] order (exposed for explanations and tests).
pub fn scores(name: &str, description: &str, instructions: &str) -> [u32; 7] {
    let fields = [
        (cue_counts(name), NAME_WEIGHT, u32::MAX),
        (cue_counts(description), DESCRIPTION_WEIGHT, u32::MAX),
        (
            cue_counts(instructions),
            INSTRUCTIONS_WEIGHT,
            INSTRUCTIONS_CAP,
        ),
    ];
    let mut out = [0u32; 7];
    for (slot, ids) in out.iter_mut().zip(&cues().of_category) {
        for &id in ids {
            for (counts, weight, cap) in &fields {
                *slot += weight * counts[id as usize].min(*cap);
            }
        }
    }
    out
}

pub fn classify(name: &str, description: &str, instructions: &str) -> Category {
    let s = scores(name, description, instructions);
    // Compare doubled specific scores with the undoubled generic one (rule 3, in integers).
    let score_of = |c: Category| {
        let raw = s[Category::ALL.iter().position(|x| *x == c).unwrap()];
        if c == Category::CodeGeneration {
            raw
        } else {
            2 * raw
        }
    };
    let best = Category::TIE_ORDER
        .iter()
        .map(|c| score_of(*c))
        .max()
        .unwrap_or(0);
    if best == 0 {
        return Category::CodeGeneration;
    }
    Category::TIE_ORDER
        .into_iter()
        .find(|c| score_of(*c) == best)
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting only cues gives every cue the count a count of all words and phrases gives.
    #[test]
    fn cue_counts_match_counting_everything() {
        let everything = |text: &str| -> HashMap<String, u32> {
            let w: Vec<String> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            let mut counts = HashMap::new();
            for (i, word) in w.iter().enumerate() {
                *counts.entry(word.clone()).or_insert(0) += 1;
                if let Some(next) = w.get(i + 1) {
                    *counts.entry(format!("{word} {next}")).or_insert(0) += 1;
                }
            }
            counts
        };
        let texts = [
            "Write pytest fixtures for unit tests; run the unit tests in CI.",
            "Deploy to Kubernetes with a Dockerfile, a health check and a GitHub Actions workflow",
            "Find the commit that broke the build with git bisect, then read the stack trace.",
            "UNIT TESTS für die Überprüfung: Unit-Tests, ÉCRIRE des unit\ttests; Code Review, code  review",
            "",
        ];
        for text in texts {
            let all = everything(text);
            let counts = cue_counts(text);
            for (id, cue) in cues().list.iter().enumerate() {
                assert_eq!(
                    counts[id],
                    all.get(*cue).copied().unwrap_or(0),
                    "{cue:?} in {text:?}"
                );
            }
        }
    }

    #[test]
    fn clear_cases() {
        assert_eq!(
            classify(
                "pytest-fixtures",
                "Write pytest fixtures for unit tests",
                ""
            ),
            Category::Testing
        );
        assert_eq!(
            classify(
                "git-bisect",
                "Find the commit that introduced a bug",
                "Run git bisect to diagnose"
            ),
            Category::Debugging
        );
        assert_eq!(
            classify("code-review-checklist", "Review a pull request", ""),
            Category::RefactoringReview
        );
        assert_eq!(
            classify("pandas-cleaning", "Clean a dataset with pandas", ""),
            Category::DataMl
        );
        assert_eq!(
            classify("k8s-deploy", "Deploy a container to Kubernetes", ""),
            Category::DevopsInfra
        );
        assert_eq!(
            classify("readme-writer", "Write a README and docs", ""),
            Category::DocsTooling
        );
        assert_eq!(
            classify("axum-endpoint", "Implement a REST endpoint", ""),
            Category::CodeGeneration
        );
    }

    #[test]
    fn no_cue_defaults_to_code_generation() {
        assert_eq!(classify("", "", ""), Category::CodeGeneration);
        assert_eq!(classify("zzz", "qqq", "xxx"), Category::CodeGeneration);
    }

    #[test]
    fn name_outweighs_a_long_body() {
        let body = "deploy docker kubernetes ".repeat(100);
        // devops from the body: 3 cues, each capped at 3 -> 9.
        // testing: name "testing" 4 + description "unit tests", "tests", "mocks" 2 each -> 10.
        assert_eq!(
            classify("testing", "unit tests with mocks", &body),
            Category::Testing
        );
    }

    #[test]
    fn ties_follow_documented_order() {
        // one cue each for testing and devops in the name: testing comes first in TIE_ORDER
        assert_eq!(classify("test deploy", "", ""), Category::Testing);
        assert_eq!(classify("deploy docs", "", ""), Category::DevopsInfra);
    }

    #[test]
    fn deterministic_and_case_insensitive() {
        let a = classify("Docker-Compose", "DEPLOY services", "x");
        for _ in 0..10 {
            assert_eq!(classify("docker-compose", "deploy services", "x"), a);
        }
        assert_eq!(a, Category::DevopsInfra);
    }

    #[test]
    fn parse_and_display_round_trip() {
        for c in Category::ALL {
            assert_eq!(c.as_str().parse::<Category>().unwrap(), c);
        }
        let err = "cooking".parse::<Category>().unwrap_err();
        assert!(
            err.contains("code_generation") && err.contains("docs_tooling"),
            "{err}"
        );
    }
}
