#!/usr/bin/env bash
# Embedder worker throughput, alone and while searches run, and search throughput with and
# without the worker busy, in one run on a throwaway cluster (127.0.0.1:54391).
#   benches/embedder_load.sh [WINDOW_SECONDS]   (default 40: shorter than the worker needs for the corpus)
# Needs the extension installed (./x demo or ./x test) and ../shared/corpus (1,276 SKILL.md).
#
# The corpus is loaded and keyed once (bm25 merged by VACUUM); each phase then queues every
# skill again, so the worker's work is the same in each and nothing else (no loader) competes:
#   1. the worker alone: skills keyed in WINDOW seconds;
#   2. the worker (pg_skills.embedder_threads = 0: one per core) while pgbench searches on 2
#      connections;
#   3. the same with embedder_threads = 1;
#   4. the searches alone, nothing queued.
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

as_postgres "$PGBIN/initdb" -D "$DIR/data" -A trust -U postgres --locale=C.UTF-8 >/dev/null
as_postgres "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w \
  -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_skills" start >/dev/null
psql_ -c "CREATE EXTENSION pg_skills"

drain() { while [ "$(psql_ -c "SELECT queued FROM skills.embedder_status")" != 0 ]; do sleep 0.5; done; }
start=$(date +%s.%N)
"$CARGO_TARGET_DIR/debug/skills-load" --tree "$CORPUS" --quiet --dsn "$DSN" >/dev/null
drain
SKILLS=$(psql_ -c "SELECT count(*) FROM skills.skill_key")
echo "loaded and keyed $SKILLS skills in $(echo "scale=1; ($(date +%s.%N) - $start) / 1" | bc) s (the loader and the worker together)"
psql_ -c "VACUUM ANALYZE skills.skill" -c "VACUUM ANALYZE skills.skill_key"

# Searches: task phrasings, half bm25, half semantic (each semantic search runs the encoder on
# its query in the backend, so searches and worker compete for the same 2 cores).
cat > "$DIR/bm25.sql" <<'SQL'
\set n random(1, 6)
SELECT count(*) FROM skills.search((ARRAY['write pytest fixtures for a database', 'deploy a service to kubernetes', 'debug a memory leak in a python process', 'review a pull request for security problems', 'make a docker image smaller', 'plot experiment results with matplotlib'])[:n], k => 5, method => 'bm25');
SQL
sed 's/bm25/semantic/' "$DIR/bm25.sql" > "$DIR/semantic.sql"
pgbench_() { "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PORT" -U postgres -c 2 -j 2 -f "$DIR/bm25.sql" -f "$DIR/semantic.sql" -T "$WINDOW" postgres; }
searches() { grep -E "^(tps|latency average)" "$1" | tr '\n' ' ' | sed 's/ (without initial connection time)//'; echo; }

# keyed_in_window [pgbench log]: queues every skill again, lets the worker run for WINDOW
# seconds (with pgbench when a log is named), prints the rate, then waits for the queue to empty.
keyed_in_window() {
  psql_ -c "INSERT INTO skills.embed_queue (skill_id, content_hash) SELECT id, content_hash FROM skills.skill"
  if [ -n "${1:-}" ]; then pgbench_ > "$1" 2>&1; else sleep "$WINDOW"; fi
  local left
  left=$(psql_ -c "SELECT queued FROM skills.embedder_status")
  echo "worker: $((SKILLS - left)) skills keyed in ${WINDOW}s = $(echo "scale=2; ($SKILLS - $left) / $WINDOW" | bc) docs/s"
  drain
}

echo "== 1. the embedder worker alone"
keyed_in_window
echo "== 2. the worker (embedder_threads = 0: one per core) while pgbench searches on 2 connections"
keyed_in_window "$DIR/busy-threads0.log"
echo "searches: $(searches "$DIR/busy-threads0.log")"
echo "== 3. the same with embedder_threads = 1"
psql_ -c "ALTER SYSTEM SET pg_skills.embedder_threads = 1" -c "SELECT pg_reload_conf()" >/dev/null
sleep 3
keyed_in_window "$DIR/busy-threads1.log"
echo "searches: $(searches "$DIR/busy-threads1.log")"
echo "== 4. the searches alone, nothing queued"
pgbench_ > "$DIR/idle.log" 2>&1
echo "searches: $(searches "$DIR/idle.log")"
