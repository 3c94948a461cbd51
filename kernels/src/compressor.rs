//! Keys from embeddings, and the residual compressor that makes skill keys.
//!
//! - query key  q  = normalize(pad512(e(query)))
//! - skill key  k0 = normalize(pad512(e(doc)) + MLP(e(doc))), MLP: 384 → hidden (ReLU) → 512
//!
//! The MLP is trained once on support pairs (query, the skill that answers it) with a
//! contrastive loss: each query against the compressed keys of the other skills in its batch
//! (in-batch negatives), queries fixed, only the MLP learning. Its last layer starts at zero, so
//! training starts from the raw keys; the epoch kept is the one with the best validation MRR on
//! held-out support queries, and when no epoch beats the raw keys the result *is* the raw keys.
//! Inference is two small matrix-vector products in plain Rust (no candle at query time).

use std::collections::{HashMap, HashSet, VecDeque};

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, Optimizer, VarBuilder, VarMap};
use sha2::{Digest, Sha256};

use crate::encoder::{hex, normalize, EMBEDDING_DIMS};
use crate::rng::SplitMix64;
use crate::vector::dot;

/// Dimensions of every key.
pub const KEY_DIMS: usize = 512;

/// pad512(e) normalised: the key of a query (queries never go through the MLP).
pub fn query_key(embedding: &[f32]) -> Vec<f32> {
    let mut key = pad(embedding);
    normalize(&mut key);
    key
}

fn pad(embedding: &[f32]) -> Vec<f32> {
    assert_eq!(
        embedding.len(),
        EMBEDDING_DIMS,
        "an embedding has 384 dimensions"
    );
    let mut key = embedding.to_vec();
    key.resize(KEY_DIMS, 0.0);
    key
}

/// A frozen compressor: weights row-major, as candle's `Linear` holds them.
#[derive(Clone, Debug, PartialEq)]
pub struct Compressor {
    pub hidden: usize,
    w1: Vec<f32>, // hidden × 384
    b1: Vec<f32>, // hidden
    w2: Vec<f32>, // 512 × hidden
    b2: Vec<f32>, // 512
}

/// The skill key of `embedding`: with no compressor, the raw padded key.
pub fn skill_key(compressor: Option<&Compressor>, embedding: &[f32]) -> Vec<f32> {
    let mut key = pad(embedding);
    if let Some(c) = compressor {
        for (k, m) in key.iter_mut().zip(c.residual(embedding)) {
            *k += m;
        }
    }
    normalize(&mut key);
    key
}

const TENSOR_NAMES: [&str; 4] = ["l1.weight", "l1.bias", "l2.weight", "l2.bias"];

impl Compressor {
    /// MLP(e): what the compressor adds to the padded embedding.
    pub fn residual(&self, e: &[f32]) -> Vec<f32> {
        let h: Vec<f32> = (0..self.hidden)
            .map(|j| {
                let row = &self.w1[j * EMBEDDING_DIMS..(j + 1) * EMBEDDING_DIMS];
                (dot(row, e) + self.b1[j]).max(0.0)
            })
            .collect();
        (0..KEY_DIMS)
            .map(|i| dot(&self.w2[i * self.hidden..(i + 1) * self.hidden], &h) + self.b2[i])
            .collect()
    }

    /// The weights as safetensors bytes (what `skills.compressor` stores).
    pub fn to_bytes(&self) -> Vec<u8> {
        let shapes = [
            vec![self.hidden, EMBEDDING_DIMS],
            vec![self.hidden],
            vec![KEY_DIMS, self.hidden],
            vec![KEY_DIMS],
        ];
        let data = [&self.w1, &self.b1, &self.w2, &self.b2];
        let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = TENSOR_NAMES
            .iter()
            .zip(shapes)
            .zip(data)
            .map(|((name, shape), values)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape,
                    bytemuck::cast_slice(values),
                )
                .expect("shape matches data");
                (*name, view)
            })
            .collect();
        safetensors::serialize(views, None).expect("in-memory serialisation")
    }

    /// Reads weights written by [`Compressor::to_bytes`], checking every shape.
    pub fn from_bytes(bytes: &[u8]) -> Result<Compressor, String> {
        let tensors = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| format!("not a compressor: {e}"))?;
        let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>), String> {
            let view = tensors
                .tensor(name)
                .map_err(|_| format!("not a compressor: no tensor {name}"))?;
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(format!("not a compressor: {name} is not f32"));
            }
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Ok((view.shape().to_vec(), values))
        };
        let (s1, w1) = get("l1.weight")?;
        let (_, b1) = get("l1.bias")?;
        let (s2, w2) = get("l2.weight")?;
        let (_, b2) = get("l2.bias")?;
        let hidden = s1.first().copied().unwrap_or(0);
        let ok = hidden > 0
            && s1 == [hidden, EMBEDDING_DIMS]
            && b1.len() == hidden
            && s2 == [KEY_DIMS, hidden]
            && b2.len() == KEY_DIMS;
        if !ok {
            return Err(format!(
                "not a compressor: shapes {s1:?}, {}, {s2:?}, {}",
                b1.len(),
                b2.len()
            ));
        }
        if [&w1, &b1, &w2, &b2]
            .iter()
            .any(|v| v.iter().any(|x| !x.is_finite()))
        {
            return Err("not a compressor: non-finite weights".into());
        }
        Ok(Compressor {
            hidden,
            w1,
            b1,
            w2,
            b2,
        })
    }

    /// Whether this compressor changes nothing (a training run that never beat the raw keys).
    pub fn is_identity(&self) -> bool {
        self.w2.iter().chain(&self.b2).all(|&x| x == 0.0)
    }
}

