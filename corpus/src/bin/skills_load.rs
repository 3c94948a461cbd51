//! skills-load: ingest SKILL.md trees, JSONL records and BEIR corpora into pg_skills.
//!
//! ```text
//! skills-load --tree ./my-skills-repo --jsonl extra.jsonl --dsn "host=127.0.0.1 port=5432 user=postgres dbname=app"
//! ```
//! Ends with a summary: read, kept, dropped by reason, merged duplicates, new, updated.
//! Exit status: 0 when the load committed (even if inputs were dropped), 1 when nothing was
//! written (connection or database error), 2 for bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use pg_skills_corpus::dedup::{IngestCounts, Pipeline, PipelineOptions};
use pg_skills_corpus::load::{self, ApplyCounts};
use pg_skills_corpus::readers::{read_beir, read_jsonl, skill_files, Item, ReadLimits, TreeReader};
use pg_skills_corpus::source::SourceInfo;

// No Debug: the connection string may hold a password.
#[derive(Parser)]
#[command(
    name = "skills-load",
    version,
    about = "Load agent skills into pg_skills"
)]
struct Args {
    /// A directory tree of SKILL.md files (for example a git checkout). Repeatable.
    #[arg(long = "tree", value_name = "DIR")]
    trees: Vec<PathBuf>,
    /// A JSON-lines file of skill records. Repeatable.
    #[arg(long = "jsonl", value_name = "FILE")]
    jsonl: Vec<PathBuf>,
    /// A BEIR corpus.jsonl (dataset name = its folder name). Repeatable.
    #[arg(long = "beir", value_name = "FILE")]
    beir: Vec<PathBuf>,
    /// Repository URL recorded in provenance for --tree (default: from git or SOURCE.md).
    #[arg(long)]
    repository: Option<String>,
    /// Commit recorded in provenance for --tree (default: from git or SOURCE.md).
    #[arg(long)]
    commit: Option<String>,
    /// Keep skills that do not produce or guide code (benchmark corpora).
    #[arg(long)]
    no_code_filter: bool,
    /// Connection string (key=value or postgresql:// URL); default from PG_SKILLS_DSN,
    /// DATABASE_URL or PGHOST/PGPORT/PGUSER/PGDATABASE. TLS as libpq: sslmode=disable, prefer
    /// (the default; also from PGSSLMODE), require, verify-ca or verify-full, with
    /// sslrootcert=FILE or system for the verify modes.
    #[arg(long)]
    dsn: Option<String>,
    /// Do not retire skills whose files are gone from a --tree (by default a tree is read whole,
    /// so a skill it no longer holds is retired: kept with its history, not served).
    #[arg(long)]
    keep_missing: bool,
    /// Read, filter and deduplicate, but write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the summary as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Do not list dropped inputs one by one (the counts are still printed).
    #[arg(long)]
    quiet: bool,
}

