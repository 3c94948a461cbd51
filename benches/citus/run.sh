#!/usr/bin/env bash
# pg_skills on Citus (coordinator + 2 workers, 4 shards) against one node holding the same rows:
# latency p50/p95 per search method and QPS at 1, 2 and 8 clients, and record_run per second.
# Run on the optimised build: `cd extension && cargo pgrx install --release` first, and
# SKILLS_LOAD=<release skills-load>. Prints markdown tables (benches/RESULTS.md, "Scale-out").
#
# Rows: the shared corpus replicated in SQL to N skills (default 100000; benches/common.sh).
# Queries: MetaTool task queries (every 67th). pgbench -M prepared, SECONDS_PER_RUN per run.
# The graph holds the document-rule edges while searches are measured. GRAPH=1 then times
# skills.build_graph() (key similarity and rules) on both sides with a skeys index; GRAPH_PER_KEY=1
# also times, on Citus, the path the batches replaced (one top-k query over every shard per key).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${PG_SKILLS_CITUS_DIR:-/var/tmp/pg_skills-citus-bench}
BASE=${PG_SKILLS_CITUS_PORT:-54415}
. "$here/../../tests/citus/cluster.sh"
. "$here/../common.sh"
N=${N:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-"1 2 8"}
METHODS=${METHODS-"bm25 semantic hybrid keyopt graph skilltrace"}  # METHODS="" runs record_run only
QUERIES_FILE=${QUERIES_FILE:-$root/../shared/bench-data/metatool/queries.jsonl}

"$here/../../tests/citus/build_citus.sh" || { echo "bench: Citus could not be built"; exit 1; }
[ -n "${KEEP:-}" ] || trap stop_all EXIT   # KEEP=1 leaves the nodes running
start_all || { echo "bench: nodes did not start (logs in $D)"; exit 1; }
# Larger buffers on every node, as a server would have.
for p in $COORD $W1 $W2 $SINGLE; do
  q $p "ALTER SYSTEM SET shared_buffers = '512MB'" >/dev/null
  runuser -u postgres -- "$B/pg_ctl" -D "$D/n$p" -l "$D/n$p.log" -w -t 120 restart >/dev/null
done
q $COORD "SELECT skills.distribute(4)" >/dev/null

t0=$(date +%s)
for p in $COORD $SINGLE; do
  "$LOAD" --tree "$SHARED_CORPUS" --dsn "host=127.0.0.1 port=$p user=postgres dbname=postgres" >/dev/null 2>&1
  q $p "SELECT skills.embed_pending()" >/dev/null
  replicate_skills $p "$N" || exit 1
done
echo "load: $(q $COORD "SELECT count(*) FROM skills.skill") skills on the coordinator, $(q $SINGLE "SELECT count(*) FROM skills.skill") on the single node, $(( $(date +%s) - t0 )) s"

# The query list, a round fitted from runs, the graph: the same on both sides.
bench_queries "$QUERIES_FILE" "$D/queries.tsv"
nq=$(wc -l < "$D/queries.tsv")
for p in $COORD $SINGLE; do
  q $p "CREATE TABLE bench_query (i integer PRIMARY KEY, q text NOT NULL)" >/dev/null
  psql -h 127.0.0.1 -p $p -U postgres -XAtq -c "\\copy bench_query FROM '$D/queries.tsv'" >/dev/null
  q $p "SELECT skills.record_run(b.q, jsonb_build_array(jsonb_build_object('skill_id', r.id, 'passed', (b.i + r.id) % 3 <> 0)))
        FROM bench_query AS b, LATERAL (SELECT id FROM skills.search(b.q, method => 'semantic', k => 1)) AS r
        WHERE b.i % 3 = 0;
        SELECT skills.fit(); SELECT count(*) FROM skills.build_graph(neighbours => 0);" >/dev/null
done

for m in $METHODS; do
  cat > "$D/search-$m.sql" <<SQL
