#!/usr/bin/env bash
# areal-train's generation against transformers' generate, side by side in one run: the
# same model (74 M parameters, float32), the same prompts, sampling at temperature 1,
# exactly NEW tokens per answer, on the CPU (both single-process, same torch threads).
# Shapes ROWS x NEW: 32 x 64, 32 x 256, 128 x 64, 128 x 256 with exactly NEW tokens per
# answer; and 128 x up to 256 with STOPS stop ids (answers of varied lengths, as real
# ones: with a random model each token stops an answer with probability ~ STOPS / vocab).
# Writes bench/results/generation.json and generation.md.
#   bench/run_generation.sh            # the full benchmark (a few minutes on 2 cores)
#   SMOKE=1 bench/run_generation.sh    # the tiny test model, 4 rows x 8 tokens
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
cd "$AREAL_ROOT"
PY="$AREAL_PYTHON_BIN"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="${RESULTS_DIR:-$AREAL_ROOT/bench/results}"
mkdir -p "$results"
if [ -n "${SMOKE:-}" ]; then
  model=tests/fixtures/models/tiny_chat; SHAPES="${SHAPES:-4x8}"; PROMPT_LEN=8; label=smoke
  STOP_SHAPES="${STOP_SHAPES:-4x8}"; STOPS="${STOPS:-8}"
else
  model="${AREAL_BENCH_MODELS:-$HOME/.cache/areal-train/bench}/qwen2_74m_float32"
  "$PY" bench/make_bench_model.py "$model" float32 74m
  SHAPES="${SHAPES:-32x64 32x256 128x64 128x256}"; PROMPT_LEN=64; label=full
  STOP_SHAPES="${STOP_SHAPES:-128x256}"; STOPS="${STOPS:-500}"  # mean answer ~ 64 tokens
fi
for run in $(for s in $SHAPES; do echo "$s:0"; done; for s in $STOP_SHAPES; do echo "$s:$STOPS"; done); do
  shape="${run%:*}"; stops="${run#*:}"
  rows="${shape%x*}"; new="${shape#*x}"
  "$PY" - "$model" "$rows" "$PROMPT_LEN" "$work/prompts_$rows.json" <<'PY'
import json, random, sys
config = json.load(open(sys.argv[1] + "/config.json"))
random.seed(0)
rows, length = int(sys.argv[2]), int(sys.argv[3])
json.dump([[random.randrange(3, config["vocab_size"]) for _ in range(length)] for _ in range(rows)], open(sys.argv[4], "w"))
PY
  echo "== $rows rows x $new new tokens, $stops stop ids"
  "$AREAL_BUILD/bench/areal_generation_bench" "$model" "$work/prompts_$rows.json" "$new" "$stops" \
    "$work/areal_${rows}x${new}_${stops}.json"
  "$PY" bench/reference/hf_generate.py "$model" "$work/prompts_$rows.json" "$new" "$stops" \
    "$work/hf_${rows}x${new}_${stops}.json"
done
"$PY" - "$work" "$results" "$label" "$PROMPT_LEN" <<'PY'
import datetime, glob, json, os, platform, sys
import torch
work, results, label, prompt_len = sys.argv[1:5]
rows = []
for path in sorted(glob.glob(f"{work}/areal_*.json"), key=os.path.getmtime):
    a = json.load(open(path))
    h = json.load(open(path.replace("areal_", "hf_")))
    rows.append({"rows": a["rows"], "new_tokens": a["new_tokens"], "stops": a["stops"],
                 "areal_generated_tokens": a["generated_tokens"], "transformers_generated_tokens": h["generated_tokens"],
                 "areal_tokens_per_second": a["tokens_per_second"],
                 "transformers_tokens_per_second": h["tokens_per_second"],
                 "ratio": a["tokens_per_second"] / h["tokens_per_second"]})
meta = {"date": datetime.date.today().isoformat(), "label": label, "cores": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "torch": torch.__version__, "prompt_tokens": int(prompt_len)}
suffix = "" if label == "full" else f"_{label}"
json.dump({"meta": meta, "rows": rows}, open(os.path.join(results, f"generation{suffix}.json"), "w"), indent=1)
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, CPU, float32; "
         f"prompts of {prompt_len} tokens, sampled answers (temperature 1).", "",
         "| rows x new tokens | answers | areal-train tokens/s | transformers tokens/s | ratio |", "|---|---|---|---|---|"]
for r in rows:
    target = " [>= 2]" if (r["rows"], r["new_tokens"]) == (128, 256) else ""
    if r["stops"]:
        answers = (f"up to {r['new_tokens']}, {r['stops']} stop ids (mean {r['areal_generated_tokens'] / r['rows']:.0f} / "
                   f"{r['transformers_generated_tokens'] / r['rows']:.0f} tokens)")
    else:
        answers = f"exactly {r['new_tokens']} tokens"
    lines.append(f"| {r['rows']} x {r['new_tokens']} | {answers} | {r['areal_tokens_per_second']:.0f} | "
                 f"{r['transformers_tokens_per_second']:.0f} | {r['ratio']:.2f}{target} |")
open(os.path.join(results, f"generation{suffix}.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
