#!/usr/bin/env bash
# A base image for the Containerfile made without any container registry: Debian bookworm (whose python3 is 3.11,
# as the official python:3.11-slim) with python3 and venv, bootstrapped from Debian's packages and imported into
# podman. Then: podman build --format docker --build-arg BASE=localhost/amp-lab-base:bookworm -t amp-lab .
# Needs root, debootstrap and podman; about 300 MB and a minute or two. Usage: deploy/local-base.sh [IMAGE [MIRROR]]
set -euo pipefail
IMAGE=${1:-localhost/amp-lab-base:bookworm}
MIRROR=${2:-http://deb.debian.org/debian}

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "==> debootstrap bookworm with python3 and python3-venv into $root (from $MIRROR)"
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$MIRROR" >"$root.log" 2>&1 \
    || { tail -20 "$root.log"; echo "debootstrap failed: $root.log" >&2; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
echo "==> importing it as $IMAGE"
tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
podman run --rm "$IMAGE" python3 -c 'import sys, venv; print("==>", sys.version.split()[0], "with venv")'
