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
root=$(cd "$here/../.." && pwd)
B=/usr/lib/postgresql/15/bin
D=${PG_SKILLS_CITUS_DIR:-/var/tmp/pg_skills-citus-test}
BASE=${PG_SKILLS_CITUS_PORT:-54391}
COORD=$BASE W1=$((BASE + 1)) W2=$((BASE + 2)) SINGLE=$((BASE + 3))
LOAD=${SKILLS_LOAD:-${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}/debug/skills-load}
SHARED_CORPUS=${PG_SKILLS_SHARED_CORPUS:-$root/../shared/corpus}

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

"$here/build_citus.sh"
case $? in
  0) ;;
  3) echo "citus: SKIPPED: the vendored Citus source (../shared/vendor) is absent"; echo "citus: 0 passed, 0 failed"; exit 0 ;;
  *) bad "building Citus"; echo "citus: $passed passed, $failed failed"; exit 1 ;;
esac

stop_all() {
  for p in $COORD $W1 $W2 $SINGLE; do
    [ -d "$D/n$p" ] && runuser -u postgres -- "$B/pg_ctl" -D "$D/n$p" -m immediate stop >/dev/null 2>&1
  done
  rm -rf "$D"
}
trap stop_all EXIT
stop_all
mkdir -p "$D" && chown postgres "$D"