\\set i random(1, $nq)
SELECT count(*) FROM skills.search((SELECT q FROM bench_query WHERE i = :i), method => '$m', k => 10);
SQL
done
cat > "$D/record.sql" <<SQL
\\set i random(1, $nq)
\\set s random(1, 1000)
SELECT skills.record_run((SELECT q FROM bench_query WHERE i = :i), jsonb_build_array(jsonb_build_object('skill_id', :s::bigint, 'passed', true)));
SQL

run() { pgbench_run "$B" "$D" "$1" "$2" "$3" "$SECONDS_PER_RUN"; }  # port script clients

echo
echo "| method | clients | single p50 / p95 ms | Citus p50 / p95 ms | single QPS | Citus QPS | Citus / single p50 |"
echo "|---|---|---|---|---|---|---|"
for m in $METHODS; do
  for c in $CLIENTS; do
    read -r s50 s95 sq <<< "$(run $SINGLE "$D/search-$m.sql" $c)"
    read -r c50 c95 cq <<< "$(run $COORD "$D/search-$m.sql" $c)"
    ratio=$(awk -v a="$c50" -v b="$s50" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    echo "| $m | $c | $s50 / $s95 | $c50 / $c95 | $sq | $cq | $ratio× |"
  done
done
echo
echo "| record_run | clients | single p50 ms | Citus p50 ms | single runs/s | Citus runs/s |"
echo "|---|---|---|---|---|---|"
for c in 1 8; do
  read -r s50 s95 sq <<< "$(run $SINGLE "$D/record.sql" $c)"
  read -r c50 c95 cq <<< "$(run $COORD "$D/record.sql" $c)"
  echo "| | $c | $s50 | $c50 | $sq | $cq |"
done

if [ -n "${GRAPH:-}" ]; then
  lists=$(awk -v n="$N" 'BEGIN { printf "%d", sqrt(n) }')
  for p in $COORD $SINGLE; do
    q $p "CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = $lists)" >/dev/null
  done
  timed() { local t0 t1; t0=$(date +%s.%N); q "$1" "$2" >/dev/null || echo "failed: $2" >&2; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'; }
  ts=$(timed $SINGLE "SELECT count(*) FROM skills.build_graph()")
  tc=$(timed $COORD "SELECT count(*) FROM skills.build_graph()")
  # The previous Citus path: each key's neighbours by one query over every shard's index.
  [ -n "${GRAPH_PER_KEY:-}" ] && tp=$(timed $COORD "DO \$\$
        DECLARE source record; n bigint;
        BEGIN
          FOR source IN SELECT sk.skill_id, sk.k0 FROM skills.skill_key AS sk ORDER BY sk.skill_id LOOP
            SELECT count(*) INTO n FROM (SELECT b.skill_id FROM skills.skill_key AS b WHERE b.skill_id <> source.skill_id
                                         ORDER BY b.k0 OPERATOR(skills.<#>) source.k0, b.skill_id LIMIT 8) AS x;
          END LOOP;
        END \$\$")
  edges() { q "$1" "SELECT from_skill || ' ' || to_skill FROM skills.edge WHERE type IN ('semantic', 'alternative')" | LC_ALL=C sort; }
  both=$(LC_ALL=C comm -12 <(edges $SINGLE) <(edges $COORD) | wc -l)
  echo
  echo "| build_graph over $(q $SINGLE "SELECT count(*) FROM skills.skill_key") keys (skeys, $lists lists) | seconds | key-similarity edges |"
  echo "|---|---|---|"
  echo "| single node | $ts | $(edges $SINGLE | wc -l) |"
  echo "| Citus, batches of sources to every shard | $tc | $(edges $COORD | wc -l) ($both shared with the single node) |"
  if [ -n "${GRAPH_PER_KEY:-}" ]; then echo "| Citus, one query per key (before) | $tp | |"; fi
fi
