//! Proof that KeyOpt learns: a planted-truth simulation, then MetaTool and SkillsBench
//! with simulated support runs, each compared with BM25, semantic and hybrid retrieval on queries
//! the fit never saw.
//!
//! 1. Planted truth: `keyopt::simulate::World` (an executor with P(pass) = σ(θ + u + vᵀ(q − μ))).
//!    Reported: Spearman(β, u), sign agreement of the fitted and planted suitability terms,
//!    held-out Hit@1 (the candidate with the highest planted P(pass) ranked first) for r alone and
//!    KeyOpt, and the all-tied control (every correction must be exactly 0).
//! 2. MetaTool: queries split at random by text (identical texts on one side; fixed seed) into
//!    80 % support and 20 % test. A support run serves the semantic top 10 of a support query:
//!    the labelled tool passes, every other arm fails (simulated outcomes; the labels are real).
//!    The fit sees only support runs; the test queries are then ranked by every method.
//! 3. SkillsBench: the 52 tasks in two folds by a hash of the task id, the skills plus the
//!    ../shared/corpus SKILL.md files as distractors (without the skillsbench fork the tasks come
//!    from). Each fold is ranked by a round fitted on the other fold's support runs.
//!
//! 4. Tasks that need several skills (`multi.rs`): MetaTool requests that join two queries of
//!    different tools, and the SkillsBench tasks that need 2–6 skills; support runs report only
//!    whether the whole run (a set of 5 skills) passed.
//!
//! Keys are the raw padded MiniLM keys (the semantic reference), so the gain is KeyOpt's alone.
//!
//!   cargo run --release -p pg_skills_benches --bin keyopt_eval -- --shared ../shared

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

mod multi;

use pg_skills_benches::eval::{
    bm25_normalised_scores, bm25_normalised_texts, bm25_rankings, cached_embeddings, distractors,
    evaluate, hash, load, row, rrf, Dataset,
};
use pg_skills_kernels::complements::{Link, LinkEdge};
use pg_skills_kernels::compressor::{self, TrainOptions, TrainingSet};
use pg_skills_kernels::encoder::{document_text, Encoder, DEFAULT_MODEL_DIR};
use pg_skills_kernels::graph::{rules, EdgeType};
use pg_skills_kernels::keyopt::fit::{
    choose_share, fit, paired_gain, FitOptions, Fitted, SupportEvent, BM25_SHARES,
    DEFAULT_BM25_SHARE,
};
use pg_skills_kernels::keyopt::memory::{self, EventMemory};
use pg_skills_kernels::keyopt::scenarios::{DEMO_QUESTIONS, DEMO_SUPPORT, DEMO_WINNER};
use pg_skills_kernels::keyopt::simulate::{spearman, World};
use pg_skills_kernels::keyopt::{Arm, Round, Settings};
use pg_skills_kernels::needs;
use pg_skills_kernels::rng::SplitMix64;
use pg_skills_kernels::vector::dot;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    #[arg(long, default_value = DEFAULT_MODEL_DIR)]
    model: PathBuf,
    /// Seeds the support/test split.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Skip the SkillsBench part (it embeds about 1,100 distractor documents on its first run).
    #[arg(long)]
    no_skillsbench: bool,
    /// Skip the MetaTool part.
    #[arg(long)]
    no_metatool: bool,
    /// The demo corpus (the feedback-loop scenario of examples/demo.sql).
    #[arg(long, default_value = "corpus/demo")]
    demo: PathBuf,
    /// Only the planted truth and the demo scenario.
    #[arg(long)]
    demo_only: bool,
    /// Fit options other than the defaults, to compare.
    #[arg(long)]
    lambda_beta: Option<f64>,
    #[arg(long)]
    min_gain_se: Option<f64>,
    /// true/false: bound the β of one-sided skills by the deficits (leads) seen in support.
    #[arg(long)]
    cap_beta: Option<bool>,
    /// true/false: bound how far behind in relevance a skill may be lifted (by the largest
    /// deficit it overcame in support).
    #[arg(long)]
    bound_lifts: Option<bool>,
    /// The event sharpness grid, e.g. 5,10,20.
    #[arg(long, value_delimiter = ',')]
    kappas: Option<Vec<f32>>,
    /// Skip the planted-truth simulation.
    #[arg(long)]
    no_planted: bool,
    /// Only the tasks that need several skills (and the single-skill tables' fits they share
    /// nothing with): skips the single-skill tables and the base relevance comparison.
    #[arg(long)]
    multi_only: bool,
    /// Skip the base relevance comparison (about 5 minutes).
    #[arg(long)]
    no_base_relevance: bool,
    /// Weight of covering a request's parts (`needs::cover`), in key-score units.
    #[arg(long, default_value_t = needs::COVERAGE_WEIGHT)]
    cover_weight: f32,
    /// Width of a part's coverage (`needs::cover`), in key-score units.
    #[arg(long, default_value_t = needs::COVERAGE_WIDTH)]
    cover_width: f32,
    /// MetaTool's skill keys through a compressor trained on the support queries' labelled
    /// pairs (what `skills.train_compressor` gives a library that has them), instead of the raw
    /// keys: every MetaTool table then reads the compressed keys.
    #[arg(long)]
    compressor: bool,
    /// With --compressor: serve the support runs in this many batches, each later batch by
    /// KeyOpt as trained on the batches before it (1: every run from the raw keys).
    #[arg(long, default_value_t = 1)]
    online: usize,
    /// Read the single-tool round with a grid of event settings on the test queries (a
    /// diagnostic of the headroom; not how settings are chosen).
    #[arg(long)]
    settings_sweep: bool,
    /// Print the Hit@1 of a nearest-neighbour vote over every support label, by key similarity
    /// and with the requests' words mixed in (a diagnostic).
    #[arg(long)]
    nearest_labels: bool,
    /// With --compressor: the single-tool round is fitted with each support run's r from a
    /// compressor trained on the other half of the support runs (cross-fitted), not from the
    /// compressor trained on it.
    #[arg(long)]
    cross_fit: bool,
    /// The BM25 share a round that corrects nothing at the key score alone is read with in the
    /// base relevance comparison (`pg_skills.keyopt_bm25_share`).
    #[arg(long, default_value_t = DEFAULT_BM25_SHARE as f32)]
    default_share: f32,
    /// Key each part of a request from the request's own pass (`Encoder::embed_with_parts`)
    /// instead of encoding it alone.
    #[arg(long)]
    parts_in_context: bool,
}

static FIT_OPTIONS: std::sync::OnceLock<FitOptions> = std::sync::OnceLock::new();
/// `--default-share`.
static DEFAULT_SHARE: std::sync::OnceLock<f32> = std::sync::OnceLock::new();

/// The share of BM25 a round that corrects nothing is read with: `--default-share`, else the
/// extension's default.
fn default_share() -> f32 {
    DEFAULT_SHARE
        .get()
        .copied()
        .unwrap_or(DEFAULT_BM25_SHARE as f32)
}

/// The fit options of this run: the defaults with the command line's overrides.
fn fit_options() -> FitOptions {
    FIT_OPTIONS.get().cloned().unwrap_or_default()
}

