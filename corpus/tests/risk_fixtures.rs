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

fn outcomes() -> Vec<Outcome> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/risk_fixtures");
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

#[test]
fn fixtures_precision_and_recall() {
    let outcomes = outcomes();
    assert!(outcomes.len() >= 50, "fixture set: {} cases", outcomes.len());
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
    let false_alarms: Vec<&str> = benign
        .iter()
        .filter(|o| !o.found.is_empty())
        .map(|o| o.case.as_str())
        .collect();
    let malicious: Vec<&Outcome> = outcomes.iter().filter(|o| !o.expected.is_empty()).collect();
    let missed: Vec<&str> = malicious
        .iter()
        .filter(|o| o.found.is_empty())
        .map(|o| o.case.as_str())
        .collect();
    for o in &outcomes {
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
    assert!(missed.is_empty(), "malicious cases not flagged: {missed:?}");
    assert!(false_alarms.is_empty(), "benign look-alikes flagged: {false_alarms:?}");
    assert!(precision >= 0.9 && recall >= 0.9, "precision {precision:.3}, recall {recall:.3}");
}
