#!/usr/bin/env bash
# Regenerates docs/cli_reference.md from the option schema.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
"$AREAL_BIN" --cli-reference > "$AREAL_ROOT/docs/cli_reference.md"
echo "wrote docs/cli_reference.md"
