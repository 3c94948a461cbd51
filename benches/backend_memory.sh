#!/usr/bin/env bash
# Memory and threads of backends that encode request keys (resident memory after the first key,
# after ten more, after a semantic search; at each precision): benches/memory/run.sh's first
# table alone. Run on the database server's machine (it reads /proc), e.g. after ./x demo:
#   bash benches/backend_memory.sh "host=127.0.0.1 port=54329 user=postgres dbname=postgres"
DSN=${1:-"host=127.0.0.1 port=54329 user=postgres dbname=postgres"} ONLY=backends \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/memory/run.sh"
