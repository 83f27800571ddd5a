#!/usr/bin/env bash
# Installs what areal-train needs to build and run. Idempotent: a second run only
# checks and returns in seconds. The Python virtual environment (with the torch
# wheel that provides LibTorch) lives OUTSIDE the checkout so that a fresh clone
# reuses it instead of downloading ~4 GB again.
#
#   AREAL_VENV   where the virtual environment lives (default ~/.cache/areal-train/venv)
#   AREAL_TORCH  the torch version to pin (default below; its CUDA must match the toolkit)
set -euo pipefail

AREAL_VENV="${AREAL_VENV:-$HOME/.cache/areal-train/venv}"
AREAL_TORCH="${AREAL_TORCH:-2.14.1}"
# The independent references of the tests (HF model parity, safetensors interop).
AREAL_TRANSFORMERS="${AREAL_TRANSFORMERS:-5.24.0}"
# Arrow C++ and Parquet (datasets as Hugging Face downloads them) come from this wheel.
AREAL_PYARROW="${AREAL_PYARROW:-26.0.1}"

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libopenmpi-dev openmpi-bin
  libcli11-dev libicu-dev libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev
  clang libclang-rt-14-dev lld
)

log() { printf '[setup] %s\n' "$*"; }

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # apt-get update only when the package lists are absent or older than a day.
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n1)" ]; then
    $SUDO apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$AREAL_VENV/bin/python" ]; then
  log "creating virtual environment $AREAL_VENV"
  mkdir -p "$(dirname "$AREAL_VENV")"
  python3 -m venv "$AREAL_VENV"
fi
if ! "$AREAL_VENV/bin/python" - <<PY 2>/dev/null
import sys, numpy, torch, transformers, safetensors, tokenizers, tensorboard, matplotlib, math_verify, peft, pyarrow
sys.exit(torch.__version__.split('+')[0] != '$AREAL_TORCH' or transformers.__version__ != '$AREAL_TRANSFORMERS'
         or pyarrow.__version__ != '$AREAL_PYARROW')
PY
then
  log "installing torch==$AREAL_TORCH, transformers==$AREAL_TRANSFORMERS into $AREAL_VENV (about 4 GB the first time)"
  "$AREAL_VENV/bin/pip" install -q --upgrade pip
  "$AREAL_VENV/bin/pip" install -q "torch==$AREAL_TORCH" "transformers==$AREAL_TRANSFORMERS" safetensors numpy \
      tensorboard matplotlib math-verify peft "pyarrow==$AREAL_PYARROW"  # tests read TensorBoard files with the
      # real reader; the demo draws its plot; scripts/rewards/gsm8k.py verifies answers with math-verify; a test
      # starts LoRA from PEFT's adapter; pyarrow: Arrow C++ for the build, and the tests write datasets with it
fi
log "ready: Debian packages present, torch $AREAL_TORCH, transformers $AREAL_TRANSFORMERS and pyarrow $AREAL_PYARROW in $AREAL_VENV"
