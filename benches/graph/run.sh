#!/usr/bin/env bash
# The skill graph kept current: skills.update_graph() (what the embedder worker runs after each
# drained batch of keys) against skills.build_graph() (the whole graph again), on a server's
# library, e.g. the end-to-end bench's kept one:
#   KEEP=1 METHODS= PEERS= CLIENTS= benches/e2e/run.sh; then
#   DSN="host=127.0.0.1 port=54420 user=postgres dbname=postgres" benches/graph/run.sh
# For each batch size K (CHANGES="1 16 64 256"): K new skills (copies of existing ones with a
# word appended, each keyed near its original: q·k about 0.93), K/4 keys rewritten (each to
# another skill's key), K/4 skills deleted; then update_graph() timed, its automatic edges kept,
# build_graph() timed, and the two edge sets compared (they must be equal). The server's embedder
# worker must not serve this database (it would update the graph itself).
# The changes are left in the library; run it on a throwaway server.
set -euo pipefail
DSN=${DSN:-"host=127.0.0.1 port=54420 user=postgres dbname=postgres"}
B=${PGBIN:-/usr/lib/postgresql/15/bin}
CHANGES=${CHANGES:-"1 16 64 256"}
# Arguments of update_graph(), e.g. UPDATE_ARGS="most_changes => 5000" (the defaults if empty).
UPDATE_ARGS=${UPDATE_ARGS:-}
q() { "$B/psql" -X -q -At -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }
timed() { # SQL: runs it, prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  q "$1" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
scans() { q "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE relid = 'skills.skill_key'::regclass"; }
edges() { q "SELECT count(*) FROM skills.edge WHERE provenance LIKE 'auto:%'"; }

keys=$(q "SELECT count(*) FROM skills.skill_key")
echo "keys: $keys; index: $(q "SELECT coalesce(string_agg(indexrelid::regclass::text || ' ' || am.amname, ', '), 'none') FROM pg_index JOIN pg_class c ON c.oid = indexrelid JOIN pg_am am ON am.oid = c.relam WHERE indrelid = 'skills.skill_key'::regclass AND am.amname = 'skeys'")"
echo "build_graph() first: $(timed "SELECT skills.build_graph()") s, $(edges) automatic edges"

for k in $CHANGES; do
  quarter=$(( (k + 3) / 4 ))
  # K new skills near existing ones (a unit key, q·k about 0.93 with its original), K/4 keys
  # rewritten to another skill's key, K/4 skills deleted.
  q "
     WITH picked AS (
         SELECT s.id, s.name, s.description, s.instructions, s.category
         FROM skills.skill AS s JOIN skills.skill_key AS k ON k.skill_id = s.id
         ORDER BY hashtext(s.id || ':pick:$k:' || clock_timestamp()) LIMIT $k),
     added AS (
         INSERT INTO skills.skill (name, description, instructions, category, provenance)
         SELECT p.name || '-g$k-' || p.id, p.description || ' graphbench$k', p.instructions, p.category, '[]'
         FROM picked AS p
         RETURNING id, content_hash, name)
     INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0)
     SELECT a.id, a.content_hash, array_fill(0::real, ARRAY[384]),
            skills.key(ARRAY(SELECT (v + 0.03 * (((abs(hashtext(a.id || ':' || i)) % 2001) - 1000) / 1000.0))
                                     / sqrt(1 + 0.03 * 0.03 * 512 / 3.0)
                             FROM unnest(k.k0::real[]) WITH ORDINALITY AS x(v, i))::real[])
     FROM added AS a
     JOIN skills.skill_key AS k ON k.skill_id = substring(a.name FROM '-g$k-([0-9]+)$')::bigint;" >/dev/null
  q "UPDATE skills.skill_key AS t SET k0 = o.k0
     FROM (SELECT a.skill_id AS target, b.k0
           FROM (SELECT skill_id, row_number() OVER () AS n FROM (SELECT skill_id FROM skills.skill_key
                   ORDER BY hashtext(skill_id || ':move:$k:' || clock_timestamp()) LIMIT $quarter) AS x) AS a
           JOIN (SELECT k0, row_number() OVER () AS n FROM (SELECT k0 FROM skills.skill_key
                   ORDER BY hashtext(skill_id || ':to:$k:' || clock_timestamp()) LIMIT $quarter) AS y) AS b USING (n)) AS o
     WHERE t.skill_id = o.target" >/dev/null
  q "DELETE FROM skills.skill WHERE id IN (SELECT skill_id FROM skills.skill_key
         ORDER BY hashtext(skill_id || ':drop:$k:' || clock_timestamp()) LIMIT $quarter)" >/dev/null
  pending=$(q "SELECT count(DISTINCT skill_id) FROM skills.graph_pending")
  s0=$(scans)
  t_update=$(timed "SELECT skills.update_graph($UPDATE_ARGS)")
  s1=$(scans)
  q "DROP TABLE IF EXISTS bench_updated; CREATE TABLE bench_updated AS
     SELECT from_skill, to_skill, type, weight, provenance FROM skills.edge WHERE provenance LIKE 'auto:%'"
  t_build=$(timed "SELECT skills.build_graph()")
  s2=$(scans)
  differ=$(q "SELECT count(*) FROM ((SELECT from_skill, to_skill, type, weight, provenance FROM bench_updated
                                    EXCEPT ALL
                                    SELECT from_skill, to_skill, type, weight, provenance FROM skills.edge WHERE provenance LIKE 'auto:%')
                                   UNION ALL
                                   (SELECT from_skill, to_skill, type, weight, provenance FROM skills.edge WHERE provenance LIKE 'auto:%'
                                    EXCEPT ALL
                                    SELECT from_skill, to_skill, type, weight, provenance FROM bench_updated)) AS d")
  echo "changes $k (+$k new, $quarter rewritten, $quarter deleted; $pending changed keys): update_graph $t_update s ($((s1 - s0)) key index scans), build_graph $t_build s ($((s2 - s1)) scans), $(edges) edges, $differ differ"
done
q "DROP TABLE IF EXISTS bench_updated"
