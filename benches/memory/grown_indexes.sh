#!/usr/bin/env bash
# Index sizes when a table is grown by ordinary inserts (no bulk insert), side by side: the bm25
# index and built-in full text search's GIN index over the same documents, filled in the same
# statements. Sizes after the inserts, after VACUUM, and after REINDEX (a rebuilt index).
#
# Run against a server with pg_skills and a loaded library (skills.skill), e.g. the end-to-end
# bench's kept server:  KEEP=1 ... benches/e2e/run.sh; then
#   DSN="host=127.0.0.1 port=54420 user=postgres dbname=postgres" benches/memory/grown_indexes.sh
# STATEMENTS: how many INSERT statements the library's rows are split into (default 100).
set -euo pipefail
DSN=${DSN:-"host=127.0.0.1 port=54420 user=postgres dbname=postgres"}
B=${PGBIN:-/usr/lib/postgresql/15/bin}
STATEMENTS=${STATEMENTS:-100}
q() { "$B/psql" -X -q -At -v ON_ERROR_STOP=1 "$DSN" -c "$1" 2> >(grep -v "word is too long\|Words longer" >&2); }
sizes() {
  q "SELECT format('| %s | %s MB | %s MB |', '$1',
       round(pg_relation_size('pgs_grown_bm25') / 1048576.0, 1),
       round(pg_relation_size('pgs_grown_gin') / 1048576.0, 1))"
}
trap 'q "DROP TABLE IF EXISTS pgs_grown" || true' EXIT

q "DROP TABLE IF EXISTS pgs_grown"
q "CREATE TABLE pgs_grown (id bigint PRIMARY KEY, doc text[], tsv tsvector)"
q "CREATE INDEX pgs_grown_bm25 ON pgs_grown USING bm25 (doc)"
q "CREATE INDEX pgs_grown_gin ON pgs_grown USING gin (tsv)"
read -r lo hi < <(q "SELECT min(id), max(id) FROM skills.skill" | tr '|' ' ')
step=$(((hi - lo) / STATEMENTS + 1))
start=$(date +%s)
for ((a = lo; a <= hi; a += step)); do
  q "SET pg_skills.bm25_bulk_insert = off;
     INSERT INTO pgs_grown
     SELECT id, ARRAY[name, description, instructions],
            to_tsvector('english', name || ' ' || description || ' ' || instructions)
       FROM skills.skill WHERE id >= $a AND id < $a + $step"
done
rows=$(q "SELECT count(*) FROM pgs_grown")
echo "$rows rows inserted in $STATEMENTS statements, $(($(date +%s) - start)) s"
echo "| index state | bm25 | built-in FTS: GIN over the tsvector |"
echo "|---|---|---|"
sizes "grown by the inserts"
q "VACUUM pgs_grown"
sizes "then VACUUM"
q "REINDEX INDEX pgs_grown_bm25"
q "REINDEX INDEX pgs_grown_gin"
sizes "then REINDEX (rebuilt)"
