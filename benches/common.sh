# Sourced by the bench scripts (benches/e2e, benches/citus, benches/ingest): servers, replicas,
# queries, pgbench timing. replicate_skills needs q PORT SQL.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

# bench_pg_ctl DIR ARGS...: pg_ctl for the server in DIR/data (log: DIR/server.log).
bench_pg_ctl() {
  local dir=$1; shift
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 "$@" >/dev/null
}

# bench_server DIR PORT [postgresql.conf lines]: a fresh server in DIR on 127.0.0.1:PORT, started
# (shared_buffers 512 MB, as a server would have).
bench_server() {
  local dir=$1 port=$2 extra=${3:-}
  rm -rf "$dir"; mkdir -p "$dir" && chown postgres "$dir" || return 1
  runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust >/dev/null || return 1
  printf "port = %s\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nshared_buffers = '512MB'\n%s\n" \
    "$port" "$dir" "$extra" >> "$dir/data/postgresql.conf"
  bench_pg_ctl "$dir" start || { echo "the server did not start (log: $dir/server.log)"; return 1; }
}

#
# replicate_skills PORT N: the skills already loaded at PORT (real skills, keyed by the encoder)
# replicated in SQL up to about N. Each replica is a skill's text with five words of the
# corpus's own vocabulary appended to its description and 0-59 to its instructions (lengths and
# terms vary, few exact ties); replicas get pseudo-random unit keys (a cost measurement, not a
# quality one), and the embedding queue is emptied (the embedder would encode every replica).
replicate_skills() {
  local p=$1 n=$2 base reps
  base=$(q "$p" "SELECT count(*) FROM skills.skill")
  reps=$(( (n + base - 1) / base - 1 ))
  # PL/pgSQL, so that Citus gets the word list as a value.
  q "$p" "DO \$\$
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
        END \$\$" >/dev/null || { echo "replicating on $p failed"; return 1; }
  # A key from each id (co-located with the skill on Citus).
  q "$p" "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0)
        SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]),
               skills.key(ARRAY(SELECT ((abs(hashtext(s.id || ':' || i)) % 2001) - 1000) / 1000.0 / 12.9
                                FROM generate_series(1, 512) AS i)::real[])
        FROM skills.skill AS s
        WHERE NOT EXISTS (SELECT 1 FROM skills.skill_key AS k WHERE k.skill_id = s.id);
        DELETE FROM skills.embed_queue;" >/dev/null || { echo "keys on $p failed"; return 1; }
  q "$p" "VACUUM ANALYZE" >/dev/null
}

# bench_queries FILE OUT: every 67th MetaTool task query (300 at most) as "i<TAB>text" lines.
bench_queries() {
  python3 - "$1" > "$2" <<'PY'
import json, sys
qs = [json.loads(l)["text"] for l in open(sys.argv[1])]
for i, q in enumerate(qs[::67][:300]):
    print(f"{i + 1}\t{q.replace(chr(9), ' ').replace(chr(92), ' ')}")
PY
}

# pgbench_run PGBIN DIR PORT SCRIPT CLIENTS SECONDS: "p50 p95 qps" (ms, 1/s) from pgbench's
# per-transaction log (-M prepared). WARM=N leaves each client's first N transactions out of
# the figures (a warm-up the script does, e.g. every query once so its backend has the key
# cached; the script sees :n, the client's transaction number from 1); QPS is then the sum over
# clients of their measured transactions per second of their own measured span.
pgbench_run() {
  local bin=$1 dir=$2 port=$3 script=$4 clients=$5 seconds=$6 out tps warm=${WARM:-0}
  rm -f "$dir"/pgbench_log.*
  out=$(cd "$dir" && "$bin/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -M prepared -c "$clients" -j "$clients" \
        -T "$seconds" -l -D n=0 -f "$script" postgres 2>&1)
  echo "$out" | grep -q '^tps' || echo "$out" | grep -iE 'error|abort' | head -3 >&2
  tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p' | head -1)
  if [ "$warm" -gt 0 ]; then
    # Log columns: client, transaction number (from 0), latency (us), script, end (s, us).
    tps=$(cat "$dir"/pgbench_log.* | awk -v w="$warm" '$2 >= w {
        c = $1; end = $5 + $6 / 1e6; start = end - $3 / 1e6; n[c]++
        if (!(c in first) || start < first[c]) first[c] = start
        if (!(c in last) || end > last[c]) last[c] = end }
      END { q = 0; for (c in n) if (last[c] > first[c]) q += n[c] / (last[c] - first[c]); printf (q < 10 ? "%.2f" : "%.0f"), q }')
  fi
  cat "$dir"/pgbench_log.* | awk -v w="$warm" '$2 >= w {print $3 / 1000}' | sort -n | awk -v tps="$tps" '
    { v[NR] = $1 } END { if (NR == 0) { print "error - -"; exit }
      printf "%.2f %.2f %s\n", v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))], v[int(NR * 0.95) + (NR * 0.95 > int(NR * 0.95))],
             sprintf(tps < 10 ? "%.2f" : "%.0f", tps) }'
}
