#!/usr/bin/env bash
# A whole GRPO step of areal-train (--job rl) against TRL's GRPOTrainer
# (bench/reference/trl_grpo.py), side by side in one run on one machine: the same model
# (the 74 M training shape with the qwen2 test tokenizer's vocabulary), the same text
# prompts, PROMPTS x GROUP answers of up to NEW tokens per step (temperature 1), the same
# reward (bench/reference/parity_reward.py), group-normalized rewards, no KL, one optimizer
# step per batch, float32, one process each with the machine's torch threads. Each
# step's wall time and its generation part, the first step left out (warm-up).
# Both train the step's rows in one forward and backward, as TRL's per-device batch of
# PROMPTS x GROUP rows without accumulation does: areal-train at its default budget
# (actor.mb_spec.max_tokens_per_mb 0: one packed micro-batch, a group's answers sharing
# their prompt, actor.share_prompts). MB_TOKENS sets a budget (AReaL's CPU GRPO example: 2048).
# Installs trl and datasets into the venv the first time (pip).
# Then the training phase alone with its per-operation profile (bench/train_step_bench.cpp).
# Writes bench/results/vs_trl.json and vs_trl.md.
#   bench/run_vs_trl.sh
#   PROMPTS=4 GROUP=4 NEW=32 STEPS=3 ROUNDS=1 bench/run_vs_trl.sh   # smaller
#   SMOKE=1 bench/run_vs_trl.sh   # the tiny test model, 2 prompts x 2 answers of 8 tokens
#   DTYPE=bfloat16 bench/run_vs_trl.sh   # both sides in bfloat16: vs_trl_bfloat16.*
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DTYPE="${DTYPE:-float32}"
"$PY" -c "import trl, datasets" 2>/dev/null || "$PY" -m pip install -q "trl==1.16.0" datasets
if [ -n "${SMOKE:-}" ]; then
  PROMPTS="${PROMPTS:-2}"; GROUP="${GROUP:-2}"; NEW="${NEW:-8}"; STEPS="${STEPS:-2}"; LR=1e-6
  ROUNDS="${ROUNDS:-1}"; model=tests/fixtures/models/tiny_chat; suffix=_smoke
else
  PROMPTS="${PROMPTS:-8}"; GROUP="${GROUP:-4}"; NEW="${NEW:-64}"; STEPS="${STEPS:-4}"; ROUNDS="${ROUNDS:-2}"; LR=1e-6
  model="$models/qwen2_74m_qwen2tok_float32"; suffix=$([ "$DTYPE" = float32 ] || echo "_$DTYPE")
  "$PY" bench/make_bench_model.py "$model" float32 74m tests/fixtures/tokenizers/qwen2
fi
"$PY" - "$work/prompts.jsonl" "$((PROMPTS * STEPS))" <<'PY'
import json, random, sys
random.seed(0)
words = ("the quick brown fox jumps over lazy dog Natalia sold clips to her friends in April and then "
         "half as many May how many did sell altogether").split()
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"prompt": " ".join(random.choice(words) for _ in range(24)), "answer": ""}) + "\n")
PY
reward="command:$PY scripts/rewards/worker.py bench/reference/parity_reward.py:even_length"
# ROUNDS rounds, each areal-train then TRL, so a drift of the machine's speed over the
# run (seen here: TRL's step 7.6 -> 11.4 s over one day) falls on both sides alike.
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round/$ROUNDS: areal-train --job rl: $PROMPTS prompts x $GROUP answers of up to $NEW tokens, $STEPS steps"
  "$AREAL_BIN" --job rl --model_path "$model" --chat_template none --train_dataset.path "$work/prompts.jsonl" \
    --train_dataset.batch_size "$PROMPTS" --train_dataset.shuffle false --gconfig.n_samples "$GROUP" \
    --gconfig.max_new_tokens "$NEW" --gconfig.temperature 1 --actor.group_size "$GROUP" --actor.ppo_n_minibatches 1 \
    --actor.kl_ctl 0 --actor.dtype "$DTYPE" --actor.mb_spec.max_tokens_per_mb "${MB_TOKENS:-0}" \
    --actor.reward_norm.mean_level group --actor.reward_norm.std_level group --actor.reward_norm.group_size "$GROUP" \
    --actor.adv_norm.mean_level none --actor.adv_norm.std_level none --optimizer.lr "$LR" \
    --optimizer.lr_scheduler_type constant --optimizer.warmup_steps_proportion 0 --total_train_steps "$STEPS" \
    --reward_fn "$reward" --cluster.fileroot "$work/runs$round" --experiment_name trl --trial_name areal 2>&1 \
    | grep -E "^.*(step [0-9]+/|error|rl:)" || true
  echo "== round $round/$ROUNDS: TRL GRPOTrainer: the same"
  "$PY" bench/reference/trl_grpo.py "$model" "$work/prompts.jsonl" "$PROMPTS" "$GROUP" "$NEW" "$STEPS" "$LR" \
    "$work/trl$round.json" "$DTYPE" 2>&1 | grep -E "trl step|Error" || true
