#!/usr/bin/env bash
# Ingestion end to end: skills-load of the shared corpus replicated to N skills (a JSONL file:
# every SKILL.md of ../shared/corpus, then variants of them with corpus words appended, as
# benches/common.sh makes them in SQL) into a fresh server with the embedder worker running:
# skills/s of the load, then keys/s of the embedder draining the queue behind it.
# Run on the build users install (`cd extension && cargo pgrx install --release`) with
# SKILLS_LOAD=<release skills-load>. DOCUMENT_PRECISION=bf16 has the embedder encode in bfloat16.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../common.sh"
D=${PG_SKILLS_INGEST_DIR:-/var/tmp/pg_skills-ingest-bench}
P=${PG_SKILLS_INGEST_PORT:-54425}
N=${N:-100000}
DRAIN_SECONDS=${DRAIN_SECONDS:-120}
# How the embedder encodes documents (pg_skills.document_precision: f32 or bf16).
DOCUMENT_PRECISION=${DOCUMENT_PRECISION:-f32}
SHARED_CORPUS=${PG_SKILLS_SHARED_CORPUS:-$root/../shared/corpus}
LOAD=${SKILLS_LOAD:-${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}/release/skills-load}

q() { psql -h 127.0.0.1 -p "$P" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
cleanup() { [ -f "$D/data/PG_VERSION" ] && bench_pg_ctl "$D" -m immediate stop 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
cleanup
bench_server "$D" $P "shared_preload_libraries = 'pg_skills'
pg_skills.embedder_database = 'postgres'
pg_skills.document_precision = $DOCUMENT_PRECISION
log_min_duration_statement = 1000" || exit 1
q "CREATE EXTENSION pg_skills" || exit 1

python3 - "$SHARED_CORPUS" "$N" > "$D/skills.jsonl" <<'PY'
import json, os, re, sys, zlib
root, n = sys.argv[1], int(sys.argv[2])
skills = []
for dirpath, dirs, files in sorted(os.walk(root)):
    dirs.sort()
    if "SKILL.md" in files:
        text = open(os.path.join(dirpath, "SKILL.md"), encoding="utf-8", errors="replace").read()
        m = re.match(r"^---\n(.*?)\n---\n?(.*)$", text, re.S)
        meta, body = (m.group(1), m.group(2)) if m else ("", text)
        field = lambda k: (re.search(rf"^{k}:\s*(.*)$", meta, re.M) or [None, ""])[1].strip().strip("'\"")
        name = field("name") or os.path.basename(dirpath)
        skills.append((name, field("description"), body))
words = sorted({w for _, d, _ in skills for w in re.findall(r"[a-z]{4,}", d.lower())})[:5000]
out = 0
for g in range(n):
    name, desc, body = skills[g % len(skills)]
    r = g // len(skills)
    if r:
        pick = lambda k: words[zlib.crc32(f"{g}:{k}".encode()) % len(words)]
        name = f"{name}-r{r}"
        desc = desc + " " + " ".join(pick(k) for k in range(5))
        body = body + "\n\n" + " ".join(pick(f"i{k}") for k in range(zlib.crc32(str(g).encode()) % 60))
    print(json.dumps({"name": name, "description": desc, "instructions": body}))
PY
echo "input: $(wc -l < "$D/skills.jsonl") records, $(du -m "$D/skills.jsonl" | cut -f1) MB"
# The file just written is flushed now, not by the kernel in the middle of the load.
sync

t0=$(date +%s.%N)
"$LOAD" --jsonl "$D/skills.jsonl" --no-code-filter --quiet --dsn "host=127.0.0.1 port=$P user=postgres dbname=postgres" \
  | tail -3 || { echo "bench: skills-load failed"; exit 1; }
t1=$(date +%s.%N)
# The load's two long statements, from the server log: the COPY into the staging table and
# skills.apply_staging() (the row triggers and index inserts).
grep -o "duration: [0-9.]* ms  [a-z0-9<> ]*: \(COPY skill_staging\|SELECT new_skills\)" "$D/server.log" \
  | awk '{ printf "  %s: %.1f s\n", ($NF == "skill_staging" ? "COPY into staging" : "apply_staging"), $2 / 1000 }'
echo "bm25 index after the load: $(q "SELECT format('%s segments, %s documents in the append area, %s MB', segments, append_documents, round(pg_relation_size('skills.skill_bm25') / 1048576.0, 1)) FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)")"
# What the triggers derived, summed: equal across builds when a change kept every row's values.
echo "derived: $(q "SELECT format('%s prompt tokens, %s flagged, categories %s', sum(token_count), count(*) FILTER (WHERE risk >= 'medium'), (SELECT string_agg(format('%s %s', category, n), ', ' ORDER BY category) FROM (SELECT category, count(*) AS n FROM skills.skill GROUP BY category) AS c)) FROM skills.skill")"
loaded=$(q "SELECT count(*) FROM skills.skill")
keys0=$(q "SELECT count(*) FROM skills.skill_key")
echo "load: $loaded skills in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s: $(awk -v a="$t0" -v b="$t1" -v n="$loaded" 'BEGIN { printf "%.0f", n / (b - a) }') skills/s (keys made meanwhile: $keys0)"
sleep "$DRAIN_SECONDS"
keys1=$(q "SELECT count(*) FROM skills.skill_key")
echo "embedder: $((keys1 - keys0)) keys in ${DRAIN_SECONDS} s after the load: $(awk -v k=$((keys1 - keys0)) -v s="$DRAIN_SECONDS" 'BEGIN { printf "%.1f", k / s }') keys/s; queue left: $(q "SELECT count(*) FROM skills.embed_queue")"
