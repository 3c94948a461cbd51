//! The batch scorer of [`super::batch`] on a CUDA GPU (feature `cuda`).
//!
//! cudarc loads the driver (`libcuda.so`) and NVRTC (`libnvrtc.so.12`) when first used, so the
//! crate builds and links on machines without either; every entry point checks for them first
//! and returns an error instead of letting the loader panic. The kernel source below is compiled
//! at run time by NVRTC for the device's architecture (NVRTC needs no driver: [`compile_ptx`]
//! works on any machine that has the library).
//!
//! Records are uploaded once ([`CudaScorer::new`]) and stay on the device; queries stream in
//! batches of [`QUERY_BATCH`]. Per batch, `keyopt_keys` computes every (query, record) ranking key
//! with one warp per record (the record's k0 and Δk are read once per batch, coalesced), then
//! `topk_partial` keeps each thread's best k of its slice of a query's keys and `topk_merge`
//! merges those lists. Ties go to the lower record index, as on the CPU. The parts of the k hits
//! are then read on the CPU ([`super::batch::read`]), so a hit's parts are exactly the CPU's and
//! only the order can differ, where keys differ in their last bits.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::batch::{read, Hit, Order, Query, Reading, Records};

/// Queries scored per launch: the keys buffer holds QUERY_BATCH × records floats.
pub const QUERY_BATCH: usize = 64;
/// The largest k the device selects (each thread keeps k candidates in local memory).
pub const MAX_K: usize = 256;
/// Threads per query in `topk_partial` (its lists are merged in `topk_merge`).
const TOPK_THREADS: u32 = 256;
/// Warps (records) per block in `keyopt_keys`.
const WARPS_PER_BLOCK: u32 = 8;

/// The kernels; `DIM` (a multiple of 32) is defined when compiling.
pub const KERNEL_SOURCE: &str = r#"
#define NEG_INF __int_as_float(0xff800000)
#define NO_INDEX 0xffffffffu
#define PER_LANE (DIM / 32)

// f16 bits to f32 (no header needed).
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// a before b: the larger key, then the lower index.
__device__ __forceinline__ bool before(float ka, unsigned int ia, float kb, unsigned int ib) {
    return ka > kb || (ka == kb && ia < ib);
}

// One warp per record: for each query of the batch, r = q16·k0 and u = (q - mu)·dk, reduced
// over the warp; lane 0 writes the ranking key, or -inf where the query's mask excludes the
// record's category.
extern "C" __global__ void keyopt_keys(
    const unsigned short* __restrict__ k0, const float* __restrict__ dk,
    const float* __restrict__ beta, const unsigned char* __restrict__ category, int n,
    const unsigned short* __restrict__ q16, const float* __restrict__ qc,
    const unsigned char* __restrict__ masks, int nq, float rho, int use_dk, float clip,
    int order_keyopt, float* __restrict__ keys)
{
    long long record = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (record >= n) return;
    const unsigned short* kr = k0 + record * DIM;
    const float* dr = dk + record * DIM;
    float kv[PER_LANE];
    float dv[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        kv[j] = h2f(kr[lane + 32 * j]);
        dv[j] = (use_dk && order_keyopt) ? dr[lane + 32 * j] : 0.0f;
    }
    unsigned int bit = 1u << category[record];
    float b = beta[record];
    for (int query = 0; query < nq; query++) {
        const unsigned short* q = q16 + (long long)query * DIM;
        const float* c = qc + (long long)query * DIM;
        float r = 0.0f;
        float u = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) {
            r += h2f(q[lane + 32 * j]) * kv[j];
        }
        // The Δk term only where it counts (uniform across the grid: no divergence).
        if (use_dk && order_keyopt) {
#pragma unroll
            for (int j = 0; j < PER_LANE; j++) {
                u += c[lane + 32 * j] * dv[j];
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            r += __shfl_xor_sync(0xffffffffu, r, offset);
            u += __shfl_xor_sync(0xffffffffu, u, offset);
        }
        if (lane == 0) {
            float key = NEG_INF;
            if (masks[query] & bit) {
                key = rho * r;
                if (order_keyopt) {
                    key += b + (use_dk ? fminf(fmaxf(u, -clip), clip) : 0.0f);
                }
            }
            keys[(long long)query * n + record] = key;
        }
    }
}

