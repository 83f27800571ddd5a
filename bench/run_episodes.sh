#!/usr/bin/env bash
# Multi-turn episodes through the generation engine (bench/episode_bench.cpp): episodes
# per second when the environment answers each turn after 0, 10 or 100 ms, with
# continuous batching across turns (a waiting row keeps its KV cache, the others go on)
# and with turn-synchronous batching (the whole batch waits for its slowest reply), side
# by side in one run; and the prefill tokens the kept KV cache saves.
# Writes bench/results/episodes.json and episodes.md.
#   bench/run_episodes.sh            # 74 M model, 64 episodes x 3 turns x 32 tokens, 16 rows
#   SMOKE=1 bench/run_episodes.sh    # the tiny test model, 8 episodes
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# Two models: a 74 M one, whose generation takes most of the time (compute-bound), and
# the tiny test model, whose turns take about as long as the environment's delays
# (environment-bound): continuous batching across turns can only pay in the second.
if [ -n "${SMOKE:-}" ]; then
  MODELS="tests/fixtures/models/tiny_chat"; EPISODES=8; TURNS=3; TOKENS=8; ROWS=4; DELAYS="${DELAYS:-0,10}"; label=smoke
else
  "$PY" bench/make_bench_model.py "$models/qwen2_74m_float32" float32 74m
  MODELS="$models/qwen2_74m_float32 tests/fixtures/models/tiny_chat"
  EPISODES="${EPISODES:-64}"; TURNS="${TURNS:-3}"; TOKENS="${TOKENS:-32}"; ROWS="${ROWS:-16}"
  DELAYS="${DELAYS:-0,10,100}"; label=full
fi
for model in $MODELS; do
  echo "== $model"
  "$AREAL_BUILD/bench/areal_episode_bench" "$model" "$EPISODES" "$TURNS" "$TOKENS" "$ROWS" "$DELAYS" \
    "$work/episodes_$(basename "$model").json"
done
"$PY" - "$work" "$results" "$label" $MODELS <<'PY'
import datetime, json, os, platform, sys
import torch
work, results, label, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = []
for m in models:
    for r in json.load(open(os.path.join(work, f"episodes_{os.path.basename(m)}.json"))):
        r["model"] = os.path.basename(m)
        rows.append(r)
meta = {"date": datetime.date.today().isoformat(), "label": label, "cores": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "torch": torch.__version__}
suffix = "" if label == "full" else f"_{label}"
json.dump({"meta": meta, "rows": rows}, open(os.path.join(results, f"episodes{suffix}.json"), "w"), indent=1)
r0 = rows[0]
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, CPU, float32; "
         f"{r0['episodes']} episodes of {r0['turns']} sampled turns of up to {r0['turn_tokens']} tokens (varied lengths), prompts of 32 tokens, "
         f"environment messages of 8 tokens, {r0['rows']} rows.", "",
         "| model | environment delay | continuous batching: episodes/s | turn-synchronous: episodes/s | ratio | "
         "prefill tokens after turn 1 (kept cache) | without the kept cache |", "|---|---|---|---|---|---|---|"]
by = {(r["model"], r["delay_ms"], r["batching"]): r for r in rows}
for model, delay in sorted({(r["model"], r["delay_ms"]) for r in rows}, key=lambda k: (models.index(next(m for m in models if os.path.basename(m) == k[0])), k[1])):
    c, s = by[(model, delay, "continuous")], by[(model, delay, "turn-synchronous")]
    lines.append(f"| {model} | {delay:.0f} ms | {c['episodes_per_second']:.2f} | {s['episodes_per_second']:.2f} | "
                 f"{c['episodes_per_second'] / s['episodes_per_second']:.2f} | {c['prefill_tokens']} | "
                 f"{c['prefill_tokens_without_kept_cache']} |")
open(os.path.join(results, f"episodes{suffix}.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
