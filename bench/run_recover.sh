#!/usr/bin/env bash
# What a recover checkpoint costs against the disk's raw speed, for Qwen2.5-0.5B's shape
# under mpirun -np 2 and -np 4. Writes bench/results/recover_np{2,4}.json and
# bench/results/recover.md (quoted by docs/benchmarks.md). Needs ~12 GB free under
# OUT (default /tmp/areal-bench-recover); a minute or two on 2 cores.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
out_dir="${OUT:-/tmp/areal-bench-recover}"
model="$out_dir/model-0.5b"
"$AREAL_PYTHON_BIN" "$AREAL_ROOT/bench/make_bench_model.py" "$model" float32 0.5b
mkdir -p "$AREAL_ROOT/bench/results"
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), $(df -h "$out_dir" | awk 'NR == 2 {print $1}')."
  for np in 2 4; do
    echo
    "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BUILD/bench/areal_recover_bench" "$model" "$out_dir/np$np" \
      --json "$AREAL_ROOT/bench/results/recover_np$np.json"
  done
} | tee "$AREAL_ROOT/bench/results/recover.md"