// One block per query: thread t keeps the best k of records t, t + T, t + 2T, ... (sorted, in
// local memory) and writes them to its list of the candidate buffers.
extern "C" __global__ void topk_partial(const float* __restrict__ keys, int n, int k,
                                        float* __restrict__ cand_key,
                                        unsigned int* __restrict__ cand_index)
{
    int query = blockIdx.x;
    int t = threadIdx.x;
    float bk[MAXK];
    unsigned int bi[MAXK];
    int count = 0;
    const float* row = keys + (long long)query * n;
    for (unsigned int i = t; i < (unsigned int)n; i += blockDim.x) {
        float v = row[i];
        if (v == NEG_INF) continue;
        if (count == k && !before(v, i, bk[k - 1], bi[k - 1])) continue;
        int pos = count < k ? count++ : k - 1;
        while (pos > 0 && before(v, i, bk[pos - 1], bi[pos - 1])) {
            bk[pos] = bk[pos - 1];
            bi[pos] = bi[pos - 1];
            pos--;
        }
        bk[pos] = v;
        bi[pos] = i;
    }
    long long out = ((long long)query * blockDim.x + t) * k;
    for (int j = 0; j < k; j++) {
        cand_key[out + j] = j < count ? bk[j] : NEG_INF;
        cand_index[out + j] = j < count ? bi[j] : NO_INDEX;
    }
}

// One thread per query: the best k of its `lists` sorted lists.
extern "C" __global__ void topk_merge(const float* __restrict__ cand_key,
                                      const unsigned int* __restrict__ cand_index, int nq,
                                      int lists, int k, unsigned int* __restrict__ out_index)
{
    int query = blockIdx.x * blockDim.x + threadIdx.x;
    if (query >= nq) return;
    unsigned short head[TOPK_THREADS];
    for (int t = 0; t < lists; t++) head[t] = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bk = NEG_INF;
        unsigned int bi = NO_INDEX;
        for (int t = 0; t < lists; t++) {
            if (head[t] >= k) continue;
            long long at = ((long long)query * lists + t) * k + head[t];
            unsigned int i = cand_index[at];
            if (i == NO_INDEX) continue;
            float v = cand_key[at];
            if (best < 0 || before(v, i, bk, bi)) {
                best = t;
                bk = v;
                bi = i;
            }
        }
        out_index[(long long)query * k + j] = bi;
        if (best >= 0) head[best]++;
    }
}
"#;

/// Why the GPU path cannot run (or failed); the caller falls back to the CPU or reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError(pub String);

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CudaError {}

fn err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> CudaError + '_ {
    move |e| CudaError(format!("{what}: {e:?}"))
}

/// Where a library NVRTC or the driver loads from may be named explicitly (a wheel's folder is
/// not on the loader's path): loading it by absolute path first makes the later load by its
/// soname find it already in the process.
pub const NVRTC_LIBRARY_ENV: &str = "PG_SKILLS_NVRTC_LIBRARY";

fn preload(path: &str) -> Result<(), CudaError> {
    let c = std::ffi::CString::new(path).map_err(|_| CudaError(format!("bad path {path:?}")))?;
    // SAFETY: dlopen with a NUL-terminated path; the handle is kept for the process's life
    // (never closed), which is what a library cudarc will use must be.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return Err(CudaError(format!("cannot load {path}")));
    }
    Ok(())
}

/// A folder of kernels compiled ahead (by [`write_ptx`]) that [`CudaScorer::new`] loads instead
/// of compiling: a machine without NVRTC (a GPU machine that reaches no package registry) then
/// needs only the driver.
pub const PTX_DIR_ENV: &str = "PG_SKILLS_CUDA_PTX_DIR";

fn ptx_file_name(dim: usize, arch: &str) -> String {
    format!("keyopt-{dim}-{arch}.ptx")
}

