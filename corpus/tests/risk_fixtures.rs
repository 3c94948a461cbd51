//! The risk scanner on the fixture set (corpus/tests/risk_fixtures, written from the rules'
//! descriptions only): every malicious case found with its rules, no benign look-alike reported
//! at medium or above, and per-rule precision and recall printed for benches/RESULTS.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use pg_skills_corpus::risk::{scan, Level, RULES};
use pg_skills_corpus::skill::parse_skill_md;

struct Outcome {
    case: String,
    expected: BTreeSet<String>,
    found: BTreeSet<String>,
}

fn outcomes(set: &str) -> Vec<Outcome> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(set);
    let expected: BTreeMap<String, Vec<String>> =
        serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (case, rules) in expected {
        let raw = std::fs::read_to_string(root.join(&case).join("SKILL.md"))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let skill = parse_skill_md(&raw, Some(&case)).expect("a valid SKILL.md");
        let report = scan(&skill.name, &skill.description, &skill.instructions);
        out.push(Outcome {
            case,
            expected: rules.into_iter().collect(),
            found: report
                .rules_at(Level::Medium)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        });
    }
    out
}

struct Scores {
    precision: f64,
    recall: f64,
    missed: Vec<String>,
    false_alarms: Vec<String>,
}

/// Prints the per-rule table and the differences; returns the scores.
fn evaluate(outcomes: &[Outcome]) -> Scores {
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    println!("| rule | TP | FP | FN |\n|---|---|---|---|");
    for rule in RULES {
        let id = rule.id;
        let t = outcomes.iter().filter(|o| o.expected.contains(id) && o.found.contains(id)).count();
        let f = outcomes.iter().filter(|o| !o.expected.contains(id) && o.found.contains(id)).count();
        let n = outcomes.iter().filter(|o| o.expected.contains(id) && !o.found.contains(id)).count();
        println!("| {id} | {t} | {f} | {n} |");
        tp += t;
        fp += f;
        fn_ += n;
    }
    let benign: Vec<&Outcome> = outcomes.iter().filter(|o| o.expected.is_empty()).collect();
    let false_alarms: Vec<String> = benign
        .iter()
        .filter(|o| !o.found.is_empty())
        .map(|o| o.case.clone())
        .collect();
    let malicious: Vec<&Outcome> = outcomes.iter().filter(|o| !o.expected.is_empty()).collect();
    let missed: Vec<String> = malicious
        .iter()
        .filter(|o| o.found.is_empty())
        .map(|o| o.case.clone())
        .collect();
    for o in outcomes {
        if o.expected != o.found {
            println!("differs: {}: expected {:?}, found {:?}", o.case, o.expected, o.found);
        }
    }
    let precision = tp as f64 / (tp + fp).max(1) as f64;
    let recall = tp as f64 / (tp + fn_).max(1) as f64;
    println!(
        "rules: precision {precision:.3}, recall {recall:.3} (TP {tp}, FP {fp}, FN {fn_}); \
         cases: {} of {} malicious flagged at medium+, {} of {} benign look-alikes flagged",
        malicious.len() - missed.len(),
        malicious.len(),
        false_alarms.len(),
        benign.len()
    );
    Scores { precision, recall, missed, false_alarms }
}

/// The first set, written from the rules' descriptions: every case right.
#[test]
fn fixtures_precision_and_recall() {
    let outcomes = outcomes("risk_fixtures");
    assert!(outcomes.len() >= 50, "fixture set: {} cases", outcomes.len());
    let s = evaluate(&outcomes);
    assert!(s.missed.is_empty(), "malicious cases not flagged: {:?}", s.missed);
    assert!(s.false_alarms.is_empty(), "benign look-alikes flagged: {:?}", s.false_alarms);
    assert!(s.precision >= 0.9 && s.recall >= 0.9, "precision {:.3}, recall {:.3}", s.precision, s.recall);
}

/// The second set (corpus/tests/risk_heldout), written later by another author without seeing
/// the scanner or the first set. Its blind result (before the fixes it led to) is in
/// benches/RESULTS.md; from then on it is a regression test like the first.
#[test]
fn heldout_precision_and_recall() {
    let outcomes = outcomes("risk_heldout");
    assert!(outcomes.len() >= 40, "held-out set: {} cases", outcomes.len());
    let s = evaluate(&outcomes);
    assert!(s.missed.is_empty(), "malicious cases not flagged: {:?}", s.missed);
    assert!(s.false_alarms.is_empty(), "benign look-alikes flagged: {:?}", s.false_alarms);
    assert!(s.precision >= 0.9 && s.recall >= 0.9, "precision {:.3}, recall {:.3}", s.precision, s.recall);
}
