#!/bin/sh
# The container's entry point. On the first start (an empty data volume) it creates the cluster
# with pg_skills preloaded and the extension installed in $POSTGRES_DB; then it runs the server
# in the foreground as the postgres user. Any other command (psql, skills-load, sh) runs as given.
#
# Environment (first start only):
#   POSTGRES_PASSWORD  password of the postgres role for TCP connections; when empty a random one
#                      is generated and printed once in the log. Connections over the container's
#                      own socket (docker compose exec) need none.
#   POSTGRES_DB        the database that holds the skills and that the embedder and fitter workers
#                      serve (default postgres)
set -eu

first=${1:-postgres}
if [ "$first" != postgres ] && [ "${first#-}" = "$first" ]; then
  exec "$@"
fi
if [ "$first" = postgres ] && [ $# -gt 0 ]; then shift; fi

db=${POSTGRES_DB:-postgres}
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password=${POSTGRES_PASSWORD:-}
  if [ -z "$password" ]; then
    password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
    echo "pg_skills: POSTGRES_PASSWORD is not set; generated password for the postgres role: $password"
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$password" > "$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U postgres --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  cat >> "$PGDATA/postgresql.conf" <<EOT

# pg_skills container settings
listen_addresses = '*'
shared_preload_libraries = 'pg_skills'
pg_skills.model_dir = '/var/lib/pg_skills/models/all-MiniLM-L6-v2'
pg_skills.embedder_database = '$db'
EOT
  # TCP from other containers and the published port: password (SCRAM) only.
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_postgres pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  if [ "$db" != postgres ]; then
    as_postgres psql -X -q -v ON_ERROR_STOP=1 -d postgres -v db="$db" <<'EOT'
CREATE DATABASE :"db";
EOT
  fi
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_skills"
  as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "pg_skills: cluster created in $PGDATA with the extension in database $db"
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
