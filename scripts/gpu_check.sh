#!/usr/bin/env bash
# On a machine with a GPU: build with the GPU tests on, then run the collective
# tests on CUDA tensors through NCCL (and the CPU ones beside them), then the overlap
# benchmark's GPU rows (one rank, bfloat16; results in bench/results/gpu/), and
# --job init on the GPU by both load paths (sliced reads through the staging buffer,
# rank-0 streaming).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# AREAL_PYARROW_ROOT: a pyarrow folder carried to a machine whose torch has none beside it.
AREAL_BUILD="${AREAL_BUILD}-gpu" bash "$AREAL_ROOT/scripts/build.sh" -DAREAL_GPU_TESTS=ON \
  ${AREAL_PYARROW_ROOT:+-DAREAL_PYARROW_ROOT="$AREAL_PYARROW_ROOT"}
cd "${AREAL_BUILD}-gpu"
nvidia-smi --query-gpu=name,memory.total --format=csv || true
ctest --output-on-failure -R "nccl_collectives|mpi_tests_np1"
cd "$AREAL_ROOT"
for efficient in false true; do
  "${AREAL_BUILD}-gpu/app/areal-train" --job init --device cuda --model_path tests/fixtures/models/qwen2_untied \
    --fsdp.memory_efficient_load "$efficient" --cluster.fileroot "$(mktemp -d)"
done
AREAL_BUILD="${AREAL_BUILD}-gpu" NP=1 DTYPE=bfloat16 REPEATS=1 RESULTS_DIR="$AREAL_ROOT/bench/results/gpu" \
  bash bench/run_overlap.sh