fn default_dsn() -> String {
    if let Ok(d) = std::env::var("PG_SKILLS_DSN").or_else(|_| std::env::var("DATABASE_URL")) {
        return d;
    }
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let user = env("PGUSER", "postgres");
    format!(
        "host={} port={} user={} dbname={}",
        env("PGHOST", "127.0.0.1"),
        env("PGPORT", "5432"),
        user,
        env("PGDATABASE", &user)
    )
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    pb.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.trees.is_empty() && args.jsonl.is_empty() && args.beir.is_empty() {
        eprintln!("skills-load: nothing to load; pass --tree, --jsonl or --beir (see --help)");
        return ExitCode::from(2);
    }
    if args.trees.len() > 1 && (args.repository.is_some() || args.commit.is_some()) {
        eprintln!("skills-load: --repository/--commit describe one tree; load several trees in separate runs");
        return ExitCode::from(2);
    }
    let dsn = args.dsn.clone().unwrap_or_else(default_dsn);
    let mut client = if args.dry_run {
        None
    } else {
        match load::connect(&dsn) {
            Ok(c) => Some(c),
            // The message names the server by the redacted connection string.
            Err(e) => {
                eprintln!("skills-load: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let max_bytes = match client.as_mut().map(load::server_max_document_bytes) {
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            eprintln!(
                "skills-load: is the extension installed? (CREATE EXTENSION pg_skills): {}",
                load::describe(&e)
            );
            return ExitCode::from(1);
        }
        None => ReadLimits::default().max_bytes,
    };
    let limits = ReadLimits { max_bytes };
    let mut pipeline = Pipeline::new(PipelineOptions {
        code_filter: !args.no_code_filter,
    });

    let mut complete_sources = Vec::new();
    for tree in &args.trees {
        let source = SourceInfo::detect(tree, args.repository.clone(), args.commit.clone());
        if !args.keep_missing {
            complete_sources.push(source.location_prefix(tree));
        }
        let files = match skill_files(tree) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("skills-load: cannot read {}: {e}", tree.display());
                return ExitCode::from(2);
            }
        };
        let reader = TreeReader { source, limits };
        let pb = bar(files.len(), "read");
        // Read and parsed on every core, merged in the files' order.
        let items: Vec<Item> = {
            use rayon::prelude::*;
            files
                .par_iter()
                .map(|f| {
                    let item = reader.read_file(f);
                    pb.inc(1);
                    item
                })
                .collect()
        };
        pipeline.push_all(items);
        pb.finish_and_clear();
    }
    let mut push_all = |what: &PathBuf, items: std::io::Result<Vec<Item>>| -> bool {
        match items {
            Ok(items) => {
                pipeline.push_all(items);
                true
            }
            Err(e) => {
                eprintln!("skills-load: cannot read {}: {e}", what.display());
                false
            }
        }
    };
    for f in &args.jsonl {
        if !push_all(f, read_jsonl(f, limits)) {
            return ExitCode::from(2);
        }
    }
    for f in &args.beir {
        let dataset = f
            .canonicalize()
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "beir".into());
        if !push_all(f, read_beir(f, &dataset, limits)) {
            return ExitCode::from(2);
        }
    }
    let (skills, counts) = pipeline.finish();

    let applied = match client.as_mut() {
        None => ApplyCounts::default(),
        Some(c) => {
            let pb = bar(skills.len(), "stage");
            let result = load::load(c, &skills, &complete_sources, |n| pb.set_position(n as u64));
            pb.finish_and_clear();
            match result {
                Ok(a) => a,
                Err(e) => {
                    report(&args, &counts, &[], None);
                    eprintln!(
                        "skills-load: load failed, nothing was written: {}",
                        load::describe(e.as_ref())
                    );
                    return ExitCode::from(1);
                }
            }
        }
    };
    let flagged = if args.dry_run {
        risk_counts(&skills)
    } else {
        pg_skills_corpus::risk::Level::FLAGGED
            .into_iter()
            .map(|level| level.as_str())
            .zip(applied.flagged)
            .map(|(level, n)| (level, n as usize))
            .collect()
    };
    report(&args, &counts, &flagged, (!args.dry_run).then_some(applied));
    ExitCode::SUCCESS
}

/// Skills per risk level at medium or above (the same rules as the server's trigger), scanned
/// on every core: what a dry run reports (a load reports what the server stored).
fn risk_counts(skills: &[pg_skills_corpus::dedup::Prepared]) -> Vec<(&'static str, usize)> {
    use pg_skills_corpus::risk::{scan, Level};
    use rayon::prelude::*;
    let levels: Vec<Level> = skills
        .par_iter()
        .map(|p| scan(&p.skill.name, &p.skill.description, &p.skill.instructions).level)
        .collect();
    let mut counts = [0usize; 5];
    for level in levels {
        counts[level as usize] += 1;
    }
    Level::FLAGGED
        .into_iter()
        .map(|l| (l.as_str(), counts[l as usize]))
        .collect()
}

fn report(
    args: &Args,
    counts: &IngestCounts,
    flagged: &[(&str, usize)],
    applied: Option<ApplyCounts>,
) {
    if !args.quiet {
        for (location, reason) in &counts.drop_log {
            eprintln!("dropped {location}: {reason}");
        }
    }
    if args.json {
        let summary = serde_json::json!({
            "read": counts.read,
            "kept": counts.kept,
            "dropped": counts.dropped_total(),
            "dropped_by_reason": counts.dropped,
            "merged_duplicates": counts.merged_duplicates,
            "distinct": counts.kept - counts.merged_duplicates,
            "committed": applied.is_some(),
            "new": applied.map(|a| a.new),
            "updated": applied.map(|a| a.updated),
            "merged_into_existing": applied.map(|a| a.merged),
            "unchanged": applied.map(|a| a.unchanged),
            "retired": applied.map(|a| a.retired),
            "returned": applied.map(|a| a.returned),
            "flagged": flagged.iter().map(|(l, n)| (l.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        });
        println!("{summary}");
        return;
    }
    let reasons: Vec<String> = counts
        .dropped
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "read {}, kept {}, dropped {}{}, merged duplicates {}",
        counts.read,
        counts.kept,
        counts.dropped_total(),
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        counts.merged_duplicates
    );
    let flags: Vec<String> = flagged.iter().map(|(l, n)| format!("{l} {n}")).collect();
    println!(
        "risk findings: {} (skills.flagged_skill lists them)",
        flags.join(", ")
    );
    match applied {
        Some(a) => println!(
            "database: new {}, updated {}, provenance added {}, unchanged {}, retired {}, returned {}",
            a.new, a.updated, a.merged, a.unchanged, a.retired, a.returned
        ),
        None => println!("database: nothing written"),
    }
}
