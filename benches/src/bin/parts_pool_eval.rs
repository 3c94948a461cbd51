//! Tried, not kept: a request of several parts (`needs::parts`) keyed by pooling its parts'
//! encodings (their embeddings weighed by token counts, as mean pooling over the parts' tokens
//! would) instead of encoding the whole request too. It would halve the rows a search that
//! covers parts encodes. Raw keys, no compressor; the requests of several parts only, ranked by
//! the key alone and as `skills.search` covers the parts (`needs::cover` over each ranking's
//! first 10). Results in benches/RESULTS.md ("Semantic search").
//!
//! Also tried and not kept, the other way round: each part keyed from the request's own pass
//! (`Encoder::embed_with_parts`, the mean of the request's token states over the part's
//! tokens), so no token is encoded twice. `keyopt_eval --parts-in-context` measures it on
//! requests that need two tools.
//!
//!   parts_pool_eval --shared ../shared
use std::path::PathBuf;

use clap::Parser;
use pg_skills_benches::eval::{
    cached_embeddings, distractors, evaluate, key_ranking, load, row, Dataset,
};
use pg_skills_kernels::compressor;
use pg_skills_kernels::encoder::{document_text, Encoder, Precision, DEFAULT_MODEL_DIR};
use pg_skills_kernels::needs;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
}

fn pooled(encoder: &Encoder, parts: &[String], embeddings: &[Vec<f32>]) -> Vec<f32> {
    let mut sum = vec![0.0f32; 384];
    for (p, e) in parts.iter().zip(embeddings) {
        let n = encoder.token_ids(p).unwrap().len() as f32;
        for (s, x) in sum.iter_mut().zip(e) {
            *s += n * x;
        }
    }
    compressor::query_key(&sum)
}

fn run(encoder: &Encoder, name: &str, data: &Dataset) {
    let docs: Vec<String> = data
        .docs
        .iter()
        .map(|d| document_text(&d.1, &d.2, &d.3))
        .collect();
    let doc_keys: Vec<Vec<f32>> = cached_embeddings(encoder, &docs)
        .iter()
        .map(|e| compressor::skill_key(None, e))
        .collect();
    let texts: Vec<String> = data.queries.iter().map(|q| q.1.clone()).collect();
    let whole: Vec<Vec<f32>> = cached_embeddings(encoder, &texts)
        .iter()
        .map(|e| compressor::query_key(e))
        .collect();
    let split: Vec<Vec<String>> = texts.iter().map(|t| needs::parts(t)).collect();
    let multi: Vec<usize> = (0..texts.len()).filter(|&q| split[q].len() >= 2).collect();
    let flat: Vec<String> = multi.iter().flat_map(|&q| split[q].clone()).collect();
    let flat_emb = cached_embeddings(encoder, &flat);
    let mut at = 0;
    let mut part_keys: Vec<Vec<Vec<f32>>> = vec![Vec::new(); texts.len()];
    let mut pooled_keys: Vec<Vec<f32>> = whole.clone();
    for &q in &multi {
        let n = split[q].len();
        let embs = &flat_emb[at..at + n];
        at += n;
        part_keys[q] = embs.iter().map(|e| compressor::query_key(e)).collect();
        pooled_keys[q] = pooled(encoder, &split[q], embs);
    }
    println!(
        "## {name}: {} queries, {} of several parts",
        texts.len(),
        multi.len()
    );
    println!(
        "{}",
        row(
            "whole request encoded (several parts only)",
            &evaluate(data, &multi, |q| key_ranking(&whole[q], &doc_keys))
        )
    );
    println!(
        "{}",
        row(
            "parts pooled (several parts only)",
            &evaluate(data, &multi, |q| key_ranking(&pooled_keys[q], &doc_keys))
        )
    );
    let covered = |keys: &Vec<Vec<f32>>| {
        evaluate(data, &multi, |q| {
            let mut r = semantic_covered(&keys[q], &part_keys[q], &doc_keys);
            r.truncate(10);
            r
        })
    };
    println!("{}", row("whole encoded, parts covered", &covered(&whole)));
    // Each part keyed from the request's own pass (its tokens' mean there), as
    // `Encoder::embed_with_parts` serves it; a part the pass does not reach is encoded alone.
    let mut in_context: Vec<Vec<Vec<f32>>> = vec![Vec::new(); texts.len()];
    for &q in &multi {
        let spans: Vec<Vec<std::ops::Range<usize>>> = needs::part_spans(&texts[q])
            .into_iter()
            .map(|p| p.spans)
            .collect();
        let (_, keys) = encoder
            .embed_with_parts(None, &texts[q], &spans, Precision::F32)
            .unwrap();
        in_context[q] = keys
            .into_iter()
            .zip(&part_keys[q])
            .map(|(k, alone)| k.map_or_else(|| alone.clone(), |e| compressor::query_key(&e)))
            .collect();
    }
    println!(
        "{}",
        row(
            "whole encoded, parts read in the request's pass, parts covered",
            &evaluate(data, &multi, |q| {
                let mut r = semantic_covered(&whole[q], &in_context[q], &doc_keys);
                r.truncate(10);
                r
            })
        )
    );
    println!(
        "{}",
        row("parts pooled, parts covered", &covered(&pooled_keys))
    );
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn semantic_covered(key: &[f32], parts: &[Vec<f32>], doc_keys: &[Vec<f32>]) -> Vec<usize> {
    let top = |k: &[f32], n: usize| key_ranking_n(k, doc_keys, n);
    let mut pool: Vec<usize> = top(key, 10);
    for p in parts {
        for d in top(p, 10) {
            if !pool.contains(&d) {
                pool.push(d);
            }
        }
    }
    let whole: Vec<f32> = pool.iter().map(|&d| dot(key, &doc_keys[d])).collect();
    let ps: Vec<Vec<f32>> = parts
        .iter()
        .map(|p| pool.iter().map(|&d| dot(p, &doc_keys[d])).collect())
        .collect();
    needs::cover(&whole, &ps, needs::COVERAGE_WEIGHT, needs::COVERAGE_WIDTH)
        .into_iter()
        .map(|(i, _)| pool[i])
        .collect()
}

fn key_ranking_n(k: &[f32], doc_keys: &[Vec<f32>], n: usize) -> Vec<usize> {
    pg_skills_benches::eval::key_ranking_to(k, doc_keys, n)
}

fn main() {
    let args = Args::parse();
    let encoder = Encoder::load(std::path::Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let bench = args.shared.join("bench-data");
    let mut sb = load(&bench.join("skillsbench-tasks"), true);
    sb.docs.extend(distractors(
        &args.shared.join("corpus"),
        "KaiserWhoLearns__skillsbench",
    ));
    run(&encoder, "SkillsBench (with distractors)", &sb);
    let mt = load(&bench.join("metatool"), false);
    run(&encoder, "MetaTool (all queries)", &mt);
}
