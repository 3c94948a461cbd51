#!/usr/bin/env bash
# Memory and index sizes, side by side in one run on one server's rows:
# - resident memory (VmRSS, VmHWM from /proc) of a backend: connected, after its first request
#   key, after ten more (new texts), after a `semantic` search; at the default precision, at
#   int8 and at f32;
# - the embedder worker's, after it has encoded a batch of new skills (when it serves this
#   database; the rows it encoded are deleted after);
# - index sizes per 100,000 skills: bm25 and skeys (as the server has them, and built again by
#   CREATE INDEX, timed), and the peers on the same rows: built-in full text search (a tsvector
#   column and its GIN index) and pgvector 0.8.6 HNSW and IVFFlat over the same keys (halfvec).
#
# Run on the database server's machine (it reads /proc) against a server with pg_skills and a
# loaded library, e.g. the end-to-end bench's kept server:
#   KEEP=1 ... benches/e2e/run.sh; then
#   DSN="host=127.0.0.1 port=54420 user=postgres dbname=postgres" PGBIN=... benches/memory/run.sh
# pgvector is built into that server (benches/keys/build_pgvector.sh, cached) unless NO_PGVECTOR=1.
# ONLY=backends measures the backends alone (any server with pg_skills, e.g. ./x demo's).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DSN=${DSN:-"host=127.0.0.1 port=54420 user=postgres dbname=postgres"}
B=${PGBIN:-/usr/lib/postgresql/15/bin}
EMBED_ROWS=${EMBED_ROWS:-64}
# Our indexes are also built with this much maintenance_work_mem (in one pass).
BIG_MWM=${BIG_MWM:-1GB}
q() { "$B/psql" -X -q -At -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1048576 }'; }
per100k() { awk -v b="$1" -v n="$2" 'BEGIN { printf "%.1f MB", b / 1048576 * 100000 / n }'; }
timed() { # SQL: runs it, prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  q "$1" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'
}

# Resident memory of PID in MB: all of it, and in parentheses its own (anonymous: the model,
# activations, caches; the rest is shared buffers and files it has touched, shared with others).
resident() {
  awk '/^VmRSS/ {r = $2} /^RssAnon/ {a = $2} END {printf "%.1f (%.1f)", r / 1024, a / 1024}' "/proc/$1/status"
}

# One backend: its pid, then its resident memory before and after each statement, and its peak.
backend() { # LABEL SETTINGS STATEMENT...
  local label=$1 settings=$2
  shift 2
  coproc PSQL { PGOPTIONS="$settings" "$B/psql" -X -q -At "$DSN" 2>&1; }
  echo "SELECT pg_backend_pid();" >&"${PSQL[1]}"
  local pid line out
  read -r pid <&"${PSQL[0]}"
  out="| $label | $(resident "$pid")"
  for statement in "$@"; do
    printf '%s\nSELECT %s;\n' "$statement" "'done'" >&"${PSQL[1]}"
    while read -r line <&"${PSQL[0]}"; do [ "$line" = done ] && break; done
    out+=" | $(resident "$pid")"
  done
  out+=" | $(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status") | $(ls "/proc/$pid/task" | wc -l) |"
  echo '\q' >&"${PSQL[1]}"
  wait "$PSQL_PID" 2>/dev/null || true
  echo "$out"
}

skills=$(q "SELECT count(*) FROM skills.skill")
keys=$(q "SELECT count(*) FROM skills.skill_key")
echo "## $skills skills, $keys keys"
echo
echo "Backends (MB resident, in parentheses the backend's own anonymous memory; the request key of a text no earlier statement used):"
echo
echo "| backend | connected | after its first request key | after ten more | after a semantic search | peak | threads |"
echo "|---|---|---|---|---|---|---|"
first="SELECT skills.query_key('which change broke the build') IS NOT NULL;"
more="SELECT count(skills.query_key('request number ' || g)) FROM generate_series(1, 10) AS g;"
search="SELECT count(*) FROM skills.search('find the commit that broke the nightly build', method => 'semantic', k => 10);"
backend "default precision ($(q "SHOW pg_skills.query_precision"))" "" "$first" "$more" "$search"
backend "query_precision = int8" "-c pg_skills.query_precision=int8" "$first" "$more" "$search"
backend "query_precision = f32" "-c pg_skills.query_precision=f32" "$first" "$more" "$search"
echo
[ "${ONLY:-}" != backends ] || exit 0

