//! Semantic retrieval quality: BM25 vs raw padded MiniLM keys vs compressed keys, on
//! queries no compressor saw in training, and the encoder's throughput.
//!
//! Splits (deterministic, by a hash of the query id):
//! - MetaTool: 80 % support (training), 20 % test (evaluation only).
//! - SkillsBench (52 tasks): two folds; each fold is evaluated with a compressor trained on the
//!   MetaTool support split plus the *other* fold, so every task is scored by a compressor that
//!   never saw it (cross-fitting), and the MetaTool test split by the first fold's compressor.
//!
//! BM25 is the reference scorer with the extension's defaults (k1 1.5, b 0.75, stemming), the
//! same scores the bm25 index returns. Keys rank by inner product, as `skills.search(...,
//! method => 'semantic')` does.
//!
//!   cargo run --release -p pg_skills_benches --bin semantic_eval -- --shared ../shared

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

use pg_skills_benches::eval::{
    bm25_rankings, bucket, cached_embeddings, evaluate, key_ranking, key_ranking_to, load, row,
    rrf, Dataset,
};
use pg_skills_kernels::compressor::{self, Compressor, TrainOptions, TrainingSet};
use pg_skills_kernels::encoder::{document_text, Encoder, DEFAULT_MODEL_DIR};

#[derive(Parser)]
struct Args {
    /// The shared data folder (bench-data/metatool, bench-data/skillsbench-tasks).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    #[arg(long, default_value = DEFAULT_MODEL_DIR)]
    model: PathBuf,
    /// Use only this many MetaTool queries (all when 0): a quick run.
    #[arg(long, default_value_t = 0)]
    metatool_queries: usize,
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

fn main() {
    let args = Args::parse();
    let encoder = Encoder::load(&args.model).unwrap_or_else(|e| panic!("{e} (run ./x model)"));
    pg_skills_kernels::encoder::keep_freed_memory();
    let bench = args.shared.join("bench-data");
    let mut metatool = load(&bench.join("metatool"), false);
    if args.metatool_queries > 0 {
        metatool.queries.truncate(args.metatool_queries);
    }
    let skillsbench = load(&bench.join("skillsbench-tasks"), true);

    // Embed everything once.
    let started = Instant::now();
    let embed = |texts: Vec<String>| -> Vec<Vec<f32>> { cached_embeddings(&encoder, &texts) };
    let t = Instant::now();
    let mt_docs = embed(
        metatool
            .docs
            .iter()
            .map(|d| document_text(&d.1, &d.2, &d.3))
            .collect(),
    );
    let sb_docs = embed(
        skillsbench
            .docs
            .iter()
            .map(|d| document_text(&d.1, &d.2, &d.3))
            .collect(),
    );
    let doc_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mt_queries = embed(metatool.queries.iter().map(|q| q.1.clone()).collect());
    let query_seconds = t.elapsed().as_secs_f64();
    let sb_queries = embed(skillsbench.queries.iter().map(|q| q.1.clone()).collect());
    eprintln!(
        "embedded {} documents in {doc_seconds:.1} s, {} MetaTool queries in {query_seconds:.1} s ({:.0}/s)",
        mt_docs.len() + sb_docs.len(),
        mt_queries.len(),
        mt_queries.len() as f64 / query_seconds
    );

    let mt_test: Vec<usize> = (0..metatool.queries.len())
        .filter(|&q| bucket(&metatool.queries[q].0) < 20)
        .collect();
    let mt_support: Vec<usize> = (0..metatool.queries.len())
        .filter(|&q| bucket(&metatool.queries[q].0) >= 20)
        .collect();
    let sb_fold = |f: u64| -> Vec<usize> {
        (0..skillsbench.queries.len())
            .filter(|&q| bucket(&skillsbench.queries[q].0) % 2 == f)
            .collect()
    };
    let folds = [sb_fold(0), sb_fold(1)];

    // Training data: all documents of both corpora (MetaTool first), pairs from the support
    // queries of MetaTool and one SkillsBench fold.
    let doc_index = |data: &Dataset, offset: usize| -> HashMap<String, usize> {
        data.docs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.0.clone(), offset + i))
            .collect()
    };
    let mt_doc_index = doc_index(&metatool, 0);
    let sb_doc_index = doc_index(&skillsbench, mt_docs.len());
    let all_docs: Vec<Vec<f32>> = mt_docs.iter().chain(&sb_docs).cloned().collect();
    let train_on =
        |with_metatool: bool, sb_queries_used: &[usize]| -> (Compressor, compressor::TrainReport) {
            let mut queries = Vec::new();
            let mut pairs = Vec::new();
            for &q in mt_support.iter().filter(|_| with_metatool) {
                for doc in metatool
                    .qrels
                    .get(&metatool.queries[q].0)
                    .into_iter()
                    .flat_map(|r| r.keys())
                {
                    if let Some(&d) = mt_doc_index.get(doc) {
                        pairs.push((queries.len(), d));
                    }
                }
                queries.push(mt_queries[q].clone());
            }
            for &q in sb_queries_used {
                for doc in skillsbench
                    .qrels
                    .get(&skillsbench.queries[q].0)
                    .into_iter()
                    .flat_map(|r| r.keys())
                {
                    if let Some(&d) = sb_doc_index.get(doc) {
                        pairs.push((queries.len(), d));
                    }
                }
                queries.push(sb_queries[q].clone());
            }
            let set = TrainingSet {
                queries: &queries,
                documents: &all_docs,
                pairs: &pairs,
            };
            let options = TrainOptions {
                hidden: args.hidden,
                epochs: args.epochs,
                seed: args.seed,
                ..Default::default()
            };
            let t = Instant::now();
            let trained = compressor::train(&set, &options, &mut |e| {
                if e % 5 == 0 {
                    eprintln!("  epoch {e} ({:.0} s)", t.elapsed().as_secs_f64());
                }
            })
            .expect("training");
            eprintln!(
                "trained on {} pairs in {:.0} s: {:?}",
                pairs.len(),
                t.elapsed().as_secs_f64(),
                trained.1
            );
            trained
        };
    // Fold f's compressors train on the other fold: one joint with the MetaTool support split
    // (one compressor for both libraries), one on SkillsBench alone (a compressor per library).
    let compressors = [train_on(true, &folds[1]), train_on(true, &folds[0])];
    let metatool_only = train_on(true, &[]);
    let skillsbench_only = [train_on(false, &folds[1]), train_on(false, &folds[0])];
    // Cold start for a new library: no labelled pair of its own, only a compressor trained on
    // another library (every SkillsBench task for MetaTool; MetaTool's support split for
    // SkillsBench, `metatool_only` above).
    let every_sb: Vec<usize> = (0..skillsbench.queries.len()).collect();
    let skillsbench_all = train_on(false, &every_sb);

    let raw_keys = |docs: &[Vec<f32>]| -> Vec<Vec<f32>> {
        docs.iter()
            .map(|e| compressor::skill_key(None, e))
            .collect()
    };
    let compressed_keys = |c: &Compressor, docs: &[Vec<f32>]| -> Vec<Vec<f32>> {
        docs.iter()
            .map(|e| compressor::skill_key(Some(c), e))
            .collect()
    };
    let query_keys = |qs: &[Vec<f32>]| -> Vec<Vec<f32>> {
        qs.iter().map(|e| compressor::query_key(e)).collect()
    };
    let mtq = query_keys(&mt_queries);
    let sbq = query_keys(&sb_queries);

    let mut out = String::new();
    // MetaTool test split.
    let bm25 = bm25_rankings(&metatool, &mt_test, 10);
    let raw = raw_keys(&mt_docs);
    let comp = compressed_keys(&compressors[0].0, &mt_docs);
    out += &format!(
        "\nMetaTool test split: {} queries never used in training, 199 tools\n\n",
        mt_test.len()
    );
    out += "| method | NDCG@10 | Recall@10 | Hit@1 | MRR@10 |\n|---|---|---|---|---|\n";
    out += &(row(
        "(a) BM25",
        &evaluate(&metatool, &mt_test, |q| bm25[&q].clone()),
    ) + "\n");
    out += &(row(
        "(b) raw MiniLM keys",
        &evaluate(&metatool, &mt_test, |q| key_ranking(&mtq[q], &raw)),
    ) + "\n");
    out += &(row(
        "(c) compressed keys, joint compressor",
        &evaluate(&metatool, &mt_test, |q| key_ranking(&mtq[q], &comp)),
    ) + "\n");
    let own = compressed_keys(&metatool_only.0, &mt_docs);
    out += &(row(
        "(c) compressed keys, MetaTool-only compressor",
        &evaluate(&metatool, &mt_test, |q| key_ranking(&mtq[q], &own)),
    ) + "\n");
    let bm25_deep = bm25_rankings(&metatool, &mt_test, 100);
    out += &(row(
        "(d) cold start: hybrid, RRF of BM25 and raw keys (top 100 each)",
        &evaluate(&metatool, &mt_test, |q| {
            rrf(&bm25_deep[&q], &key_ranking_to(&mtq[q], &raw, 100))
        }),
    ) + "\n");
    let foreign = compressed_keys(&skillsbench_all.0, &mt_docs);
    out += &(row(
        "(e) cold start: compressed keys, compressor trained on SkillsBench only",
        &evaluate(&metatool, &mt_test, |q| key_ranking(&mtq[q], &foreign)),
    ) + "\n");

    // SkillsBench, cross-fitted.
    let all_sb: Vec<usize> = (0..skillsbench.queries.len()).collect();
    let bm25 = bm25_rankings(&skillsbench, &all_sb, 10);
    let raw = raw_keys(&sb_docs);
    let comp: Vec<Vec<Vec<f32>>> = compressors
        .iter()
        .map(|c| compressed_keys(&c.0, &sb_docs))
        .collect();
    let fold_of = |q: usize| (bucket(&skillsbench.queries[q].0) % 2) as usize;
    out += &format!(
        "\nSkillsBench: {} tasks, 123 skills; each task scored by the compressor of the fold that did not train on it\n\n",
        all_sb.len()
    );
    out += "| method | NDCG@10 | Recall@10 | Hit@1 | MRR@10 |\n|---|---|---|---|---|\n";
    out += &(row(
        "(a) BM25",
        &evaluate(&skillsbench, &all_sb, |q| bm25[&q].clone()),
    ) + "\n");
    out += &(row(
        "(b) raw MiniLM keys",
        &evaluate(&skillsbench, &all_sb, |q| key_ranking(&sbq[q], &raw)),
    ) + "\n");
    out += &(row(
        "(c) compressed keys, joint compressor",
        &evaluate(&skillsbench, &all_sb, |q| {
            key_ranking(&sbq[q], &comp[fold_of(q)])
        }),
    ) + "\n");
    let own: Vec<Vec<Vec<f32>>> = skillsbench_only
        .iter()
        .map(|c| compressed_keys(&c.0, &sb_docs))
        .collect();
    out += &(row(
        "(c) compressed keys, SkillsBench-only compressor",
        &evaluate(&skillsbench, &all_sb, |q| {
            key_ranking(&sbq[q], &own[fold_of(q)])
        }),
    ) + "\n");
    let bm25_deep = bm25_rankings(&skillsbench, &all_sb, 100);
    out += &(row(
        "(d) cold start: hybrid, RRF of BM25 and raw keys (top 100 each)",
        &evaluate(&skillsbench, &all_sb, |q| {
            rrf(&bm25_deep[&q], &key_ranking_to(&sbq[q], &raw, 100))
        }),
    ) + "\n");
    let foreign = compressed_keys(&metatool_only.0, &sb_docs);
    out += &(row(
        "(e) cold start: compressed keys, compressor trained on MetaTool only",
        &evaluate(&skillsbench, &all_sb, |q| key_ranking(&sbq[q], &foreign)),
    ) + "\n");
    out += &format!(
        "\ncompressors: hidden {}, {} epochs, seed {}; best epochs {} and {}; validation MRR raw → trained {:.3} → {:.3} and {:.3} → {:.3}\n",
        args.hidden,
        args.epochs,
        args.seed,
        compressors[0].1.best_epoch,
        compressors[1].1.best_epoch,
        compressors[0].1.validation_mrr_raw,
        compressors[0].1.validation_mrr,
        compressors[1].1.validation_mrr_raw,
        compressors[1].1.validation_mrr,
    );
    out += &format!(
        "MetaTool-only: best epoch {}, validation MRR {:.3} → {:.3}; SkillsBench-only: best epochs {} and {}, validation MRR {:.3} → {:.3} and {:.3} → {:.3}\n",
        metatool_only.1.best_epoch,
        metatool_only.1.validation_mrr_raw,
        metatool_only.1.validation_mrr,
        skillsbench_only[0].1.best_epoch,
        skillsbench_only[1].1.best_epoch,
        skillsbench_only[0].1.validation_mrr_raw,
        skillsbench_only[0].1.validation_mrr,
        skillsbench_only[1].1.validation_mrr_raw,
        skillsbench_only[1].1.validation_mrr,
    );
    out += &format!("total {:.0} s\n", started.elapsed().as_secs_f64());
    println!("{out}");
}