/// Document indices by descending key score, the first `n`.
fn semantic_top(query: &[f32], keys: &[Vec<f32>], n: usize) -> Vec<(usize, f32)> {
    let mut scored: Vec<(usize, f32)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (i, dot(query, k)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(n);
    scored
}

/// The KeyOpt ranking of one query: semantic top 10, event recall (when `recall`, and the round
/// is not neutral), scored by S.
fn keyopt_ranking(
    round: &Round,
    memory: &EventMemory,
    query: &[f32],
    keys: &[Vec<f32>],
    recall: bool,
) -> Vec<usize> {
    keyopt_ranking_with(round, memory, query, keys, recall, None)
}

/// [`keyopt_ranking`] of a round fitted on another base relevance r(skill) than qᵀk0.
fn keyopt_ranking_with(
    round: &Round,
    memory: &EventMemory,
    query: &[f32],
    keys: &[Vec<f32>],
    recall: bool,
    relevance: Option<&dyn Fn(usize) -> f32>,
) -> Vec<usize> {
    keyopt_ranking_scored(round, memory, query, keys, recall, relevance)
        .into_iter()
        .map(|(d, _)| d)
        .collect()
}

/// [`keyopt_ranking_with`] with each skill's S.
fn keyopt_ranking_scored(
    round: &Round,
    memory: &EventMemory,
    query: &[f32],
    keys: &[Vec<f32>],
    recall: bool,
    relevance: Option<&dyn Fn(usize) -> f32>,
) -> Vec<(usize, f32)> {
    let semantic: Vec<i64> = semantic_top(query, keys, 10)
        .into_iter()
        .map(|(d, _)| d as i64)
        .collect();
    let neighbours = memory.neighbours(query, memory::NEIGHBOURS);
    let recalled = if recall && round.corrections {
        let kept: HashSet<i64> = semantic[..memory::KEPT].iter().copied().collect();
        memory::recall(
            &neighbours,
            memory::RECALLED,
            memory::RECALL_MIN_SIMILARITY,
            |s| kept.contains(&s),
        )
    } else {
        Vec::new()
    };
    let pool: Vec<usize> = memory::candidate_pool(&semantic, &recalled, 10)
        .into_iter()
        .map(|(s, _)| s as usize)
        .collect();
    let q = round.query(query);
    round
        .rank_with(&pool, &q, relevance, |s| event_term(round, &neighbours, s))
        .into_iter()
        .map(|(d, parts)| (d, parts.total()))
        .collect()
}

/// The KeyOpt score S for `query` of each skill of `pool` (pool order): from `ranked` (the
/// query's own KeyOpt ranking) where it is there, else read for the rest of the pool alone (a
/// skill's lift bound acts against rivals of its own ranking, so the skills of `ranked` keep
/// the scores that ranking gave them).
fn keyopt_scored(
    round: &Round,
    memory: &EventMemory,
    query: &[f32],
    ranked: &[(usize, f32)],
    pool: &[usize],
) -> Vec<f32> {
    let mut scored: HashMap<usize, f32> = ranked.iter().copied().collect();
    let rest: Vec<usize> = pool
        .iter()
        .copied()
        .filter(|d| !scored.contains_key(d))
        .collect();
    if !rest.is_empty() {
        let neighbours = memory.neighbours(query, memory::NEIGHBOURS);
        let q = round.query(query);
        for (d, parts) in round.rank_with(&rest, &q, None, |s| event_term(round, &neighbours, s)) {
            scored.insert(d, parts.total());
        }
    }
    pool.iter().map(|d| scored[d]).collect()
}

/// Whether part keys are read in their request's pass (`--parts-in-context`), as the server
/// serves them, instead of each part encoded alone.
static PARTS_IN_CONTEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keys of the parts of each text (`needs::parts`; none for a text of one part).
fn part_keys(encoder: &Encoder, texts: &[String]) -> Vec<Vec<Vec<f32>>> {
    if PARTS_IN_CONTEXT.load(std::sync::atomic::Ordering::Relaxed) {
        return pg_skills_benches::eval::cached_parts_in_context(encoder, texts)
            .into_iter()
            .map(|parts| parts.iter().map(|e| compressor::query_key(e)).collect())
            .collect();
    }
    let split: Vec<Vec<String>> = texts
        .iter()
        .map(|t| {
            let p = needs::parts(t);
            if p.len() < 2 {
                Vec::new()
            } else {
                p
            }
        })
        .collect();
    let flat: Vec<String> = split.iter().flatten().cloned().collect();
    let mut keys = cached_embeddings(encoder, &flat)
        .into_iter()
        .map(|e| compressor::query_key(&e));
    split
        .iter()
        .map(|p| {
            p.iter()
                .map(|_| keys.next().expect("one key per part"))
                .collect()
        })
        .collect()
}

/// α·E(q, s) of a round (0 when it does not read events).
fn event_term(round: &Round, neighbours: &[memory::Neighbour], skill: usize) -> f32 {
    if round.settings.alpha == 0.0 {
        0.0
    } else {
        round.settings.alpha * memory::event_reading(neighbours, skill as i64, round.settings.kappa)
    }
}

/// Support runs: the semantic top 10 of each support query; labelled documents pass.
fn support_runs(
    data: &Dataset,
    queries: &[usize],
    query_keys: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
    seed: u64,
) -> Vec<SupportEvent> {
    support_runs_with(data, queries, query_keys, doc_keys, seed, None)
}

/// [`support_runs`] with the base relevance r(query, document) of each arm given (None: qᵀk0).
fn support_runs_with(
    data: &Dataset,
    queries: &[usize],
    query_keys: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
    seed: u64,
    relevance: Option<&dyn Fn(usize, usize) -> f32>,
) -> Vec<SupportEvent> {
    let serve = |q: usize| {
        semantic_top(&query_keys[q], doc_keys, 10)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    };
    support_runs_served(data, queries, query_keys, seed, relevance, &serve)
}

/// Support runs of `queries`, each serving the 10 skills `serve(query)` returns; labelled
/// documents pass.
fn support_runs_served(
    data: &Dataset,
    queries: &[usize],
    query_keys: &[Vec<f32>],
    seed: u64,
    relevance: Option<&dyn Fn(usize, usize) -> f32>,
    serve: &(dyn Fn(usize) -> Vec<usize> + Sync),
) -> Vec<SupportEvent> {
    let doc_index: HashMap<&str, usize> = data
        .docs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.0.as_str(), i))
        .collect();
    queries
        .iter()
        .map(|&q| {
            let (qid, text) = &data.queries[q];
            let relevant: HashSet<usize> = data
                .qrels
                .get(qid)
                .into_iter()
                .flat_map(|r| r.keys())
                .filter_map(|d| doc_index.get(d.as_str()).copied())
                .collect();
            let served = serve(q);
            SupportEvent {
                key: query_keys[q].clone(),
                pairing: hash(seed, text),
                group: hash(seed, text),
                arms: served
                    .iter()
                    .map(|&d| Arm {
                        skill: d as i64,
                        passed: relevant.contains(&d),
                    })
                    .collect(),
                relevance: relevance.map(|r| served.iter().map(|&d| r(q, d)).collect()),
                set: None,
            }
        })
        .collect()
}

fn memory_of(events: &[SupportEvent]) -> EventMemory {
    let mut memory = EventMemory::new(compressor::KEY_DIMS);
    for e in events {
        memory.push(&e.key, e.reading_arms());
    }
    memory
}

fn describe_fit(label: &str, fitted: &Fitted, seconds: f64) -> String {
    let r = &fitted.report;
    let best = r.cv.iter().map(|c| c.accuracy).fold(0.0f64, f64::max);
    format!(
        "{label}: {} events, {} arms, {} discordant and {} tied tasks, {:.0} weighted pairs; CV pair accuracy r alone {:.3}, best setting {:.3} (gain {:.3} ± {:.3} SE); chosen {}{:?}; ρ {:.2}; fit {seconds:.1} s\n",
        r.events,
        r.arms,
        r.discordant_groups,
        r.tied_groups,
        r.pairs,
        r.relevance_only_accuracy,
        best,
        r.best_gain,
        r.best_gain_se,
        if r.corrections { "" } else { "no correction (r alone wins CV) " },
        fitted.settings,
        fitted.rho,
    )
}

struct Methods<'a> {
    data: &'a Dataset,
    query_keys: &'a [Vec<f32>],
    /// Keys of each query's parts (none for a query of one part).
    part_keys: Vec<Vec<Vec<f32>>>,
    doc_keys: &'a [Vec<f32>],
}

impl<'a> Methods<'a> {
    fn new(
        encoder: &Encoder,
        data: &'a Dataset,
        query_keys: &'a [Vec<f32>],
        doc_keys: &'a [Vec<f32>],
    ) -> Methods<'a> {
        let texts: Vec<String> = data.queries.iter().map(|q| q.1.clone()).collect();
        Methods {
            data,
            query_keys,
            part_keys: part_keys(encoder, &texts),
            doc_keys,
        }
    }

    /// The table rows of every method over `test`, with the round and memory for each query.
    fn table<'r>(
        &self,
        test: &[usize],
        round_of: impl Fn(usize) -> (&'r Round, &'r EventMemory),
    ) -> String {
        let bm25 = bm25_rankings(self.data, test, 100);
        let semantic = |q: usize, n: usize| -> Vec<usize> {
            semantic_top(&self.query_keys[q], self.doc_keys, n)
                .into_iter()
                .map(|(d, _)| d)
                .collect()
        };
        let mut out = String::from(
            "| method | NDCG@10 | Recall@10 | Hit@1 | MRR@10 |\n|---|---|---|---|---|\n",
        );
        out += &(row(
            "BM25",
            &evaluate(self.data, test, |q| {
                bm25[&q][..bm25[&q].len().min(10)].to_vec()
            }),
        ) + "\n");
        out += &(row(
            "semantic (q·k0)",
            &evaluate(self.data, test, |q| semantic(q, 10)),
        ) + "\n");
        out += &(row(
            "hybrid (RRF k = 60 of BM25 and semantic top 100)",
            &evaluate(self.data, test, |q| rrf(&bm25[&q], &semantic(q, 100))),
        ) + "\n");
        out += &(row(
            "KeyOpt without event recall",
            &evaluate(self.data, test, |q| {
                let (round, memory) = round_of(q);
                keyopt_ranking(round, memory, &self.query_keys[q], self.doc_keys, false)
            }),
        ) + "\n");
        out += &(row(
            "**KeyOpt** (6 kept + up to 4 recalled)",
            &evaluate(self.data, test, |q| {
                let (round, memory) = round_of(q);
                keyopt_ranking(round, memory, &self.query_keys[q], self.doc_keys, true)
            }),
        ) + "\n");
        out += &(row(
            "semantic, parts covered",
            &evaluate(self.data, test, |q| {
                multi::semantic_covered(&self.query_keys[q], &self.part_keys[q], self.doc_keys)
            }),
        ) + "\n");
        out += &(row(
            "KeyOpt, parts covered",
            &evaluate(self.data, test, |q| {
                let (round, memory) = round_of(q);
                multi::keyopt_covered(
                    round,
                    memory,
                    &self.query_keys[q],
                    &self.part_keys[q],
                    self.doc_keys,
                )
            }),
        ) + "\n");
        let split = test
            .iter()
            .filter(|&&q| !self.part_keys[q].is_empty())
            .count();
        out += &format!(
            "\n({split} of {} test queries have more than one part.)\n",
            test.len()
        );
        out
    }
}