start_node() { # port preload
  local p=$1
  runuser -u postgres -- "$B/initdb" -D "$D/n$p" -U postgres -A trust >/dev/null || return 1
  cat >> "$D/n$p/postgresql.conf" <<EOC
port = $p
listen_addresses = '127.0.0.1'
unix_socket_directories = '$D'
shared_preload_libraries = '$2'
max_prepared_transactions = 100
citus.node_conninfo = 'sslmode=disable'
EOC
  runuser -u postgres -- "$B/pg_ctl" -D "$D/n$p" -l "$D/n$p.log" -w -t 120 start >/dev/null
}
q() { psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$2"; }

for p in $COORD $W1 $W2; do
  start_node $p citus,pg_skills && q $p "CREATE EXTENSION citus; CREATE EXTENSION pg_skills;" \
    || { bad "starting Citus node $p"; echo "citus: $passed passed, $failed failed"; exit 1; }
done
start_node $SINGLE pg_skills && q $SINGLE "CREATE EXTENSION pg_skills;" \
  || { bad "starting the single node"; echo "citus: $passed passed, $failed failed"; exit 1; }
q $COORD "SELECT citus_set_coordinator_host('127.0.0.1', $COORD);
          SELECT citus_add_node('127.0.0.1', $W1); SELECT citus_add_node('127.0.0.1', $W2);" >/dev/null \
  || bad "adding the workers"

layout=$(q $COORD "SELECT string_agg(relation || '=' || layout, ' ' ORDER BY relation::text) FROM skills.distribute(4)")
if echo "$layout" | grep -q 'skills.skill=distributed' && echo "$layout" | grep -q 'skills.event_arm=distributed' \
   && echo "$layout" | grep -q 'skills.edge=coordinator'; then ok "distribute: $layout"; else bad "distribute: $layout"; fi
placed=$(q $COORD "SELECT string_agg(DISTINCT nodeport::text, ',') FROM citus_shards WHERE table_name = 'skills.skill'::regclass")
[ "$placed" = "$W1,$W2" ] && ok "the skills' shards are on both workers ($placed)" || bad "shard placement: $placed"

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

for p in $COORD $SINGLE; do
  q $p "SELECT skills.embed_pending()" >/dev/null || bad "embed_pending on $p"
done
[ "$(q $COORD "SELECT count(*) FROM skills.skill_key")" = "$n_c" ] && [ "$(q $COORD "SELECT count(*) FROM skills.embed_queue")" = 0 ] \
  && ok "the coordinator's embedder keyed every skill" || bad "keys on the coordinator"

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
e_c=$(q $COORD "SELECT count(*) FROM skills.edge") e_s=$(q $SINGLE "SELECT count(*) FROM skills.edge")
[ "$e_c" = "$e_s" ] && ok "build_graph: $e_c edges on both" || bad "build_graph: coordinator $e_c edges, single $e_s"

QUERIES=("which commit broke the build" "CI is red again but the same tests pass when I rerun the job"
         "write a multi-stage Dockerfile for a Python service" "plot a chart from a CSV file with pandas"
         "100% coverage of the parser's edge cases")
# One answer as "content_hash score" lines (content, not ids: both sides number their rows).
answer() { # port query method extra-args
  # The search as its own step: joined directly with skills.skill, Citus would push the call
  # into every shard's query.
  q "$1" "WITH r AS MATERIALIZED (SELECT r.id, r.score, r.ord FROM skills.search(\$q\$$2\$q\$, method => '$3' $4) WITH ORDINALITY AS r(id, name, category, score, tokens, bm25, semantic, graph, beta, dk_term, event_term, held_back, risk, risk_rules, ord))
          SELECT s.content_hash || ' ' || r.score FROM r JOIN skills.skill AS s ON s.id = r.id ORDER BY r.ord"
}
same() { # label a b: same skills in the same order, scores within 1e-6
  if [ -z "$2" ] && [ -z "$3" ]; then bad "$1: both answers empty"; return; fi
  if paste -d' ' <(echo "$2") <(echo "$3") | awk '{ if ($1 != $3 || ($2 - $4) > 1e-6 || ($4 - $2) > 1e-6) bad = 1 } END { exit bad }' \
     && [ "$(echo "$2" | wc -l)" = "$(echo "$3" | wc -l)" ]; then
    return 0
  fi
  bad "$1"; diff <(echo "$2") <(echo "$3") | head -6; return 1
}
compare_all() { # label
  local method qtext extra agree=0 total=0
  for method in bm25 semantic hybrid graph skilltrace keyopt; do
    for qtext in "${QUERIES[@]}"; do
      for extra in ", k => 10" ", categories => ARRAY['testing', 'debugging'], token_budget => 3000"; do
        total=$((total + 1))
        same "$1: $method '$qtext' $extra" "$(answer $COORD "$qtext" $method "$extra" 2>&1)" "$(answer $SINGLE "$qtext" $method "$extra" 2>&1)" \
          && agree=$((agree + 1))
      done
    done
  done
  [ "$agree" = "$total" ] && ok "$1: every method's answers equal the single node's ($total searches)"
  # render_context serves the same skills.
  local rc rs
  rc=$(q $COORD "SELECT md5(skills.render_context('which commit broke the build', token_budget => 2000))")
  rs=$(q $SINGLE "SELECT md5(skills.render_context('which commit broke the build', token_budget => 2000))")
  [ -n "$rc" ] && [ "$rc" = "$rs" ] && ok "$1: render_context equal" || bad "$1: render_context differs"
}
compare_all "loaded"

# Scores are the whole table's: a shard scoring alone would differ (the check can fail).
global=$(q $COORD "SELECT -(ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25_global_query('git bisect')) FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25_global_query('git bisect'), id LIMIT 1")
local_only=$(q $COORD "SELECT -(ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('git bisect')) FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('git bisect'), id LIMIT 1")
single=$(q $SINGLE "SELECT -(ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('git bisect')) FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('git bisect'), id LIMIT 1")
awk -v a="$global" -v b="$single" 'BEGIN { exit !((a - b) < 1e-6 && (b - a) < 1e-6) }' \
  && ok "ORDER BY <&> skills.bm25_global_query on the coordinator scores as one node ($global)" || bad "global query score $global vs single $single"
[ -n "$local_only" ] && awk -v a="$local_only" -v b="$single" 'BEGIN { exit !((a - b) > 1e-6 || (b - a) > 1e-6) }' \
  && ok "skills.bm25query binds to each shard's index, with that shard's statistics ($local_only)" || bad "per-shard query: '$local_only' vs $single"

# Writes: inserts, updates, deletes, then VACUUM; the same statements on both sides.
dml="
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('bisect-helper', 'Find the commit that broke the build with git bisect run', 'git bisect start; git bisect run ./test.sh'),
  ('flaky-quarantine', 'Quarantine flaky tests that fail only sometimes in CI', 'Rerun the job, mark the flaky test, open an issue');
UPDATE skills.skill SET instructions = instructions || ' Also check the CI logs.' WHERE name IN ('git-bisect-regression', 'readme-writing');
DELETE FROM skills.skill WHERE name IN ('changelog-conventional-commits', 'makefile-task-runner');
SELECT skills.embed_pending();
SELECT count(*) FROM skills.build_graph();"
for p in $COORD $SINGLE; do
  q $p "$dml" >/dev/null || bad "writes on $p"
  q $p "VACUUM skills.skill" || bad "VACUUM on $p"
done
v_c=$(q $COORD "SELECT count(*) FROM skills.skill_version") v_s=$(q $SINGLE "SELECT count(*) FROM skills.skill_version")
[ "$v_c" = "$v_s" ] && [ "$v_c" -ge 2 ] && ok "updates keep history on the shards ($v_c versions)" || bad "versions: coordinator $v_c, single $v_s"
compare_all "after inserts, updates, deletes and VACUUM"

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
[ "$(q $COORD "SELECT count(*) FROM skills.skill WHERE name LIKE 'down-%'")" = 0 ] \
  && ok "nothing of the failed write is there after the worker returns" || bad "a half-applied write"
[ "$(q $COORD "SELECT count(*) FROM skills.event_arm")" = 4 ] && ok "every acknowledged outcome is there" || bad "outcomes lost"
compare_all "after the worker returned"

if [ "$failed" = 0 ]; then echo "test result: ok. $passed passed; 0 failed"
else echo "test result: FAILED. $passed passed; $failed failed"; exit 1; fi
