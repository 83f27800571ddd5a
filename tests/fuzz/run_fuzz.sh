#!/usr/bin/env bash
# Builds the safetensors header fuzz target with clang (libFuzzer + AddressSanitizer +
# UBSan) and runs it for a fixed number of inputs, starting from a small seed corpus.
#   run_fuzz.sh BUILD_DIR [RUNS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:?build dir}/fuzz"
runs="${2:-20000}"
mkdir -p "$out/corpus"
bin="$out/fuzz_safetensors_header"
sources=("$here/fuzz_safetensors_header.cpp" "$root/lib/areal/io/safetensors_header.cpp" "$root/lib/areal/util/strings.cpp")
if [ ! -x "$bin" ] || [ -n "$(find "${sources[@]}" "$root/lib/areal/io/safetensors_header.h" -newer "$bin")" ]; then
  # One object per source through ccache (as the CMake build: paths relative to the
  # checkout, so a fresh clone reuses them), then the link.
  ccache=(); command -v ccache >/dev/null && ccache=(env CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1 ccache)
  flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  objects=()
  for src in "${sources[@]}"; do
    obj="$out/$(basename "$src" .cpp).o"
    (cd "$out" && "${ccache[@]}" clang++ "${flags[@]}" -fdebug-prefix-map="$root"=. -I"$root/lib" -c "$src" -o "$obj")
    objects+=("$obj")
  done
  clang++ "${flags[@]}" "${objects[@]}" -o "$bin"
fi
# Seeds: a valid file, one with metadata, one with an empty tensor.
python3 - "$out/corpus" <<'PY'
import json, struct, sys
def file(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
seeds = {
    "valid": file({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16)),
    "meta": file({"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                  "b": {"dtype": "I64", "shape": [1], "data_offsets": [6, 14]}}, bytes(14)),
    "empty": file({"e": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}, b""),
}
for name, data in seeds.items():
    open(f"{sys.argv[1]}/{name}", "wb").write(data)
PY
"$bin" -runs="$runs" -max_len=4096 -seed=1 "$out/corpus" 2>&1 | tail -n 3
