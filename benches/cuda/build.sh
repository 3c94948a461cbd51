#!/usr/bin/env bash
# Builds what the GPU measurement of KeyOpt batch scoring needs, on a machine that reaches the
# package registries (the GPU machine reaches nothing): the release benchmark with the cuda
# feature, and the kernels compiled to PTX here with NVRTC from the PyPI wheel
# nvidia-cuda-nvrtc-cu12 (NVRTC needs no GPU), so the GPU machine needs only its driver.
# Everything lands in target/cuda-bench/ of the clone (a few MB: carry that folder), then
# benches/cuda/run.sh runs there.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$ROOT/target/cuda-bench
mkdir -p "$OUT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}
cd "$ROOT"
cargo build --release -p pg_skills_benches --features cuda --bin keyopt_batch_bench
cp "$CARGO_TARGET_DIR/release/keyopt_batch_bench" "$OUT/"
strip "$OUT/keyopt_batch_bench" 2>/dev/null || true
PG_SKILLS_NVRTC_LIBRARY=$("$ROOT/benches/cuda/nvrtc.sh" "${PG_SKILLS_NVRTC_DIR:-$HOME/.cache/pg_skills/nvrtc}") \
  "$OUT/keyopt_batch_bench" --write-ptx "$OUT/ptx" --dim 512
ls -la "$OUT" "$OUT/ptx"
