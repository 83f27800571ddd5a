#!/usr/bin/env bash
# Communicator bandwidth under mpirun -np 2 and -np 4, 1 MiB to 1 GiB, beside memcpy.
# Writes bench/results/comm_np{2,4}.json and bench/results/comm.md (the table that
# docs/benchmarks.md quotes). Takes a few minutes on 2 cores.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
mkdir -p "$AREAL_ROOT/bench/results"
out="$AREAL_ROOT/bench/results/comm.md"
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), float32, MPI (CPU) path."
  for np in 2 4; do
    echo
    echo "mpirun -np $np (ratio to memcpy in parentheses):"
    echo
    "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BUILD/bench/areal_comm_bench" --max-mib "${MAX_MIB:-1024}" \
      --json "$AREAL_ROOT/bench/results/comm_np$np.json"
  done
} | tee "$out"
