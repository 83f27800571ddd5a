# Sourced by the other scripts: where things live and how mpirun is called.
AREAL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AREAL_VENV="${AREAL_VENV:-$HOME/.cache/areal-train/venv}"
AREAL_PYTHON_BIN="$AREAL_VENV/bin/python"
AREAL_BUILD="${AREAL_BUILD:-$AREAL_ROOT/build}"
AREAL_BIN="$AREAL_BUILD/app/areal-train"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# mpirun on one machine with 2 cores: oversubscribe; containers and CI run as root.
AREAL_MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && AREAL_MPIRUN+=(--allow-run-as-root)
