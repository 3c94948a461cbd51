#!/usr/bin/env bash
# Builds pgvector 0.8.6 from ../shared/vendor (PostgreSQL licence; never copied into this
# repository) with PGXS and installs it into the server of PG_CONFIG, for the key-index
# benchmark's peer. Cached: does nothing when that server already has vector 0.8.6.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
SRC=${PGVECTOR_TARBALL:-$root/../shared/vendor/pgvector-v0.8.6.tar.gz}
BUILD=${PGVECTOR_BUILD_DIR:-/var/cache/pg_skills/pgvector}
if [ -f "$("$PG_CONFIG" --sharedir)/extension/vector--0.8.6.sql" ] && [ -f "$("$PG_CONFIG" --pkglibdir)/vector.so" ]; then
  echo "pgvector 0.8.6 is installed"
  exit 0
fi
[ -f "$SRC" ] || { echo "build_pgvector: $SRC is missing"; exit 1; }
rm -rf "$BUILD" && mkdir -p "$BUILD"
tar -xzf "$SRC" -C "$BUILD" --strip-components=1
make -C "$BUILD" -j2 PG_CONFIG="$PG_CONFIG" >/dev/null
make -C "$BUILD" install PG_CONFIG="$PG_CONFIG" >/dev/null
echo "pgvector 0.8.6 built and installed into $("$PG_CONFIG" --pkglibdir)"
