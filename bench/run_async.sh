#!/usr/bin/env bash
# Synchronous against asynchronous RL side by side on the demo's task (GRPO on 2-digit
# addition after the sloppy warm-up, scripts/demo.sh): the synchronous loop on 2 ranks
# (both generate and train) and separate ranks, 1 generating + 1 training
# (rollout.backend=areal:d1t1 actor.backend=fsdp:d1, decoupled PPO), at
# rollout.max_head_offpolicyness eta in ETAS. Reports per mode: wall time per step,
# time to a held-out greedy accuracy of TARGET (evaluation every EVAL_EVERY steps, on
# the time of the steps up to the first evaluation that reached it), tokens generated
# per second, the trainers' idle time per step (synchronous: the rollout phase, when
# nothing trains; asynchronous: the wait for the queue), staleness, final accuracy.
# Writes bench/results/async.json and async.md.
#   bench/run_async.sh              # the demo's task, STEPS=60 steps per mode (~25 min on 2 cores)
#   SMOKE=1 bench/run_async.sh      # the CI smoke config, 3 steps, sync and eta = 1 (a minute)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [ -n "${SMOKE:-}" ]; then
  STEPS="${STEPS:-3}"; ETAS="${ETAS:-1}"; EVAL_EVERY="${EVAL_EVERY:-2}"; label=smoke
  base=(--config configs/ci_smoke.yaml total_train_epochs=3)
else
  STEPS="${STEPS:-60}"; ETAS="${ETAS:-1 2 4}"; EVAL_EVERY="${EVAL_EVERY:-10}"; label=full
  checkpoint="$work/warmup/demo/sft-warmup/checkpoint"
  echo "== the demo's supervised warm-up (configs/demo_sft_warmup.yaml)"
  "${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" --config configs/demo_sft_warmup.yaml cluster.fileroot="$work/warmup" 2>&1 \
    | grep -E "sft: |error" || true
  base=(--config configs/demo_grpo.yaml --fsdp.memory_efficient_load true --model_path "$checkpoint")
fi
TARGET="${TARGET:-0.7}"

run_mode() {  # name, extra overrides...
  local name="$1"; shift
  echo "== $name"
  local start=$SECONDS
  "${AREAL_MPIRUN[@]}" -np 2 "$AREAL_BIN" "${base[@]}" total_train_steps="$STEPS" evaluator.freq_steps="$EVAL_EVERY" \
    cluster.fileroot="$work/runs" experiment_name=async trial_name="$name" "$@" 2>&1 | grep -E "info (step|eval|rl:)|error" || true
  echo "$((SECONDS - start))" > "$work/runs/async/$name/wall_seconds"
}
run_mode sync
for eta in $ETAS; do
  run_mode "eta$eta" rollout.backend=areal:d1t1 actor.backend=fsdp:d1 rollout.max_head_offpolicyness="$eta" \
    actor.use_decoupled_loss=true actor.behav_imp_weight_cap=5
done

"$PY" - "$work/runs/async" "$results" "$label" "$TARGET" "$STEPS" <<'PY'
import datetime, glob, json, os, platform, sys
runs, results, label, target, steps_wanted = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
rows = []
for mode in ["sync"] + sorted((os.path.basename(p) for p in glob.glob(f"{runs}/eta*")), key=lambda m: int(m[3:])):
    lines = [json.loads(l) for l in open(f"{runs}/{mode}/stats.jsonl") if l.strip()]
    steps = sorted((l for l in lines if "reward_mean" in l), key=lambda l: l["step"])
    evals = sorted((l["step"], l["eval_accuracy"]) for l in lines if "eval_accuracy" in l)
    if len(steps) != steps_wanted:
        sys.exit(f"{mode}: {len(steps)} steps in stats.jsonl, not {steps_wanted}")
    step_seconds = [s["step_seconds"] for s in steps]
    reached = next((step for step, acc in evals if acc >= target), None)
    rows.append({
        "mode": mode, "eta": None if mode == "sync" else int(mode[3:]),
        "ranks": "2 (both generate and train)" if mode == "sync" else "1 generates + 1 trains",
        "wall_seconds": float(open(f"{runs}/{mode}/wall_seconds").read()),
        "seconds_per_step": sum(step_seconds) / len(step_seconds),
        "seconds_per_step_after_first": sum(step_seconds[1:]) / max(1, len(step_seconds) - 1),
        "time_to_target_seconds": None if reached is None else sum(step_seconds[:reached]),
        "step_reaching_target": reached,
        # answer tokens over the run's step time (sync's figure is per rollout second, async's per step second)
        "gen_tokens_per_second": sum(s["gen_tokens_per_second"] * (s["step_seconds"] if mode != "sync" else s["rollout_seconds"])
                                     for s in steps) / sum(step_seconds),
        "trainer_idle_seconds_per_step": sum(s["rollout_seconds"] for s in steps) / len(steps),
        "train_seconds_per_step": sum(s["train_seconds"] for s in steps) / len(steps),
        "staleness_mean": sum(s.get("staleness_mean", 0) for s in steps) / len(steps),
        "staleness_max": max(s.get("staleness_max", 0) for s in steps),
        "eval_first": evals[0][1], "eval_last": evals[-1][1], "evals": evals})
sync = rows[0]
for r in rows:
    r["step_time_ratio_to_sync"] = r["seconds_per_step"] / sync["seconds_per_step"]
meta = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(), "machine": platform.machine(),
        "label": label, "steps": steps_wanted, "target_accuracy": target}
json.dump({"meta": meta, "rows": rows}, open(f"{results}/async.json", "w"), indent=1)
fmt = lambda x, f="{:.1f}": "not reached" if x is None else f.format(x)
lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), {label} run, {steps_wanted} steps per mode; "
         f"time to {100 * target:.0f}% held-out accuracy counts the steps up to the first evaluation that reached it.", "",
         "| mode | ranks | s/step | / sync | time to target | gen tokens/s | trainer idle s/step | train s/step | staleness mean / max | accuracy first -> last |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {'synchronous' if r['eta'] is None else 'async, eta ' + str(r['eta'])} | {r['ranks']} | "
                 f"{r['seconds_per_step']:.2f} | {r['step_time_ratio_to_sync']:.2f} | "
                 f"{fmt(r['time_to_target_seconds'], '{:.0f} s')} | {r['gen_tokens_per_second']:.0f} | "
                 f"{r['trainer_idle_seconds_per_step']:.2f} | {r['train_seconds_per_step']:.2f} | "
                 f"{r['staleness_mean']:.2f} / {r['staleness_max']:.0f} | "
                 f"{100 * r['eval_first']:.1f}% -> {100 * r['eval_last']:.1f}% |")
open(f"{results}/async.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
