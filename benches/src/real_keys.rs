//! Query keys from real text, for the key-index benchmark (`key_bench --data real`).
//!
//! Keys: MiniLM (all-MiniLM-L6-v2, this crate's encoder) query keys — normalize(pad512(e)) —
//! of MetaTool task queries, MetaTool tool descriptions and passages of the shared skill corpus
//! (paragraphs of 40–240 characters of every markdown file, deduplicated). Queries: held-out
//! MetaTool queries (every 20th, never among the keys). Encoding takes minutes on 2 cores, so
//! both sets are cached as little-endian f32 files.
//!
//! Larger sets are the real keys followed by perturbed replicas: normalize(x + ε·z/√512), z
//! standard normal, ε = [`REPLICA_NOISE`] — near copies spread around each real key, as many
//! similar skills would be.

use std::collections::HashSet;
use std::path::Path;

use pg_skills_kernels::compressor::query_key;
use pg_skills_kernels::encoder::Encoder;
use pg_skills_kernels::rng::SplitMix64;
use pg_skills_kernels::synthetic::normal;

pub const DIM: usize = 512;
/// Noise of a perturbed replica relative to the key's unit norm.
pub const REPLICA_NOISE: f64 = 0.35;

/// The texts: (key texts, query texts).
pub fn texts(shared: &Path, max_passages: usize) -> (Vec<String>, Vec<String>) {
    let bench = shared.join("bench-data/metatool");
    let mut keys = Vec::new();
    let mut queries = Vec::new();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    for (i, line) in read(&bench.join("queries.jsonl")).lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = v["text"].as_str().unwrap_or_default().to_string();
        if i % 20 == 0 {
            queries.push(text);
        } else {
            keys.push(text);
        }
    }
    for line in read(&bench.join("corpus.jsonl")).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        keys.push(format!(
            "{}: {}",
            v["title"].as_str().unwrap_or_default(),
            v["text"].as_str().unwrap_or_default()
        ));
    }
    let mut files = Vec::new();
    collect_markdown(&shared.join("corpus"), &mut files);
    files.sort();
    let mut seen = HashSet::new();
    let mut passages = 0;
    'files: for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for paragraph in text.split("\n\n") {
            let p = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
            if (40..=240).contains(&p.len()) && !p.starts_with("```") && seen.insert(p.clone()) {
                keys.push(p);
                passages += 1;
                if passages >= max_passages {
                    break 'files;
                }
            }
        }
    }
    (keys, queries)
}

fn collect_markdown(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_markdown(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

fn encode(encoder: &Encoder, texts: &[String]) -> Vec<f32> {
    let mut out = Vec::with_capacity(texts.len() * DIM);
    for (i, chunk) in texts.chunks(512).enumerate() {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for e in encoder.embed(&refs).expect("encode") {
            out.extend(query_key(&e));
        }
        eprintln!("encoded {} of {}", (i * 512 + chunk.len()), texts.len());
    }
    out
}

fn write_f32(path: &Path, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

fn read_f32(path: &Path) -> Option<Vec<f32>> {
    let bytes = std::fs::read(path).ok()?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

// The command-line options of `key_bench` and `key_scan` that say where real keys come from
// (a plain comment: clap would show a doc comment as the benchmark's own description).
#[derive(clap::Args, Debug)]
pub struct RealKeySource {
    /// The shared data folder (real data: MetaTool and the skill corpus).
    #[arg(long, default_value = "../shared")]
    pub shared: std::path::PathBuf,
    #[arg(long, default_value = pg_skills_kernels::encoder::DEFAULT_MODEL_DIR)]
    pub model: std::path::PathBuf,
    /// Where the encoded real keys are cached.
    #[arg(long, default_value = "/var/cache/pg_skills/real-keys")]
    pub real_cache: std::path::PathBuf,
    /// Corpus passages among the real keys, at most.
    #[arg(long, default_value_t = 40000)]
    pub max_passages: usize,
}

impl RealKeySource {
    /// (keys, queries) as [`real_keys`] gives them.
    pub fn load(&self) -> (Vec<f32>, Vec<f32>) {
        real_keys(
            &self.shared,
            &self.model,
            &self.real_cache,
            self.max_passages,
        )
    }
}

/// Indices of the `k` largest scores, largest first (ties by index): exact search's answer.
pub fn top_k(scores: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..scores.len() as u32).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    let order = |a: &u32, b: &u32| {
        scores[*b as usize]
            .total_cmp(&scores[*a as usize])
            .then(a.cmp(b))
    };
    idx.select_nth_unstable_by(k - 1, order);
    idx.truncate(k);
    idx.sort_by(order);
    idx
}

/// (keys, queries), rows of [`DIM`] values: from `cache` when both files are there, else encoded
/// (and cached).
pub fn real_keys(
    shared: &Path,
    model: &Path,
    cache: &Path,
    max_passages: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (kf, qf) = (cache.join("keys.f32"), cache.join("queries.f32"));
    if let (Some(k), Some(q)) = (read_f32(&kf), read_f32(&qf)) {
        return (k, q);
    }
    let (key_texts, query_texts) = texts(shared, max_passages);
    eprintln!(
        "real keys: encoding {} key texts and {} queries (cached in {cache:?})",
        key_texts.len(),
        query_texts.len()
    );
    let encoder = Encoder::load(model).expect("the model (./x model fetches it)");
    let (k, q) = (encode(&encoder, &key_texts), encode(&encoder, &query_texts));
    std::fs::create_dir_all(cache).unwrap();
    write_f32(&kf, &k);
    write_f32(&qf, &q);
    (k, q)
}

/// `base` followed by perturbed replicas of its rows (in order, cycling) up to `n` rows.
pub fn with_replicas(base: &[f32], n: usize, seed: u64) -> Vec<f32> {
    let rows = base.len() / DIM;
    let mut out = base[..rows.min(n) * DIM].to_vec();
    let mut rng = SplitMix64(seed);
    let scale = REPLICA_NOISE / (DIM as f64).sqrt();
    let mut i = 0;
    while out.len() < n * DIM {
        let x = &base[(i % rows) * DIM..][..DIM];
        let mut r: Vec<f32> = x
            .iter()
            .map(|&v| (v as f64 + scale * normal(&mut rng)) as f32)
            .collect();
        pg_skills_kernels::encoder::normalize(&mut r);
        out.extend(r);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_unit_and_near_their_key() {
        let mut base = vec![0f32; 3 * DIM];
        for (r, row) in base.chunks_exact_mut(DIM).enumerate() {
            row[r] = 1.0;
        }
        let all = with_replicas(&base, 9, 1);
        assert_eq!(all.len(), 9 * DIM);
        assert_eq!(&all[..3 * DIM], &base[..]);
        for (i, row) in all.chunks_exact(DIM).enumerate().skip(3) {
            let norm: f32 = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4);
            let own = row[i % 3];
            assert!(own > 0.85 && own < 1.0, "replica {i}: {own}");
        }
    }
}
