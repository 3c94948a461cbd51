//! The BERT forward pass of all-MiniLM-L6-v2 on the CPU, over packed batches.
//!
//! A batch is not padded: the tokens of all its texts are laid end to end (N rows), the dense
//! layers run once over all N rows, and attention runs per text and head over that text's own
//! tokens. No compute goes to padding and no attention mask is needed. Matrix products are
//! the `gemm` crate's (the kernels candle itself calls), or for a query's few rows
//! [`super::few_rows`]'s; the rest is fused passes from
//! [`super::fastmath`] over buffers allocated once per batch, where candle allocates a tensor
//! per operation and pads every text to the batch's longest.
//!
//! candle's own `BertModel` is the reference: a test checks both give the same embeddings.

use std::path::Path;
use std::sync::OnceLock;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use gemm::Parallelism;

use super::bf16_tiles::{self, TiledWeight};
use super::fastmath::{gelu_in_place, layer_norm_rows, softmax_rows};
use super::int16_rows::{self, QuantizedWeight};
use super::int8_rows::{self, Int8Weight};
use super::{team, Precision};

/// Rows per task of the element-wise steps (GELU, layer norms) between a pass's products.
const ROWS_PER_TASK: usize = 4;

/// The shape of the model, from its config.json; only what this forward pass supports loads.
#[derive(Debug, Clone, PartialEq)]
pub struct BertShape {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_positions: usize,
    pub layer_norm_eps: f32,
}

impl BertShape {
    pub fn from_config(config: &serde_json::Value) -> Result<BertShape, String> {
        let int = |key: &str| {
            config[key]
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| format!("config.json: {key} is missing or not a number"))
        };
        let text = |key: &str, default: &str| config[key].as_str().unwrap_or(default).to_string();
        if text("hidden_act", "gelu") != "gelu" {
            return Err(format!(
                "config.json: hidden_act {} is not supported (gelu is)",
                config["hidden_act"]
            ));
        }
        if text("position_embedding_type", "absolute") != "absolute" {
            return Err("config.json: only absolute position embeddings are supported".into());
        }
        let shape = BertShape {
            vocab: int("vocab_size")?,
            hidden: int("hidden_size")?,
            layers: int("num_hidden_layers")?,
            heads: int("num_attention_heads")?,
            intermediate: int("intermediate_size")?,
            max_positions: int("max_position_embeddings")?,
            layer_norm_eps: config["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
        };
        if shape.heads == 0 || !shape.hidden.is_multiple_of(shape.heads) {
            return Err(format!(
                "config.json: {} heads do not divide hidden size {}",
                shape.heads, shape.hidden
            ));
        }
        Ok(shape)
    }

    fn head_dims(&self) -> usize {
        self.hidden / self.heads
    }
}

/// A dense layer: `out` rows, `inputs` columns, stored row-major as in the checkpoint.
struct Dense {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
    /// The weights on the 16-bit grid, made on the first reduced-precision product (only
    /// processes that encode queries that way hold them: 21 MB for the model's layers).
    quantized: OnceLock<Option<QuantizedWeight>>,
    /// The weights on the 8-bit grid, made on the first 8-bit product (11 MB for the layers).
    quantized8: OnceLock<Option<Int8Weight>>,
    /// The weights in bfloat16 tiles, made on the first AMX product (21 MB likewise).
    tiled: OnceLock<Option<TiledWeight>>,
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    /// Query, key and value stacked into one (3·hidden × hidden) layer: one product for all three.
    qkv: Dense,
    attention_out: Dense,
    attention_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
}

impl Layer {
    /// The layer's dense products in the order of a pass.
    fn dense(&self) -> [&Dense; DENSE_PER_LAYER] {
        [
            &self.qkv,
            &self.attention_out,
            &self.intermediate,
            &self.output,
        ]
    }
}

pub struct Bert {
    shape: BertShape,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    /// Token ids of the texts whose activations set the 8-bit products' smoothing factors
    /// ([`Bert::calibrate_with`]); none: no smoothing.
    calibration: Vec<Vec<u32>>,
    /// Per dense product (layer by layer: qkv, attention output, intermediate, output), the
    /// factor of each input channel for the 8-bit products, made on the first 8-bit pass.
    smoothing: OnceLock<Vec<Option<Vec<f32>>>>,
}

