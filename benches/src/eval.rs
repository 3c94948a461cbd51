//! Shared parts of the offline quality evaluations (`semantic_eval`, `keyopt_eval`): BEIR
//! datasets read into memory, deterministic splits, rankings by BM25 and by keys, metrics over
//! rankings, and an on-disk cache of embeddings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::beir::{read_qrels, read_queries, Qrels};
use crate::metrics::{mean, query_metrics, Metrics};
use pg_skills_kernels::bm25::{Bm25Params, ReferenceScorer};
use pg_skills_kernels::encoder::Encoder;
use pg_skills_kernels::keyopt::fit::bm25_relevance_part;
use pg_skills_kernels::text::AnalyzerConfig;
use pg_skills_kernels::vector::dot;

pub struct Dataset {
    /// (id, name, description, instructions)
    pub docs: Vec<(String, String, String, String)>,
    pub queries: Vec<(String, String)>,
    pub qrels: Qrels,
}

pub fn read_corpus(dir: &Path, skill_md: bool) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(dir.join("corpus.jsonl")).expect("corpus.jsonl");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            let id = v["_id"].as_str().unwrap_or_default().to_string();
            let title = v["title"].as_str().unwrap_or_default();
            let body = v["text"].as_str().unwrap_or_default();
            if skill_md {
                match pg_skills_corpus::skill::parse_skill_md(body, Some(title)) {
                    Ok(s) => (id, s.name, s.description, s.instructions),
                    Err(_) => (id, title.to_string(), String::new(), body.to_string()),
                }
            } else {
                (id, title.to_string(), body.to_string(), String::new())
            }
        })
        .collect()
}

pub fn load(dir: &Path, skill_md: bool) -> Dataset {
    Dataset {
        docs: read_corpus(dir, skill_md),
        queries: read_queries(dir).expect("queries.jsonl"),
        qrels: read_qrels(dir).expect("qrels"),
    }
}

/// A stable pseudo-random number in 0..100 for a query id.
pub fn bucket(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
    }
    h % 100
}

/// Metrics of rankings: `rank(query index)` gives document indices best first.
pub fn evaluate(
    data: &Dataset,
    queries: &[usize],
    mut rank: impl FnMut(usize) -> Vec<usize>,
) -> Metrics {
    let per_query: Vec<Metrics> = queries
        .iter()
        .map(|&q| {
            let (qid, _) = &data.queries[q];
            let ranked: Vec<Vec<String>> = rank(q)
                .into_iter()
                .map(|d| vec![data.docs[d].0.clone()])
                .collect();
            let empty = HashMap::new();
            let relevant = data.qrels.get(qid).unwrap_or(&empty);
            let index: HashMap<&str, i64> = data
                .docs
                .iter()
                .enumerate()
                .map(|(i, d)| (d.0.as_str(), i as i64))
                .collect();
            query_metrics(&ranked, relevant, |doc| index.get(doc).copied())
        })
        .collect();
    mean(&per_query)
}

/// Reciprocal-rank fusion (k = 60, equal weights) of two rankings, the first 10.
pub fn rrf(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut score: HashMap<usize, f64> = HashMap::new();
    for list in [a, b] {
        for (rank, &d) in list.iter().enumerate() {
            *score.entry(d).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
        }
    }
    let mut out: Vec<(usize, f64)> = score.into_iter().collect();
    out.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    out.into_iter().take(10).map(|(d, _)| d).collect()
}

/// The first 10 documents by inner product with the query key.
pub fn key_ranking(query_key: &[f32], doc_keys: &[Vec<f32>]) -> Vec<usize> {
    key_ranking_to(query_key, doc_keys, 10)
}

