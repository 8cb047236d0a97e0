#!/usr/bin/env bash
# Build (once per machine) the llama-cpp-python wheel with AMX-safe flags and print its path.
# A native build segfaults in ggml_backend_amx_mul_mat on these CPUs, and pip's own wheel cache
# does not key on CMAKE_ARGS, so we keep our own cache keyed on version + flags + Python.
set -euo pipefail
PY=${1:?usage: build-llama-wheel.sh PYTHON}
LLAMA_VERSION=${SERVEGATE_LLAMA_VERSION:-0.3.16}
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_AVX512=OFF"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$(printf '%s|%s|%s|%s' "$LLAMA_VERSION" "$CMAKE_FLAGS" "$pyver" "$(uname -m)" | sha256sum | cut -c1-16)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/servegate/wheels/$key"
if ! compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null; then
  echo "building llama-cpp-python $LLAMA_VERSION with AMX-safe flags (about 4 minutes on 2 cores)..." >&2
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PY" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -w "$tmp" "llama-cpp-python==$LLAMA_VERSION" >&2
  rm -rf "$dir"; mv "$tmp" "$dir"
fi
compgen -G "$dir/llama_cpp_python-*.whl" | head -n 1