fn planted_truth() -> String {
    let mut out = String::from("\n### Planted truth (simulated executor)\n\n");
    let world = World::new(42, 200, 20, compressor::KEY_DIMS);
    let support = world.support(7, 20_000, 4, 10);
    let t = Instant::now();
    let fitted = fit(&world.skill_keys, &support, &fit_options());
    let seconds = t.elapsed().as_secs_f64();
    out += &describe_fit("support", &fitted, seconds);
    let round = Round::new(&world.skill_keys, &fitted);
    let mut rng = SplitMix64(1234);
    let (mut agree, mut clear) = (0usize, 0usize);
    let (mut hit_r, mut hit_k, mut pass_r, mut pass_k, mut pass_best) = (0, 0, 0.0, 0.0, 0.0);
    let tasks = 5000;
    for _ in 0..tasks {
        let task = world.task(&mut rng, 0);
        let candidates = world.candidates(&task.key, 10);
        let q = round.query(&task.key);
        for &s in &candidates {
            let planted = world.suitability(&task.key, s);
            if planted.abs() > 0.5 {
                clear += 1;
                agree += (dot(&q.centered, &fitted.dk[s]).signum() == planted.signum()) as usize;
            }
        }
        let p = |s: usize| world.pass_probability(&task, s);
        let best = *candidates
            .iter()
            .max_by(|&&a, &&b| p(a).total_cmp(&p(b)))
            .unwrap();
        let top = round.rank(&candidates, &q, |_| 0.0)[0].0;
        hit_r += (candidates[0] == best) as usize;
        hit_k += (top == best) as usize;
        pass_r += p(candidates[0]) as f64;
        pass_k += p(top) as f64;
        pass_best += p(best) as f64;
    }
    let n = tasks as f64;
    out += &format!(
        "\n200 skills, 20 topics, 512-d keys; 20,000 support tasks (4 per source question) run with their top 10; {tasks} fresh test tasks.\n\n\
         | measure | value |\n|---|---|\n\
         | Spearman(β, planted u) | {:.3} |\n\
         | sign agreement of (q − μ)ᵀΔk with planted vᵀ(q − μ), where that is > 0.5 in size ({clear} cases) | {:.3} |\n\
         | Hit@1 (best planted P(pass) ranked first), r alone | {:.3} |\n\
         | Hit@1, KeyOpt | {:.3} |\n\
         | mean planted P(pass) of the first result: r alone / KeyOpt / best possible | {:.3} / {:.3} / {:.3} |\n",
        spearman(&fitted.beta, &world.u),
        agree as f64 / clear.max(1) as f64,
        hit_r as f64 / n,
        hit_k as f64 / n,
        pass_r / n,
        pass_k / n,
        pass_best / n,
    );
    // Control: the same support with every task tied (all arms pass or all fail).
    let tied: Vec<SupportEvent> = support
        .iter()
        .enumerate()
        .map(|(i, e)| SupportEvent {
            arms: e
                .arms
                .iter()
                .map(|a| Arm {
                    skill: a.skill,
                    passed: i % 2 == 0,
                })
                .collect(),
            ..e.clone()
        })
        .collect();
    let neutral = fit(&world.skill_keys, &tied, &fit_options());
    out += &format!(
        "| all-tied control: every β and Δk exactly 0, ρ = 1, settings none | {} |\n",
        neutral.is_neutral() && neutral.rho == 1.0 && neutral.settings == Settings::NONE
    );
    out
}

/// Raw padded keys of a dataset's documents and queries (embeddings cached on disk).
fn raw_keys(encoder: &Encoder, data: &Dataset) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let docs: Vec<String> = data
        .docs
        .iter()
        .map(|d| document_text(&d.1, &d.2, &d.3))
        .collect();
    let queries: Vec<String> = data.queries.iter().map(|q| q.1.clone()).collect();
    let doc_keys = cached_embeddings(encoder, &docs)
        .iter()
        .map(|e| compressor::skill_key(None, e))
        .collect();
    let query_keys = cached_embeddings(encoder, &queries)
        .iter()
        .map(|e| compressor::query_key(e))
        .collect();
    (doc_keys, query_keys)
}

/// Skill keys through a compressor trained, as `skills.train_compressor()` trains it from the
/// recorded runs, on the (task, skill) pairs of the arms that passed in `events` (the support
/// runs, served from the raw keys before any compressor existed), and a line describing the
/// training. Test queries are never in `events`.
fn compressed_doc_keys(
    encoder: &Encoder,
    data: &Dataset,
    support: &[usize],
    events: &[SupportEvent],
    keep: impl Fn(&SupportEvent) -> bool,
    seed: u64,
) -> (Vec<Vec<f32>>, String) {
    let docs: Vec<String> = data
        .docs
        .iter()
        .map(|d| document_text(&d.1, &d.2, &d.3))
        .collect();
    let doc_embeddings = cached_embeddings(encoder, &docs);
    assert_eq!(
        events.len(),
        support.len(),
        "one support run per support query"
    );
    let (support, events): (Vec<usize>, Vec<&SupportEvent>) = support
        .iter()
        .zip(events)
        .filter(|(_, e)| keep(e))
        .map(|(&q, e)| (q, e))
        .unzip();
    // Rows of every query's embedding (the list `raw_keys` caches), not a new list per subset:
    // each subset of runs would embed its queries again and cache them in a file of its own.
    let all: Vec<String> = data.queries.iter().map(|q| q.1.clone()).collect();
    let embedded = cached_embeddings(encoder, &all);
    let queries: Vec<Vec<f32>> = support.iter().map(|&q| embedded[q].clone()).collect();
    let pairs: Vec<(usize, usize)> = events
        .iter()
        .enumerate()
        .flat_map(|(i, e)| {
            e.arms
                .iter()
                .filter(|a| a.passed)
                .map(move |a| (i, a.skill as usize))
        })
        .collect();
    let set = TrainingSet {
        queries: &queries,
        documents: &doc_embeddings,
        pairs: &pairs,
    };
    let options = TrainOptions {
        seed,
        ..Default::default()
    };
    let t = Instant::now();
    let (trained, report) = compressor::train(&set, &options, &mut |_| {}).expect("training");
    let keys = doc_embeddings
        .iter()
        .map(|e| compressor::skill_key(Some(&trained), e))
        .collect();
    let line = format!(
        "compressor trained on the {} passing arms of the {} support runs in {:.0} s (hidden {}, best epoch {} of {}; validation MRR raw {:.3} → {:.3})\n",
        pairs.len(),
        events.len(),
        t.elapsed().as_secs_f64(),
        trained.hidden,
        report.best_epoch,
        report.epochs_run,
        report.validation_mrr_raw,
        report.validation_mrr
    );
    (keys, line)
}

