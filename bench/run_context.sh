#!/usr/bin/env bash
# The training mesh (actor.backend fsdp:dDtTcC) side by side in one run: --job sft on the
# same N ranks as data parallelism alone (dN: one whole sequence per rank), with every
# sequence split over groups of C ranks (context parallelism: a sequence's tokens over C
# ranks, the attention by all-to-all of heads) and with each layer split over groups of
# T ranks (tensor parallelism: heads, channels and vocabulary), one sequence of L tokens
# per data-parallel group and step, activations kept (actor.gradient_checkpointing
# false). Reports per rank: the peak memory growth of the training phase, the tokens in
# its chunk, tokens/s after WARMUP steps, and checks that the shapes' first-step losses
# agree (every row is the same sequence, so every batch has its loss). Beside them, the
# same in Python (REFERENCE shapes, d2t2 by default): FSDP2 with PyTorch's own tensor
# parallelism (bench/reference/fsdp2_tp_train.py; PyTorch's context parallelism is built
# for CUDA devices, not these CPU ranks).
# Writes bench/results/context.json and context.md.
#   bench/run_context.sh                 # ctx_60m (8 heads, 4 key/value heads), N = 4: d4, d2c2, c4, d2t2, t2c2; L = 1024, 4096
#   SMOKE=1 bench/run_context.sh         # the tiny test model, N = 2: d2, c2, t2; L = 64
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [ -n "${SMOKE:-}" ]; then
  model=tests/fixtures/models/tiny_chat; NP="${NP:-2}"; SHAPES="${SHAPES:-d2 d1c2 d1t2}"; LENGTHS="${LENGTHS:-64}"
  STEPS="${STEPS:-2}"; label=smoke
else
  model="$models/ctx_60m_float32"
  "$PY" bench/make_bench_model.py "$model" float32 ctx_60m
  NP="${NP:-4}"; SHAPES="${SHAPES:-d4 d2c2 d1c4 d2t2 d1t2c2}"; LENGTHS="${LENGTHS:-1024 4096}"; STEPS="${STEPS:-3}"; label=full
  REFERENCE="${REFERENCE-d2t2}"
fi
REFERENCE="${REFERENCE:-}"
port=29630
WARMUP="${WARMUP:-1}"

for length in $LENGTHS; do
  # 4 x STEPS copies of one seeded row of exactly `length` byte tokens (BOS + length-2
  # bytes + EOS): every batch's loss is that row's, so the shapes' first losses must agree.
  "$PY" - "$work/rows_$length.jsonl" "$((4 * STEPS))" "$length" <<'PY'
import json, random, sys
random.seed(0)
row = json.dumps({"text": "".join(random.choice("abcdefghij 0123456789+=.") for _ in range(int(sys.argv[3]) - 2))})
with open(sys.argv[1], "w") as f:
    f.write((row + "\n") * int(sys.argv[2]))
PY
  for shape in $SHAPES; do
    groups="${shape#d}"; groups="${groups%%[tc]*}"  # one sequence per data-parallel group and step
    echo "== L = $length, fsdp:$shape, -np $NP"
    "${AREAL_MPIRUN[@]}" -np "$NP" "$AREAL_BIN" --job sft --model_path "$model" --tokenizer_path byte \
      --actor.backend "fsdp:$shape" --actor.dtype float32 --actor.gradient_checkpointing false \
      --train_dataset.path "$work/rows_$length.jsonl" --train_dataset.shuffle false --train_dataset.max_length "$length" \
      --train_dataset.batch_size "$groups" --total_train_steps "$STEPS" --optimizer.lr 1e-4 \
      --optimizer.warmup_steps_proportion 0 --cluster.fileroot "$work/runs" --experiment_name context \
      --trial_name "L${length}_${shape}" 2>&1 | grep -E "sft:|error" || true
  done
  for shape in $REFERENCE; do
    groups="${shape#d}"; groups="${groups%%[tc]*}"; tensor="${shape#*t}"; tensor="${tensor%%c*}"
    echo "== L = $length, FSDP2 + torch tensor parallelism $shape, -np $NP"
    port=$((port + 1))
    mkdir -p "$work/runs/context/fsdp2"
    AREAL_BENCH_PORT=$port "${AREAL_MPIRUN[@]}" -np "$NP" -x AREAL_BENCH_PORT -x AREAL_BENCH_DEVICE "$PY" \
      bench/reference/fsdp2_tp_train.py "$model" "$work/rows_$length.jsonl" "$groups" "$STEPS" 1e-4 \
      "$work/runs/context/fsdp2/L${length}_${shape}.json" "$tensor" 2>&1 | grep -E "Error|error" || true
  done
done