/// The first `depth` documents by inner product with the query key (ties: lower index).
pub fn key_ranking_to(query_key: &[f32], doc_keys: &[Vec<f32>], depth: usize) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = doc_keys
        .iter()
        .enumerate()
        .map(|(i, k)| (dot(query_key, k), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(depth).map(|(_, i)| i).collect()
}

/// The BM25 part of KeyOpt's mixed base relevance for each query
/// (`keyopt::fit::bm25_relevance_part`: every document's score over the query's supremum);
/// documents without a query term have no entry (0).
pub fn bm25_normalised_scores(
    data: &Dataset,
    queries: &[usize],
) -> HashMap<usize, HashMap<usize, f32>> {
    let texts: Vec<&str> = queries
        .iter()
        .map(|&q| data.queries[q].1.as_str())
        .collect();
    queries
        .iter()
        .copied()
        .zip(bm25_normalised_texts(data, &texts))
        .collect()
}

/// [`bm25_normalised_scores`] of any texts (a request's parts, say), in their order.
pub fn bm25_normalised_texts(data: &Dataset, texts: &[&str]) -> Vec<HashMap<usize, f32>> {
    let mut scorer = reference_scorer(data);
    texts
        .iter()
        .map(|text| {
            let hits: Vec<(i64, f64)> = scorer
                .search(text, None, |_| true)
                .into_iter()
                .map(|h| (h.id, h.score))
                .collect();
            bm25_relevance_part(&hits, scorer.supremum(text))
                .into_iter()
                .map(|(id, r)| (id as usize, r))
                .collect()
        })
        .collect()
}

/// The reference BM25 scorer (the extension's defaults) over a dataset's documents, by index.
fn reference_scorer(data: &Dataset) -> ReferenceScorer {
    let mut scorer =
        ReferenceScorer::new(Bm25Params::default(), AnalyzerConfig { stemming: true }).unwrap();
    for (i, (_, name, description, instructions)) in data.docs.iter().enumerate() {
        scorer.add(i as i64, name, description, instructions);
    }
    scorer
}

/// The first `depth` BM25 results of each query (document indices).
pub fn bm25_rankings(
    data: &Dataset,
    queries: &[usize],
    depth: usize,
) -> HashMap<usize, Vec<usize>> {
    let mut scorer = reference_scorer(data);
    queries
        .iter()
        .map(|&q| {
            let hits = scorer.search(&data.queries[q].1, Some(depth), |_| true);
            (q, hits.into_iter().map(|h| h.id as usize).collect())
        })
        .collect()
}

/// Embeddings of `texts`, kept in /var/tmp keyed by a hash of the texts and the model files, so a
/// rerun with other training options skips the encoder (20k MetaTool queries take minutes).
pub fn cached_embeddings(encoder: &Encoder, texts: &[String]) -> Vec<Vec<f32>> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    texts.hash(&mut h);
    pg_skills_kernels::encoder::MODEL_MANIFEST.hash(&mut h);
    let dir = PathBuf::from("/var/tmp/pg_skills-eval-cache");
    let path = dir.join(format!("{:016x}.f32", h.finish()));
    if let Ok(bytes) = std::fs::read(&path) {
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if values.len() == texts.len() * 384 {
            return values.chunks(384).map(<[f32]>::to_vec).collect();
        }
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = encoder.embed(&refs).expect("embed");
    let _ = std::fs::create_dir_all(&dir);
    let bytes: Vec<u8> = vectors
        .iter()
        .flatten()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let _ = std::fs::write(&path, bytes);
    vectors
}

/// The embeddings of each text's parts (`needs::part_spans`), each read in its text's own
/// pass (`Encoder::embed_with_parts`, f32), as a search that covers parts serves them; a part
/// the pass does not reach is encoded alone. A text of one part has none. Cached on disk like
/// [`cached_embeddings`].
pub fn cached_parts_in_context(encoder: &Encoder, texts: &[String]) -> Vec<Vec<Vec<f32>>> {
    use pg_skills_kernels::encoder::Precision;
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ("parts in context", texts).hash(&mut h);
    pg_skills_kernels::encoder::MODEL_MANIFEST.hash(&mut h);
    let dir = PathBuf::from("/var/tmp/pg_skills-eval-cache");
    let path = dir.join(format!("{:016x}.parts.f32", h.finish()));
    if let Ok(bytes) = std::fs::read(&path) {
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // Per text: its number of parts, then that many embeddings.
        let mut at = 0;
        let mut out = Vec::with_capacity(texts.len());
        while at < values.len() && out.len() < texts.len() {
            let n = values[at] as usize;
            at += 1;
            out.push(
                values[at..(at + n * 384).min(values.len())]
                    .chunks(384)
                    .map(<[f32]>::to_vec)
                    .collect(),
            );
            at += n * 384;
        }
        if out.len() == texts.len() && at == values.len() {
            return out;
        }
    }
    let out: Vec<Vec<Vec<f32>>> = texts
        .iter()
        .map(|t| {
            let parts = pg_skills_kernels::needs::part_spans(t);
            if parts.len() < 2 {
                return Vec::new();
            }
            let spans: Vec<_> = parts.iter().map(|p| p.spans.clone()).collect();
            let (_, keys) = encoder
                .embed_with_parts(None, t, &spans, Precision::F32)
                .expect("embed");
            keys.into_iter()
                .zip(&parts)
                .map(|(k, p)| {
                    k.unwrap_or_else(|| encoder.embed(&[p.text.as_str()]).expect("embed").remove(0))
                })
                .collect()
        })
        .collect();
    let mut bytes = Vec::new();
    for parts in &out {
        bytes.extend((parts.len() as f32).to_le_bytes());
        for x in parts.iter().flatten() {
            bytes.extend(x.to_le_bytes());
        }
    }
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&path, bytes);
    out
}

pub fn row(name: &str, m: &Metrics) -> String {
    format!(
        "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
        m.ndcg_at_10, m.recall_at_10, m.hit_at_1, m.mrr_at_10
    )
}

/// A stable 64-bit hash of `text` under `seed` (splits and folds of the evaluations).
pub fn hash(seed: u64, text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in text.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
    }
    pg_skills_kernels::rng::SplitMix64(h).next_u64()
}

/// SKILL.md files of ../shared/corpus, except those under `exclude_folder` (the repository a
/// benchmark's own skills come from): (id, name, description, instructions).
pub fn distractors(corpus: &Path, exclude_folder: &str) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    let Ok(folders) = std::fs::read_dir(corpus) else {
        return out;
    };
    let mut folders: Vec<PathBuf> = folders
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        if folder.file_name().is_some_and(|n| n == exclude_folder) {
            continue;
        }
        for file in pg_skills_corpus::readers::skill_files(&folder).unwrap_or_default() {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            if let Ok(s) = pg_skills_corpus::skill::parse_skill_md(&text, None) {
                out.push((
                    format!("distractor:{}", file.display()),
                    s.name,
                    s.description,
                    s.instructions,
                ));
            }
        }
    }
    out
}