/// The dense products of a layer, in the order [`Bert::smoothing`] holds their factors.
const DENSE_PER_LAYER: usize = 4;
/// The products (of [`DENSE_PER_LAYER`]) whose 8-bit inputs are smoothed: those fed by a layer
/// norm (q|k|v and the intermediate product). On 4,016 MetaTool requests that halved the 8-bit
/// keys' mean distance to f32 (1 − cosine 8.9e-4 → 5.0e-4, the lowest cosine 0.9962 → 0.9979);
/// smoothing the attention output's and the last product's inputs too changed nothing.
const SMOOTHED: [usize; 2] = [0, 2];

/// Widens each column's largest magnitude in `range` to that of the rows of `values` (rows as
/// long as `range`).
/// The mean of `rows` of `x` (rows of `h` floats), summed in the order given (a mean of no row
/// is zeros).
fn mean_of_rows(x: &[f32], h: usize, rows: impl ExactSizeIterator<Item = usize>) -> Vec<f32> {
    let mut mean = vec![0f32; h];
    let count = rows.len().max(1) as f32;
    for r in rows {
        for (m, v) in mean.iter_mut().zip(&x[r * h..(r + 1) * h]) {
            *m += v;
        }
    }
    mean.iter_mut().for_each(|m| *m /= count);
    mean
}

fn widen_to_columns(range: &mut [f32], values: &[f32]) {
    for row in values.chunks_exact(range.len()) {
        for (r, v) in range.iter_mut().zip(row) {
            *r = r.max(v.abs());
        }
    }
}

fn tensor(vb: &VarBuilder, shape: &[usize], name: &str) -> Result<Vec<f32>, String> {
    vb.get(shape, name)
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .map_err(|e| format!("{}.{name}: {e}", vb.prefix()))
}

fn dense(vb: &VarBuilder, outputs: usize, inputs: usize) -> Result<Dense, String> {
    Ok(Dense {
        weight: tensor(vb, &[outputs, inputs], "weight")?,
        bias: tensor(vb, &[outputs], "bias")?,
        inputs,
        outputs,
        quantized: OnceLock::new(),
        quantized8: OnceLock::new(),
        tiled: OnceLock::new(),
    })
}

fn layer_norm(vb: &VarBuilder, width: usize) -> Result<LayerNorm, String> {
    Ok(LayerNorm {
        gamma: tensor(vb, &[width], "weight")?,
        beta: tensor(vb, &[width], "bias")?,
    })
}

