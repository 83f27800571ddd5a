#!/usr/bin/env bash
# areal-train side by side with PyTorch FSDP2 (bench/reference/, the same torch wheel),
# in one run on one machine, same checkpoints and data:
#   init      N in NP_INIT: areal-train (--job init) rank-0 streaming (memory_efficient_load
#             true) vs FSDP2 AReaL-style (rank 0 loads, broadcast_from_rank0), and sliced
#             reads (false) vs FSDP2 plain (every rank from_pretrained); per-rank wall
#             time and peak host-memory growth; the raw read time of the checkpoint
#   training  N in NP_TRAIN, activation checkpointing on and off on both sides (CKPT_MODES):
#             areal-train --job sft vs FSDP2, same batch, data, AdamW, clipping: tokens/s
#             per rank after warm-up, peak memory growth per rank, and the first steps'
#             losses (must agree)
#   packing   N in PACK_NP, variable-length rows (a long tail of lengths, as GSM8K answers):
#             areal-train padded (one micro-batch) vs packed (actor.mb_spec.max_tokens_per_mb)
#             vs FSDP2 (pads, as transformers does): useful (non-padding) tokens/s per rank
# Writes bench/results/vs_fsdp2.json, vs_fsdp2.md and vs_fsdp2.png.
#   bench/run_vs_fsdp2.sh                              # the full benchmark (~0.5 B init, 74 M training)
#   SMOKE=1 bench/run_vs_fsdp2.sh                      # tiny models, N=2 only: the CI smoke run
#   MOE=1 bench/run_vs_fsdp2.sh                        # mixtures of experts (Qwen3-MoE, 0.68 B init,
#                                                      # 131 M training at e = 1 and 2 (EXPERTS);
#                                                      # init and training parts)
#   PARTS=init bench/run_vs_fsdp2.sh                   # some parts only (init training packing);
#                                                      # results then go to vs_fsdp2_<label>-<parts>.*
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export AREAL_BENCH_DEVICE="${AREAL_BENCH_DEVICE:-auto}"

if [ -n "${SMOKE:-}" ]; then
  init_model=tests/fixtures/models/tiny_chat; train_model=tests/fixtures/models/tiny_chat
  NP_INIT="${NP_INIT:-2}"; NP_TRAIN="${NP_TRAIN:-2}"; STEPS="${STEPS:-3}"; WARMUP="${WARMUP:-1}"
  BATCH="${BATCH:-4}"; SEQ="${SEQ:-32}"; label="smoke"
  PACK_NP="${PACK_NP:-2}"; PACK_BATCH=4; PACK_STEPS=2; PACK_MIN=8; PACK_MAX=64; PACK_MEDIAN=16; PACK_BUDGET=128
elif [ -n "${MOE:-}" ]; then
  init_model="$models/qwen3moe_0p7b_float32"; train_model="$models/qwen3moe_130m_float32"
  "$PY" bench/make_bench_model.py "$init_model" float32 moe_0.7b
  "$PY" bench/make_bench_model.py "$train_model" float32 moe_130m
  NP_INIT="${NP_INIT:-1 2 4}"; NP_TRAIN="${NP_TRAIN:-1 2 4}"; STEPS="${STEPS:-5}"; WARMUP="${WARMUP:-1}"
  BATCH="${BATCH:-4}"; SEQ="${SEQ:-128}"; label="moe"; PARTS="${PARTS:-init training}"; EXPERTS="${EXPERTS:-1 2}"
  PACK_NP=""; PACK_BATCH=8; PACK_STEPS=4; PACK_MIN=32; PACK_MAX=512; PACK_MEDIAN=100; PACK_BUDGET=1024
else
  init_model="$models/qwen2_0p5b_float32"; train_model="$models/qwen2_74m_float32"
  "$PY" bench/make_bench_model.py "$init_model" float32 0.5b
  "$PY" bench/make_bench_model.py "$train_model" float32 74m
  NP_INIT="${NP_INIT:-1 2 4}"; NP_TRAIN="${NP_TRAIN:-1 2 4}"; STEPS="${STEPS:-5}"; WARMUP="${WARMUP:-1}"
  BATCH="${BATCH:-4}"; SEQ="${SEQ:-128}"; label="full"
  PACK_NP="${PACK_NP:-1 2}"; PACK_BATCH=8; PACK_STEPS=4; PACK_MIN=32; PACK_MAX=512; PACK_MEDIAN=100; PACK_BUDGET=1024
fi
LR=1e-4
default_parts="init training packing"; [ -n "${MOE:-}" ] && default_parts="init training"
PARTS="${PARTS:-$default_parts}"
export AREAL_BENCH_PARTS="$PARTS"
[ "$PARTS" = "$default_parts" ] || label="$label-${PARTS// /-}"
wants() { [[ " $PARTS " == *" $1 "* ]]; }
wants init || NP_INIT=""
wants training || NP_TRAIN=""
wants packing || PACK_NP=""
CKPT_MODES="${CKPT_MODES:-true false}"  # actor.gradient_checkpointing / FSDP2 activation checkpointing

# Training rows of exactly SEQ byte tokens (BOS + SEQ-2 bytes + EOS), seeded; both sides use
# the byte tokenizer (areal-train: --tokenizer_path byte, even where the model ships one).
"$PY" - "$work/train.jsonl" "$((BATCH * STEPS))" "$SEQ" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"text": "".join(random.choice("abcdefghij 0123456789+=.") for _ in range(int(sys.argv[3]) - 2))}) + "\n")
PY

