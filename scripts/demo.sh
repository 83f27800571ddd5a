#!/usr/bin/env bash
# The main job on its built-in default (configs/demo.yaml) under mpirun -np 2.
# Extra arguments are passed to areal-train as overrides, e.g. scripts/demo.sh seed=3
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$AREAL_ROOT/scripts/build.sh"
cd "$AREAL_ROOT"
echo "== the merged config (configs/demo.yaml + overrides) =="
"$AREAL_BIN" --config configs/demo.yaml --print-config "$@"
echo "== areal-train under mpirun -np 2 =="
"${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config configs/demo.yaml "$@"
