# Sourced by the benchmark scripts: the environment (scripts/env.sh), a built binary,
# the repository as the working folder, and
#   $models   where generated benchmark models are kept between runs
#   $work     a scratch folder, removed on exit
#   $results  where the figures go (RESULTS_DIR, else bench/results)
#   $PY       the venv's python (torch, transformers)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
cd "$AREAL_ROOT"
models="${AREAL_BENCH_MODELS:-$HOME/.cache/areal-train/bench}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="${RESULTS_DIR:-$AREAL_ROOT/bench/results}"
mkdir -p "$models" "$results"
PY="$AREAL_PYTHON_BIN"
