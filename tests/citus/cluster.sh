# A Citus coordinator with two workers and a plain single-node server on loopback ports, for
# tests/citus/citus_test.sh and benches/citus/run.sh (sourced; set D and BASE first).
# Ports: coordinator BASE, workers BASE+1 and BASE+2, the single node BASE+3.
B=/usr/lib/postgresql/15/bin
set_ports() { COORD=$BASE W1=$((BASE + 1)) W2=$((BASE + 2)) SINGLE=$((BASE + 3)); }
set_ports
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SHARED_CORPUS=${PG_SKILLS_SHARED_CORPUS:-$root/../shared/corpus}
# The loader binary (./x test builds the debug one; benches may point SKILLS_LOAD at release).
LOAD=${SKILLS_LOAD:-${CARGO_TARGET_DIR:-/var/cache/pg_skills/target}/debug/skills-load}

stop_all() {
  for p in $COORD $W1 $W2 $SINGLE; do
    [ -d "$D/n$p" ] && runuser -u postgres -- "$B/pg_ctl" -D "$D/n$p" -m immediate stop >/dev/null 2>&1
  done
  rm -rf "$D"
}

start_node() { # port preload-libraries [more postgresql.conf lines]
  local p=$1
  runuser -u postgres -- "$B/initdb" -D "$D/n$p" -U postgres -A trust >/dev/null || return 1
  cat >> "$D/n$p/postgresql.conf" <<EOC
port = $p
listen_addresses = '127.0.0.1'
unix_socket_directories = '$D'
shared_preload_libraries = '$2'
max_prepared_transactions = 100
citus.node_conninfo = 'sslmode=disable'
${3:-}
EOC
  runuser -u postgres -- "$B/pg_ctl" -D "$D/n$p" -l "$D/n$p.log" -w -t 120 start >/dev/null && return 0
  # Say why, in the test's own output (the data folder is removed when the test ends).
  echo "the server on port $p did not start; the end of its log:"
  tail -n 15 "$D/n$p.log" 2>/dev/null | sed 's/^/  /'
  return 1
}

q() { psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$2"; }

# Fresh nodes: Citus and pg_skills on the three Citus nodes, the workers added; pg_skills alone
# on the single node. The ports lie in Linux's ephemeral range, where a client connection of
# another process can hold one for a while: when a node does not start, every node is stopped
# and the four start again on the next ports (three tries).
start_all() {
  local try
  for try in 1 2 3; do
    start_all_once && return 0
    stop_all
    BASE=$((BASE + 20))
    set_ports
    echo "starting again on ports $COORD-$SINGLE"
  done
  return 1
}

start_all_once() {
  stop_all
  mkdir -p "$D" && chown postgres "$D" || return 1
  local p
  for p in $COORD $W1 $W2; do
    # The workers' role connects from the coordinator to the workers (Citus runs a user's
    # statements on the workers as that user), so it must be able to log in there
    # (docs/citus.md, "Workers"); trust authentication on loopback here.
    start_node $p citus,pg_skills \
      && q $p "CREATE EXTENSION citus; CREATE EXTENSION pg_skills; ALTER ROLE skills_worker LOGIN;" || return 1
  done
  start_node $SINGLE pg_skills "pg_skills.embedder_database = 'template1'" \
    && q $SINGLE "CREATE EXTENSION pg_skills;" || return 1
  q $COORD "SELECT citus_set_coordinator_host('127.0.0.1', $COORD);
            SELECT citus_add_node('127.0.0.1', $W1); SELECT citus_add_node('127.0.0.1', $W2);" >/dev/null
}
