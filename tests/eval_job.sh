#!/usr/bin/env bash
# --job eval end to end (docs/evaluation.md), on the demo's warm-up checkpoint
# (AREAL_DEMO_CHECKPOINT) and the built-in base model it started from, under mpirun -np 2:
#   - 8 sampled answers to each of the 500 held-out sums, at t = 1 (two generation
#     groups), t = 2 (one group of two ranks) and on one rank in chunks of 100 prompts, not
#     125: the same per-prompt results;
#   - pass@k and maj@k recomputed from results.jsonl in Python (math.comb, a Counter
#     over the answers, the reference compared by hand) equal the summary's;
#   - the checkpoint scores above the base model;
#   - one GRPO step from the checkpoint with evaluator.n_samples = 8: the eval_pass@k and
#     eval_maj@8 it logs before the step equal --job eval's on the checkpoint, and those
#     after it equal --job eval's on the checkpoint the RL run saved;
#   - the same with LoRA: --job eval of the base plus the adapter the run saved
#     (actor.lora_adapter_path) gives the figures the run logged after its last step.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
cd "$AREAL_ROOT"
CHECKPOINT="${AREAL_DEMO_CHECKPOINT:?the demo warm-up checkpoint (ctest fixture demo_checkpoint)}"
ROOT="${AREAL_EVAL_ROOT:-/tmp/areal_eval_job}"
rm -rf "$ROOT"
run_eval() {  # trial, then options (NP ranks, default 2; BATCH prompts a chunk, default 125)
  local trial=$1; shift
  "${AREAL_MPIRUN[@]}" -np "${NP:-2}" "$AREAL_BIN" --config configs/demo_grpo.yaml --job eval cluster.fileroot="$ROOT" \
    trial_name="$trial" gconfig.n_samples=8 gconfig.temperature=1.0 valid_dataset.batch_size="${BATCH:-125}" "$@"
}
run_eval t1 --model_path "$CHECKPOINT"
run_eval t2 --model_path "$CHECKPOINT" rollout.backend=sglang:d1t2 actor.backend=fsdp:d2
NP=1 BATCH=100 run_eval np1 --model_path "$CHECKPOINT"
run_eval base --init_from_scratch true --fsdp.memory_efficient_load false
"${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config configs/demo_grpo.yaml cluster.fileroot="$ROOT" trial_name=rl \
  --model_path "$CHECKPOINT" total_train_steps=1 evaluator.n_samples=8 valid_dataset.batch_size=125
run_eval rl_after --model_path "$ROOT/demo/rl/checkpoint"
LORA=(actor.use_lora=true actor.lora_rank=8)
"${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config configs/demo_grpo.yaml cluster.fileroot="$ROOT" trial_name=lora \
  --model_path "$CHECKPOINT" total_train_steps=2 evaluator.n_samples=8 valid_dataset.batch_size=125 "${LORA[@]}" \
  optimizer.lr=1e-3
run_eval lora_adapter --model_path "$CHECKPOINT" "${LORA[@]}" actor.lora_adapter_path="$ROOT/demo/lora/checkpoint"
"$AREAL_PYTHON_BIN" - "$ROOT/demo" <<'PY'
import collections, json, math, sys

SPACE = " \t\r\n"  # what the trainer trims (not Python's every Unicode space)

def load(trial):
    d = f"{sys.argv[1]}/{trial}/eval"
    rows = [json.loads(line) for line in open(f"{d}/results.jsonl")]
    return rows, json.load(open(f"{d}/summary.json"))

def check(trial):
    rows, summary = load(trial)
    n = summary["n_samples"]
    assert len(rows) == summary["prompts"] == 500, (len(rows), summary["prompts"])
    assert [r["index"] for r in rows] == list(range(500)), trial
    ks = sorted({1, n} | {2 ** i for i in range(8) if 2 ** i < n})
    for k in ks:
        # Chen et al. 2021: 1 - C(n - c, k) / C(n, k), per prompt, averaged.
        ref = sum(1 - math.comb(n - r["correct"], k) / math.comb(n, k) for r in rows) / len(rows)
        assert abs(summary[f"pass@{k}"] - ref) < 1e-9, (trial, k, summary[f"pass@{k}"], ref)
    maj = 0
    for r in rows:
        answers = [s["text"].strip(SPACE) for s in r["samples"]]  # what exact_match compares
        assert [s["answer"] for s in r["samples"]] == answers, (trial, r["index"], r["samples"])
        # exact_match by hand: the reward is 1 exactly when the answer is the reference.
        assert [s["reward"] for s in r["samples"]] == [float(a == r["reference"].strip(SPACE)) for a in answers], (trial, r)
        assert r["correct"] == sum(a == r["reference"].strip(SPACE) for a in answers), (trial, r)
        counts = collections.Counter(a for a in answers if a)
        if counts:
            top = max(counts.values())
            winner = next(a for a in answers if a and counts[a] == top)  # ties: the first seen
            maj += winner == r["reference"].strip(SPACE)
    assert abs(summary[f"maj@{n}"] - maj / len(rows)) < 1e-12, (summary[f"maj@{n}"], maj / len(rows))
    print(f"eval_job: {trial}: " + ", ".join(f"{k} {100 * summary[k]:.1f}%" for k in summary if k.startswith(("pass@", "maj@"))))
    return rows, summary

t1, s1 = check("t1")
t2, s2 = check("t2")
for other, name in ((t2, "t = 2"), (check("np1")[0], "one rank")):
    same = sum(a["samples"] == b["samples"] for a, b in zip(t1, other))
    assert same == len(t1), f"t = 1 and {name} differ on {len(t1) - same} of {len(t1)} prompts"
_, base = check("base")
assert s1["pass@1"] > base["pass@1"] + 0.2, (s1["pass@1"], base["pass@1"])
_, after = check("rl_after")
logged = [r for r in map(json.loads, open(f"{sys.argv[1]}/rl/stats.jsonl")) if "eval_pass@1" in r]
assert [r["step"] for r in logged] == [0, 1], [r["step"] for r in logged]
lora_rows, adapter = load("lora_adapter")
lora_logged = [r for r in map(json.loads, open(f"{sys.argv[1]}/lora/stats.jsonl")) if "eval_pass@1" in r]
assert [r["step"] for r in lora_logged] == [0, 2], [r["step"] for r in lora_logged]
# The same samples: the same figures (float32).
for row, summary in zip(logged + lora_logged, (s1, after, s1, adapter)):
    for key in [k for k in summary if k.startswith(("pass@", "maj@"))]:
        assert abs(row[f"eval_{key}"] - summary[key]) < 1e-12, (row["step"], key, row[f"eval_{key}"], summary[key])
moved = sum(a["samples"] != b["samples"] for a, b in zip(lora_rows, t1))
assert moved > 0, "the adapter changed no answer: was it loaded?"
print(f"eval_job: OK (t = 1, t = 2 and one rank: the same {len(t1)} prompts' samples; "
      f"pass@1 of the warm-up {100 * s1['pass@1']:.1f}% vs the base model {100 * base['pass@1']:.1f}%; "
      f"--job rl logs --job eval's figures, pass@1 {100 * s1['pass@1']:.1f}% -> {100 * after['pass@1']:.1f}% after a step; "
      f"with LoRA -> {100 * adapter['pass@1']:.1f}% after two, the adapter changing the answers to {moved} prompts)")
PY
