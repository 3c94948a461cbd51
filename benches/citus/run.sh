#!/usr/bin/env bash
# pg_skills on Citus (coordinator + 2 workers, 4 shards) against one node holding the same rows:
# latency p50/p95 per search method and QPS at 1, 2 and 8 clients, and record_run per second.
# Run on the optimised build: `cd extension && cargo pgrx install --release` first, and
# SKILLS_LOAD=<release skills-load>. Prints markdown tables (benches/RESULTS.md, "Scale-out").
#
# Rows: the shared corpus (real skills, keyed by the encoder) replicated in SQL to N skills
# (default 100000): each replica is a skill's text with five corpus words appended to its
# description and 0-59 to its instructions (lengths and terms vary, few exact ties); replicas get pseudo-random unit keys (without a key index, a semantic
# search scans every key either way; this measures cost, not quality).
# Queries: MetaTool task queries (every 67th). pgbench -M prepared, SECONDS_PER_RUN per run.
# The graph holds the document-rule edges only (key-similarity edges on Citus take one query per
# key: minutes at this size).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${PG_SKILLS_CITUS_DIR:-/var/tmp/pg_skills-citus-bench}
BASE=${PG_SKILLS_CITUS_PORT:-54415}
. "$here/../../tests/citus/cluster.sh"
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
  base=$(q $p "SELECT count(*) FROM skills.skill")
  reps=$(( (N + base - 1) / base - 1 ))
  # Replicas: each skill's text with five words of the corpus's own vocabulary appended (in
  # PL/pgSQL, so that Citus gets the word list as a value).
  q $p "DO \$\$
        DECLARE w text[];
        BEGIN
          SELECT array_agg(x.w) INTO w FROM (SELECT DISTINCT t AS w FROM skills.skill AS s,
              regexp_split_to_table(lower(s.description), '[^a-z]+') AS t WHERE length(t) > 3 ORDER BY 1 LIMIT 5000) AS x;
          INSERT INTO skills.skill (name, description, instructions, category, provenance)
          SELECT s.name || '-r' || g, s.description || ' ' || array_to_string(ARRAY(
                     SELECT w[1 + abs(hashtext(s.id || ':' || g || ':' || k)) % cardinality(w)]
                     FROM generate_series(1, 5) AS k), ' '),
                 s.instructions || ' ' || array_to_string(ARRAY(
                     SELECT w[1 + abs(hashtext(s.id || ':' || g || ':i' || k)) % cardinality(w)]
                     FROM generate_series(1, 59) AS k WHERE k <= abs(hashtext(s.id || '/' || g)) % 60), ' '),
                 s.category, '[]'
          FROM (SELECT id, name, description, instructions, category FROM skills.skill ORDER BY id) AS s,
               generate_series(1, $reps) AS g;
        END \$\$" >/dev/null || { echo "bench: replicating on $p failed"; exit 1; }
  # Replicas' keys (a key from each id; co-located with the skill), then an empty queue (the
  # embedder would otherwise encode every replica).
  q $p "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0)
        SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]),
               skills.key(ARRAY(SELECT ((abs(hashtext(s.id || ':' || i)) % 2001) - 1000) / 1000.0 / 12.9
                                FROM generate_series(1, 512) AS i)::real[])
        FROM skills.skill AS s
        WHERE NOT EXISTS (SELECT 1 FROM skills.skill_key AS k WHERE k.skill_id = s.id);
        DELETE FROM skills.embed_queue;" >/dev/null || { echo "bench: keys on $p failed"; exit 1; }
  q $p "VACUUM ANALYZE" >/dev/null
done
echo "load: $(q $COORD "SELECT count(*) FROM skills.skill") skills on the coordinator, $(q $SINGLE "SELECT count(*) FROM skills.skill") on the single node, $(( $(date +%s) - t0 )) s"

# The query list, a round fitted from runs, the graph: the same on both sides.
python3 - "$QUERIES_FILE" > "$D/queries.tsv" <<'PY'
import json, sys
qs = [json.loads(l)["text"] for l in open(sys.argv[1])]
for i, q in enumerate(qs[::67][:300]):
    print(f"{i + 1}\t{q.replace(chr(9), ' ').replace(chr(92), ' ')}")
PY
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

# pgbench with per-transaction logs: "p50 p95 qps" in ms and 1/s.
run() { # port script clients
  rm -f "$D"/pgbench_log.*
  local out
  out=$(cd "$D" && "$B/pgbench" -h 127.0.0.1 -p "$1" -U postgres -n -M prepared -c "$3" -j "$3" -T "$SECONDS_PER_RUN" \
        -l -f "$2" postgres 2>&1)
  echo "$out" | grep -q '^tps' || echo "$out" | grep -iE 'error|abort' | head -3 >&2
  local tps
  tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p' | head -1)
  cat "$D"/pgbench_log.* | awk '{print $3 / 1000}' | sort -n | awk -v tps="$tps" '
    { v[NR] = $1 } END { if (NR == 0) { print "error - -"; exit }
      printf "%.2f %.2f %.0f\n", v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))], v[int(NR * 0.95) + (NR * 0.95 > int(NR * 0.95))], tps }'
}

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
