#!/usr/bin/env bash
# Makes the local base image the compose test builds on, when no image registry is reachable:
# Debian 12 (minbase) from Debian's mirror, with the same APT sources as the official
# debian:bookworm-slim image (bookworm, bookworm-updates, bookworm-security: Rust 1.96 comes
# from bookworm-security as rustc-web). Kept in Docker's image store between runs.
#   base_image.sh NAME
set -euo pipefail
name=${1:?usage: base_image.sh NAME}
if docker image inspect "$name" >/dev/null 2>&1; then exit 0; fi
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
dir=$(mktemp -d /var/tmp/pg_skills-rootfs.XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "debootstrap --variant=minbase bookworm (about 2 minutes, once)"
debootstrap --variant=minbase bookworm "$dir" http://deb.debian.org/debian >/dev/null
rm -f "$dir/etc/apt/sources.list"
cat > "$dir/etc/apt/sources.list.d/debian.sources" <<'EOT'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOT
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
tar -C "$dir" -c . | docker import - "$name" >/dev/null
echo "base image $name made"
