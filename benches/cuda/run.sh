#!/usr/bin/env bash
# On the GPU machine, with target/cuda-bench/ from benches/cuda/build.sh: KeyOpt batch scoring at
# 10^4 queries × 10^5 and 10^6 synthetic skills, the GPU's top k checked against the CPU twin's
# (the run fails when the ids differ) and its throughput in queries/s and GB/s of records.
# Writes its tables to stdout and to $OUT/keyopt_batch.md when OUT is set.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$ROOT/target/cuda-bench
export PG_SKILLS_CUDA_PTX_DIR=$BIN/ptx
report=${OUT:-/tmp}/keyopt_batch.md
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  for n in 100000 1000000; do
    "$BIN/keyopt_batch_bench" --skills "$n" --queries 10000 --cpu-queries 200
    echo
  done
} | tee "$report"