/// Support runs served as a library that learns serves them: the support queries in `phases`
/// batches (by a hash of their text); the first batch is served from the raw keys, each later
/// one by KeyOpt as it stands after the batches before it (the compressor retrained on their
/// passing arms, a round fitted on their runs, event recall), as when `skills.train_compressor()`
/// and `skills.fit()` run between batches. Returns the runs in support order and a line per
/// batch.
fn online_support_runs(
    encoder: &Encoder,
    data: &Dataset,
    support: &[usize],
    query_keys: &[Vec<f32>],
    raw_doc_keys: &[Vec<f32>],
    phases: usize,
    seed: u64,
) -> (Vec<SupportEvent>, String) {
    let phase_of = |q: usize| (hash(seed ^ 0x5eed, &data.queries[q].1) % phases as u64) as usize;
    let mut events: Vec<Option<SupportEvent>> = vec![None; support.len()];
    let mut doc_keys = raw_doc_keys.to_vec();
    let mut learned: Option<(Round, EventMemory)> = None;
    let mut log = String::new();
    for phase in 0..phases {
        let at: Vec<usize> = (0..support.len())
            .filter(|&i| phase_of(support[i]) == phase)
            .collect();
        let queries: Vec<usize> = at.iter().map(|&i| support[i]).collect();
        let runs = match &learned {
            None => support_runs(data, &queries, query_keys, &doc_keys, seed),
            Some((round, memory)) => {
                let serve =
                    |q: usize| keyopt_ranking(round, memory, &query_keys[q], &doc_keys, true);
                support_runs_served(data, &queries, query_keys, seed, None, &serve)
            }
        };
        let found = runs
            .iter()
            .filter(|e| e.arms.iter().any(|a| a.passed))
            .count();
        log += &format!(
            "batch {phase}: {} runs served by {}, {found} served a passing skill ({:.3})\n",
            runs.len(),
            if learned.is_none() {
                "the raw keys"
            } else {
                "KeyOpt on the keys trained so far"
            },
            found as f64 / runs.len().max(1) as f64
        );
        for (&i, e) in at.iter().zip(runs) {
            events[i] = Some(e);
        }
        if phase + 1 < phases {
            let (so_far, runs): (Vec<usize>, Vec<SupportEvent>) = support
                .iter()
                .zip(&events)
                .filter_map(|(&q, e)| e.clone().map(|e| (q, e)))
                .unzip();
            let (keys, line) = compressed_doc_keys(encoder, data, &so_far, &runs, |_| true, seed);
            log += &format!("  then {line}");
            doc_keys = keys;
            let fitted = fit(&doc_keys, &runs, &fit_options());
            learned = Some((Round::new(&doc_keys, &fitted), memory_of(&runs)));
        }
    }
    let events = events
        .into_iter()
        .map(|e| e.expect("every support query in one batch"))
        .collect();
    (events, log)
}

/// Words of a request for [`lexical_vectors`]: lower-cased runs of letters and digits of two
/// characters or more.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 2)
        .map(|w| w.to_lowercase())
        .collect()
}

/// Unit TF-IDF vectors of every query's words, the IDF counted over `support` alone.
fn lexical_vectors(data: &Dataset, support: &[usize]) -> Vec<HashMap<String, f32>> {
    let mut df: HashMap<String, f32> = HashMap::new();
    for &s in support {
        let seen: HashSet<String> = words(&data.queries[s].1).into_iter().collect();
        for w in seen {
            *df.entry(w).or_default() += 1.0;
        }
    }
    let n = support.len() as f32;
    data.queries
        .iter()
        .map(|(_, text)| {
            let mut v: HashMap<String, f32> = HashMap::new();
            for w in words(text) {
                let idf = (1.0 + n / (1.0 + df.get(&w).copied().unwrap_or(0.0))).ln();
                *v.entry(w).or_default() += idf;
            }
            let norm = v.values().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            v.values_mut().for_each(|x| *x /= norm);
            v
        })
        .collect()
}

/// Hit@1 of a vote of the nearest support queries, each label weighed by exp(κ(sim − 1)), with
/// sim = (1 − λ)·(key cosine) + λ·(TF-IDF cosine of their words) (λ 0: the keys alone). A
/// diagnostic: how well MetaTool's tools separate when every support label is read directly,
/// and whether a lexical reading of past requests would separate them better.
fn nearest_label_hit1(
    data: &Dataset,
    support: &[usize],
    test: &[usize],
    query_keys: &[Vec<f32>],
    lexical: &[HashMap<String, f32>],
    kappa: f32,
    lambda: f32,
) -> f64 {
    let label = |q: usize| -> Option<&String> { data.qrels.get(&data.queries[q].0)?.keys().next() };
    let lex = |a: &HashMap<String, f32>, b: &HashMap<String, f32>| -> f32 {
        let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
        small
            .iter()
            .map(|(w, x)| x * large.get(w).copied().unwrap_or(0.0))
            .sum()
    };
    let hits = test
        .iter()
        .filter(|&&t| {
            let mut sims: Vec<(f32, usize)> = support
                .iter()
                .map(|&s| {
                    let key = dot(&query_keys[t], &query_keys[s]);
                    let words = if lambda > 0.0 {
                        lex(&lexical[t], &lexical[s])
                    } else {
                        0.0
                    };
                    ((1.0 - lambda) * key + lambda * words, s)
                })
                .collect();
            sims.select_nth_unstable_by(memory::NEIGHBOURS, |a, b| b.0.total_cmp(&a.0));
            let mut votes: HashMap<&String, f32> = HashMap::new();
            for &(sim, s) in &sims[..memory::NEIGHBOURS] {
                if let Some(l) = label(s) {
                    *votes.entry(l).or_default() += memory::weight(sim, kappa);
                }
            }
            let best = votes
                .into_iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(l, _)| l);
            best.is_some_and(|b| data.qrels[&data.queries[t].0].contains_key(b))
        })
        .count();
    hits as f64 / test.len() as f64
}

/// The demo's feedback loop (`keyopt::scenarios`): 8 runs on one kind of task, then questions
/// of that kind and of others.
fn demo_scenario(encoder: &Encoder, demo: &std::path::Path) -> String {
    let docs: Vec<(String, String, String)> = pg_skills_corpus::readers::skill_files(demo)
        .expect("corpus/demo")
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let s = pg_skills_corpus::skill::parse_skill_md(&text, None).ok()?;
            Some((s.name, s.description, s.instructions))
        })
        .collect();
    let texts: Vec<String> = docs
        .iter()
        .map(|d| document_text(&d.0, &d.1, &d.2))
        .collect();
    let keys: Vec<Vec<f32>> = cached_embeddings(encoder, &texts)
        .iter()
        .map(|e| compressor::skill_key(None, e))
        .collect();
    let index = |name: &str| {
        docs.iter()
            .position(|d| d.0 == name)
            .unwrap_or_else(|| panic!("{name} not in corpus/demo"))
    };
    let bisect = index(DEMO_WINNER);
    let query_key = |text: &str| compressor::query_key(&encoder.embed(&[text]).expect("encode")[0]);
    let events: Vec<SupportEvent> = DEMO_SUPPORT
        .iter()
        .map(|t| {
            let key = query_key(t);
            let mut served: Vec<usize> = semantic_top(&key, &keys, 4)
                .into_iter()
                .map(|(d, _)| d)
                .collect();
            if !served.contains(&bisect) {
                served.push(bisect);
            }
            SupportEvent {
                pairing: hash(0, t),
                group: hash(0, t),
                arms: served
                    .iter()
                    .map(|&d| Arm {
                        skill: d as i64,
                        passed: d == bisect,
                    })
                    .collect(),
                key,
                relevance: None,
                set: None,
            }
        })
        .collect();
    let t = Instant::now();
    let fitted = fit(&keys, &events, &fit_options());
    let seconds = t.elapsed().as_secs_f64();
    let round = Round::new(&keys, &fitted);
    let memory = memory_of(&events);
    let mut out = format!(
        "\n### Demo feedback loop: {} skills (corpus/demo), 8 runs where git-bisect-regression passed\n\n",
        docs.len()
    );
    out += &describe_fit("fit", &fitted, seconds);
    out += &format!(
        "β of git-bisect-regression {:.3}, its lift bound {:.3}; largest |β| of the others {:.3}\n\n",
        fitted.beta[bisect],
        fitted.lift_bound[bisect],
        fitted
            .beta
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != bisect)
            .map(|(_, b)| b.abs())
            .fold(0.0f32, f32::max)
    );
    let sims: Vec<f32> = (0..events.len())
        .flat_map(|i| (i + 1..events.len()).map(move |j| (i, j)))
        .map(|(i, j)| dot(&events[i].key, &events[j].key))
        .collect();
    let deficit = |key: &[f32], winner: usize, rivals: &[usize]| -> f32 {
        rivals
            .iter()
            .map(|&d| dot(key, &keys[d]) - dot(key, &keys[winner]))
            .fold(f32::NEG_INFINITY, f32::max)
    };
    out += &format!(
        "r deficit of git-bisect-regression to the best other served skill, per support task: {:?}\n",
        events.iter().map(|e| {
            let rivals: Vec<usize> = e.arms.iter().map(|a| a.skill as usize).filter(|&d| d != bisect).collect();
            (deficit(&e.key, bisect, &rivals) * 100.0).round() / 100.0
        }).collect::<Vec<_>>()
    );
    out += &format!(
        "r deficit of git-bisect-regression to the expected skill or the semantic first, per question: {:?}\n",
        DEMO_QUESTIONS.iter().map(|(q, e)| {
            let key = query_key(q);
            let rival = if *e == DEMO_WINNER { semantic_top(&key, &keys, 1)[0].0 } else { index(e) };
            (deficit(&key, bisect, &[rival]) * 100.0).round() / 100.0
        }).collect::<Vec<_>>()
    );
    out += &format!(
        "similarity between support tasks: min {:.2}, mean {:.2}, max {:.2}\n\n",
        sims.iter().copied().fold(f32::INFINITY, f32::min),
        sims.iter().sum::<f32>() / sims.len() as f32,
        sims.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    );
    out += "| question (not in the support) | nearest support task | expected first | semantic first | KeyOpt first | KeyOpt parts of the first (ρr, β, Δk, event, held back) |\n|---|---|---|---|---|---|\n";
    let mut right = (0, 0);
    for (question, expected) in DEMO_QUESTIONS {
        let key = query_key(question);
        let semantic = docs[semantic_top(&key, &keys, 1)[0].0].0.clone();
        let ranking = keyopt_ranking(&round, &memory, &key, &keys, true);
        let first = ranking[0];
        let q = round.query(&key);
        let neighbours = memory.neighbours(&key, memory::NEIGHBOURS);
        let parts = round.rank(&ranking, &q, |s| event_term(&round, &neighbours, s))[0].1;
        right.0 += (semantic == expected) as usize;
        right.1 += (docs[first].0 == expected) as usize;
        let nearest = events
            .iter()
            .map(|e| dot(&e.key, &key))
            .fold(f32::NEG_INFINITY, f32::max);
        out += &format!(
            "| {question} | {nearest:.2} | {expected} | {semantic} | {} | {:.2}, {:.2}, {:.2}, {:.2}, {:.2} |\n",
            docs[first].0, parts.relevance, parts.beta, parts.dk_term, parts.event_term, parts.held_back
        );
    }
    out += &format!(
        "\nfirst as expected: semantic {}/{n}, KeyOpt {}/{n}\n",
        right.0,
        right.1,
        n = DEMO_QUESTIONS.len()
    );
    out
}