"$PY" - "$work/runs/context" "$results" "$label" "$WARMUP" "$NP" <<'PY'
import datetime, glob, json, os, platform, re, sys
import torch
runs, results, label, warmup, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
MIB = 1 << 20
rows = []
for path in sorted(glob.glob(f"{runs}/L*_d*/stats.jsonl")):
    length, shape = re.match(r".*/L(\d+)_(d\d+(?:t\d+)?(?:c\d+)?)/", path).groups()
    context = int(shape.split("c")[1]) if "c" in shape else 1
    tensor = int(re.search(r"t(\d+)", shape).group(1)) if "t" in shape else 1
    steps = [json.loads(l) for l in open(path) if l.strip()]
    memory = json.load(open(os.path.join(os.path.dirname(path), "train_memory.json")))
    timed = steps[warmup:]
    rows.append({"length": int(length), "shape": shape, "context": context, "tensor": tensor,
                 "chunk_tokens": int(length) // context,
                 "first_loss": steps[0]["loss"],
                 "tokens_per_second_per_rank": sum(s["tokens"] / world for s in timed) / sum(s["seconds"] for s in timed),
                 "peak_growth_worst_rank": max(memory["peak_growth_bytes"])})
for path in sorted(glob.glob(f"{runs}/fsdp2/L*_d*.json")):  # FSDP2 + PyTorch's tensor parallelism
    length, shape = re.match(r".*/L(\d+)_(d\d+t\d+)\.json", path).groups()
    ref = json.load(open(path))
    timed = ref["steps"][warmup:]
    rows.append({"length": int(length), "shape": shape, "reference": "fsdp2", "context": 1,
                 "tensor": ref["tensor_parallel"], "chunk_tokens": int(length), "first_loss": ref["steps"][0]["loss"],
                 "tokens_per_second_per_rank": sum(s["target_tokens"] / world for s in timed) / sum(s["seconds"] for s in timed),
                 "peak_growth_worst_rank": max(r["peak_growth_bytes"] for r in ref["ranks"])})
rows.sort(key=lambda r: (r["length"], r["context"] * r["tensor"], r["tensor"], r.get("reference", "")))
failures = []
for r in rows:
    base = next(b for b in rows if b["length"] == r["length"] and b["context"] == 1 and b["tensor"] == 1
                and "reference" not in b)
    r["memory_vs_data_parallel"] = r["peak_growth_worst_rank"] / base["peak_growth_worst_rank"]
    r["speed_vs_data_parallel"] = r["tokens_per_second_per_rank"] / base["tokens_per_second_per_rank"]
    if abs(r["first_loss"] - base["first_loss"]) > 1e-4 * abs(base["first_loss"]):
        failures.append(f"L = {r['length']}: fsdp:{r['shape']} first loss {r['first_loss']} vs {base['first_loss']}")
for r in rows:  # areal-train against the same mesh in Python
    ours = next((o for o in rows if o["length"] == r["length"] and o["shape"] == r["shape"] and "reference" not in o), None)
    if r.get("reference") and ours:
        r["areal_vs_reference"] = {"memory": ours["peak_growth_worst_rank"] / r["peak_growth_worst_rank"],
                                   "speed": ours["tokens_per_second_per_rank"] / r["tokens_per_second_per_rank"]}
meta = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "torch": torch.__version__, "ranks": world, "label": label}
suffix = "" if label == "full" else f"_{label}"
json.dump({"meta": meta, "rows": rows}, open(os.path.join(results, f"context{suffix}.json"), "w"), indent=1)
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, float32, "
         f"{world} ranks, activations kept; one sequence of L tokens per data-parallel group and step.", "",
         "| L | actor.backend | tokens per rank (its chunk) | peak memory growth, worst rank | vs dN | tokens/s per rank | vs dN | first loss |",
         "|---|---|---|---|---|---|---|---|"]
for r in rows:
    name = f"FSDP2 + torch TP, {r['shape']}" if r.get("reference") else f"fsdp:{r['shape']}"
    lines.append(f"| {r['length']} | {name} | {r['chunk_tokens']} | {r['peak_growth_worst_rank'] / MIB:.0f} MiB | "
                 f"{r['memory_vs_data_parallel']:.2f} | {r['tokens_per_second_per_rank']:.0f} | "
                 f"{r['speed_vs_data_parallel']:.2f} | {r['first_loss']:.5f} |")
lines.append("")
for r in rows:
    if "areal_vs_reference" in r:
        lines.append(f"- L = {r['length']}, {r['shape']}: areal-train at {r['areal_vs_reference']['memory']:.2f}x "
                     f"FSDP2 + torch TP's worst-rank memory, {r['areal_vs_reference']['speed']:.2f}x its tokens/s per rank")
lines.append("")
lines.append("First losses equal across the shapes: " + ("yes" if not failures else "NO"))
text = "\n".join(lines) + "\n"
open(os.path.join(results, f"context{suffix}.md"), "w").write(text)
print(text)
for f in failures:
    print("MISMATCH:", f)
sys.exit(1 if failures else 0)
PY
