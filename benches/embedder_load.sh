#!/usr/bin/env bash
# Embedder worker throughput, alone and while searches run, and search throughput with and
# without the worker busy, in one run on a throwaway cluster (127.0.0.1:54391).
#   benches/embedder_load.sh [WINDOW_SECONDS]   (default 40: shorter than the worker needs for the corpus)
# Needs the extension installed (./x demo or ./x test) and ../shared/corpus (1,276 SKILL.md).
# Phases, each on a freshly created extension with the same skills:
#   1. worker alone: skills keyed WINDOW seconds after the load starts (and the time to key all);
#   2. worker + searches: the same while pgbench runs searches on 2 connections for WINDOW s;
#   3. searches alone: pgbench for WINDOW seconds with nothing left to embed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}
PGBIN=/usr/lib/postgresql/15/bin
PORT=${PG_SKILLS_BENCH_PORT:-54391}
WINDOW=${1:-40}
CORPUS=$ROOT/../shared/corpus
[ -d "$CORPUS" ] || { echo "embedder_load: $CORPUS is not there"; exit 2; }
[ -f "$("$PGBIN/pg_config" --pkglibdir)/pg_skills.so" ] || { echo "embedder_load: install the extension first (./x demo)"; exit 2; }
DIR=$(mktemp -d /var/tmp/pg_skills-embedder-load.XXXXXX)
chmod 755 "$DIR"
chown postgres:postgres "$DIR"
as_postgres() { env -u RUST_BACKTRACE runuser -u postgres -- "$@"; }
cleanup() {
  as_postgres "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

DSN="host=127.0.0.1 port=$PORT user=postgres dbname=postgres"
psql_() { psql -X -q -At -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
(cd "$ROOT" && cargo build -q -p pg_skills_kernels -p pg_skills_corpus -p pg_skills_benches \
  -p pg_skills_server_tests -p skills-mcp --bin skills-load)
LOAD=$CARGO_TARGET_DIR/debug/skills-load

# Searches: task phrasings, half bm25, half semantic (each semantic search runs the encoder on
# its query in the backend, so the two compete for the same 2 cores).
cat > "$DIR/bm25.sql" <<'SQL'
\set n random(1, 6)
SELECT count(*) FROM skills.search((ARRAY['write pytest fixtures for a database', 'deploy a service to kubernetes', 'debug a memory leak in a python process', 'review a pull request for security problems', 'make a docker image smaller', 'plot experiment results with matplotlib'])[:n], k => 5, method => 'bm25');
SQL
sed 's/bm25/semantic/' "$DIR/bm25.sql" > "$DIR/semantic.sql"

# A new cluster for each phase (dropping the extension under a busy worker can deadlock).
fresh_extension() {
  as_postgres "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR/data"
  as_postgres "$PGBIN/initdb" -D "$DIR/data" -A trust -U postgres --locale=C.UTF-8 >/dev/null
  as_postgres "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_skills" start >/dev/null
  psql_ -c "CREATE EXTENSION pg_skills"
}

# keys_after SECONDS: starts loading the corpus, prints how many skills have keys SECONDS later
# (the worker starts on the first batch the loader commits), then lets the loader finish.
keys_after() {
  local load_pid
  "$LOAD" --tree "$CORPUS" --quiet --dsn "$DSN" >/dev/null &
  load_pid=$!
  sleep "$1"
  psql_ -c "SELECT count(*) FROM skills.skill_key"
  wait "$load_pid"
}

pgbench_() { "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PORT" -U postgres -c 2 -j 2 -f "$DIR/bm25.sql" -f "$DIR/semantic.sql" "$@" postgres; }
summary() { grep -E "^(tps|latency average|number of transactions actually processed)" "$1" || cat "$1"; }

echo "== phase 1: the embedder worker alone, ${WINDOW}s from the start of the load"
fresh_extension
k1=$(keys_after "$WINDOW")
echo "keys=$k1 docs_per_s=$(echo "scale=2; $k1 / $WINDOW" | bc)"
start=$(date +%s.%N)
while [ "$(psql_ -c "SELECT queued FROM skills.embedder_status")" != 0 ]; do sleep 0.5; done
total=$(psql_ -c "SELECT count(*) FROM skills.skill_key")
echo "all $total keyed $(echo "scale=1; $(date +%s.%N) - $start + $WINDOW" | bc)s after the load started"

echo "== phase 2: the embedder worker while pgbench searches on 2 connections, ${WINDOW}s"
fresh_extension
pgbench_ -T "$WINDOW" > "$DIR/pgbench-busy.log" 2>&1 &
bench_pid=$!
k2=$(keys_after "$WINDOW")
wait "$bench_pid"
echo "keys=$k2 docs_per_s=$(echo "scale=2; $k2 / $WINDOW" | bc)"
summary "$DIR/pgbench-busy.log"

echo "== phase 3: the same searches with nothing to embed, ${WINDOW}s"
while [ "$(psql_ -c "SELECT queued FROM skills.embedder_status")" != 0 ]; do sleep 0.5; done
pgbench_ -T "$WINDOW" > "$DIR/pgbench-idle.log" 2>&1
summary "$DIR/pgbench-idle.log"
