#!/usr/bin/env bash
# Configures and builds areal-train (and its tests) into build/. Incremental;
# ccache keeps a clean rebuild short. Extra arguments go to CMake's configure step.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$AREAL_ROOT/scripts/setup.sh"

if [ ! -f "$AREAL_BUILD/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  torch_cmake="$("$AREAL_VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  cmake -S "$AREAL_ROOT" -B "$AREAL_BUILD" -G Ninja -DCMAKE_PREFIX_PATH="$torch_cmake" "$@"
fi
# Two jobs: on 2 cores with 24 GiB, more torch-heavy jobs run out of memory sooner than they finish.
cmake --build "$AREAL_BUILD" -j "${AREAL_JOBS:-2}"
