#!/usr/bin/env bash
# The main job on its built-in default, under mpirun -np 2 on CPU ranks:
#   1. supervised warm-up of the built-in tiny model on a sloppy teacher's additions
#      (configs/demo_sft_warmup.yaml) -> a Hugging Face checkpoint
#   2. GRPO from that checkpoint, loaded with fsdp.memory_efficient_load
#      (configs/demo_grpo.yaml): held-out greedy accuracy before, during and after
#   3. the evaluator (--job eval) on the warm-up's and GRPO's checkpoints: pass@k, maj@k
#      before and after (docs/evaluation.md)
#   4. the plot of reward and accuracy against step (PNG)
# Extra arguments are overrides for the GRPO step, e.g. scripts/demo.sh optimizer.lr=1e-4
# Exits non-zero when the held-out accuracy did not rise by at least 25 points (or the
# evaluator's pass@1 did not rise).
#
#   scripts/demo.sh                          # all four steps
#   scripts/demo.sh --warmup-only            # step 1 alone: the warm-up checkpoint
#   scripts/demo.sh --checkpoint DIR [...]   # steps 2 to 4 from an earlier warm-up's checkpoint
#   scripts/demo.sh --tools [...]            # the tool-use demo (docs/agentic.md): three-digit
#                                            # multiplication, a warm-up that mostly guesses,
#                                            # then GRPO with the calculator (episodes)
# (CTest runs the warm-up once and both demo tests start from its checkpoint.)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
WARMUP_ONLY=""; CHECKPOINT=""; DEMO=demo; WARMUP_CONFIG=configs/demo_sft_warmup.yaml; GRPO_CONFIG=configs/demo_grpo.yaml
TITLE="demo: GRPO on 2-digit addition after a sloppy warm-up (mpirun -np 2, CPU)"
if [ "${1:-}" = "--tools" ]; then
  shift
  DEMO=demo-tools; WARMUP_CONFIG=configs/demo_tools_sft_warmup.yaml; GRPO_CONFIG=configs/demo_tools_grpo.yaml
  TITLE="tool-use demo: GRPO with a calculator on 3-digit multiplication (mpirun -np 2, CPU)"
fi
case "${1:-}" in
  --warmup-only) WARMUP_ONLY=1; shift ;;
  --checkpoint) CHECKPOINT="${2:?--checkpoint needs the warm-up checkpoint directory}"; shift 2 ;;
esac
bash "$AREAL_ROOT/scripts/build.sh"
cd "$AREAL_ROOT"
ROOT="${AREAL_DEMO_ROOT:-/tmp/areal}"
START=$SECONDS

if [ -z "$CHECKPOINT" ]; then
  echo "== 1/4 supervised warm-up: mpirun -np 2 areal-train --config $WARMUP_CONFIG =="
  "${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config "$WARMUP_CONFIG" cluster.fileroot="$ROOT"
  CHECKPOINT="$ROOT/$DEMO/sft-warmup/checkpoint"
fi
[ -f "$CHECKPOINT/config.json" ] || { echo "demo: no warm-up checkpoint at $CHECKPOINT" >&2; exit 1; }
if [ -n "$WARMUP_ONLY" ]; then
  echo "demo: warm-up checkpoint written to $CHECKPOINT in $((SECONDS - START)) s"
  exit 0
fi

echo "== 2/4 GRPO: mpirun -np 2 areal-train --config $GRPO_CONFIG --fsdp.memory_efficient_load true --model_path $CHECKPOINT =="
"${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config "$GRPO_CONFIG" --fsdp.memory_efficient_load true \
  --model_path "$CHECKPOINT" cluster.fileroot="$ROOT" "$@"

RUN="$ROOT/$DEMO/grpo"
echo "== 3/4 the evaluator before and after: areal-train --job eval on the warm-up's and GRPO's checkpoints =="
for WHEN in before after; do
  MODEL="$CHECKPOINT"; [ "$WHEN" = after ] && MODEL="$RUN/checkpoint"
  "${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config "$GRPO_CONFIG" --job eval --model_path "$MODEL" \
    cluster.fileroot="$ROOT" trial_name="eval-$WHEN"
done

echo "== 4/4 the plot =="
"$AREAL_PYTHON_BIN" scripts/plot_stats.py "$RUN/stats.jsonl" "$RUN/reward_accuracy.png" \
  --title "$TITLE" | tee "$RUN/summary.txt"
echo "demo: done in $((SECONDS - START)) s; stats $RUN/stats.jsonl, TensorBoard $RUN/tensorboard"
"$AREAL_PYTHON_BIN" - "$RUN/stats.jsonl" "$ROOT/$DEMO" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
before, after = (json.load(open(f"{sys.argv[2]}/eval-{w}/eval/summary.json")) for w in ("before", "after"))
metrics = [k for k in before if k.startswith(("pass@", "maj@"))]
print(f"demo: the evaluator ({before['prompts']} held-out prompts x {before['n_samples']} samples), before -> after GRPO: "
      + ", ".join(f"{k} {100 * before[k]:.1f}% -> {100 * after[k]:.1f}%" for k in metrics))
evals = [r["eval_accuracy"] for r in rows if "eval_accuracy" in r]
rise = 100 * (evals[-1] - evals[0])
print(f"demo: held-out greedy accuracy {100 * evals[0]:.1f}% -> {100 * evals[-1]:.1f}% ({rise:+.1f} points; target: +25)")
ok = rise >= 25 and after["pass@1"] > before["pass@1"]
tools = [r["tool_calls_mean"] for r in rows if "tool_calls_mean" in r]
if tools:  # the tool-use demo: the model learned to call the calculator
    print(f"demo: tool calls per sampled episode {tools[0]:.2f} -> {tools[-1]:.2f}")
    ok = ok and tools[-1] > tools[0]
print("demo: OK, the accuracy rose by at least 25 points" if ok
      else "demo: FAILED, the greedy rise is under 25 points or the evaluator's pass@1 did not rise")
sys.exit(0 if ok else 1)
PY
