#!/usr/bin/env bash
# pg_skills on Citus against one node holding the same rows (docs/citus.md).
#
# Builds Citus from the benchmark data folder's vendored source when it is missing (cached),
# starts a coordinator and two workers on loopback ports plus a plain single-node server,
# distributes pg_skills on the coordinator (skills.distribute), loads the demo corpus and the
# shared corpus into both with skills-load, keys them, records runs and fits a round, builds the
# graph, and checks that every search method answers on the coordinator exactly as the single
# node does (same skills in the same order; scores equal to 1e-6): before and after inserts,
# updates, deletes and VACUUM. Then a worker stops: searches fail with an error naming the node,
# a write to its shards fails whole, and once it is back the answers equal the single node's
# again. Everything is stopped and removed at the end, also on failure.
# Prints "citus: N passed, M failed"; exit 0 when nothing failed. Skips (exit 0, a message) only
# when the vendored Citus source is absent.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${PG_SKILLS_CITUS_DIR:-/var/tmp/pg_skills-citus-test}
BASE=${PG_SKILLS_CITUS_PORT:-54411}
# shellcheck source=tests/citus/cluster.sh
. "$here/cluster.sh"

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $* [${SECONDS}s]"; }
bad() { failed=$((failed + 1)); echo "FAILED: $* [${SECONDS}s]"; }
finish() {
  if [ "$failed" = 0 ]; then echo "test result: ok. $passed passed; 0 failed"; exit 0; fi
  echo "test result: FAILED. $passed passed; $failed failed"; exit 1
}

"$here/build_citus.sh"
case $? in
  0) ;;
  3) echo "citus: SKIPPED: the vendored Citus source (../shared/vendor) is absent"; exit 0 ;;
  *) bad "building Citus"; finish ;;
esac
trap stop_all EXIT
start_all || { bad "starting the coordinator, two workers and the single node (logs in $D)"; finish; }

layout=$(q $COORD "SELECT string_agg(relation || '=' || layout, ' ' ORDER BY relation::text) FROM skills.distribute(4)")
if echo "$layout" | grep -q 'skills.skill=distributed' && echo "$layout" | grep -q 'skills.event_arm=distributed' \
   && echo "$layout" | grep -q 'skills.edge=coordinator'; then ok "distribute: $layout"; else bad "distribute: $layout"; fi
