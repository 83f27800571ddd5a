#!/usr/bin/env bash
# The test suite: setup, build, then every Catch2 test through CTest (including
# the multi-rank ones under mpirun). Extra arguments go to ctest (e.g. -R cli).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$AREAL_ROOT/scripts/build.sh"
cd "$AREAL_BUILD"
ctest --output-on-failure -j "${AREAL_TEST_JOBS:-2}" "$@"