/// The relevant documents of query `q` as document indices.
fn needed_docs(data: &Dataset, q: usize) -> Vec<usize> {
    let index: HashMap<&str, usize> = data
        .docs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.0.as_str(), i))
        .collect();
    let mut needed: Vec<usize> = data
        .qrels
        .get(&data.queries[q].0)
        .into_iter()
        .flat_map(|r| r.keys())
        .filter_map(|d| index.get(d.as_str()).copied())
        .collect();
    needed.sort_unstable();
    needed
}

/// Fits a round from `events` and its event memory.
/// The two rounds of every multi-skill table: from set outcomes, and the per-arm reference.
const SET_AND_ARM_ROUNDS: [&str; 2] = [
    "**KeyOpt**, fitted on set outcomes only",
    "KeyOpt, fitted on per-arm outcomes (reference)",
];

fn round_of(
    doc_keys: &[Vec<f32>],
    events: &[SupportEvent],
    label: &str,
) -> (Round, EventMemory, String) {
    let t = Instant::now();
    let fitted = fit(doc_keys, events, &fit_options());
    let line = describe_fit(label, &fitted, t.elapsed().as_secs_f64());
    (Round::new(doc_keys, &fitted), memory_of(events), line)
}

/// MetaTool requests that need two tools: each joins a query with another query of a different
/// tool from the same side of the split ("<q1> Also, <q2>"). The test requests are also read
/// joined into one sentence ("<q1> and <q2>", same pairs, same rounds): a phrasing the rounds
/// were not fitted on, and one that only a split inside a sentence separates.
fn metatool_pairs(
    encoder: &Encoder,
    data: &Dataset,
    doc_keys: &[Vec<f32>],
    support: &[usize],
    test: &[usize],
    single_runs: &[SupportEvent],
    seed: u64,
) -> String {
    const SUPPORT_REQUESTS: usize = 6000;
    const TEST_REQUESTS: usize = 1500;
    let requests =
        |side: &[usize], limit: usize, salt: u64, one_sentence: bool| -> Vec<multi::MultiTask> {
            let mut rng = SplitMix64(seed ^ salt);
            let mut chosen: Vec<(String, Vec<usize>)> = Vec::new();
            let mut attempts = 0usize;
            while chosen.len() < limit.min(side.len()) && attempts < 50 * limit {
                attempts += 1;
                let a = side[(rng.next_u64() % side.len() as u64) as usize];
                let b = side[(rng.next_u64() % side.len() as u64) as usize];
                let (na, nb) = (needed_docs(data, a), needed_docs(data, b));
                if na.is_empty() || nb.is_empty() || na.iter().any(|d| nb.contains(d)) {
                    continue;
                }
                let text = if one_sentence {
                    and_joined(&data.queries[a].1, &data.queries[b].1)
                } else {
                    format!(
                        "{} Also, {}",
                        data.queries[a].1.trim_end(),
                        data.queries[b].1
                    )
                };
                let mut needed = na;
                needed.extend(nb);
                chosen.push((text, needed));
            }
            let texts: Vec<String> = chosen.iter().map(|c| c.0.clone()).collect();
            let parts = part_keys(encoder, &texts);
            cached_embeddings(encoder, &texts)
                .iter()
                .zip(chosen)
                .zip(parts)
                .map(|((e, (text, needed)), parts)| multi::MultiTask {
                    key: compressor::query_key(e),
                    parts,
                    needed,
                    id: hash(seed, &text),
                })
                .collect()
        };
    let support_tasks = requests(support, SUPPORT_REQUESTS, 0x5, false);
    let test_tasks = requests(test, TEST_REQUESTS, 0x7, false);
    let joined_tasks = requests(test, TEST_REQUESTS, 0x7, true);
    let support_refs: Vec<&multi::MultiTask> = support_tasks.iter().collect();
    let test_refs: Vec<&multi::MultiTask> = test_tasks.iter().collect();
    let set_runs = multi::set_runs(&support_refs, doc_keys, seed);
    let (set_round, set_memory, set_line) = round_of(doc_keys, &set_runs, "set outcomes");
    let (arm_round, arm_memory, arm_line) = round_of(
        doc_keys,
        &multi::arm_runs(&support_refs, doc_keys),
        "per-arm outcomes",
    );
    // What a library's event table holds: the single-tool runs of the support queries and the
    // two-tool set runs (none of them from a test query).
    let mut library_runs = single_runs.to_vec();
    library_runs.extend(set_runs);
    let (library_round, library_memory, library_line) =
        round_of(doc_keys, &library_runs, "all the library's runs");
    // What `complements => 1` serves from those runs (co-success; MetaTool has no edges).
    let complementer = multi::Complementer::new(&library_runs, &[], doc_keys.len());
    let complements_of = |_: &multi::MultiTask| &complementer;
    let mut out = format!(
        "\n### MetaTool, two tools per request: {} test requests (support {} requests from the support queries)\n\n",
        test_tasks.len(),
        support_tasks.len()
    );
    out += &set_line;
    out += &arm_line;
    out += "\n";
    out += &library_line;
    out += "\n";
    let names = [
        SET_AND_ARM_ROUNDS[0],
        "**KeyOpt**, fitted on all the library's runs (single-tool runs and two-tool set outcomes)",
        SET_AND_ARM_ROUNDS[1],
    ];
    let rounds = |_: &multi::MultiTask| {
        vec![
            (&set_round, &set_memory),
            (&library_round, &library_memory),
            (&arm_round, &arm_memory),
        ]
    };
    out += &format!(
        "Complements (`complements => 1`, co-success in all the library's runs) for a tool's own description: {} of {} tools.\n\n",
        complementer.with_any(doc_keys),
        doc_keys.len()
    );
    out += &multi::table(&test_refs, doc_keys, &names, rounds, Some(&complements_of));
    let joined_refs: Vec<&multi::MultiTask> = joined_tasks.iter().collect();
    out += "\nThe same test pairs as one sentence, \"<q1> and <q2>\" (same rounds):\n\n";
    out += &multi::table(
        &joined_refs,
        doc_keys,
        &names,
        rounds,
        Some(&complements_of),
    );
    out
}

