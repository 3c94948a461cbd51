//! The demo corpus (corpus/demo) is the project's own: it must parse, pass the code filter,
//! cover all seven categories, and the classifier must agree with the authors' intended
//! categories (listed in corpus/demo/README.md) on nearly every skill.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use pg_skills_corpus::category::{classify, scores, Category};
use pg_skills_corpus::dedup::{Pipeline, PipelineOptions};
use pg_skills_corpus::readers::{skill_files, Item, ReadLimits, TreeReader};
use pg_skills_corpus::source::SourceInfo;

/// Read at run time: a test binary cached from another checkout must not look there.
fn demo_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test")).join("demo")
}

fn intended() -> BTreeMap<String, Category> {
    let readme = std::fs::read_to_string(demo_dir().join("README.md")).unwrap();
    readme
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l
                .trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`'))
                .collect();
            Some((
                cells.first()?.to_string(),
                cells.get(1)?.parse::<Category>().ok()?,
            ))
        })
        .collect()
}

#[test]
fn demo_corpus_loads_whole_and_classifies_as_intended() {
    let intended = intended();
    assert!(
        intended.len() >= 40,
        "README lists {} skills",
        intended.len()
    );
    let reader = TreeReader {
        source: SourceInfo::detect(&demo_dir(), None, None),
        limits: ReadLimits::default(),
    };
    let mut pipeline = Pipeline::new(PipelineOptions { code_filter: true });
    let mut mismatches = Vec::new();
    let mut seen = BTreeSet::new();
    for f in skill_files(&demo_dir()).unwrap() {
        let item = reader.read_file(&f);
        if let Item::Skill(s) = &item {
            let got = classify(&s.name, &s.description, &s.instructions);
            seen.insert(got);
            let want = intended
                .get(&s.name)
                .unwrap_or_else(|| panic!("{} missing from README", s.name));
            if got != *want {
                mismatches.push(format!(
                    "{}: intended {want}, got {got} {:?}",
                    s.name,
                    scores(&s.name, &s.description, &s.instructions)
                ));
            }
        }
        pipeline.push(item);
    }
    let (skills, counts) = pipeline.finish();
    assert_eq!(counts.dropped_total(), 0, "{:?}", counts.drop_log);
    assert_eq!(skills.len(), intended.len());
    assert_eq!(seen.len(), 7, "all seven categories occur: {seen:?}");
    assert!(
        mismatches.len() * 10 <= skills.len(),
        "classifier disagrees on more than 10%:\n{}",
        mismatches.join("\n")
    );
    for m in &mismatches {
        eprintln!("classifier disagreement: {m}");
    }
}
