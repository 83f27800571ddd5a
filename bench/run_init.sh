#!/usr/bin/env bash
# The init benchmark: a ~0.5 B-parameter checkpoint (float32 and bfloat16), loaded by
# `areal-train --job init` under mpirun -np 1, 2, 4, with rank-0 streaming
# (memory_efficient_load true) and sliced reads (false) side by side in one run, from a
# warm page cache and from a cold one (the checkpoint's pages evicted before the run
# with posix_fadvise(DONTNEED), which needs no privileges), beside the raw read time of
# the checkpoint's bytes. Per rank: peak host-memory growth of the whole init (RSS
# high-water mark) and wall time. Writes bench/results/init.json, init.md and init.png.
#   NP_LIST="1 2 4" DTYPES="float32 bfloat16" CACHES="warm cold" bench/run_init.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
models="${AREAL_BENCH_MODELS:-$HOME/.cache/areal-train/bench}"
results="$AREAL_ROOT/bench/results"
runs="$(mktemp -d)"
mkdir -p "$models" "$results"
"$AREAL_VENV/bin/python" -c "import matplotlib" 2>/dev/null || "$AREAL_VENV/bin/pip" install -q matplotlib

for dtype in ${DTYPES:-float32 bfloat16}; do
  model="$models/qwen2_0p5b_$dtype"
  "$AREAL_VENV/bin/python" "$AREAL_ROOT/bench/make_bench_model.py" "$model" "$dtype"
  for np in ${NP_LIST:-1 2 4}; do
    for efficient in true false; do
      for cache in ${CACHES:-warm cold}; do
        echo "== $dtype, mpirun -np $np, memory_efficient_load=$efficient, $cache page cache"
        if [ "$cache" = cold ]; then
          "$AREAL_VENV/bin/python" "$AREAL_ROOT/bench/summarize_init.py" --evict "$model/model.safetensors"
        else
          cat "$model/model.safetensors" >/dev/null
        fi
        "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BIN" --job init --model_path "$model" \
          --fsdp.memory_efficient_load "$efficient" --cluster.fileroot "$runs" \
          --experiment_name "$dtype" --trial_name "np${np}_${efficient}_${cache}" 2>&1 | sed -n '/staged init of/,$p'
      done
    done
  done
done
"$AREAL_VENV/bin/python" "$AREAL_ROOT/bench/summarize_init.py" "$runs" "$models" "$results"
rm -rf "$runs"
