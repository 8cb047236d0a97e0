#!/usr/bin/env bash
# Build the servegate image (deploy/Dockerfile) without a Docker daemon — buildah, vfs storage,
# chroot isolation: it runs as root in a plain container or VM, no user namespaces needed — and
# run its smoke test in it. Uses `docker build` instead when a Docker daemon answers.
#
# Usage: scripts/image.sh [--base IMAGE] [--probe URL] [--no-build]
#   --base IMAGE  the Dockerfile's PYTHON_IMAGE (default python:3.11-slim, pulled from Docker Hub)
#   --probe URL   also run `servegate probe URL --json` from inside the image (a server on this
#                 host: buildah's chroot shares the host's network)
#   --no-build    smoke-test the image already built, do not build it again
# Environment: SERVEGATE_IMAGE (default servegate:<version in pyproject.toml>),
#   SERVEGATE_BUILDAH_ROOT (default ~/.cache/servegate/buildah: the image store).
# Needs buildah (Debian: apt-get install buildah) where there is no Docker daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
base="" probe="" build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2;;
    --probe) probe=$2; shift 2;;
    --no-build) build=0; shift;;
    *) echo "usage: scripts/image.sh [--base IMAGE] [--probe URL] [--no-build]" >&2; exit 2;;
  esac
done
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)
image=${SERVEGATE_IMAGE:-servegate:$version}
build_args=()
[ -n "$base" ] && build_args=(--build-arg "PYTHON_IMAGE=$base")

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  [ "$build" = 0 ] || docker build -f deploy/Dockerfile -t "$image" "${build_args[@]}" .
  run() { docker run --rm --network host --entrypoint "$1" "$image" "${@:2}"; }
  user() { docker image inspect -f '{{.Config.User}}' "$image"; }
else
  command -v buildah >/dev/null || {
    echo "image.sh: no Docker daemon and no buildah (Debian: apt-get install buildah)" >&2; exit 2; }
  store=${SERVEGATE_BUILDAH_ROOT:-$HOME/.cache/servegate/buildah}
  B=(buildah --storage-driver vfs --root "$store/root" --runroot "$store/run")
  # --pull=false: a base already in the store is used as it is (a local stand-in included)
  [ "$build" = 0 ] || "${B[@]}" bud --isolation chroot --network host --pull=false \
    -f deploy/Dockerfile -t "$image" "${build_args[@]}" . >&2
  ctr=$("${B[@]}" from --pull=never "$image")
  trap '"${B[@]}" rm "$ctr" >/dev/null' EXIT
  run() { "${B[@]}" run --isolation chroot --network host "$ctr" -- "$@"; }
  user() { "${B[@]}" inspect --type image -f '{{.OCIv1.Config.User}}' "$image"; }
fi

# The smoke test: the entry point and the command line, the extras the image promises, the user.
echo "image.sh: smoke test of $image" >&2
[ "$(user)" = 10001 ] || { echo "image.sh: the image runs as $(user), not 10001" >&2; exit 1; }
run servegate --version | grep -qx "servegate, version $version"
for command in gate probe proxy replay runs baseline; do run servegate "$command" --help >/dev/null; done
run python -c 'import starlette, uvicorn, prometheus_client, psycopg; import importlib.util as u; assert u.find_spec("llama_cpp") is None'
run servegate policy >/dev/null
if [ -n "$probe" ]; then
  run servegate probe "$probe" --json | python3 -c 'import json, sys; caps = json.load(sys.stdin)["capabilities"]; sys.exit(0 if caps["logprobs"]["supported"] else "no logprobs")'
fi
echo "image.sh: $image smoke-tested" >&2
echo "$image"
