#!/usr/bin/env bash
# The docker compose test: builds the image with docker-compose.yml, starts it, loads the demo
# corpus with the documented command, searches through psql inside the container and over the
# published port from this machine, then restarts the container and recreates it on the same
# volume and finds the skills, their keys and the answers unchanged. Everything it made
# (containers, network, volume, image) is removed at the end, also on failure; Docker's build
# cache and the local base image stay as caches. Runs as root.
#
# Docker: the running daemon, or Debian's docker.io installed and dockerd started by hand (and
# stopped at the end). No registry: the base image is made with debootstrap (base_image.sh).
# When Docker cannot be had the test says SKIPPED and counts nothing.
# Ends with "test result: ok. N passed; M failed" (or FAILED) for ./x's totals.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
PROJECT=pg_skills_compose_test
PORT=${PG_SKILLS_COMPOSE_PORT:-54371}
# The published port must be free: a listener there (another test's server) moves it 100 up.
for _ in 1 2 3 4 5; do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
  PORT=$((PORT + 100))
done
PASSWORD=compose-test-$RANDOM$RANDOM
export PG_SKILLS_BASE_IMAGE=${PG_SKILLS_BASE_IMAGE:-local/debian:bookworm}
export PG_SKILLS_IMAGE=pg_skills:compose-test
export PG_SKILLS_PORT=$PORT POSTGRES_PASSWORD=$PASSWORD POSTGRES_DB=skills
# Debian's client first: it builds with its daemon's BuildKit (cache mounts) without the buildx
# plugin that newer clients need for that.
export PATH=/usr/bin:/usr/sbin:$PATH
export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1
DOCKERD_LOG=/var/tmp/pg_skills-dockerd.log

passed=0
failed=0
check() { # check NAME COMMAND...: one counted assertion
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok: $name"
  else failed=$((failed + 1)); echo "FAILED: $name"; fi
}
skip() {
  echo "compose test SKIPPED: $*"
  echo "test result: ok. 0 passed; 0 failed"
  exit 0
}

