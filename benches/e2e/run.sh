#!/usr/bin/env bash
# Every search method end to end, as a user calls it (`skills.search(..., k => 10)` over
# pgbench -M prepared): p50/p95 and QPS at 1 and 2 clients, with the query key cached (the same
# 300 queries again) and with the encoder run for every call (a distinct query each time), and
# the SQL statements each call runs inside the server (pg_stat_statements, track = all).
# Peers in the same run on the same rows: built-in full text search (GIN, OR of the query's
# lexemes, ts_rank_cd, LIMIT 10) and the bm25 operator path (ORDER BY doc <&> q LIMIT 10).
#
# Run on the build users install: `cd extension && cargo pgrx install --release` first, and
# SKILLS_LOAD=<release skills-load>. Rows: the shared corpus replicated to N skills
# (benches/common.sh). KEEP=1 leaves the server running; REUSE=1 runs again on the server
# left running (restarted, so that it loads the library installed since: before/after).
# ALONE="5 24 20" also sends each of those requests (bench_query.i) alone, key cached, for
# SECONDS_PER_RUN per method: p50/p95 of one request's calls (requests of several parts).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../common.sh"
B=${PGBIN:-/usr/lib/postgresql/15/bin}
D=${PG_SKILLS_E2E_DIR:-/var/tmp/pg_skills-e2e-bench}
P=${PG_SKILLS_E2E_PORT:-54420}
N=${N:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
# Added to the key-cached runs for each client's pass over every query (left out of the figures).
WARM_SECONDS=${WARM_SECONDS:-8}
CLIENTS=${CLIENTS:-"1 2"}
METHODS=${METHODS-"bm25 semantic hybrid keyopt graph skilltrace"}
# The peers (built-in FTS, the bm25 operator); PEERS= leaves them out.
QUERIES_FILE=${QUERIES_FILE:-$root/../shared/bench-data/metatool/queries.jsonl}
SHARED_CORPUS=${PG_SKILLS_SHARED_CORPUS:-$root/../shared/corpus}
LOAD=${SKILLS_LOAD:-${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}/release/skills-load}

q() { psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$2"; }
pg_ctl() { bench_pg_ctl "$D" "$@"; }
stop() { [ -f "$D/data/PG_VERSION" ] && pg_ctl -m fast stop 2>/dev/null; }
[ -n "${KEEP:-}" ] || trap 'stop; rm -rf "$D"' EXIT

# The full-text peer: the same text in a tsvector column with a GIN index (words over 2 kB,
# which full text search skips with a NOTICE each, are left out quietly).
fts_table() {
  PGOPTIONS='-c client_min_messages=warning' q $P "DROP TABLE IF EXISTS bench_fts;
      CREATE TABLE bench_fts AS SELECT id, to_tsvector('english', name || ' ' || description || ' ' || instructions) AS tsv FROM skills.skill;
      CREATE INDEX bench_fts_gin ON bench_fts USING gin (tsv);" && q $P "VACUUM ANALYZE bench_fts"
}

if [ -n "${REUSE:-}" ] && [ -f "$D/data/PG_VERSION" ]; then
  stop; pg_ctl start || { echo "bench: the server did not start (log: $D/server.log)"; exit 1; }
  [ "$(q $P "SELECT to_regclass('bench_fts') IS NOT NULL")" = t ] || fts_table || exit 1
else
  stop
  bench_server "$D" $P "shared_preload_libraries = 'pg_skills, pg_stat_statements'
pg_stat_statements.track = all
# The embedder worker stays out of the measurement (replicas come with their keys).
pg_skills.embedder_database = 'template1'" || exit 1
  t0=$(date +%s)
  q $P "CREATE EXTENSION pg_skills; CREATE EXTENSION pg_stat_statements;" || exit 1
  "$LOAD" --tree "$SHARED_CORPUS" --dsn "host=127.0.0.1 port=$P user=postgres dbname=postgres" >/dev/null 2>&1 \
    || { echo "bench: skills-load failed ($LOAD)"; exit 1; }
  q $P "SELECT skills.embed_pending()" >/dev/null || exit 1
  replicate_skills $P "$N" || exit 1
  bench_queries "$QUERIES_FILE" "$D/queries.tsv"
  q $P "CREATE TABLE bench_query (i integer PRIMARY KEY, q text NOT NULL)" >/dev/null
  psql -h 127.0.0.1 -p $P -U postgres -XAtq -c "\\copy bench_query FROM '$D/queries.tsv'" >/dev/null
  # A fitted round and the document-rule graph, so keyopt, graph and skilltrace do their work.
  q $P "SELECT skills.record_run(b.q, jsonb_build_array(jsonb_build_object('skill_id', r.id, 'passed', (b.i + r.id) % 3 <> 0)))
        FROM bench_query AS b, LATERAL (SELECT id FROM skills.search(b.q, method => 'semantic', k => 1)) AS r
        WHERE b.i % 3 = 0;
        SELECT skills.fit(); SELECT count(*) FROM skills.build_graph(neighbours => 0);" >/dev/null || exit 1
  # The key index a deployment creates once keys exist (as ./x demo does).
  q $P "CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0); ANALYZE skills.skill_key;" || exit 1
  fts_table || exit 1
  echo "load: $(q $P "SELECT count(*) FROM skills.skill") skills, $(( $(date +%s) - t0 )) s"
fi
echo "index sizes: $(q $P "SELECT string_agg(format('%s %s', c, pg_size_pretty(pg_relation_size(c))), ', ')
                          FROM unnest(ARRAY['skills.skill_bm25', 'bench_fts_gin', 'skills.skill_key_k0']::regclass[]) AS c")"
nq=$(q $P "SELECT count(*) FROM bench_query")
echo "library: $(md5sum "$("$B/pg_config" --pkglibdir)/pg_skills.so" | cut -c1-12), commit $(git -C "$root" rev-parse --short HEAD)"

# script NAME SELECT...: a pgbench script over a random query (:qt is its text; with ENCODE=1 a
# distinct text each call, so the encoder runs every time). Without ENCODE each client first
# sends every query once, in order (its backend then has every key cached; pgbench_run leaves
# these WARM transactions out), then random ones.
script() {
  local name=$1 body=$2 text="(SELECT q FROM bench_query WHERE i = :i)"
  [ "${ENCODE:-}" = 1 ] && text="((SELECT q FROM bench_query WHERE i = :i) || ' ' || :r)"
  printf '\\set n :n + 1\n\\set i case when :n <= %s then :n else random(1, %s) end\n\\set r random(1, 1000000000)\nSELECT count(*) FROM (%s) AS x;\n' \
    "$nq" "$nq" "${body//:qt/$text}" > "$D/$name.sql"
  echo "$D/$name.sql"
}
search_sql() { echo "SELECT id FROM skills.search(:qt, method => '$1', k => 10)"; }
fts_sql="SELECT id FROM bench_fts, LATERAL (SELECT replace(plainto_tsquery('english', :qt)::text, ' & ', ' | ')::tsquery AS tq) AS t
         WHERE tsv @@ tq ORDER BY ts_rank_cd(tsv, tq) DESC LIMIT 10"
operator_sql="SELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query(:qt) LIMIT 10"

# Statements run inside the server per call (SPI and PL/pgSQL queries), over 20 calls.
nested() { # sql with :qt
  local i total=0 n
  q $P "SELECT pg_stat_statements_reset()" >/dev/null
  for i in $(seq 1 20); do
    q $P "SELECT count(*) FROM (${1//:qt/(SELECT q FROM bench_query WHERE i = $i)}) AS x" >/dev/null
  done
  n=$(q $P "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE NOT toplevel")
  awk -v n="$n" 'BEGIN { printf "%.1f", n / 20 }'
}

# Key cached: each pgbench client's backend first encodes every query once (left out).
echo
echo "| method | clients | p50 / p95 ms, key cached | QPS | p50 / p95 ms, encoding every call | QPS | statements per call |"
echo "|---|---|---|---|---|---|---|"
for m in $METHODS ${PEERS-fts operator}; do
  case $m in
    fts) body=$fts_sql; label="built-in FTS (GIN, ts_rank_cd)" ;;
    operator) body=$operator_sql; label="bm25 operator (ORDER BY <&> LIMIT 10)" ;;
    *) body=$(search_sql "$m"); label="skills.search $m" ;;
  esac
  calls=$(nested "$body")
  # Each client's pass over every query warms its backend's key cache; full text search has
  # none, and at seconds a call such a pass would outlast the run: its first call alone is left out.
  warm=$nq
  [ "$m" = fts ] && warm=1
  for c in $CLIENTS; do
    read -r a50 a95 aq <<< "$(WARM=$warm pgbench_run "$B" "$D" $P "$(ENCODE=0 script "$m" "$body")" "$c" "$((SECONDS_PER_RUN + WARM_SECONDS))")"
    if [ "$m" = bm25 ] || [ "$m" = fts ] || [ "$m" = operator ]; then
      e="(no encoding) | -"
    else
      read -r e50 e95 eq <<< "$(pgbench_run "$B" "$D" $P "$(ENCODE=1 script "$m-enc" "$body")" "$c" "$SECONDS_PER_RUN")"
      e="$e50 / $e95 | $eq"
    fi
    echo "| $label | $c | $a50 / $a95 | $aq | $e | $calls |"
  done
done

# One request at a time (ALONE): the same text every call, so its key stays cached; the first
# 20 calls (the encoder's first use in the backend) are left out.
if [ -n "${ALONE:-}" ]; then
  echo
  echo "| method | request (bench_query.i) | sentences | p50 / p95 ms, key cached | QPS |"
  echo "|---|---|---|---|---|"
  for m in $METHODS; do
    for i in $ALONE; do
      printf 'SELECT count(*) FROM (%s) AS x;\n' "$(search_sql "$m" | sed "s/:qt/(SELECT q FROM bench_query WHERE i = $i)/")" > "$D/alone.sql"
      parts=$(q $P "SELECT array_length(regexp_split_to_array(q, '[.?!]+ +'), 1) FROM bench_query WHERE i = $i")
      read -r a50 a95 aq <<< "$(WARM=20 pgbench_run "$B" "$D" $P "$D/alone.sql" 1 "$SECONDS_PER_RUN")"
      echo "| skills.search $m | $i | $parts | $a50 / $a95 | $aq |"
    done
  done
fi
