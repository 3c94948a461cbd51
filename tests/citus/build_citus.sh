#!/usr/bin/env bash
# Builds Citus from the benchmark data folder's vendored source (../shared/vendor) and installs it
# into the PostgreSQL that $PG_CONFIG names, when it is not installed there already. The build
# tree is cached outside the clone (Citus takes about 10 minutes on 2 cores), so a later run only
# runs `make install`. Citus is AGPL: it is built and loaded as a separate server extension by the
# tests; none of its code is copied into this repository.
# Exit status: 0 installed (or already there), 3 the vendored source is absent (the caller skips).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
VENDOR=${PG_SKILLS_VENDOR_DIR:-$here/../../../shared/vendor}
TARBALL=$VENDOR/citus-13.2.2-pg15patch.tar.gz
CACHE=${PG_SKILLS_CITUS_CACHE:-/var/cache/pg_skills/citus}

libdir=$("$PG_CONFIG" --pkglibdir)
if [ -f "$libdir/citus.so" ] && [ -f "$("$PG_CONFIG" --sharedir)/extension/citus.control" ]; then
  exit 0
fi
[ -f "$TARBALL" ] || { echo "build_citus: $TARBALL is absent"; exit 3; }

# The libraries Citus links against (Debian 12 package names).
missing=()
for p in liblz4-dev libzstd-dev libcurl4-openssl-dev libkrb5-dev libselinux1-dev libxslt1-dev libpam0g-dev libreadline-dev; do
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The cache is keyed by the tarball's checksum and the server's version.
key=$(sha256sum "$TARBALL" | cut -c1-16)-$("$PG_CONFIG" --version | tr -cd '0-9.')
src=$CACHE/$key
if [ ! -f "$src/.built" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar -C "$src" --strip-components=1 -xzf "$TARBALL"
  # The tarball drops Citus's own copy of have_createdb_privilege() for servers whose headers
  # declare it (15.14 to 15.17); later 15.x no longer export it, so the copy comes back there.
  if ! grep -q have_createdb_privilege "$("$PG_CONFIG" --includedir-server)/commands/dbcommands.h"; then
    sed -i 's|^/\* have_createdb_privilege: PostgreSQL 15.14+ exports it.*|#include "access/htup_details.h"\
#include "catalog/pg_authid.h"\
#include "miscadmin.h"\
#include "utils/syscache.h"\
/* whether the current role may create databases (superusers always may) */\
static inline bool\
have_createdb_privilege(void)\
{\
\tbool may = superuser();\
\tHeapTuple role;\
\tif (may)\
\t\treturn true;\
\trole = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));\
\tif (HeapTupleIsValid(role))\
\t{\
\t\tmay = ((Form_pg_authid) GETSTRUCT(role))->rolcreatedb;\
\t\tReleaseSysCache(role);\
\t}\
\treturn may;\
}|' "$src/src/include/pg_version_compat.h"
  fi
  (cd "$src" && ./configure PG_CONFIG="$PG_CONFIG" >configure.log 2>&1 && make -j"$(nproc)" >make.log 2>&1) \
    || { echo "build_citus: build failed, see $src/make.log"; tail -20 "$src"/make.log 2>/dev/null; exit 1; }
  touch "$src/.built"
fi
(cd "$src" && make install >install.log 2>&1) || { echo "build_citus: make install failed"; tail -20 "$src/install.log"; exit 1; }
echo "build_citus: installed citus into $libdir"
