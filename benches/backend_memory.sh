#!/usr/bin/env bash
# Memory and threads of one backend that encodes: connects, reads /proc/PID/status, runs a
# statement, reads it again. Run on the database server's machine (it reads /proc), e.g. after
# ./x demo:  bash benches/backend_memory.sh "host=127.0.0.1 port=54329 user=postgres dbname=postgres"
set -euo pipefail
DSN=${1:-"host=127.0.0.1 port=54329 user=postgres dbname=postgres"}

measure() { # LABEL SQL
  coproc PSQL { psql -X -q -At "$DSN" 2>&1; }
  echo "SELECT pg_backend_pid();" >&"${PSQL[1]}"
  read -r pid <&"${PSQL[0]}"
  local rss0 threads0 rss1 threads1 peak line
  rss0=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  threads0=$(ls "/proc/$pid/task" | wc -l)
  printf '%s\nSELECT %s;\n' "$2" "'done'" >&"${PSQL[1]}"
  while read -r line <&"${PSQL[0]}"; do [ "$line" = done ] && break; done
  rss1=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  threads1=$(ls "/proc/$pid/task" | wc -l)
  echo "$1: RSS ${rss0} kB -> ${rss1} kB (peak ${peak} kB), threads ${threads0} -> ${threads1}"
  echo '\q' >&"${PSQL[1]}"
  wait "$PSQL_PID" 2>/dev/null || true
}

measure "one query key" "SELECT skills.query_key('which commit broke the build') IS NOT NULL;"
measure "eleven query keys" "SELECT count(skills.query_key('query number ' || g)) FROM generate_series(0, 10) AS g;"