/// Hex sha256 of stored weights.
pub fn checksum(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Support data: embeddings of queries and of skill documents, and which document answers
/// which query (a query may have several).
pub struct TrainingSet<'a> {
    pub queries: &'a [Vec<f32>],
    pub documents: &'a [Vec<f32>],
    pub pairs: &'a [(usize, usize)],
}

#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub hidden: usize,
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub temperature: f64,
    /// Share of the support queries held out to choose the epoch.
    pub validation_fraction: f64,
    pub seed: u64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            hidden: 256,
            epochs: 30,
            batch_size: 64,
            learning_rate: 1e-3,
            weight_decay: 1e-4,
            temperature: 0.05,
            validation_fraction: 0.15,
            seed: 42,
        }
    }
}

/// What a training run did (stored next to the weights).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainReport {
    pub training_pairs: usize,
    pub validation_pairs: usize,
    pub epochs_run: usize,
    /// 0 when no epoch beat the raw keys (the result is then the identity).
    pub best_epoch: usize,
    pub validation_mrr_raw: f64,
    pub validation_mrr: f64,
}

/// Trains a compressor. `between_epochs` runs after each epoch (cancellation checks).
pub fn train(
    set: &TrainingSet,
    options: &TrainOptions,
    between_epochs: &mut dyn FnMut(usize),
) -> Result<(Compressor, TrainReport), String> {
    // candle's products run on rayon's global pool.
    crate::threads::global_pool();
    if set.pairs.is_empty() {
        return Err("no training pairs".into());
    }
    for &(q, d) in set.pairs {
        if q >= set.queries.len() || d >= set.documents.len() {
            return Err(format!("pair ({q}, {d}) is out of range"));
        }
    }
    if options.hidden == 0 || options.batch_size < 2 || options.temperature <= 0.0 {
        return Err("hidden must be ≥ 1, batch_size ≥ 2 and temperature > 0".into());
    }
    let (training, validation) =
        split_by_query(set.pairs, options.validation_fraction, options.seed);
    if training.is_empty() {
        return Err("every pair went to validation: add pairs or lower the fraction".into());
    }
    let device = Device::Cpu;
    let err = |e: candle_core::Error| e.to_string();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let l1 = candle_nn::linear(EMBEDDING_DIMS, options.hidden, vb.pp("l1")).map_err(err)?;
    let l2 = {
        let vb = vb.pp("l2");
        let w = vb
            .get_with_hints(
                (KEY_DIMS, options.hidden),
                "weight",
                candle_nn::Init::Const(0.0),
            )
            .map_err(err)?;
        let b = vb
            .get_with_hints(KEY_DIMS, "bias", candle_nn::Init::Const(0.0))
            .map_err(err)?;
        Linear::new(w, Some(b))
    };
    let mut optimizer = candle_nn::AdamW::new(
        varmap.all_vars(),
        candle_nn::ParamsAdamW {
            lr: options.learning_rate,
            weight_decay: options.weight_decay,
            ..Default::default()
        },
    )
    .map_err(err)?;

    let query_keys: Vec<Vec<f32>> = set.queries.iter().map(|e| query_key(e)).collect();
    let frozen = |l1: &Linear, l2: &Linear| -> Result<Compressor, String> {
        let flat = |t: &Tensor| -> Result<Vec<f32>, String> {
            t.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .map_err(err)
        };
        Ok(Compressor {
            hidden: options.hidden,
            w1: flat(l1.weight())?,
            b1: flat(l1.bias().expect("has bias"))?,
            w2: flat(l2.weight())?,
            b2: flat(l2.bias().expect("has bias"))?,
        })
    };
    let identity = frozen(&l1, &l2)?;
    let validation_mrr_raw = mrr(set, &query_keys, &validation, None);
    let mut best = (validation_mrr_raw, 0usize, identity);
    let mut rng = SplitMix64(options.seed ^ 0x5eed);
    let mut report = TrainReport {
        training_pairs: training.len(),
        validation_pairs: validation.len(),
        validation_mrr_raw,
        ..Default::default()
    };
    for epoch in 1..=options.epochs {
        for batch in distinct_document_batches(&training, options.batch_size, &mut rng) {
            let qs: Vec<f32> = batch
                .iter()
                .flat_map(|&(q, _)| query_keys[q].clone())
                .collect();
            let es: Vec<f32> = batch
                .iter()
                .flat_map(|&(_, d)| set.documents[d].clone())
                .collect();
            let padded: Vec<f32> = batch
                .iter()
                .flat_map(|&(_, d)| pad(&set.documents[d]))
                .collect();
            let n = batch.len();
            let loss = (|| -> candle_core::Result<Tensor> {
                let q = Tensor::from_vec(qs, (n, KEY_DIMS), &device)?;
                let e = Tensor::from_vec(es, (n, EMBEDDING_DIMS), &device)?;
                let p = Tensor::from_vec(padded, (n, KEY_DIMS), &device)?;
                let k = (p + l2.forward(&l1.forward(&e)?.relu()?)?)?;
                let k = k.broadcast_div(&k.sqr()?.sum_keepdim(1)?.sqrt()?)?;
                let logits = (q.matmul(&k.t()?)? / options.temperature)?;
                let targets = Tensor::arange(0u32, n as u32, &device)?;
                candle_nn::loss::cross_entropy(&logits, &targets)
            })()
            .map_err(err)?;
            optimizer.backward_step(&loss).map_err(err)?;
        }
        report.epochs_run = epoch;
        let current = frozen(&l1, &l2)?;
        let score = mrr(set, &query_keys, &validation, Some(&current));
        if score > best.0 {
            best = (score, epoch, current);
        }
        between_epochs(epoch);
    }
    report.best_epoch = best.1;
    report.validation_mrr = best.0;
    Ok((best.2, report))
}