STARTED_DOCKERD=
COPIED_CERTS=()
compose=()
cleanup() {
  if [ ${#compose[@]} -gt 0 ]; then
    "${compose[@]}" down -v --rmi all --remove-orphans >/dev/null 2>&1 || true
  fi
  [ ${#COPIED_CERTS[@]} -eq 0 ] || rm -f "${COPIED_CERTS[@]}"
  if [ -n "$STARTED_DOCKERD" ]; then kill "$STARTED_DOCKERD" 2>/dev/null; wait "$STARTED_DOCKERD" 2>/dev/null; fi
}
trap cleanup EXIT

# --- Docker ---------------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then
    echo "installing Debian's docker.io, docker-compose and debootstrap"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose debootstrap; } >/dev/null 2>&1 \
      || skip "Docker is not installed and apt-get could not install docker.io"
  fi
  dockerd > "$DOCKERD_LOG" 2>&1 &
  STARTED_DOCKERD=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -5 "$DOCKERD_LOG"; skip "dockerd did not start (log above, $DOCKERD_LOG)"; }
fi
if docker compose version >/dev/null 2>&1; then compose=(docker compose)
else
  command -v docker-compose >/dev/null || { apt-get install -y -qq docker-compose >/dev/null 2>&1 || true; }
  command -v docker-compose >/dev/null || skip "neither 'docker compose' nor docker-compose is available"
  compose=(docker-compose)
fi
compose+=(-p "$PROJECT" -f "$ROOT/docker-compose.yml")
"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true   # leftovers of an interrupted run

"$HERE/base_image.sh" "$PG_SKILLS_BASE_IMAGE" || { failed=$((failed + 1)); echo "FAILED: base image"; }
# This machine's extra CA certificates (a proxy that re-signs TLS) for the build stage.
for crt in /usr/local/share/ca-certificates/*.crt; do
  [ -f "$crt" ] || continue
  dest="docker/certs/pg_skills_test_$(basename "$crt")"
  cp "$crt" "$dest" && COPIED_CERTS+=("$dest")
done

# --- helpers --------------------------------------------------------------------------------
# SQL over the container's socket (the documented `docker compose exec` path).
inside() { "${compose[@]}" exec -T pg_skills psql -X -A -t -q -v ON_ERROR_STOP=1 -U postgres -d skills -c "$1"; }
# SQL over TCP through the published port, with the password, from this machine.
outside() { PGPASSWORD=$PASSWORD PGCONNECT_TIMEOUT=5 psql -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d skills -c "$1"; }
health() { docker inspect -f '{{.State.Health.Status}}' "$("${compose[@]}" ps -q pg_skills)" 2>/dev/null; }
wait_healthy() {
  local i
  for i in $(seq 180); do
    [ "$(health)" = healthy ] && return 0
    sleep 1
  done
  echo "container health: $(health)"; "${compose[@]}" logs --tail 30 pg_skills
  return 1
}
TOP_QUERY="my pytest tests repeat the same database setup"
state() { # what must survive a restart: skills, keyed skills, queued, and the top three per method
  inside "SELECT count(*) FROM skills.skill" &&
  inside "SELECT done, queued FROM skills.embedder_status" &&
  for m in bm25 semantic hybrid keyopt; do
    inside "SELECT string_agg(name || ':' || round(score::numeric, 4), ',' ORDER BY score DESC, name) FROM skills.search('$TOP_QUERY', k => 3, method => '$m')"
  done
}

# --- build, start, load, search -------------------------------------------------------------
echo "build the image (docker-compose.yml, base $PG_SKILLS_BASE_IMAGE; cold: about 15 minutes on 2 cores)"
build_start=$SECONDS
if "${compose[@]}" build --progress plain > /var/tmp/pg_skills-compose-build.log 2>&1 \
   || "${compose[@]}" build > /var/tmp/pg_skills-compose-build.log 2>&1; then
  echo "built in $((SECONDS - build_start)) s"; passed=$((passed + 1))
else
  tail -40 /var/tmp/pg_skills-compose-build.log
  failed=$((failed + 1)); echo "FAILED: build"
  echo "test result: FAILED. $passed passed; $failed failed"; exit 1
fi
check "up -d" "${compose[@]}" up -d
check "healthy: server up, extension installed, embedder worker running" wait_healthy
check "pg-skills-demo loads the corpus and the worker keys it" "${compose[@]}" exec -T pg_skills pg-skills-demo
skills=$(inside "SELECT count(*) FROM skills.skill")
check "demo corpus loaded ($skills skills)" test "${skills:-0}" -ge 30
check "every skill keyed by the worker" test "$(inside "SELECT done FROM skills.embedder_status")" = "$skills"
check "hybrid search inside the container" test "$(inside "SELECT name FROM skills.search('$TOP_QUERY', k => 1, method => 'hybrid')")" = pytest-fixtures
check "semantic search over TCP with the password" test "$(outside "SELECT count(*) FROM skills.search('my program crashed and I need to see where', k => 5, method => 'semantic')")" = 5
check "TCP refuses a wrong password" bash -c "! PGPASSWORD=wrong psql -X -h 127.0.0.1 -p $PORT -U postgres -d skills -c 'SELECT 1' >/dev/null 2>&1"
# Captured first: `| grep -q` would close the pipe on its first match, and under pipefail psql's
# SIGPIPE on the rest of the block would fail the check at random.
rendered() { local block; block=$(outside "SELECT skills.render_context('$TOP_QUERY', k => 1, token_budget => 20000)") && [[ $block == *pytest-fixtures* ]]; }
check "render_context over TCP" rendered
record() { outside "SELECT skills.record_run('$TOP_QUERY', jsonb_build_array(jsonb_build_object('skill_id', (SELECT id FROM skills.skill WHERE name = 'pytest-fixtures'), 'passed', true)))" >/dev/null; }
check "record_run over TCP" record
before=$(state)
echo "$before"

# --- restart, recreate ----------------------------------------------------------------------
check "restart" "${compose[@]}" restart
check "healthy after restart" wait_healthy
check "skills, keys and answers unchanged after restart" test "$(state)" = "$before"
check "down (volume kept) and up again" bash -c "$(printf '%q ' "${compose[@]}") down && $(printf '%q ' "${compose[@]}") up -d"
check "healthy in a new container" wait_healthy
check "skills, keys and answers unchanged in a new container on the same volume" test "$(state)" = "$before"
check "the outcome recorded before the restarts is there" test "$(inside "SELECT count(*) FROM skills.event")" -ge 1

if [ "$failed" -eq 0 ]; then echo "test result: ok. $passed passed; 0 failed"
else "${compose[@]}" logs --tail 40 pg_skills; echo "test result: FAILED. $passed passed; $failed failed"; exit 1; fi