placed=$(q $COORD "SELECT string_agg(DISTINCT p.nodeport::text, ',' ORDER BY p.nodeport::text)
                   FROM pg_dist_shard AS s JOIN pg_dist_shard_placement AS p USING (shardid)
                   WHERE s.logicalrelid = 'skills.skill'::regclass")
[ "$placed" = "$W1,$W2" ] && ok "the skills' shards are on both workers ($placed)" || bad "shard placement: $placed"
# One anchor per shard: the statistics of every shard are read by one query over pooled
# connections (skills.bm25_global_query).
anchors=$(q $COORD "SELECT count(DISTINCT get_shard_id_for_distribution_column('skills.skill', id)) || '/' || count(*) FROM skills.shard_anchor")
[ "$anchors" = "4/4" ] && ok "one shard anchor per shard (4)" || bad "shard anchors: $anchors"

# The same rows on both sides: the demo corpus, then the shared corpus when it is there.
for p in $COORD $SINGLE; do
  "$LOAD" --tree "$root/corpus/demo" --dsn "host=127.0.0.1 port=$p user=postgres dbname=postgres" >/dev/null \
    || bad "skills-load of the demo corpus into $p"
  if [ -d "$SHARED_CORPUS" ]; then
    "$LOAD" --tree "$SHARED_CORPUS" --dsn "host=127.0.0.1 port=$p user=postgres dbname=postgres" >/dev/null 2>&1 \
      || bad "skills-load of the shared corpus into $p"
  fi
done
n_c=$(q $COORD "SELECT count(*) FROM skills.skill") n_s=$(q $SINGLE "SELECT count(*) FROM skills.skill")
[ "$n_c" = "$n_s" ] && [ "$n_c" -gt 40 ] && ok "skills-load into the coordinator: $n_c skills, as on one node" \
  || bad "skill counts: coordinator $n_c, single $n_s"
# Loading the same tree again adds nothing (the content-hash identity holds across shards).
"$LOAD" --tree "$root/corpus/demo" --dsn "host=127.0.0.1 port=$COORD user=postgres dbname=postgres" >/dev/null
[ "$(q $COORD "SELECT count(*) FROM skills.skill")" = "$n_c" ] \
  && [ "$(q $COORD "SELECT count(*) FROM (SELECT content_hash FROM skills.skill GROUP BY 1 HAVING count(*) > 1) d")" = 0 ] \
  && ok "a second load deduplicates by content hash" || bad "a second load duplicated skills"

# Keys are made on the coordinator (embed_pending, taking turns with its embedder worker) and
# copied to the single node by content, so both sides hold exactly the same keys (encoding in
# other batches may differ in the last bits; that is not what this test compares). The single
# node's embedder serves another database.
sync_keys() {
  q $COORD "SELECT skills.embed_pending()" >/dev/null || { bad "embed_pending on the coordinator"; return; }
  rm -f "$D/keys.tsv"
  psql -h 127.0.0.1 -p $COORD -U postgres -XAtq -v ON_ERROR_STOP=1 \
    -c "\\copy (SELECT s.content_hash, k.embedding, k.k0 FROM skills.skill_key AS k JOIN skills.skill AS s ON s.id = k.skill_id) TO '$D/keys.tsv'" \
    && chmod 644 "$D/keys.tsv" \
    && psql -h 127.0.0.1 -p $SINGLE -U postgres -XAtq -v ON_ERROR_STOP=1 <<SQL >/dev/null || bad "copying the keys to the single node"
CREATE TEMP TABLE copied (content_hash text, embedding real[], k0 skills.key);
\\copy copied FROM '$D/keys.tsv'
INSERT INTO skills.skill_key AS k (skill_id, content_hash, embedding, k0)
SELECT s.id, s.content_hash, c.embedding, c.k0 FROM copied AS c JOIN skills.skill AS s USING (content_hash)
ON CONFLICT (skill_id) DO UPDATE SET content_hash = EXCLUDED.content_hash, embedding = EXCLUDED.embedding, k0 = EXCLUDED.k0;
DELETE FROM skills.skill_key AS k WHERE NOT EXISTS (SELECT 1 FROM skills.skill AS s WHERE s.id = k.skill_id AND s.content_hash = k.content_hash);
DELETE FROM skills.embed_queue;
SQL
}
sync_keys
[ "$(q $COORD "SELECT count(*) FROM skills.skill_key")" = "$n_c" ] && [ "$(q $COORD "SELECT count(*) FROM skills.embed_queue")" = 0 ] \
  && [ "$(q $SINGLE "SELECT count(*) FROM skills.skill_key")" = "$n_c" ] \
  && ok "every skill keyed on the coordinator through the distributed queue" || bad "keys on the coordinator"

# Outcomes and a fitted round, the graph: the same calls on both sides.
runs="
SELECT skills.record_run('which commit broke the build', jsonb_build_array(jsonb_build_object('skill_id', (SELECT id FROM skills.skill WHERE name = 'git-bisect-regression' ORDER BY id LIMIT 1), 'passed', true), jsonb_build_object('skill_id', (SELECT id FROM skills.skill WHERE name = 'changelog-conventional-commits' ORDER BY id LIMIT 1), 'passed', false)));
SELECT skills.record_run('a commit last week made the tests fail, find it', jsonb_build_array(jsonb_build_object('skill_id', (SELECT id FROM skills.skill WHERE name = 'git-bisect-regression' ORDER BY id LIMIT 1), 'passed', true)));
SELECT skills.record_run('the same tests fail only sometimes in CI', jsonb_build_array(jsonb_build_object('skill_id', (SELECT id FROM skills.skill WHERE name = 'flaky-test-triage' ORDER BY id LIMIT 1), 'passed', true)), run_passed => true);
SELECT skills.fit();
SELECT count(*) FROM skills.build_graph();"
for p in $COORD $SINGLE; do
  q $p "$runs" >/dev/null || bad "record_run, fit and build_graph on $p"
done
[ "$(q $COORD "SELECT count(*) FROM skills.event_arm")" = 4 ] && ok "record_run on the coordinator" || bad "record_run on the coordinator"
# The graph: the same edges (ends, type, weight to 1e-6) on both sides; the coordinator merges
# every shard's nearest keys for a batch of sources (skills.key_shard_neighbours).
edges() { q "$1" "SELECT from_skill || ' ' || to_skill || ' ' || type || ' ' || round(weight::numeric, 6)
                   FROM skills.edge ORDER BY from_skill, to_skill, type"; }
same_edges() { # when
  local e_c e_s
  e_c=$(edges $COORD) e_s=$(edges $SINGLE)
  if [ "$e_c" = "$e_s" ] && [ "$(echo "$e_c" | grep -c semantic)" -gt 0 ]; then
    ok "build_graph $1: the same $(echo "$e_c" | wc -l) edges on both ($(echo "$e_c" | grep -c semantic) by key similarity)"
  else
    bad "build_graph $1: coordinator $(echo "$e_c" | wc -l) edges, single $(echo "$e_s" | wc -l)"
    diff <(echo "$e_c") <(echo "$e_s") | head -6
  fi
}
same_edges "after loading"

QUERIES=("which commit broke the build" "CI is red again but the same tests pass when I rerun the job"
         "write a multi-stage Dockerfile for a Python service" "plot a chart from a CSV file with pandas"
         "100% coverage of the parser's edge cases" "kubernetes helm chart rollout"
         "Write pytest fixtures that share one test database. Then add a readiness probe to the Kubernetes deployment.")
VARIANTS=(", k => 10" ", categories => ARRAY['testing', 'debugging'], token_budget => 3000" ", min_score => 0.05, k => 25")
# Every search of a comparison as one script, one session per side (a new connection per search
# would load the encoder each time). Each answer row: "label content_hash score" (content, not
# ids: the two sides number their rows independently). The search is its own step: joined
# directly with skills.skill, Citus would push the call into every shard's query.
searches_sql() {
  local method qtext i v
  for method in bm25 semantic hybrid graph skilltrace keyopt; do
    i=0
    for qtext in "${QUERIES[@]}"; do
      i=$((i + 1)) v=0
      for extra in "${VARIANTS[@]}"; do
        v=$((v + 1))
        echo "WITH r AS MATERIALIZED (SELECT r.id, r.score, r.ordinality AS ord FROM skills.search(\$q\$$qtext\$q\$, method => '$method' $extra)
                WITH ORDINALITY AS r)
              SELECT '$method/q$i/v$v ' || s.content_hash || ' ' || r.score FROM r JOIN skills.skill AS s ON s.id = r.id ORDER BY r.ord;"
      done
    done
    echo "SELECT '$method/rendered ' || md5(skills.render_context(\$q\$${QUERIES[0]}\$q\$, token_budget => 2000, method => '$method')) || ' 0';"
  done
  # KeyOpt's batch scoring (every query at once) ranks as on one node too.
  local list
  list=$(printf '$q$%s$q$,' "${QUERIES[@]}")
  echo "WITH b AS MATERIALIZED (SELECT query_no, rank, skill_id, score FROM skills.keyopt_rank_batch(ARRAY[${list%,}], 10))
        SELECT 'batch/q' || b.query_no || ' ' || s.content_hash || ' ' || b.score FROM b JOIN skills.skill AS s ON s.id = b.skill_id
        ORDER BY b.query_no, b.rank;"
}
compare_all() { # label
  local script out_c out_s mismatched
  script=$(searches_sql)
  out_c=$(echo "$script" | psql -h 127.0.0.1 -p $COORD -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 2>&1)
  out_s=$(echo "$script" | psql -h 127.0.0.1 -p $SINGLE -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 2>&1)
  # Labels whose rows differ: another skill, order, row count, or a score off by more than 1e-6.
  mismatched=$(awk 'NR == FNR { c[FNR] = $0; n = FNR; next }
                    { split(c[FNR], a, " "); if (a[1] != $1 || a[2] != $2 || a[3] - $3 > 1e-6 || $3 - a[3] > 1e-6) bad[$1] = 1; m = FNR }
                    END { if (n != m) bad["row-count"] = 1; for (l in bad) print l }' \
                   <(echo "$out_c") <(echo "$out_s") | sort | tr '\n' ' ')
  local rows searches
  rows=$(echo "$out_s" | grep -c ' ')
  searches=$(echo "$out_s" | cut -d' ' -f1 | sort -u | wc -l)
  if [ -z "$mismatched" ] && [ "$rows" -gt 100 ]; then
    ok "$1: every method's answers on the coordinator equal the single node's ($searches searches and render_context calls, $rows rows, scores to 1e-6)"
  else
    bad "$1: answers differ from the single node's for: ${mismatched:-(too few rows: $rows)}"
    diff <(echo "$out_c") <(echo "$out_s") | head -12
  fi
}
compare_all "loaded"

# In SQL: the global query computed once (a MATERIALIZED step, so Citus sends its value to the
# shards) scores as one node; a plain bm25query binds to each shard's index with that shard's
# statistics (differs: the check can fail); with a tie-break column the shards would sort
# instead of scanning their index, and that is refused with a hint.
DOCQ="ARRAY[s.name, s.description, s.instructions] OPERATOR(skills.<&>)"
global=$(q $COORD "WITH g AS MATERIALIZED (SELECT skills.bm25_global_query('git bisect') AS q)
                   SELECT -($DOCQ (SELECT q FROM g)) FROM skills.skill AS s ORDER BY $DOCQ (SELECT q FROM g) LIMIT 1")
local_only=$(q $COORD "SELECT -($DOCQ skills.bm25query('git bisect')) FROM skills.skill AS s ORDER BY $DOCQ skills.bm25query('git bisect') LIMIT 1")
single=$(q $SINGLE "SELECT -($DOCQ skills.bm25query('git bisect')) FROM skills.skill AS s ORDER BY $DOCQ skills.bm25query('git bisect') LIMIT 1")
awk -v a="$global" -v b="$single" 'BEGIN { exit !(a != "" && (a - b) < 1e-6 && (b - a) < 1e-6) }' \
  && ok "ORDER BY <&> skills.bm25_global_query (a MATERIALIZED step) on the coordinator scores as one node ($global)" \
  || bad "global query score '$global' vs single $single"
[ -n "$local_only" ] && awk -v a="$local_only" -v b="$single" 'BEGIN { exit !(a > 0 && ((a - b) > 1e-6 || (b - a) > 1e-6)) }' \
  && ok "skills.bm25query binds to each shard's index, with that shard's statistics ($local_only against $single)" \
  || bad "per-shard query: '$local_only' vs $single"
err=$(q $COORD "SELECT s.id FROM skills.skill AS s ORDER BY $DOCQ skills.bm25query('git bisect'), s.id LIMIT 1" 2>&1)
echo "$err" | grep -q "cannot be scored outside its shards' index scans" \
  && ok "a plain bm25query a shard cannot scan is refused with a hint" || bad "plain bm25query with a tie-break: $err"

# The key search's breadth set in the coordinator's session reaches the shards: the searches'
# queries carry it (skills.keyquery). With a skeys index on every shard (Citus creates it on
# each), every list read answers as the exact single node (no index there); one list of twenty
# misses neighbours, so the index was read with that breadth.
breadth_sql() { # probes
  local i=0 qtext
  echo "SET pg_skills.key_probes = $1;"
  for qtext in "${QUERIES[@]}"; do
    i=$((i + 1))
    for method in semantic keyopt; do
      echo "WITH r AS MATERIALIZED (SELECT r.id, r.ordinality AS ord FROM skills.search(\$q\$$qtext\$q\$, method => '$method', k => 20)
              WITH ORDINALITY AS r)
            SELECT '$method/q$i ' || string_agg(s.content_hash, ',' ORDER BY r.ord) FROM r JOIN skills.skill AS s ON s.id = r.id;"
    done
  done
}
if q $COORD "CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 20)" >/dev/null; then
  exact=$(breadth_sql 65535 | psql -h 127.0.0.1 -p $SINGLE -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 2>&1)
  every=$(breadth_sql 65535 | psql -h 127.0.0.1 -p $COORD -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 2>&1)
  narrow=$(breadth_sql 1 | psql -h 127.0.0.1 -p $COORD -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 2>&1)
  if [ "$every" = "$exact" ] && [ "$narrow" != "$exact" ] && [ "$(echo "$exact" | grep -c ' ')" = $((2 * ${#QUERIES[@]})) ]; then
    ok "pg_skills.key_probes set on the coordinator reaches the shards' key indexes (every list: the exact answers; one list: others)"
  else
    bad "key_probes on the coordinator: every list equals exact: $([ "$every" = "$exact" ] && echo yes || echo no); one list differs: $([ "$narrow" != "$exact" ] && echo yes || echo no)"
    diff <(echo "$every") <(echo "$exact") | head -6
  fi
  q $COORD "DROP INDEX skills.skill_key_k0" >/dev/null || bad "DROP INDEX on the coordinator"
else
  bad "CREATE INDEX ... USING skeys on the coordinator"
fi

# Writes: inserts, updates, deletes, then VACUUM; the same statements on both sides.
dml="
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('bisect-helper', 'Find the commit that broke the build with git bisect run', 'git bisect start; git bisect run ./test.sh'),
  ('flaky-quarantine', 'Quarantine flaky tests that fail only sometimes in CI', 'Rerun the job, mark the flaky test, open an issue');
UPDATE skills.skill SET instructions = instructions || ' Also check the CI logs.' WHERE name IN ('git-bisect-regression', 'readme-writing');
DELETE FROM skills.skill WHERE name IN ('changelog-conventional-commits', 'makefile-task-runner');"
for p in $COORD $SINGLE; do
  q $p "$dml" >/dev/null || bad "writes on $p"
done
sync_keys
for p in $COORD $SINGLE; do
  q $p "SELECT count(*) FROM skills.build_graph()" >/dev/null || bad "build_graph on $p"
  q $p "VACUUM skills.skill" || bad "VACUUM on $p"
done
v_c=$(q $COORD "SELECT count(*) FROM skills.skill_version") v_s=$(q $SINGLE "SELECT count(*) FROM skills.skill_version")
[ "$v_c" = "$v_s" ] && [ "$v_c" -ge 2 ] && ok "updates keep history on the shards ($v_c versions)" || bad "versions: coordinator $v_c, single $v_s"
compare_all "after inserts, updates, deletes and VACUUM"
same_edges "after inserts, updates and deletes"

# The embedder worker on the coordinator keys a new skill through the distributed queue (as
# the workers' role, which logs in to the workers), and the workers' embedders leave it alone.
q $COORD "INSERT INTO skills.skill (name, description, instructions)
          VALUES ('worker-keyed', 'Keyed by the background embedder', 'It drains the queue on the coordinator')" >/dev/null
keyed=0
for _ in $(seq 1 120); do
  if [ "$(q $COORD "SELECT count(*) FROM skills.skill_key AS k JOIN skills.skill AS s ON s.id = k.skill_id WHERE s.name = 'worker-keyed'")" = 1 ]; then
    keyed=1; break
  fi
  sleep 1
done
if [ "$keyed" = 1 ] && [ "$(q $COORD "SELECT count(*) FROM skills.embed_queue")" = 0 ]; then
  ok "the embedder worker on the coordinator keyed a new skill"
else
  bad "the embedder worker did not key the new skill in 120 s"
  grep -E 'ERROR|FATAL' "$D/n$COORD.log" | tail -5
fi

# A plain INSERT of content another skill has (no unique constraint backs the content hash
# across shards), and a run that used the copy, in one transaction: the embedder merges the
# copy into the skill before keying it (its place and that outcome go to the skill). The single
# node, whose constraint refuses the copy, gets the place and the run the merge gives.
orig=$(q $COORD "SELECT id FROM skills.skill WHERE name = 'flaky-test-triage' ORDER BY id LIMIT 1")
place='[{"location": "by-hand/flaky-test-triage/SKILL.md"}]'
copy_run="SELECT skills.record_run('the tests pass when the job is rerun', jsonb_build_array(jsonb_build_object(
            'skill_id', (SELECT max(id) FROM skills.skill WHERE name = 'flaky-test-triage'), 'passed', true)))"
q $COORD "INSERT INTO skills.skill (name, description, instructions, provenance)
          SELECT name, description, instructions, '$place' FROM skills.skill WHERE id = $orig;
          $copy_run" >/dev/null || bad "a plain INSERT of a copy and a run that used it"
q $SINGLE "UPDATE skills.skill SET provenance = skills.merge_provenance(provenance, '$place') WHERE name = 'flaky-test-triage';
           $copy_run" >/dev/null || bad "the place and the run on the single node"
q $SINGLE "VACUUM skills.skill" || bad "VACUUM on the single node"
merged=0
for _ in $(seq 1 60); do
  if [ "$(q $COORD "SELECT count(*) FROM skills.skill WHERE name = 'flaky-test-triage'")" = 1 ]; then merged=1; break; fi
  sleep 1
done
state="$(q $COORD "SELECT id = $orig AND provenance @> '$place' FROM skills.skill WHERE name = 'flaky-test-triage'")"
state="$state|$(q $COORD "SELECT count(*) FROM skills.event_arm WHERE skill_id = $orig")"
state="$state|$(q $COORD "SELECT count(*) FROM skills.skill_key WHERE skill_id = $orig")"
[ "$merged" = 1 ] && [ "$state" = "t|2|1" ] \
  && ok "the embedder merged a plain INSERT's copy into the skill with that content (its place and outcome moved)" \
  || { bad "copy not merged (merged=$merged, kept with the place|arms|keys = $state)"; grep -E 'ERROR|FATAL' "$D/n$COORD.log" | tail -5; }
# Then it rebuilds the graph (as the workers' role, in a security-restricted context: no
# temporary tables).
rebuilt=0
for _ in $(seq 1 120); do
  if [ "$(q $COORD "SELECT (SELECT built_at FROM skills.graph_state) >= (SELECT max(embedded_at) FROM skills.skill_key)")" = t ]; then
    rebuilt=1; break
  fi
  sleep 1
done
# The workers' embedders leave the graph to the coordinator (their own edge table is unused).
w_built=$(q $W1 "SELECT coalesce(built_at::text, 'never') FROM skills.graph_state")/$(q $W2 "SELECT coalesce(built_at::text, 'never') FROM skills.graph_state")
if [ "$rebuilt" = 1 ] && [ "$w_built" = never/never ]; then
  ok "the embedder worker rebuilt the graph on Citus (the workers' embedders did not)"
else
  bad "graph rebuilds: coordinator rebuilt=$rebuilt ($(q $COORD "SELECT last_error FROM skills.embedder_progress")), workers' built_at $w_built"
fi
q $COORD "DELETE FROM skills.skill WHERE name = 'worker-keyed'" >/dev/null

# A worker stops.
runuser -u postgres -- "$B/pg_ctl" -D "$D/n$W2" -m fast stop >/dev/null
err=$(q $COORD "SELECT count(*) FROM skills.search('which commit broke the build', method => 'bm25', k => 5)" 2>&1)
echo "$err" | grep -q "$W2" && ok "a search with a worker down fails naming it: $(echo "$err" | head -1)" \
  || bad "search with a worker down: $err"
# A batch whose rows land on both workers' shards fails whole (Citus's two-phase commit).
err=$(q $COORD "INSERT INTO skills.skill (name, description, instructions)
                SELECT 'down-' || g, 'written while a worker is down ' || g, 'x' FROM generate_series(1, 20) AS g" 2>&1)
[ -n "$err" ] && ok "a write touching the stopped worker fails: $(echo "$err" | head -1)" || bad "a write with a worker down succeeded"
runuser -u postgres -- "$B/pg_ctl" -D "$D/n$W2" -l "$D/n$W2.log" -w -t 120 start >/dev/null
q $COORD "SELECT recover_prepared_transactions()" >/dev/null
# The failed write's rows on the other worker's shards were aborted: as on one node, BM25
# statistics count aborted and dead rows until VACUUM, which the comparison below needs.
q $COORD "VACUUM skills.skill" || bad "VACUUM after the worker returned"
[ "$(q $COORD "SELECT count(*) FROM skills.skill WHERE name LIKE 'down-%'")" = 0 ] \
  && ok "nothing of the failed write is there after the worker returns" || bad "a half-applied write"
[ "$(q $COORD "SELECT count(*) FROM skills.event_arm")" = 5 ] && ok "every acknowledged outcome is there" || bad "outcomes lost"
compare_all "after the worker returned"

# The fitter worker on the coordinator fits a round from runs recorded on the shards.
rounds=$(q $COORD "SELECT count(*) FROM skills.keyopt_round")
q $COORD "SELECT skills.record_run('which commit broke the build', jsonb_build_array(jsonb_build_object('skill_id',
            (SELECT id FROM skills.skill WHERE name = 'git-bisect-regression' ORDER BY id LIMIT 1), 'passed', true)))" >/dev/null
q $COORD "ALTER SYSTEM SET pg_skills.fit_interval = 1" >/dev/null && q $COORD "SELECT pg_reload_conf()" >/dev/null
fitted=0
for _ in $(seq 1 90); do
  [ "$(q $COORD "SELECT count(*) FROM skills.keyopt_round")" -gt "$rounds" ] && { fitted=1; break; }
  sleep 1
done
[ "$fitted" = 1 ] && ok "the fitter worker on the coordinator fitted a round from the distributed runs" \
  || { bad "the fitter worker fitted no round in 90 s"; grep -E 'ERROR|FATAL' "$D/n$COORD.log" | tail -5; }

finish