/// Compiles the kernels for `dim` and each of `archs` into `dir` (for [`PTX_DIR_ENV`]).
pub fn write_ptx(
    dir: &std::path::Path,
    dim: usize,
    archs: &[&'static str],
) -> Result<(), CudaError> {
    std::fs::create_dir_all(dir).map_err(|e| CudaError(format!("{}: {e}", dir.display())))?;
    for arch in archs {
        let path = dir.join(ptx_file_name(dim, arch));
        std::fs::write(&path, compile_ptx(dim, arch)?.to_src())
            .map_err(|e| CudaError(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// The kernels for `dim` and `arch`: from [`PTX_DIR_ENV`] when it holds them, else compiled.
fn kernels_for(dim: usize, arch: &'static str) -> Result<Ptx, CudaError> {
    if let Ok(dir) = std::env::var(PTX_DIR_ENV) {
        let path = std::path::Path::new(&dir).join(ptx_file_name(dim, arch));
        if path.exists() {
            return Ok(Ptx::from_file(path));
        }
    }
    compile_ptx(dim, arch)
}

/// NVRTC is loadable (after preloading [`NVRTC_LIBRARY_ENV`] when it is set).
pub fn nvrtc_available() -> Result<(), CudaError> {
    if let Ok(path) = std::env::var(NVRTC_LIBRARY_ENV) {
        preload(&path)?;
    }
    // SAFETY: only tries to dlopen the candidate names; no NVRTC call is made.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError(format!(
            "NVRTC (libnvrtc.so.12) is not installed: install the CUDA toolkit's NVRTC or the \
             PyPI wheel nvidia-cuda-nvrtc-cu12, and put its lib folder on the library path or \
             name libnvrtc.so.12 in {NVRTC_LIBRARY_ENV}"
        )))
    }
}

/// A CUDA driver and at least one device are present; returns device 0's name.
pub fn device_available() -> Result<String, CudaError> {
    // SAFETY: only tries to dlopen the candidate names; no driver call is made.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError(
            "no CUDA device: the CUDA driver (libcuda.so) is not installed".into(),
        ));
    }
    let count = CudaContext::device_count().map_err(err("no CUDA device"))?;
    if count < 1 {
        return Err(CudaError("no CUDA device".into()));
    }
    let ctx = CudaContext::new(0).map_err(err("CUDA device 0"))?;
    ctx.name().map_err(err("CUDA device 0"))
}

/// NVRTC's virtual architecture for a compute capability (PTX for an older one runs on newer
/// devices; the driver compiles it on load).
fn virtual_arch(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (m, _) if m >= 10 => "compute_90",
        (9, _) => "compute_90",
        (8, n) if n >= 9 => "compute_89",
        (8, n) if n >= 6 => "compute_86",
        (8, _) => "compute_80",
        _ => "compute_75",
    }
}

/// The kernels compiled to PTX for keys of `dim` dimensions (a multiple of 32) and `arch`.
pub fn compile_ptx(dim: usize, arch: &'static str) -> Result<Ptx, CudaError> {
    if dim == 0 || dim % 32 != 0 {
        return Err(CudaError(format!(
            "keys of {dim} dimensions: the kernel needs a multiple of 32"
        )));
    }
    nvrtc_available()?;
    let options = CompileOptions {
        arch: Some(arch),
        options: vec![
            format!("-DDIM={dim}"),
            format!("-DMAXK={MAX_K}"),
            format!("-DTOPK_THREADS={TOPK_THREADS}"),
        ],
        ..CompileOptions::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, options)
        .map_err(|e| CudaError(format!("the KeyOpt kernel does not compile: {e:?}")))
}

/// Records on the device, ready to score query batches.
pub struct CudaScorer {
    records: Records,
    stream: Arc<CudaStream>,
    keys_fn: CudaFunction,
    partial_fn: CudaFunction,
    merge_fn: CudaFunction,
    k0: CudaSlice<u16>,
    dk: CudaSlice<f32>,
    beta: CudaSlice<f32>,
    category: CudaSlice<u8>,
    device: String,
}

