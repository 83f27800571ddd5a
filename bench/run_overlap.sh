#!/usr/bin/env bash
# Communication/compute overlap (fsdp.prefetch_depth) side by side in one run: the same
# areal-train --job sft steps at depth 0 (every all-gather and reduce-scatter waits in
# place), 1 and 2, with activation checkpointing on and off, at N in NP. The depths take
# turns within each repeat, so a slow phase of the machine hits all of them alike.
# Reports training tokens/s per rank (after WARMUP steps), its ratio to depth 0, peak
# memory growth per rank, and checks that every depth gives the same losses.
# Writes bench/results/overlap.json and overlap.md.
#   bench/run_overlap.sh                  # 74 M Qwen2, float32, N = 2 and 4
#   SMOKE=1 bench/run_overlap.sh          # the tiny test model, N = 2, a few seconds
#   NP=1 DTYPE=bfloat16 bench/run_overlap.sh   # one GPU (scripts/gpu_check.sh; NCCL takes one rank per GPU)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [ -n "${SMOKE:-}" ]; then
  model=tests/fixtures/models/tiny_chat; NP="${NP:-2}"; STEPS="${STEPS:-3}"; SEQ="${SEQ:-32}"; REPEATS="${REPEATS:-1}"
  DTYPE="${DTYPE:-float32}"; label=smoke
else
  model="$models/qwen2_74m_float32"
  "$PY" bench/make_bench_model.py "$model" float32 74m
  NP="${NP:-2 4}"; STEPS="${STEPS:-4}"; SEQ="${SEQ:-128}"; REPEATS="${REPEATS:-2}"; DTYPE="${DTYPE:-float32}"; label=full
fi
BATCH="${BATCH:-4}"; WARMUP="${WARMUP:-1}"; DEPTHS="${DEPTHS:-0 1 2}"; CKPT_MODES="${CKPT_MODES:-true false}"

"$PY" - "$work/train.jsonl" "$((BATCH * STEPS))" "$SEQ" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"text": "".join(random.choice("abcdefghij 0123456789+=.") for _ in range(int(sys.argv[3]) - 2))}) + "\n")
PY

for np in $NP; do
  for ckpt in $CKPT_MODES; do
    for repeat in $(seq 1 "$REPEATS"); do
      for depth in $DEPTHS; do
        echo "== -np $np, gradient checkpointing $ckpt, fsdp.prefetch_depth $depth (repeat $repeat)"
        "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BIN" --job sft --model_path "$model" --tokenizer_path byte \
          --actor.dtype "$DTYPE" --actor.gradient_checkpointing "$ckpt" --fsdp.prefetch_depth "$depth" \
          --train_dataset.path "$work/train.jsonl" --train_dataset.shuffle false --train_dataset.batch_size "$BATCH" \
          --total_train_steps "$STEPS" --optimizer.lr 1e-4 --optimizer.warmup_steps_proportion 0 \
          --cluster.fileroot "$work/runs" --experiment_name overlap \
          --trial_name "np${np}_ckpt${ckpt}_depth${depth}_r${repeat}" 2>&1 | grep -E "sft:|error" || true
      done
    done
  done
done

"$PY" - "$work/runs/overlap" "$results" "$label" "$WARMUP" "$DTYPE" <<'PY'
import collections, datetime, glob, json, os, platform, re, sys
import torch
runs, results, label, warmup, dtype = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
groups = collections.defaultdict(lambda: {"seconds": 0.0, "tokens": 0.0, "losses": [], "peak": []})
for path in sorted(glob.glob(f"{runs}/np*_ckpt*_depth*_r*/stats.jsonl")):
    np_, ckpt, depth, _ = re.match(r".*np(\d+)_ckpt(true|false)_depth(\d+)_r(\d+)", path).groups()
    steps = [json.loads(l) for l in open(path) if l.strip()]
    g = groups[(int(np_), ckpt == "true", int(depth))]
    g["seconds"] += sum(s["seconds"] for s in steps[warmup:])
    g["tokens"] += sum(s["tokens"] / int(np_) for s in steps[warmup:])
    g["losses"].append([s["loss"] for s in steps])
    g["peak"] += json.load(open(os.path.join(os.path.dirname(path), "train_memory.json")))["peak_growth_bytes"]
rows, failures = [], []
for (np_, ckpt, depth), g in sorted(groups.items()):
    base = groups[(np_, ckpt, 0)]
    tps, base_tps = g["tokens"] / g["seconds"], base["tokens"] / base["seconds"]
    if g["losses"][0] != base["losses"][0]:
        failures.append(f"N={np_} checkpointing={ckpt} depth={depth}: losses {g['losses'][0]} differ from depth 0's {base['losses'][0]}")
    rows.append({"world_size": np_, "checkpointing": ckpt, "prefetch_depth": depth, "tokens_per_second_per_rank": tps,
                 "ratio_to_depth0": tps / base_tps, "peak_growth_worst_rank": max(g["peak"]),
                 "peak_ratio_to_depth0": max(g["peak"]) / max(base["peak"]), "losses": g["losses"][0]})
meta = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(), "machine": platform.machine(),
        "torch": torch.__version__, "dtype": dtype, "label": label,
        "device": "cuda" if torch.cuda.is_available() else "cpu"}
json.dump({"meta": meta, "rows": rows, "failures": failures}, open(f"{results}/overlap.json", "w"), indent=1)
MIB = 1 << 20
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, {meta['device']}, {dtype}, "
         f"{label} run; tokens/s per rank after {warmup} warm-up step(s), summed over the repeats.", "",
         "| N | checkpointing | prefetch_depth | tokens/s per rank | / depth 0 | peak mem growth, worst rank | / depth 0 |",
         "|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['world_size']} | {'on' if r['checkpointing'] else 'off'} | {r['prefetch_depth']} | "
                 f"{r['tokens_per_second_per_rank']:.1f} | {r['ratio_to_depth0']:.2f} | "
                 f"{r['peak_growth_worst_rank'] / MIB:.0f} MiB | {r['peak_ratio_to_depth0']:.2f} |")
lines += ["", "Losses equal at every depth: " + ("yes" if not failures else "NO: " + "; ".join(failures))]
open(f"{results}/overlap.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if failures else 0)
PY
