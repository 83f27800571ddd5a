#!/usr/bin/env bash
# A mixture of experts' layer: areal-train's grouped expert products against a
# per-expert loop (transformers' eager experts), side by side in one process
# (bench/moe_experts_bench.cpp), forward and forward + backward, float32 on the CPU.
# Shape: Qwen3-30B-A3B's routing (128 experts, top 8) at a quarter of its widths
# (hidden 512, expert width 192), at decode-sized (32), micro-batch-sized (512) and
# prefill-sized (4096) token counts. Writes bench/results/moe_experts.md and .json.
#   bench/run_moe_experts.sh           # the full benchmark (about a minute on 2 cores)
#   SMOKE=1 bench/run_moe_experts.sh   # 8 experts, 16 and 64 tokens
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ -n "${SMOKE:-}" ]; then TOKENS=16,64; EXPERTS=8; TOP_K=2; HIDDEN=32; WIDTH=16; REPEATS=2
else TOKENS="${TOKENS:-32,512,4096}"; EXPERTS="${EXPERTS:-128}"; TOP_K="${TOP_K:-8}"; HIDDEN="${HIDDEN:-512}"
  WIDTH="${WIDTH:-192}"; REPEATS="${REPEATS:-5}"; fi
"$AREAL_BUILD/bench/areal_moe_experts_bench" "$work/moe_experts.json" "$TOKENS" "$EXPERTS" "$TOP_K" "$HIDDEN" "$WIDTH" \
  "$REPEATS" | tee "$work/table.md"
cp "$work/moe_experts.json" "$results/moe_experts.json"
{
  echo "# A sparse layer's experts: grouped products vs a per-expert loop"
  echo
  echo "$EXPERTS experts, top $TOP_K, hidden $HIDDEN, expert width $WIDTH, float32, $(nproc) cores,"
  echo "median of $REPEATS runs; \`bench/run_moe_experts.sh\`, $(date -u +%Y-%m-%d)."
  echo
  cat "$work/table.md"
} > "$results/moe_experts.md"
echo "wrote $results/moe_experts.md"