impl Bert {
    /// Reads the weights from a safetensors file (names as in the Hugging Face checkpoint).
    pub fn load(weights: &Path, shape: BertShape) -> Result<Bert, String> {
        // SAFETY: the file is mapped read-only and copied out before this returns; the caller
        // verified its checksum, and nothing in this process writes it.
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
                .map_err(|e| e.to_string())?;
        let h = shape.hidden;
        let e = vb.pp("embeddings");
        let word = tensor(&e, &[shape.vocab, h], "word_embeddings.weight")?;
        let position = tensor(&e, &[shape.max_positions, h], "position_embeddings.weight")?;
        let token_type = tensor(&e, &[2, h], "token_type_embeddings.weight")?;
        let embedding_norm = layer_norm(&e.pp("LayerNorm"), h)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let a = l.pp("attention");
            let (q, k, v) = (
                dense(&a.pp("self.query"), h, h)?,
                dense(&a.pp("self.key"), h, h)?,
                dense(&a.pp("self.value"), h, h)?,
            );
            let qkv = Dense {
                weight: [q.weight, k.weight, v.weight].concat(),
                bias: [q.bias, k.bias, v.bias].concat(),
                inputs: h,
                outputs: 3 * h,
                quantized: OnceLock::new(),
                quantized8: OnceLock::new(),
                tiled: OnceLock::new(),
            };
            layers.push(Layer {
                qkv,
                attention_out: dense(&a.pp("output.dense"), h, h)?,
                attention_norm: layer_norm(&a.pp("output.LayerNorm"), h)?,
                intermediate: dense(&l.pp("intermediate.dense"), shape.intermediate, h)?,
                output: dense(&l.pp("output.dense"), h, shape.intermediate)?,
                output_norm: layer_norm(&l.pp("output.LayerNorm"), h)?,
            });
        }
        Ok(Bert {
            shape,
            word,
            position,
            token_type,
            embedding_norm,
            layers,
            calibration: Vec::new(),
            smoothing: OnceLock::new(),
        })
    }

    /// Sets the texts (token ids) whose activations set the 8-bit products' smoothing factors,
    /// before the first 8-bit pass; none leaves the products unsmoothed.
    pub fn calibrate_with(&mut self, texts: Vec<Vec<u32>>) {
        self.calibration = texts;
        self.smoothing = OnceLock::new();
    }

    /// The 8-bit products' factor per input channel of each smoothed dense product
    /// ([`SMOOTHED`]), from the largest magnitude each channel takes over the calibration texts
    /// and in the weights ([`int8_rows::smoothing_factor`]).
    fn smoothing(&self) -> &[Option<Vec<f32>>] {
        self.smoothing.get_or_init(|| {
            let products = self.layers.len() * DENSE_PER_LAYER;
            if self.calibration.is_empty() {
                return vec![None; products];
            }
            let mut ranges: Vec<Vec<f32>> = Vec::with_capacity(products);
            for layer in &self.layers {
                for dense in layer.dense() {
                    ranges.push(vec![0f32; dense.inputs]);
                }
            }
            let mut observe = |product: usize, input: &[f32]| {
                if !SMOOTHED.contains(&(product % DENSE_PER_LAYER)) {
                    return;
                }
                widen_to_columns(&mut ranges[product], input);
            };
            // Passes of at most a query's rows: the products then take the few-rows path, which
            // runs on the team this is called from. In 16-bit products (within cosine 0.99999
            // of f32, and faster: this runs in the first 8-bit pass of every process).
            let texts = &self.calibration;
            let order: Vec<usize> = (0..texts.len()).collect();
            let passes = super::passes_of(
                &order,
                |i| texts[i].len(),
                usize::MAX,
                super::few_rows::MAX_ROWS,
            );
            for pass in passes {
                let batch: Vec<&[u32]> = pass.iter().map(|&i| texts[i].as_slice()).collect();
                if self
                    .hidden_states(&batch, Precision::Int16, &mut observe)
                    .is_err()
                {
                    return vec![None; products];
                }
            }
            let denses = self.layers.iter().flat_map(Layer::dense);
            denses
                .zip(ranges)
                .enumerate()
                .map(|(product, (dense, range))| {
                    if !SMOOTHED.contains(&(product % DENSE_PER_LAYER)) {
                        return None;
                    }
                    let mut weight_range = vec![0f32; dense.inputs];
                    widen_to_columns(&mut weight_range, &dense.weight);
                    let factors: Vec<f32> = range
                        .iter()
                        .zip(&weight_range)
                        .map(|(&a, &b)| int8_rows::smoothing_factor(a, b))
                        .collect();
                    Some(factors)
                })
                .collect()
        })
    }

    /// Mean of the last hidden states over each text's tokens (not normalised), one row of
    /// `hidden` floats per text. Token ids must be below the vocabulary size and a text no
    /// longer than the position table (the tokenizer truncates well before).
    ///
    /// `precision` applies to the dense products of passes of up to
    /// [`super::few_rows::MAX_ROWS`] rows (a query's), and [`Precision::Bf16`] on AMX tiles to
    /// every pass; otherwise batches are multiplied in f32.
    pub fn mean_pooled(
        &self,
        batch: &[&[u32]],
        precision: Precision,
    ) -> Result<Vec<Vec<f32>>, String> {
        let h = self.shape.hidden;
        let (x, starts) = self.hidden_states(batch, precision, &mut |_, _| {})?;
        Ok(batch
            .iter()
            .zip(&starts)
            .map(|(ids, &start)| mean_of_rows(&x, h, start..start + ids.len()))
            .collect())
    }

    /// One text's pass, pooled as [`Bert::mean_pooled`] pools it (`pools[j]`: the rows, in
    /// increasing order, whose mean is row j; a pool of every row gives that text's
    /// `mean_pooled` row bit for bit).
    pub fn pooled(
        &self,
        ids: &[u32],
        precision: Precision,
        pools: &[Vec<usize>],
    ) -> Result<Vec<Vec<f32>>, String> {
        if let Some(&row) = pools.iter().flatten().find(|&&row| row >= ids.len()) {
            return Err(format!(
                "row {row} of a pool is past the text's {} rows",
                ids.len()
            ));
        }
        let h = self.shape.hidden;
        let (x, _) = self.hidden_states(&[ids], precision, &mut |_, _| {})?;
        Ok(pools
            .iter()
            .map(|rows| mean_of_rows(&x, h, rows.iter().copied()))
            .collect())
    }

    /// The last hidden states of the batch's rows and the row each text starts at;
    /// `observe(product, input)` sees each dense product's input rows (products numbered as in
    /// [`Bert::smoothing`]).
    fn hidden_states(
        &self,
        batch: &[&[u32]],
        precision: Precision,
        observe: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<(Vec<f32>, Vec<usize>), String> {
        let h = self.shape.hidden;
        let mut starts = Vec::with_capacity(batch.len());
        let mut rows = 0;
        for (i, ids) in batch.iter().enumerate() {
            if ids.len() > self.shape.max_positions {
                return Err(format!(
                    "text {i} has {} tokens, the model reads at most {}",
                    ids.len(),
                    self.shape.max_positions
                ));
            }
            if let Some(id) = ids.iter().find(|&&id| id as usize >= self.shape.vocab) {
                return Err(format!("text {i}: token id {id} is outside the vocabulary"));
            }
            starts.push(rows);
            rows += ids.len();
        }
        let mut x = self.embed(batch, rows);
        let mut qkv = vec![0f32; rows * 3 * h];
        let mut context = vec![0f32; rows * h];
        let mut wide = vec![0f32; rows * self.shape.intermediate];
        let mut attended = vec![0f32; rows * h];
        let smoothing = if precision == Precision::Int8 && int8_rows::available() {
            self.smoothing()
        } else {
            &[]
        };
        let factors = |product: usize| smoothing.get(product).and_then(Option::as_deref);

        for (l, layer) in self.layers.iter().enumerate() {
            let product = l * DENSE_PER_LAYER;
            observe(product, &x);
            layer
                .qkv
                .apply(&x, rows, &mut qkv, None, precision, factors(product));
            self.attention(&qkv, batch, &starts, &mut context);
            // The residual goes in with the bias: out = x + b + context·Wᵀ.
            observe(product + 1, &context);
            layer.attention_out.apply(
                &context,
                rows,
                &mut attended,
                Some(&x),
                precision,
                factors(product + 1),
            );
            self.norm_rows(&mut attended, &layer.attention_norm);
            observe(product + 2, &attended);
            layer.intermediate.apply(
                &attended,
                rows,
                &mut wide,
                None,
                precision,
                factors(product + 2),
            );
            team::for_each_chunk(
                &mut wide,
                ROWS_PER_TASK * self.shape.intermediate,
                gelu_in_place,
            );
            observe(product + 3, &wide);
            layer.output.apply(
                &wide,
                rows,
                &mut x,
                Some(&attended),
                precision,
                factors(product + 3),
            );
            self.norm_rows(&mut x, &layer.output_norm);
        }
        Ok((x, starts))
    }

    /// Each hidden-state row of `x` layer-normalised by `norm`, rows in parallel.
    fn norm_rows(&self, x: &mut [f32], norm: &LayerNorm) {
        let (h, eps) = (self.shape.hidden, self.shape.layer_norm_eps);
        team::for_each_chunk(x, ROWS_PER_TASK * h, |rows| {
            layer_norm_rows(rows, &norm.gamma, &norm.beta, eps)
        });
    }

    /// Word + position (restarting at 0 for each text) + token type 0, layer-normalised.
    fn embed(&self, batch: &[&[u32]], rows: usize) -> Vec<f32> {
        let h = self.shape.hidden;
        let mut x = Vec::with_capacity(rows * h);
        for ids in batch {
            for (position, &id) in ids.iter().enumerate() {
                let word = &self.word[id as usize * h..][..h];
                let pos = &self.position[position * h..][..h];
                x.extend(
                    word.iter()
                        .zip(pos)
                        .zip(&self.token_type[..h])
                        .map(|((w, p), t)| w + p + t),
                );
            }
        }
        layer_norm_rows(
            &mut x,
            &self.embedding_norm.gamma,
            &self.embedding_norm.beta,
            self.shape.layer_norm_eps,
        );
        x
    }

    /// Scaled dot-product attention of every text and head, from the stacked q|k|v rows into
    /// `context` (rows × hidden, heads side by side). One task per (text, head).
    fn attention(&self, qkv: &[f32], batch: &[&[u32]], starts: &[usize], context: &mut [f32]) {
        let h = self.shape.hidden;
        let d = self.shape.head_dims();
        let heads = self.shape.heads;
        let scale = 1.0 / (d as f32).sqrt();
        let out = SharedRows(context.as_mut_ptr());
        let stride = 3 * h;
        super::team::for_each(batch.len() * heads, |task| {
            SCORES.with_borrow_mut(|scores| {
                let (text, head) = (task / heads, task % heads);
                let len = batch[text].len();
                if len == 0 {
                    return;
                }
                let first = starts[text] * stride + head * d;
                let (q, k, v) = (&qkv[first..], &qkv[first + h..], &qkv[first + 2 * h..]);
                scores.clear();
                scores.resize(len * len, 0.0);
                // SAFETY (both products): every pointer stays inside its buffer: q, k and v rows
                // start..start+len of this text, columns head·d..head·d+d of their third of a
                // stride-wide row; scores is len×len. Each task writes `context` only at its own
                // text's rows and its own head's columns, so no two tasks write the same element,
                // and `context` outlives the parallel loop.
                unsafe {
                    // scores = scale · q kᵀ (len × len)
                    gemm::gemm(
                        len,
                        len,
                        d,
                        scores.as_mut_ptr(),
                        1,
                        len as isize,
                        false,
                        q.as_ptr(),
                        1,
                        stride as isize,
                        k.as_ptr(),
                        stride as isize,
                        1,
                        0.0,
                        scale,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
                softmax_rows(scores, len);
                unsafe {
                    // context[text rows, head columns] = scores · v (len × d)
                    let dst = out.at(starts[text] * h + head * d);
                    gemm::gemm(
                        len,
                        d,
                        len,
                        dst,
                        1,
                        h as isize,
                        false,
                        scores.as_ptr(),
                        1,
                        len as isize,
                        v.as_ptr(),
                        1,
                        stride as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
            })
        });
    }
}

thread_local! {
    /// An attention task's len × len scores, kept for the thread's next task.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An output buffer shared by parallel tasks that write disjoint elements of it: the context of
/// the attention tasks, the columns of [`super::few_rows`]'s tasks.
#[derive(Clone, Copy)]
pub(super) struct SharedRows(pub(super) *mut f32);
// SAFETY: only used where the tasks write disjoint elements (see each use).
unsafe impl Send for SharedRows {}
unsafe impl Sync for SharedRows {}

impl SharedRows {
    /// The element at `offset` (a method, so closures capture the Sync wrapper, not the pointer).
    ///
    /// # Safety
    /// `offset` must be inside the buffer.
    pub(super) unsafe fn at(self, offset: usize) -> *mut f32 {
        self.0.add(offset)
    }
}

impl Dense {
    /// The weights on the 16-bit grid, where the CPU can multiply them.
    fn quantized(&self) -> Option<&QuantizedWeight> {
        if !int16_rows::available() {
            return None;
        }
        self.quantized
            .get_or_init(|| QuantizedWeight::new(&self.weight, self.inputs, self.outputs))
            .as_ref()
    }

    /// The weights on the 8-bit grid, where the CPU can multiply them, smoothed by `factors`
    /// (per input channel; the model's, the same on every call).
    fn quantized8(&self, factors: Option<&[f32]>) -> Option<&Int8Weight> {
        if !int8_rows::available() {
            return None;
        }
        self.quantized8
            .get_or_init(|| match factors {
                Some(factors) => {
                    Int8Weight::smoothed(&self.weight, self.inputs, self.outputs, factors)
                }
                None => Int8Weight::new(&self.weight, self.inputs, self.outputs),
            })
            .as_ref()
    }

    /// The weights in bfloat16 tiles, where the CPU and kernel run AMX products.
    fn tiled(&self) -> Option<&TiledWeight> {
        if !bf16_tiles::available() {
            return None;
        }
        self.tiled
            .get_or_init(|| TiledWeight::new(&self.weight, self.inputs, self.outputs))
            .as_ref()
    }

    /// Fills each row of `out` with the bias (+ the residual's row): what a product adds to.
    fn start(&self, out: &mut [f32], residual: Option<&[f32]>) {
        let start = int16_rows::Start {
            bias: &self.bias,
            residual,
        };
        for (r, row) in out.chunks_exact_mut(self.outputs).enumerate() {
            start.fill(r, 0, row);
        }
    }

    /// out = input·Wᵀ + bias (+ residual), for `rows` rows; on all of rayon's threads. A few
    /// rows (one query) go through [`super::few_rows`], which reads W as stored, or with
    /// [`Precision::Bf16`] through [`bf16_tiles`] (any number of rows) and with
    /// [`Precision::Int16`] through [`int16_rows`] and with [`Precision::Int8`] through
    /// [`int8_rows`] where the CPU has their instructions (a CPU without AMX takes Bf16's
    /// products of few rows in 16-bit integers, one without AVX-512 VNNI Int8's).
    /// `factors`: the 8-bit products' smoothing ([`Bert::smoothing`]).
    fn apply(
        &self,
        input: &[f32],
        rows: usize,
        out: &mut [f32],
        residual: Option<&[f32]>,
        precision: Precision,
        factors: Option<&[f32]>,
    ) {
        assert_eq!(input.len(), rows * self.inputs);
        assert_eq!(out.len(), rows * self.outputs);
        let mut started = false;
        if precision == Precision::Bf16 {
            if let Some(tiled) = self.tiled() {
                self.start(out, residual);
                started = true;
                // Any number of rows: a batch of documents in bfloat16 too.
                if bf16_tiles::product(input, rows, tiled, usize::MAX, out) {
                    return;
                }
            }
        }
        // The integer products' tasks each start their own columns from the bias and residual.
        let start = int16_rows::Start {
            bias: &self.bias,
            residual,
        };
        let max_rows = super::few_rows::MAX_ROWS;
        if precision == Precision::Int8 {
            if let Some(quantized) = self.quantized8(factors) {
                if int8_rows::product(input, rows, quantized, max_rows, Some(&start), out) {
                    return;
                }
            }
        }
        if precision != Precision::F32 {
            if let Some(quantized) = self.quantized() {
                if int16_rows::product(input, rows, quantized, max_rows, Some(&start), out) {
                    return;
                }
            }
        }
        if !started {
            self.start(out, residual);
        }
        if super::few_rows::product(input, rows, &self.weight, self.inputs, self.outputs, out) {
            return;
        }
        // SAFETY: out is rows × outputs, input rows × inputs, weight outputs × inputs (read as
        // its transpose: column stride `inputs`), all row-major; the lengths are asserted above.
        unsafe {
            gemm::gemm(
                rows,
                self.outputs,
                self.inputs,
                out.as_mut_ptr(),
                1,
                self.outputs as isize,
                true,
                input.as_ptr(),
                1,
                self.inputs as isize,
                self.weight.as_ptr(),
                self.inputs as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::Rayon(0),
            );
        }
    }
}