done
# The training phase alone, where its time goes: one engine step (forward, backward,
# AdamW) on PROMPTS x GROUP rows of NEW + 30 tokens (about a step's rows: 24-word prompts
# are 20-30 tokens), a group's rows sharing a 30-token prompt in one packed row, beside
# its matrix products alone.
echo "== the training phase's profile (areal_train_step_bench)"
"$AREAL_BUILD/bench/areal_train_step_bench" "$model" "$work/train_step.json" "$((PROMPTS * GROUP))" "$((NEW + 30))" \
  "${STEPS}" "$DTYPE" "$GROUP" 30
"$PY" - "$work" "$results" "$PROMPTS" "$GROUP" "$NEW" "$suffix" "$DTYPE" "$ROUNDS" "${MB_TOKENS:-0}" <<'PY'
import datetime, json, os, platform, sys
import torch
work, results, prompts, group, new, suffix, dtype = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), *sys.argv[6:8]
rounds, mb_tokens = int(sys.argv[8]), int(sys.argv[9])
# Per round, the steps after its first (warm-up).
areal_rounds, trl_rounds = [], []
for r in range(1, rounds + 1):
    areal_rounds.append([json.loads(l) for l in open(f"{work}/runs{r}/trl/areal/stats.jsonl") if "step_seconds" in l])
    trl_rounds.append(json.load(open(f"{work}/trl{r}.json"))["steps"])
if min(map(len, areal_rounds + trl_rounds)) < 2:
    sys.exit(f"too few steps: areal-train {list(map(len, areal_rounds))}, TRL {list(map(len, trl_rounds))}")
areal = [s for steps in areal_rounds for s in steps[1:]]
trl = [s for steps in trl_rounds for s in steps[1:]]
mean = lambda xs: sum(xs) / len(xs)
a_step, a_gen = mean([r["step_seconds"] for r in areal]), mean([r["rollout_seconds"] for r in areal])
t_step, t_gen = mean([s["seconds"] for s in trl]), mean([s["generation_seconds"] for s in trl])
meta = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(), "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "dtype": dtype, "prompts_per_step": prompts, "group": group,
        "new_tokens": new, "rounds": rounds, "areal_max_tokens_per_mb": mb_tokens, "steps_timed": min(len(areal), len(trl)),
        "round_ratios": [mean([x["step_seconds"] for x in a[1:]]) / mean([x["seconds"] for x in t[1:]])
                         for a, t in zip(areal_rounds, trl_rounds)]}
rows = {"areal_step_seconds": a_step, "areal_rollout_seconds": a_gen, "areal_rest_seconds": a_step - a_gen,
        "trl_step_seconds": t_step, "trl_generation_seconds": t_gen, "trl_rest_seconds": t_step - t_gen,
        "step_ratio": a_step / t_step, "areal_answer_tokens_mean": mean([r["response_length_mean"] for r in areal])}
profile = json.load(open(f"{work}/train_step.json"))
json.dump({"meta": meta, "figures": rows, "areal_steps": areal_rounds, "trl_steps": trl_rounds, "train_step_profile": profile},
          open(os.path.join(results, f"vs_trl{suffix}.json"), "w"), indent=1)
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, CPU, {dtype}; "
         f"{prompts} prompts x {group} answers of up to {new} tokens per step, "
         + (f"areal-train in micro-batches of up to {mb_tokens} tokens" if mb_tokens else "one forward and backward a step on each side")
         + f"; {rounds} rounds of each side in turn, "
         f"the mean of {meta['steps_timed']} steps (each round's first left out); the rounds' step ratios: "
         + ", ".join(f"{x:.2f}" for x in meta["round_ratios"]) + ".", "",
         "| | areal-train | TRL GRPOTrainer | ratio |", "|---|---|---|---|",
         f"| whole step | {a_step:.2f} s | {t_step:.2f} s | {a_step / t_step:.2f} [<= 0.5] |",
         f"| rollout (areal-train: weights to the rollout, generation, rewards; TRL: generate()) | {a_gen:.2f} s | {t_gen:.2f} s | {a_gen / t_gen:.2f} |",
         f"| the rest (rewards, advantages, forward, backward, optimizer) | {a_step - a_gen:.2f} s | "
         f"{t_step - t_gen:.2f} s | {(a_step - a_gen) / (t_step - t_gen):.2f} |"]
step_ms = 1e3 * profile["step_seconds"]
lines += ["", f"The training phase alone (`areal_train_step_bench`, {profile['rows']} x {profile['length']} tokens "
          f"in groups of {profile['group']} sharing {profile['prompt']}-token prompts: {profile['tokens_run']} tokens run): "
          f"a step {step_ms:.0f} ms, its matrix products alone {1e3 * profile['floor_seconds']:.0f} ms "
          f"(floor/step {profile['floor_share']:.2f}); per operation (top level):", "",
          "| operation | ms per step | share |", "|---|---|---|"]
ops = sorted(profile["op_seconds_per_step"].items(), key=lambda kv: -kv[1])
for name, seconds in ops[:12]:
    lines.append(f"| `{name}` | {1e3 * seconds:.1f} | {100 * seconds / profile['step_seconds']:.1f} % |")
rest = profile["step_seconds"] - sum(seconds for _, seconds in ops[:12])
lines.append(f"| the rest | {1e3 * rest:.1f} | {100 * rest / profile['step_seconds']:.1f} % |")
open(os.path.join(results, f"vs_trl{suffix}.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