/// Holds out a share of the queries (all their pairs); with no validation queries the first
/// epoch that runs is kept as it is measured on nothing, so at least one query is held out when
/// there are two or more.
fn split_by_query(
    pairs: &[(usize, usize)],
    fraction: f64,
    seed: u64,
) -> (Vec<(usize, usize)>, Vec<(usize, usize)>) {
    let queries: Vec<usize> = {
        let mut seen: Vec<usize> = pairs.iter().map(|p| p.0).collect();
        seen.sort_unstable();
        seen.dedup();
        seen
    };
    let mut rng = SplitMix64(seed);
    let mut shuffled = queries.clone();
    rng.shuffle(&mut shuffled);
    let wanted = ((queries.len() as f64 * fraction).round() as usize)
        .max(usize::from(queries.len() >= 2 && fraction > 0.0));
    let held: HashSet<usize> = shuffled.into_iter().take(wanted).collect();
    pairs.iter().partition(|p| !held.contains(&p.0))
}

/// Shuffled batches in which no document appears twice (a duplicate would be its own negative).
fn distinct_document_batches(
    pairs: &[(usize, usize)],
    batch_size: usize,
    rng: &mut SplitMix64,
) -> Vec<Vec<(usize, usize)>> {
    let mut order = pairs.to_vec();
    rng.shuffle(&mut order);
    let mut pending: VecDeque<(usize, usize)> = order.into();
    let mut batches = Vec::new();
    while !pending.is_empty() {
        let mut batch = Vec::new();
        let mut docs = HashSet::new();
        let mut deferred = VecDeque::new();
        while let Some(pair) = pending.pop_front() {
            if batch.len() < batch_size && docs.insert(pair.1) {
                batch.push(pair);
            } else {
                deferred.push_back(pair);
            }
        }
        pending = deferred;
        if batch.len() >= 2 {
            batches.push(batch);
        } else {
            break; // one document left with nothing to contrast it with
        }
    }
    batches
}

