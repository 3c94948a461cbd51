//! The risk scanner on a real corpus: how many skills each level flags, the top rules, and
//! examples (benches/RESULTS.md, "Skill trust"). Precision is what this shows: a scanner that
//! flags much of a real corpus is ignored.
//!
//!   cargo run --release -p pg_skills_benches --bin risk_report -- ../shared/corpus

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;

use pg_skills_corpus::readers::skill_files;
use pg_skills_corpus::risk::{scan, Level};
use pg_skills_corpus::skill::parse_skill_md;

#[derive(Parser)]
struct Args {
    /// A folder of SKILL.md trees (e.g. ../shared/corpus).
    corpus: PathBuf,
    /// Examples printed per rule.
    #[arg(long, default_value_t = 3)]
    examples: usize,
}

fn main() {
    let args = Args::parse();
    let files = skill_files(&args.corpus).expect("a corpus folder");
    let mut levels: BTreeMap<Level, usize> = BTreeMap::new();
    // rule -> (skills at medium+, skills with a low-only finding of it, examples)
    let mut rules: BTreeMap<&str, (usize, usize, Vec<String>)> = BTreeMap::new();
    let mut parsed = 0;
    let started = std::time::Instant::now();
    let mut bytes = 0usize;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let Ok(skill) = parse_skill_md(&text, None) else { continue };
        parsed += 1;
        bytes += skill.byte_len();
        let report = scan(&skill.name, &skill.description, &skill.instructions);
        *levels.entry(report.level).or_default() += 1;
        let rel = file.strip_prefix(&args.corpus).unwrap_or(file).display().to_string();
        let mut seen: Vec<&str> = Vec::new();
        for f in &report.findings {
            if seen.contains(&f.rule) {
                continue;
            }
            let top = report.findings.iter().filter(|g| g.rule == f.rule).map(|g| g.severity).max().unwrap();
            seen.push(f.rule);
            let e = rules.entry(f.rule).or_default();
            if top >= Level::Medium {
                e.0 += 1;
                if e.2.len() < args.examples {
                    let best = report.findings.iter().find(|g| g.rule == f.rule && g.severity == top).unwrap();
                    e.2.push(format!("{rel}:{} ({}): {}", best.lines.0, top.as_str(), best.excerpt.chars().take(110).collect::<String>()));
                }
            } else {
                e.1 += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    println!("{parsed} skills scanned ({:.1} MB) in {:.2} s", bytes as f64 / 1e6, elapsed.as_secs_f64());
    println!("\n| risk level | skills | share |\n|---|---|---|");
    for level in Level::ALL {
        let n = levels.get(&level).copied().unwrap_or(0);
        println!("| {} | {n} | {:.1}% |", level.as_str(), 100.0 * n as f64 / parsed.max(1) as f64);
    }
    let mut by_count: Vec<_> = rules.iter().collect();
    by_count.sort_by(|a, b| (b.1).0.cmp(&(a.1).0).then(a.0.cmp(b.0)));
    println!("\n| rule | skills at medium+ | skills with only a low (warned/quoted/scoped) match |\n|---|---|---|");
    for (rule, (n, low, _)) in &by_count {
        println!("| {rule} | {n} | {low} |");
    }
    println!("\nExamples (medium and above):");
    for (rule, (_, _, examples)) in &by_count {
        for e in examples {
            println!("- {rule}: {e}");
        }
    }
}