/// A library whose tasks each need a second skill the request does not name: every tool has a
/// fixed partner (a seeded random pairing of the tools), and a task of a tool needs its partner
/// too. Support runs record what an agent used: the semantic top 3 of its request and, in half
/// of the runs, the partner it found by itself; a run passes when it used every needed skill
/// (reported as the outcome of the whole set). Test requests are the test queries, which name
/// only their own tool; the rankings are scored on both needs.
fn metatool_hidden_partners(
    data: &Dataset,
    doc_keys: &[Vec<f32>],
    query_keys: &[Vec<f32>],
    support: &[usize],
    test: &[usize],
    seed: u64,
) -> String {
    const SUPPORT_REQUESTS: usize = 6000;
    const TEST_REQUESTS: usize = 1500;
    const USED: usize = 3;
    let mut rng = SplitMix64(seed ^ 0xc0);
    let mut order: Vec<usize> = (0..doc_keys.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let mut partner: Vec<Option<usize>> = vec![None; doc_keys.len()];
    for pair in order.chunks(2) {
        if let [a, b] = *pair {
            partner[a] = Some(b);
            partner[b] = Some(a);
        }
    }
    // (the partners a task needs, the task)
    let tasks = |side: &[usize], limit: usize| -> Vec<(Vec<usize>, multi::MultiTask)> {
        side.iter()
            .filter_map(|&q| {
                let own = needed_docs(data, q);
                let partners: Vec<usize> = own
                    .iter()
                    .filter_map(|&d| partner[d])
                    .filter(|p| !own.contains(p))
                    .collect();
                if own.is_empty() || partners.len() != own.len() {
                    return None;
                }
                let mut needed = own;
                needed.extend(&partners);
                Some((
                    partners,
                    multi::MultiTask {
                        key: query_keys[q].clone(),
                        parts: Vec::new(),
                        needed,
                        id: hash(seed, &data.queries[q].1),
                    },
                ))
            })
            .take(limit)
            .collect()
    };
    let support_tasks = tasks(support, SUPPORT_REQUESTS);
    let test_tasks: Vec<multi::MultiTask> = tasks(test, TEST_REQUESTS)
        .into_iter()
        .map(|t| t.1)
        .collect();
    let runs: Vec<SupportEvent> = support_tasks
        .iter()
        .map(|(partners, task)| {
            let mut set: Vec<usize> = semantic_top(&task.key, doc_keys, USED)
                .into_iter()
                .map(|(d, _)| d)
                .collect();
            if rng.next_u64().is_multiple_of(2) {
                for &p in partners {
                    if !set.contains(&p) {
                        set.push(p);
                    }
                }
            }
            multi::set_run(task, &set)
        })
        .collect();
    let passed = runs
        .iter()
        .filter(|r| r.set.as_ref().is_some_and(|s| s.passed))
        .count();
    let (round, memory, line) = round_of(doc_keys, &runs, "the library's runs");
    let complementer = multi::Complementer::new(&runs, &[], doc_keys.len());
    let right = (0..doc_keys.len())
        .filter(|&d| {
            let served = complementer.complemented(&doc_keys[d], &[d], 1);
            served.get(1).copied() == partner[d]
        })
        .count();
    let mut out = format!(
        "\n### MetaTool, a partner tool the request does not name: {} test requests (support {} runs, {passed} passed)\n\n",
        test_tasks.len(),
        runs.len()
    );
    out += &line;
    out += &format!(
        "\nComplements (`complements => 1`) for a tool's own description: {} of {} tools; the partner for {right}.\n\n",
        complementer.with_any(doc_keys),
        doc_keys.len()
    );
    let test_refs: Vec<&multi::MultiTask> = test_tasks.iter().collect();
    let complements_of = |_: &multi::MultiTask| &complementer;
    out += &multi::table(
        &test_refs,
        doc_keys,
        &["**KeyOpt**, fitted on the library's runs"],
        |_| vec![(&round, &memory)],
        Some(&complements_of),
    );
    out
}

/// "<q1> and <q2>" as one sentence: q1 without its closing punctuation, q2 with a lower-case
/// first letter (unless it starts an acronym or "I").
fn and_joined(first: &str, second: &str) -> String {
    let first = first.trim_end().trim_end_matches(['.', '?', '!']);
    let second = second.trim();
    let mut chars = second.chars();
    let lowered = match (chars.next(), chars.next()) {
        (Some(c), Some(n)) if c.is_uppercase() && !n.is_uppercase() && !n.is_whitespace() => c
            .to_lowercase()
            .chain(second[c.len_utf8()..].chars())
            .collect(),
        _ => second.to_string(),
    };
    format!("{first} and {lowered}")
}

/// The SkillsBench tasks that need 2–6 skills, each fold ranked by rounds fitted on the other
/// fold's multi-skill tasks.
fn skillsbench_multi(
    encoder: &Encoder,
    data: &Dataset,
    doc_keys: &[Vec<f32>],
    query_keys: &[Vec<f32>],
    fold_of: impl Fn(usize) -> usize,
    seed: u64,
) -> String {
    let texts: Vec<String> = data.queries.iter().map(|q| q.1.clone()).collect();
    let mut parts = part_keys(encoder, &texts);
    let tasks: Vec<(usize, multi::MultiTask)> = (0..data.queries.len())
        .filter_map(|q| {
            let needed = needed_docs(data, q);
            (needed.len() >= 2).then(|| {
                (
                    fold_of(q),
                    multi::MultiTask {
                        key: query_keys[q].clone(),
                        parts: std::mem::take(&mut parts[q]),
                        needed,
                        id: hash(seed, &data.queries[q].0),
                    },
                )
            })
        })
        .collect();
    let mut out = format!(
        "\n### SkillsBench, tasks that need 2–6 skills: {} tasks; each fold ranked by rounds fitted on the other fold\n\n",
        tasks.len()
    );
    // The documents' dependency and workflow edges (`skills.build_graph`'s rules).
    let documents: Vec<(String, String)> = data
        .docs
        .iter()
        .map(|d| (d.1.clone(), format!("{}\n\n{}", d.2, d.3)))
        .collect();
    let edges: Vec<LinkEdge> = rules::extract(
        &documents
            .iter()
            .enumerate()
            .map(|(i, (name, text))| rules::Document {
                id: i as i64,
                name,
                text,
            })
            .collect::<Vec<_>>(),
    )
    .into_iter()
    .filter_map(|e| {
        let link = match e.kind {
            EdgeType::Dependency => Link::Dependency,
            EdgeType::Workflow => Link::Workflow,
            _ => return None,
        };
        Some(LinkEdge {
            from: e.from,
            to: e.to,
            link,
            weight: e.weight,
        })
    })
    .collect();
    let mut rounds = Vec::new();
    let mut fold_runs = Vec::new();
    for f in 0..2 {
        let support: Vec<&multi::MultiTask> =
            tasks.iter().filter(|t| t.0 != f).map(|t| &t.1).collect();
        let set_runs = multi::set_runs(&support, doc_keys, seed);
        fold_runs.push(set_runs.clone());
        let (set_round, set_memory, line) =
            round_of(doc_keys, &set_runs, &format!("fold {f}, set outcomes"));
        out += &line;
        let (arm_round, arm_memory, line) = round_of(
            doc_keys,
            &multi::arm_runs(&support, doc_keys),
            &format!("fold {f}, per-arm outcomes"),
        );
        out += &line;
        rounds.push([(set_round, set_memory), (arm_round, arm_memory)]);
    }
    let fold: HashMap<u64, usize> = tasks.iter().map(|t| (t.1.id, t.0)).collect();
    let complementers: Vec<multi::Complementer> = fold_runs
        .iter()
        .map(|runs| multi::Complementer::new(runs, &edges, doc_keys.len()))
        .collect();
    let needed_pairs: usize = tasks
        .iter()
        .map(|t| {
            let c = &complementers[t.0];
            t.1.needed
                .iter()
                .filter(|&&a| {
                    c.complemented(&t.1.key, &[a], 1)
                        .get(1)
                        .is_some_and(|x| t.1.needed.contains(x))
                })
                .count()
        })
        .sum();
    out += &format!(
        "\n{} dependency and workflow edges from the documents' rules; complements (`complements => 1`: the other fold's set runs, then these edges) for a skill's own document: {} and {} of {} skills (fold 0, 1); a needed skill's complement for its task is another needed skill of the task {needed_pairs} times.\n\n",
        edges.len(),
        complementers[0].with_any(doc_keys),
        complementers[1].with_any(doc_keys),
        doc_keys.len()
    );
    let all: Vec<&multi::MultiTask> = tasks.iter().map(|t| &t.1).collect();
    let complements_of = |t: &multi::MultiTask| &complementers[fold[&t.id]];
    out += &multi::table(
        &all,
        doc_keys,
        &SET_AND_ARM_ROUNDS,
        |t| {
            let r = &rounds[fold[&t.id]];
            vec![(&r[0].0, &r[0].1), (&r[1].0, &r[1].1)]
        },
        Some(&complements_of),
    );
    // What `keyopt` serves where the rounds correct nothing: r = q·k0 + w·BM25 for the whole
    // request and each part (the BM25 of each text over the documents).
    let neutral = rounds
        .iter()
        .all(|r| !r[0].0.corrections && !r[1].0.corrections);
    let mut bm25_of: HashMap<u64, Vec<HashMap<usize, f32>>> = HashMap::new();
    for q in 0..data.queries.len() {
        let id = hash(seed, &data.queries[q].0);
        if !fold.contains_key(&id) {
            continue;
        }
        let mut texts: Vec<String> = vec![data.queries[q].1.clone()];
        let parts = needs::parts(&data.queries[q].1);
        if parts.len() >= 2 {
            texts.extend(parts);
        }
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        bm25_of.insert(id, bm25_normalised_texts(data, &texts));
    }
    let default = default_share();
    for &share in &BM25_SHARES[1..] {
        let name = format!(
            "semantic, parts covered, r = q·k0 + {share}·BM25{}",
            if neutral && share == default {
                " (= KeyOpt as served: every round here corrects nothing)"
            } else {
                ""
            }
        );
        out += &multi::row_of(&all, &name, |t| {
            multi::semantic_covered_mixed(&t.key, &t.parts, doc_keys, &bm25_of[&t.id], share)
        });
    }
    // A diagnostic: each text's BM25 best added to the candidates.
    for lexical in [3, 5, 10] {
        let name = format!(
            "semantic, parts covered, r = q·k0 + {default}·BM25, candidates + each text's BM25 top {lexical}"
        );
        out += &multi::row_of(&all, &name, |t| {
            multi::covered_mixed(
                &t.key,
                &t.parts,
                doc_keys,
                &bm25_of[&t.id],
                default,
                lexical,
            )
        });
    }
    out
}

/// KeyOpt with the base relevance r = qᵀk0 + w·BM25 (normalised per query) for each w of
/// [`BM25_SHARES`]: each round is fitted and read with its own r. `splits` are (support, test)
/// query sets (one for MetaTool; the two folds for SkillsBench). The fit's cross-validated
/// held-out pair accuracy (best setting) is what a round would choose w by.
fn base_relevance(
    data: &Dataset,
    query_keys: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
    splits: &[(Vec<usize>, Vec<usize>)],
    seed: u64,
) -> String {
    let all: Vec<usize> = (0..data.queries.len()).collect();
    let bm25 = bm25_normalised_scores(data, &all);
    let bm25 = &bm25;
    let r = |w: f32| {
        move |q: usize, d: usize| -> f32 {
            dot(&query_keys[q], &doc_keys[d]) + w * bm25[&q].get(&d).copied().unwrap_or(0.0)
        }
    };
    // Per w, per split: the fit, its round and memory.
    let fitted: Vec<Vec<(Fitted, Round, EventMemory)>> = BM25_SHARES
        .iter()
        .map(|&w| {
            let rw = r(w);
            splits
                .iter()
                .map(|(support, _)| {
                    let events =
                        support_runs_with(data, support, query_keys, doc_keys, seed, Some(&rw));
                    let f = fit(doc_keys, &events, &fit_options());
                    let round = Round::new(doc_keys, &f);
                    (f, round, memory_of(&events))
                })
                .collect()
        })
        .collect();
    // What skills.fit() would choose per split (the same rule: `choose_share`): the fit, and
    // the share its round is read with.
    let default_share = default_share();
    let chosen: Vec<(usize, f32)> = (0..splits.len())
        .map(|s| {
            let fits: Vec<Fitted> = fitted.iter().map(|per_w| per_w[s].0.clone()).collect();
            let (at, _, share) = choose_share(fits, default_share, fit_options().min_gain_se);
            for (i, per_w) in fitted.iter().enumerate().skip(1) {
                let groups = &per_w[s].0.report.served_per_group;
                if let Some((gain, se)) =
                    paired_gain(groups, &fitted[0][s].0.report.served_per_group)
                {
                    eprintln!(
                        "split {s}: w {} against the key score alone: {gain:.4} ± {se:.4} SE over {} groups",
                        BM25_SHARES[i],
                        groups.len()
                    );
                }
            }
            (at, share)
        })
        .collect();
    let tests: Vec<usize> = splits.iter().flat_map(|s| s.1.iter().copied()).collect();
    let split_of = |q: usize| {
        splits
            .iter()
            .position(|s| s.1.contains(&q))
            .expect("a test query")
    };
    // Each split's fit (by its position in BM25_SHARES) and the share it is read with.
    let metrics_of = |of_split: &dyn Fn(usize) -> (usize, f32)| {
        evaluate(data, &tests, |q| {
            let s = split_of(q);
            let (w, share) = of_split(s);
            let (_, round, memory) = &fitted[w][s];
            let rw = r(share);
            let of_query = |d: usize| rw(q, d);
            keyopt_ranking_with(
                round,
                memory,
                &query_keys[q],
                doc_keys,
                true,
                Some(&of_query),
            )
        })
    };
    let mut out = String::from(
        "| base relevance r | CV pair accuracy, r alone / best setting (per split) | NDCG@10 | Recall@10 | Hit@1 | MRR@10 |\n|---|---|---|---|---|---|\n",
    );
    for (i, &w) in BM25_SHARES.iter().enumerate() {
        let cv: Vec<String> = fitted[i]
            .iter()
            .map(|(f, _, _)| {
                let best = f
                    .report
                    .cv
                    .iter()
                    .map(|c| c.accuracy)
                    .fold(0.0f64, f64::max);
                format!(
                    "{:.3} / {:.3}{}",
                    f.report.relevance_only_accuracy,
                    best,
                    if f.report.corrections {
                        ""
                    } else {
                        " (neutral)"
                    }
                )
            })
            .collect();
        let name = if w == 0.0 {
            "qᵀk0".to_string()
        } else {
            format!("qᵀk0 + {w}·BM25")
        };
        out += &row(&name, &metrics_of(&|_| (i, w))).replacen(
            " | ",
            &format!(" | {} | ", cv.join(", ")),
            1,
        );
        out += "\n";
    }
    // No round at all (a new library): the semantic top 10 ordered by each r.
    for &w in &BM25_SHARES {
        let rw = r(w);
        let m = evaluate(data, &tests, |q| {
            let mut top: Vec<(usize, f32)> = semantic_top(&query_keys[q], doc_keys, 10)
                .into_iter()
                .map(|(d, _)| (d, rw(q, d)))
                .collect();
            top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            top.into_iter().map(|(d, _)| d).collect()
        });
        out += &row(
            &format!("no round, r = qᵀk0 + {w}·BM25 over the semantic top 10"),
            &m,
        )
        .replacen(" | ", " | (no fit) | ", 1);
        out += "\n";
    }
    let names: Vec<String> = chosen
        .iter()
        .map(|&(i, share)| {
            if BM25_SHARES[i] == share {
                format!("w {share}")
            } else {
                format!("neutral at w {}: read at w {share}", BM25_SHARES[i])
            }
        })
        .collect();
    out += &row(
        "**chosen by the fit's CV** (`skills.fit()`'s rule)",
        &metrics_of(&|s| chosen[s]),
    )
    .replacen(" | ", &format!(" | {} | ", names.join(", ")), 1);
    out += "\n";
    out
}

fn main() {
    let args = Args::parse();
    PARTS_IN_CONTEXT.store(args.parts_in_context, std::sync::atomic::Ordering::Relaxed);
    let mut options = FitOptions::default();
    options.lambda_beta = args.lambda_beta.unwrap_or(options.lambda_beta);
    options.min_gain_se = args.min_gain_se.unwrap_or(options.min_gain_se);
    if let Some(k) = &args.kappas {
        options.grid.kappas = k.clone();
    }
    options.cap_one_sided_beta = args.cap_beta.unwrap_or(options.cap_one_sided_beta);
    options.bound_lifts = args.bound_lifts.unwrap_or(options.bound_lifts);
    eprintln!(
        "fit options: λ_β {}, min gain {} SE, one-sided β capped {}, lifts bounded {}",
        options.lambda_beta, options.min_gain_se, options.cap_one_sided_beta, options.bound_lifts
    );
    FIT_OPTIONS.set(options).expect("set once");
    DEFAULT_SHARE.set(args.default_share).expect("set once");
    multi::COVER
        .set((args.cover_weight, args.cover_width))
        .expect("set once");
    let started = Instant::now();
    let mut out = if args.no_planted {
        String::new()
    } else {
        planted_truth()
    };
    eprintln!(
        "planted truth done ({:.0} s)",
        started.elapsed().as_secs_f64()
    );

    let encoder = Encoder::load(&args.model).unwrap_or_else(|e| panic!("{e} (run ./x model)"));
    pg_skills_kernels::encoder::keep_freed_memory();
    out += &demo_scenario(&encoder, &args.demo);
    eprintln!(
        "demo scenario done ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    if args.demo_only {
        println!("{out}");
        return;
    }
    let bench = args.shared.join("bench-data");

    if !args.no_metatool {
        // MetaTool.
        let metatool = load(&bench.join("metatool"), false);
        let (doc_keys, query_keys) = raw_keys(&encoder, &metatool);
        let is_test = |q: usize| hash(args.seed, &metatool.queries[q].1) % 100 < 20;
        let test: Vec<usize> = (0..metatool.queries.len())
            .filter(|&q| is_test(q))
            .collect();
        let support: Vec<usize> = (0..metatool.queries.len())
            .filter(|&q| !is_test(q))
            .collect();
        // The support runs were served from the raw keys; with --compressor the keys are then
        // compressed, and every round below is fitted and read on the compressed keys.
        if args.nearest_labels {
            let lexical = lexical_vectors(&metatool, &support);
            // The words mixed in at the best κ of the keys alone, then the keys alone (λ 0).
            let words_mixed = [0.1, 0.2, 0.3, 0.5].map(|lambda| (lambda, 20.0));
            let keys_alone = [5.0, 10.0, 20.0, 40.0].map(|kappa| (0.0, kappa));
            for (lambda, kappa) in words_mixed.into_iter().chain(keys_alone) {
                let hit1 = nearest_label_hit1(
                    &metatool,
                    &support,
                    &test,
                    &query_keys,
                    &lexical,
                    kappa,
                    lambda,
                );
                let line = if lambda == 0.0 {
                    format!("nearest support labels (κ {kappa}): Hit@1 {hit1:.3}\n")
                } else {
                    format!(
                        "nearest support labels and words (λ {lambda}, κ {kappa}): Hit@1 {hit1:.3}\n"
                    )
                };
                eprint!("{line}");
                out += &line;
            }
        }
        let mut raw_events = if args.compressor && args.online > 1 {
            let (events, log) = online_support_runs(
                &encoder,
                &metatool,
                &support,
                &query_keys,
                &doc_keys,
                args.online,
                args.seed,
            );
            eprint!("{log}");
            out += &format!(
                "\nMetaTool support runs served in {} batches:\n{log}",
                args.online
            );
            events
        } else {
            support_runs(&metatool, &support, &query_keys, &doc_keys, args.seed)
        };
        let doc_keys = if args.compressor {
            let (keys, line) = compressed_doc_keys(
                &encoder,
                &metatool,
                &support,
                &raw_events,
                |_| true,
                args.seed,
            );
            out += &format!("\nMetaTool skill keys: compressed; {line}");
            eprintln!("{line}");
            if args.cross_fit {
                // Each run's r from the compressor of the other half (halves by source question).
                let halves: Vec<Vec<Vec<f32>>> = (0..2u64)
                    .map(|h| {
                        let (keys, line) = compressed_doc_keys(
                            &encoder,
                            &metatool,
                            &support,
                            &raw_events,
                            |e| e.group % 2 != h,
                            args.seed,
                        );
                        out += &format!("half {h}'s r: {line}");
                        keys
                    })
                    .collect();
                for e in &mut raw_events {
                    let keys = &halves[(e.group % 2) as usize];
                    e.relevance = Some(
                        e.arms
                            .iter()
                            .map(|a| dot(&e.key, &keys[a.skill as usize]))
                            .collect(),
                    );
                }
            }
            keys
        } else {
            doc_keys
        };
        if !args.multi_only {
            let events = &raw_events;
            let t = Instant::now();
            let fitted = fit(&doc_keys, events, &fit_options());
            let seconds = t.elapsed().as_secs_f64();
            let round = Round::new(&doc_keys, &fitted);
            let memory = memory_of(events);
            out += &format!(
                "\n### MetaTool: {} test queries (support {} queries, split by text, seed {})\n\n",
                test.len(),
                support.len(),
                args.seed
            );
            out += &describe_fit("fit", &fitted, seconds);
            out += "\n";
            let methods = Methods::new(&encoder, &metatool, &query_keys, &doc_keys);
            out += &methods.table(&test, |_| (&round, &memory));
            eprintln!("MetaTool done ({:.0} s)", started.elapsed().as_secs_f64());
            if args.settings_sweep {
                out += "\nThe same round read with other settings on the test queries (a diagnostic: the test queries choose them here):\n\n| α | κ | Hit@1 | NDCG@10 |\n|---|---|---|---|\n";
                for alpha in [0.0f32, 2.0, 4.0, 8.0, 16.0, 32.0] {
                    for kappa in [10.0f32, 20.0, 40.0] {
                        let mut other = round.clone();
                        other.settings.alpha = alpha;
                        other.settings.kappa = kappa;
                        let m = evaluate(&metatool, &test, |q| {
                            keyopt_ranking(&other, &memory, &query_keys[q], &doc_keys, true)
                        });
                        let line = format!(
                            "| {alpha} | {kappa} | {:.3} | {:.3} |\n",
                            m.hit_at_1, m.ndcg_at_10
                        );
                        eprint!("{line}");
                        out += &line;
                    }
                }
            }
            if !args.no_base_relevance {
                out += "\nBase relevance r of the KeyOpt rounds (MetaTool, same split):\n\n";
                out += &base_relevance(
                    &metatool,
                    &query_keys,
                    &doc_keys,
                    &[(support.clone(), test.clone())],
                    args.seed,
                );
                eprintln!("MetaTool r done ({:.0} s)", started.elapsed().as_secs_f64());
            }
        }
        out += &metatool_pairs(
            &encoder,
            &metatool,
            &doc_keys,
            &support,
            &test,
            &raw_events,
            args.seed,
        );
        eprintln!(
            "MetaTool pairs done ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
        out += &metatool_hidden_partners(
            &metatool,
            &doc_keys,
            &query_keys,
            &support,
            &test,
            args.seed,
        );
    }
    if !args.no_skillsbench {
        let mut skillsbench = load(&bench.join("skillsbench-tasks"), true);
        let own = skillsbench.docs.len();
        skillsbench.docs.extend(distractors(
            &args.shared.join("corpus"),
            "KaiserWhoLearns__skillsbench",
        ));
        let (doc_keys, query_keys) = raw_keys(&encoder, &skillsbench);
        let fold_of = |q: usize| (hash(args.seed, &skillsbench.queries[q].0) % 2) as usize;
        let folds: Vec<Vec<usize>> = (0..2)
            .map(|f| {
                (0..skillsbench.queries.len())
                    .filter(|&q| fold_of(q) == f)
                    .collect()
            })
            .collect();
        if !args.multi_only {
            let mut rounds = Vec::new();
            out += &format!(
                "\n### SkillsBench: {} tasks, {own} skills + {} distractors from ../shared/corpus; each fold ranked by a round fitted on the other fold\n\n",
                skillsbench.queries.len(),
                skillsbench.docs.len() - own
            );
            for f in 0..2 {
                let events = support_runs(
                    &skillsbench,
                    &folds[1 - f],
                    &query_keys,
                    &doc_keys,
                    args.seed,
                );
                let t = Instant::now();
                let fitted = fit(&doc_keys, &events, &fit_options());
                out += &describe_fit(
                    &format!("fold {f}'s round"),
                    &fitted,
                    t.elapsed().as_secs_f64(),
                );
                rounds.push((Round::new(&doc_keys, &fitted), memory_of(&events)));
            }
            out += "\n";
            let methods = Methods::new(&encoder, &skillsbench, &query_keys, &doc_keys);
            let all: Vec<usize> = (0..skillsbench.queries.len()).collect();
            out += &methods.table(&all, |q| {
                let (round, memory) = &rounds[fold_of(q)];
                (round, memory)
            });
            if !args.no_base_relevance {
                out += "\nBase relevance r of the KeyOpt rounds (SkillsBench, same folds):\n\n";
                out += &base_relevance(
                    &skillsbench,
                    &query_keys,
                    &doc_keys,
                    &[
                        (folds[1].clone(), folds[0].clone()),
                        (folds[0].clone(), folds[1].clone()),
                    ],
                    args.seed,
                );
            }
        }
        out += &skillsbench_multi(
            &encoder,
            &skillsbench,
            &doc_keys,
            &query_keys,
            fold_of,
            args.seed,
        );
    }
    out += &format!("\ntotal {:.0} s\n", started.elapsed().as_secs_f64());
    println!("{out}");
}