impl CudaScorer {
    /// Compiles the kernels for device 0 and uploads `records` (kept, for reading hits' parts).
    pub fn new(records: Records) -> Result<CudaScorer, CudaError> {
        let device = device_available()?;
        if records.is_empty() {
            return Err(CudaError("no records to upload".into()));
        }
        if records.len() >= i32::MAX as usize {
            return Err(CudaError(format!("{} records: too many", records.len())));
        }
        let ctx = CudaContext::new(0).map_err(err("CUDA device 0"))?;
        let (major, minor) = ctx.compute_capability().map_err(err("CUDA device 0"))?;
        let ptx = kernels_for(records.dim, virtual_arch(major, minor))?;
        let module = ctx
            .load_module(ptx)
            .map_err(err("loading the KeyOpt kernels"))?;
        let function = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| CudaError(format!("kernel {name}: {e:?}")))
        };
        let stream = ctx.default_stream();
        let k0_bits: Vec<u16> = records.k0.iter().map(|x| x.to_bits()).collect();
        let upload = err("uploading the records");
        Ok(CudaScorer {
            keys_fn: function("keyopt_keys")?,
            partial_fn: function("topk_partial")?,
            merge_fn: function("topk_merge")?,
            k0: stream.clone_htod(&k0_bits).map_err(&upload)?,
            dk: stream.clone_htod(&records.dk).map_err(&upload)?,
            beta: stream.clone_htod(&records.beta).map_err(&upload)?,
            category: stream.clone_htod(&records.category).map_err(&upload)?,
            stream,
            records,
            device,
        })
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn records(&self) -> &Records {
        &self.records
    }

    /// [`super::batch::top_k`] on the device.
    pub fn top_k(
        &self,
        queries: &[Query],
        reading: &Reading,
        order: Order,
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, CudaError> {
        let dim = self.records.dim;
        let n = self.records.len();
        let k = k.min(n);
        if k > MAX_K {
            return Err(CudaError(format!(
                "k {k} is over the device path's {MAX_K}"
            )));
        }
        let mut out = Vec::with_capacity(queries.len());
        if k == 0 {
            out.resize(queries.len(), Vec::new());
            return Ok(out);
        }
        let failed = err("scoring a query batch");
        let mut keys = self
            .stream
            .alloc_zeros::<f32>(QUERY_BATCH * n)
            .map_err(&failed)?;
        let lists = TOPK_THREADS as usize;
        let mut cand_key = self
            .stream
            .alloc_zeros::<f32>(QUERY_BATCH * lists * k)
            .map_err(&failed)?;
        let mut cand_index = self
            .stream
            .alloc_zeros::<u32>(QUERY_BATCH * lists * k)
            .map_err(&failed)?;
        let mut top = self
            .stream
            .alloc_zeros::<u32>(QUERY_BATCH * k)
            .map_err(&failed)?;
        for batch in queries.chunks(QUERY_BATCH) {
            crate::interrupt::check();
            let nq = batch.len();
            for q in batch {
                if q.key.len() != dim || q.centered.len() != dim {
                    return Err(CudaError("a query of another dimension".into()));
                }
            }
            let q16: Vec<u16> = batch
                .iter()
                .flat_map(|q| q.key.iter().map(|x| x.to_bits()))
                .collect();
            let qc: Vec<f32> = batch
                .iter()
                .flat_map(|q| q.centered.iter().copied())
                .collect();
            let masks: Vec<u8> = batch.iter().map(|q| q.categories).collect();
            let q16 = self.stream.clone_htod(&q16).map_err(&failed)?;
            let qc = self.stream.clone_htod(&qc).map_err(&failed)?;
            let masks = self.stream.clone_htod(&masks).map_err(&failed)?;
            let (n_arg, nq_arg, k_arg, lists_arg) = (n as i32, nq as i32, k as i32, lists as i32);
            let use_dk = reading.settings.use_dk as i32;
            let order_keyopt = (order == Order::KeyOpt) as i32;
            let threads = 32 * WARPS_PER_BLOCK;
            let scoring = LaunchConfig {
                grid_dim: ((n as u32).div_ceil(WARPS_PER_BLOCK), 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the arguments match keyopt_keys' parameters in order and type; every
            // buffer holds what the kernel indexes (n records of dim, nq queries of dim, nq × n
            // keys).
            unsafe {
                self.stream
                    .launch_builder(&self.keys_fn)
                    .arg(&self.k0)
                    .arg(&self.dk)
                    .arg(&self.beta)
                    .arg(&self.category)
                    .arg(&n_arg)
                    .arg(&q16)
                    .arg(&qc)
                    .arg(&masks)
                    .arg(&nq_arg)
                    .arg(&reading.rho)
                    .arg(&use_dk)
                    .arg(&reading.settings.clip)
                    .arg(&order_keyopt)
                    .arg(&mut keys)
                    .launch(scoring)
            }
            .map_err(&failed)?;
            let partial = LaunchConfig {
                grid_dim: (nq as u32, 1, 1),
                block_dim: (TOPK_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: topk_partial's parameters; the candidate buffers hold nq × lists × k.
            unsafe {
                self.stream
                    .launch_builder(&self.partial_fn)
                    .arg(&keys)
                    .arg(&n_arg)
                    .arg(&k_arg)
                    .arg(&mut cand_key)
                    .arg(&mut cand_index)
                    .launch(partial)
            }
            .map_err(&failed)?;
            let merge = LaunchConfig {
                grid_dim: ((nq as u32).div_ceil(64), 1, 1),
                block_dim: (64, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: topk_merge's parameters; `top` holds nq × k indices.
            unsafe {
                self.stream
                    .launch_builder(&self.merge_fn)
                    .arg(&cand_key)
                    .arg(&cand_index)
                    .arg(&nq_arg)
                    .arg(&lists_arg)
                    .arg(&k_arg)
                    .arg(&mut top)
                    .launch(merge)
            }
            .map_err(&failed)?;
            let indices: Vec<u32> = self.stream.clone_dtoh(&top).map_err(&failed)?;
            for (b, query) in batch.iter().enumerate() {
                out.push(
                    indices[b * k..(b + 1) * k]
                        .iter()
                        .take_while(|&&i| i != u32::MAX)
                        .map(|&i| read(&self.records, i as usize, query, reading))
                        .collect(),
                );
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles the kernel with NVRTC alone (no driver, no device). Skipped, saying so, where
    /// NVRTC cannot be loaded; `./x test` installs it from PyPI and names it in
    /// PG_SKILLS_NVRTC_LIBRARY, so there it runs.
    #[test]
    fn the_kernel_compiles_to_ptx() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED: {e}");
            return;
        }
        for arch in ["compute_80", "compute_90"] {
            let ptx = compile_ptx(512, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            let text = ptx.to_src();
            for kernel in ["keyopt_keys", "topk_partial", "topk_merge"] {
                assert!(
                    text.contains(kernel),
                    "{arch}: {kernel} missing from the PTX"
                );
            }
        }
        assert!(
            compile_ptx(100, "compute_80").is_err(),
            "dim must be a multiple of 32"
        );
    }

    /// Where no driver is installed (CI), the first CUDA call is an error, never a panic; on a
    /// GPU machine it names the device and the GPU agrees with the CPU.
    #[test]
    fn without_a_driver_the_gpu_path_is_a_clean_error() {
        use super::super::batch::{top_k, Records, ALL_CATEGORIES};
        use half::f16;
        let mut rng = crate::rng::SplitMix64(17);
        let dim = 64;
        let mut records = Records::new(dim);
        for i in 0..3000 {
            let k0: Vec<f16> = (0..dim)
                .map(|_| f16::from_f32(rng.unit() as f32 - 0.5))
                .collect();
            let dk: Vec<f32> = (0..dim).map(|_| (rng.unit() as f32 - 0.5) * 0.1).collect();
            records.push(&k0, Some((&dk[..], 0.01 * (i % 5) as f32)), (i % 7) as u8);
        }
        let mu = vec![0.01; dim];
        let queries: Vec<Query> = (0..70)
            .map(|_| {
                let key: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
                Query::new(&key, &mu, ALL_CATEGORIES)
            })
            .collect();
        let reading = Reading {
            rho: 1.3,
            settings: super::super::Settings {
                use_dk: true,
                clip: 0.05,
                alpha: 0.0,
                kappa: 0.0,
            },
        };
        match CudaScorer::new(records.clone()) {
            Err(e) => {
                assert!(
                    e.0.starts_with("no CUDA device") || e.0.contains("NVRTC"),
                    "{e}"
                );
                eprintln!("SKIPPED the GPU comparison: {e}");
            }
            Ok(scorer) => {
                for order in [Order::Relevance, Order::KeyOpt] {
                    let gpu = scorer.top_k(&queries, &reading, order, 20).unwrap();
                    let cpu = top_k(&records, &queries, &reading, order, 20);
                    for (g, c) in gpu.iter().zip(&cpu) {
                        let ids = |h: &[Hit]| {
                            let mut v: Vec<u32> = h.iter().map(|x| x.index).collect();
                            v.sort_unstable();
                            v
                        };
                        assert_eq!(ids(g), ids(c), "{order:?}");
                    }
                }
            }
        }
    }
}