/// Mean reciprocal rank of the first right document, over the queries of `pairs`, ranking
/// every document.
fn mrr(
    set: &TrainingSet,
    query_keys: &[Vec<f32>],
    pairs: &[(usize, usize)],
    compressor: Option<&Compressor>,
) -> f64 {
    let mut relevant: HashMap<usize, HashSet<usize>> = HashMap::new();
    for &(q, d) in pairs {
        relevant.entry(q).or_default().insert(d);
    }
    if relevant.is_empty() {
        return 0.0;
    }
    let keys: Vec<Vec<f32>> = set
        .documents
        .iter()
        .map(|e| skill_key(compressor, e))
        .collect();
    let total: f64 = relevant
        .iter()
        .map(|(&q, right)| {
            let scores: Vec<f32> = keys.iter().map(|k| dot(&query_keys[q], k)).collect();
            let best_right = right
                .iter()
                .map(|&d| scores[d])
                .fold(f32::NEG_INFINITY, f32::max);
            let rank = 1 + scores.iter().filter(|&&s| s > best_right).count();
            1.0 / rank as f64
        })
        .sum();
    total / relevant.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(rng: &mut SplitMix64, dims: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dims).map(|_| rng.unit() as f32 - 0.5).collect();
        normalize(&mut v);
        v
    }

    #[test]
    fn keys_are_unit_length_and_raw_without_a_compressor() {
        let mut rng = SplitMix64(7);
        let e = unit(&mut rng, EMBEDDING_DIMS);
        let q = query_key(&e);
        assert_eq!(q.len(), KEY_DIMS);
        assert!(q[EMBEDDING_DIMS..].iter().all(|&x| x == 0.0));
        assert_eq!(skill_key(None, &e), q);
        let norm: f32 = q.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    /// Documents whose queries point elsewhere than the documents do: the raw keys rank badly,
    /// a compressor can learn the mapping, and the weights survive a round trip.
    #[test]
    fn training_learns_a_shifted_mapping_and_round_trips() {
        let mut rng = SplitMix64(11);
        let docs: Vec<Vec<f32>> = (0..40).map(|_| unit(&mut rng, EMBEDDING_DIMS)).collect();
        // Each query is a fixed rotation-like mix of its document and the next one.
        let mut queries = Vec::new();
        let mut pairs = Vec::new();
        for rep in 0..6 {
            for d in 0..docs.len() {
                let other = &docs[(d + 1) % docs.len()];
                let noise = unit(&mut rng, EMBEDDING_DIMS);
                let mut q: Vec<f32> = (0..EMBEDDING_DIMS)
                    .map(|i| 0.3 * docs[d][i] + 0.9 * other[i] + 0.1 * noise[i])
                    .collect();
                normalize(&mut q);
                queries.push(q);
                pairs.push((rep * docs.len() + d, d));
            }
        }
        let set = TrainingSet {
            queries: &queries,
            documents: &docs,
            pairs: &pairs,
        };
        let options = TrainOptions {
            hidden: 64,
            epochs: 40,
            batch_size: 16,
            learning_rate: 3e-3,
            ..Default::default()
        };
        let mut epochs = 0;
        let (c, report) = train(&set, &options, &mut |_| epochs += 1).unwrap();
        assert_eq!(epochs, 40);
        assert!(report.validation_pairs > 0 && report.training_pairs > report.validation_pairs);
        assert!(
            report.validation_mrr > report.validation_mrr_raw + 0.2,
            "{report:?}"
        );
        assert!(report.best_epoch > 0 && !c.is_identity());
        let back = Compressor::from_bytes(&c.to_bytes()).unwrap();
        assert_eq!(back, c);
        assert_eq!(checksum(&c.to_bytes()), checksum(&back.to_bytes()));
        assert!(Compressor::from_bytes(b"junk").is_err());
    }

    /// When the raw keys are already right, no epoch can beat them by much; whatever is kept
    /// never scores below the raw keys on validation.
    #[test]
    fn training_never_keeps_worse_than_raw() {
        let mut rng = SplitMix64(3);
        let docs: Vec<Vec<f32>> = (0..30).map(|_| unit(&mut rng, EMBEDDING_DIMS)).collect();
        let queries = docs.clone();
        let pairs: Vec<(usize, usize)> = (0..docs.len()).map(|d| (d, d)).collect();
        let set = TrainingSet {
            queries: &queries,
            documents: &docs,
            pairs: &pairs,
        };
        let options = TrainOptions {
            hidden: 16,
            epochs: 3,
            batch_size: 8,
            ..Default::default()
        };
        let (c, report) = train(&set, &options, &mut |_| {}).unwrap();
        assert!(
            report.validation_mrr >= report.validation_mrr_raw,
            "{report:?}"
        );
        if report.best_epoch == 0 {
            assert!(c.is_identity());
        }
    }

    #[test]
    fn batches_never_repeat_a_document() {
        let pairs: Vec<(usize, usize)> = (0..100).map(|i| (i, i % 7)).collect();
        let mut rng = SplitMix64(1);
        let batches = distinct_document_batches(&pairs, 5, &mut rng);
        let mut seen = 0;
        for b in &batches {
            let docs: HashSet<usize> = b.iter().map(|p| p.1).collect();
            assert_eq!(docs.len(), b.len());
            assert!(b.len() <= 5);
            seen += b.len();
        }
        assert!(
            seen >= 99,
            "at most one pair is left over, {seen} of 100 used"
        );
    }
}