# Variable-length rows for the packing rows: log-normal lengths (median PACK_MEDIAN,
# clipped to PACK_MIN..PACK_MAX), the long tail of answer lengths GSM8K has.
"$PY" - "$work/varlen.jsonl" "$((PACK_BATCH * PACK_STEPS))" "$PACK_MIN" "$PACK_MAX" "$PACK_MEDIAN" <<'PY'
import json, math, random, sys
random.seed(1)
rows, low, high, median = (int(a) for a in sys.argv[2:6])
with open(sys.argv[1], "w") as f:
    for _ in range(rows):
        length = min(high, max(low, int(random.lognormvariate(math.log(median), 0.7))))
        f.write(json.dumps({"text": "".join(random.choice("abcdefghij 0123456789+=.") for _ in range(length - 2))}) + "\n")
PY

port=29600
for np in $NP_INIT; do
  for efficient in true false; do
    echo "== init, areal-train, -np $np, memory_efficient_load=$efficient"
    "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BIN" --job init --model_path "$init_model" \
      --fsdp.memory_efficient_load "$efficient" --cluster.fileroot "$work/runs" \
      --experiment_name init --trial_name "areal_np${np}_${efficient}" 2>&1 | grep -E "whole init|error" || true
  done
  for mode in areal plain; do
    echo "== init, FSDP2 ($mode), -np $np"
    port=$((port + 1))
    AREAL_BENCH_PORT=$port "${AREAL_MPIRUN[@]}" -np "$np" -x AREAL_BENCH_PORT -x AREAL_BENCH_DEVICE "$PY" \
      bench/reference/fsdp2_init.py "$init_model" "$mode" "$work/fsdp2_init_${mode}_np${np}.json" 2>&1 \
      | grep -E "Error|error" || true
  done
done
for np in $NP_TRAIN; do
  for ckpt in $CKPT_MODES; do
    # Mixtures of experts: also with expert parallelism (actor.backend fsdp:dNeE) for each E in
    # EXPERTS that divides N (trial ..._eE; e = 1 is the plain trial).
    for e in ${EXPERTS:-1}; do
      if [ "$e" != 1 ] && { [ "$np" = 1 ] || [ $((np % e)) != 0 ]; }; then continue; fi
      suffix=""; [ "$e" = 1 ] || suffix="_e$e"
      echo "== training, areal-train --job sft, -np $np, gradient checkpointing $ckpt, e $e"
      "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BIN" --job sft --model_path "$train_model" --tokenizer_path byte --actor.dtype float32 \
        --actor.gradient_checkpointing "$ckpt" --actor.backend "fsdp:d${np}e${e}" \
        --train_dataset.path "$work/train.jsonl" --train_dataset.shuffle false --train_dataset.batch_size "$BATCH" \
        --total_train_steps "$STEPS" --optimizer.lr "$LR" --optimizer.warmup_steps_proportion 0 \
        --optimizer.lr_scheduler_type constant --cluster.fileroot "$work/runs" --experiment_name train \
        --trial_name "areal_np${np}_ckpt${ckpt}${suffix}" 2>&1 | grep -E "sft:|error" || true
    done
    echo "== training, FSDP2, -np $np, activation checkpointing $ckpt"
    port=$((port + 1))
    AREAL_BENCH_PORT=$port "${AREAL_MPIRUN[@]}" -np "$np" -x AREAL_BENCH_PORT -x AREAL_BENCH_DEVICE "$PY" \
      bench/reference/fsdp2_train.py "$train_model" "$work/train.jsonl" "$BATCH" "$STEPS" "$LR" \
      "$work/fsdp2_train_np${np}_ckpt${ckpt}.json" "$ckpt" 2>&1 | grep -E "Error|error" || true
  done
done
for np in $PACK_NP; do
  for budget in 0 "$PACK_BUDGET"; do
    echo "== packing, areal-train --job sft, -np $np, actor.mb_spec.max_tokens_per_mb $budget"
    "${AREAL_MPIRUN[@]}" -np "$np" "$AREAL_BIN" --job sft --model_path "$train_model" --tokenizer_path byte --actor.dtype float32 \
      --actor.mb_spec.max_tokens_per_mb "$budget" \
      --train_dataset.path "$work/varlen.jsonl" --train_dataset.shuffle false --train_dataset.batch_size "$PACK_BATCH" \
      --total_train_steps "$PACK_STEPS" --optimizer.lr "$LR" --optimizer.warmup_steps_proportion 0 \
      --optimizer.lr_scheduler_type constant --cluster.fileroot "$work/runs" --experiment_name pack \
      --trial_name "areal_np${np}_budget${budget}" 2>&1 | grep -E "sft:|error" || true
  done
  echo "== packing, FSDP2 (padded), -np $np"
  port=$((port + 1))
  AREAL_BENCH_PORT=$port "${AREAL_MPIRUN[@]}" -np "$np" -x AREAL_BENCH_PORT -x AREAL_BENCH_DEVICE "$PY" \
    bench/reference/fsdp2_train.py "$train_model" "$work/varlen.jsonl" "$PACK_BATCH" "$PACK_STEPS" "$LR" \
    "$work/fsdp2_pack_np${np}.json" false 2>&1 | grep -E "Error|error" || true
done
"$PY" bench/summarize_vs_fsdp2.py "$work" "$init_model" "$train_model" "$results" "$label" "$WARMUP"
