#!/usr/bin/env bash
# On a machine with a GPU: build with the GPU tests on, then run the collective
# tests on CUDA tensors through NCCL (and the CPU ones beside them), then the overlap
# benchmark's GPU rows (one rank, bfloat16; results in bench/results/gpu/), and
# --job init on the GPU by both load paths (sliced reads through the staging buffer,
# rank-0 streaming), then a few SFT and RL steps in bfloat16 on a model of
# Qwen2.5-0.5B's shape initialized from the seed (no download: its config.json is
# written here; byte tokens), and the same RL steps on the tiny Qwen3-MoE.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# AREAL_PYARROW_ROOT: a pyarrow folder carried to a machine whose torch has none beside it.
AREAL_BUILD="${AREAL_BUILD}-gpu" bash "$AREAL_ROOT/scripts/build.sh" -DAREAL_GPU_TESTS=ON \
  ${AREAL_PYARROW_ROOT:+-DAREAL_PYARROW_ROOT="$AREAL_PYARROW_ROOT"}
cd "${AREAL_BUILD}-gpu"
nvidia-smi --query-gpu=name,memory.total --format=csv || true
ctest --output-on-failure -R "nccl_collectives|mpi_tests_np1"
cd "$AREAL_ROOT"
for efficient in false true; do
  "${AREAL_BUILD}-gpu/app/areal-train" --job init --device cuda --model_path tests/fixtures/models/qwen2_untied \
    --fsdp.memory_efficient_load "$efficient" --cluster.fileroot "$(mktemp -d)"
done
AREAL_BUILD="${AREAL_BUILD}-gpu" NP=1 DTYPE=bfloat16 REPEATS=1 RESULTS_DIR="$AREAL_ROOT/bench/results/gpu" \
  bash bench/run_overlap.sh
# Qwen2.5-0.5B's shape from the seed: SFT and RL steps in bfloat16 on the GPU.
half_b="$(mktemp -d)"
cat > "$half_b/config.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
 "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
 "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
 "tie_word_embeddings": true}
JSON
common=(--device cuda --model_path "$half_b" --init_from_scratch true --tokenizer_path byte --actor.dtype bfloat16
        --cluster.fileroot "$(mktemp -d)")
"${AREAL_BUILD}-gpu/app/areal-train" --job sft "${common[@]}" --train_dataset.path configs/data/arithmetic_sft.jsonl \
  --train_dataset.batch_size 8 --total_train_steps 5
"${AREAL_BUILD}-gpu/app/areal-train" --job rl "${common[@]}" --chat_template none \
  --train_dataset.path builtin:arithmetic/train --train_dataset.batch_size 4 --gconfig.n_samples 4 \
  --actor.group_size 4 --gconfig.max_new_tokens 32 --total_train_steps 3
"${AREAL_BUILD}-gpu/app/areal-train" --job rl --config configs/ci_smoke.yaml --device cuda --actor.dtype bfloat16 \
  --model_path tests/fixtures/models/tiny_moe_chat --actor.router_aux_loss_coef 0.01 --cluster.fileroot "$(mktemp -d)" \
  --reward_fn "command:sh tests/fixtures/rewards/length_parity.sh"