worker=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_skills embedder' AND datname = current_database()")
if [ -n "$worker" ]; then
  before=$(resident "$worker")
  # New skills: copies of existing ones with a word added (new texts, new content hashes).
  q "INSERT INTO skills.skill (name, description, instructions)
     SELECT name || '-memory-bench', description || ' (memory bench copy)', instructions
     FROM skills.skill ORDER BY id LIMIT $EMBED_ROWS" >/dev/null
  for _ in $(seq 1 600); do
    [ "$(q "SELECT count(*) FROM skills.embed_queue")" = 0 ] && break
    sleep 1
  done
  left=$(q "SELECT count(*) FROM skills.embed_queue")
  # Then the worker rebuilds the skill graph (new keys since its last build): wait for it, so
  # that the figure includes it and the DELETE below does not race it.
  for _ in $(seq 1 600); do
    [ "$(q "SELECT coalesce((SELECT built_at FROM skills.graph_state), '-infinity') >= (SELECT max(embedded_at) FROM skills.skill_key)")" = t ] && break
    sleep 1
  done
  after=$(resident "$worker")
  peak=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$worker/status")
  threads=$(ls "/proc/$worker/task" | wc -l)
  q "DELETE FROM skills.skill WHERE name LIKE '%-memory-bench'" >/dev/null
  echo "Embedder worker: $before MB before, $after MB after encoding $EMBED_ROWS skills ($left left in the queue) and rebuilding the graph, peak $peak MB, $threads threads."
else
  echo "Embedder worker: not measured (none serves this database: pg_skills.embedder_database)."
fi
echo

echo "Indexes (per 100,000 rows of their table; build: CREATE INDEX, maintenance_work_mem $(q "SHOW maintenance_work_mem")):"
echo
echo "| index | rows | size | per 100,000 rows | build |"
echo "|---|---|---|---|---|"
row() { # NAME ROWS BYTES BUILD
  echo "| $1 | $2 | $(mb "$3") | $(per100k "$3" "$2") | $4 |"
}
# built LABEL ROWS SETTING NAME DEFINITION: CREATE INDEX NAME DEFINITION (after SETTING, if
# any), timed; its row; then the index dropped.
built() {
  local t
  t=$(timed "$3 CREATE INDEX ${4##*.} $5")
  row "$1" "$2" "$(q "SELECT pg_relation_size('$4')")" "$t s"
  q "DROP INDEX $4"
}
big="SET maintenance_work_mem = '$BIG_MWM';"
bm25="ON skills.skill USING bm25 ((ARRAY[name, description, instructions]))"
row "bm25, as the server has it (skills.skill_bm25)" "$skills" "$(q "SELECT pg_relation_size('skills.skill_bm25')")" ""
built "bm25, built again" "$skills" "" skills.memory_bench_bm25 "$bm25"
# Our builds in one pass (CREATE INDEX spills to temporary files past maintenance_work_mem).
built "bm25, built again with maintenance_work_mem = $BIG_MWM" "$skills" "$big" skills.memory_bench_bm25 "$bm25"
if [ "$(q "SELECT to_regclass('public.bench_fts') IS NOT NULL")" != t ]; then
  PGOPTIONS='-c client_min_messages=warning' q "CREATE TABLE bench_fts AS SELECT id, to_tsvector('english', name || ' ' || description || ' ' || instructions) AS tsv FROM skills.skill"
  made_fts=1
fi
fts_rows=$(q "SELECT count(*) FROM bench_fts")
t=$(timed "CREATE INDEX memory_bench_gin ON bench_fts USING gin (tsv)")
gin=$(q "SELECT pg_relation_size('memory_bench_gin')")
tsv=$(q "SELECT pg_table_size('bench_fts')")
row "built-in FTS: GIN over the tsvector column" "$fts_rows" "$gin" "$t s"
row "built-in FTS: the tsvector column it reads (table with TOAST)" "$fts_rows" "$tsv" ""
row "built-in FTS: both" "$fts_rows" "$((gin + tsv))" ""
q "DROP INDEX memory_bench_gin"
[ -z "${made_fts:-}" ] || q "DROP TABLE bench_fts"
skeys="ON skills.skill_key USING skeys (k0)"
row "skeys, as the server has it (skills.skill_key_k0)" "$keys" "$(q "SELECT pg_relation_size('skills.skill_key_k0')")" ""
built "skeys, built again" "$keys" "" skills.memory_bench_skeys "$skeys"
built "skeys, built again with maintenance_work_mem = $BIG_MWM" "$keys" "$big" skills.memory_bench_skeys "$skeys"
if [ -z "${NO_PGVECTOR:-}" ]; then
  PG_CONFIG="$B/pg_config" bash "$here/../keys/build_pgvector.sh" >&2
  PGOPTIONS='-c client_min_messages=warning' q "CREATE EXTENSION IF NOT EXISTS vector;
     DROP TABLE IF EXISTS memory_bench_pv;
     CREATE TABLE memory_bench_pv AS SELECT skill_id, k0::text::halfvec(512) AS v FROM skills.skill_key"
  q "VACUUM ANALYZE memory_bench_pv"
  lists=$(( keys / 1000 > 10 ? keys / 1000 : 10 ))
  built "pgvector HNSW, halfvec (m 16, ef_construction 64)" "$keys" "" memory_bench_hnsw \
    "ON memory_bench_pv USING hnsw (v halfvec_ip_ops) WITH (m = 16, ef_construction = 64)"
  built "pgvector IVFFlat, halfvec ($lists lists: rows / 1000)" "$keys" "" memory_bench_ivf \
    "ON memory_bench_pv USING ivfflat (v halfvec_ip_ops) WITH (lists = $lists)"
  q "DROP TABLE memory_bench_pv"
fi
