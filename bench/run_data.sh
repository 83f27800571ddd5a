#!/usr/bin/env bash
# Reading datasets as Hugging Face leaves them: rows per second and the peak memory of
# one rank, parquet against the same rows in JSONL (side by side, one run), for a
# GSM8K-sized dataset (7,473 rows) and a ~1 GB parquet file. Writes
# bench/results/data.md and data.json (quoted by docs/benchmarks.md). Needs ~2.5 GB
# under OUT (default /tmp/areal-bench-data) and ~4.5 GB under TMPDIR while the big file's
# rows are kept (the datasets' row files, docs/data.md "Memory"); SMOKE=1: small files, for CI.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bash "$AREAL_ROOT/scripts/build.sh" >/dev/null
out_dir="${OUT:-/tmp/areal-bench-data}"
results="${RESULTS_DIR:-$AREAL_ROOT/bench/results}"
big_rows=$([ "${SMOKE:-0}" = 1 ] && echo 20000 || echo 2400000)
mkdir -p "$out_dir" "$results"
"$AREAL_PYTHON_BIN" - "$out_dir" "$big_rows" <<'PY'
import json, os, random, sys
import pyarrow as pa, pyarrow.parquet as pq
out, big = sys.argv[1], int(sys.argv[2])
random.seed(0)
words = "the of and to a in is was for on that with as by at from his he it an were are which".split()
def row(i):  # GSM8K-like lengths: ~240 characters of question, ~300 of solution
    q = " ".join(random.choice(words) for _ in range(48)) + f" {i}?"
    a = " ".join(random.choice(words) for _ in range(60)) + f"\n#### {i}"
    return {"question": q, "answer": a}
def write(name, n, jsonl):
    rows = [row(i) for i in range(min(n, 100000))]
    path = os.path.join(out, name)
    if os.path.exists(path + ".parquet"):
        return
    with pq.ParquetWriter(path + ".parquet", pa.schema([("question", pa.string()), ("answer", pa.string())])) as w:
        for start in range(0, n, len(rows)):
            w.write_table(pa.Table.from_pylist(rows[: min(len(rows), n - start)]), row_group_size=10000)
    if jsonl:
        with open(path + ".jsonl", "w") as f:
            for start in range(0, n, len(rows)):
                for r in rows[: min(len(rows), n - start)]:
                    f.write(json.dumps(r) + "\n")
write("gsm8k_sized", 7473, True)
write("big", big, False)
PY
rm -f "$results/data.json"
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')); one process = one rank."
  echo "Big parquet: $(du -h "$out_dir/big.parquet" | cut -f1) on disk."
  echo
  echo "| data | what | rows | text | time | rate | peak RSS over start | row file (TMPDIR) |"
  echo "|---|---|---|---|---|---|---|---|"
  for f in gsm8k_sized.parquet gsm8k_sized.jsonl; do
    "$AREAL_BUILD/bench/areal_data_bench" "$out_dir/$f" "$f" --json "$results/data.json"
  done
  for f in gsm8k_sized.parquet gsm8k_sized.jsonl; do
    "$AREAL_BUILD/bench/areal_data_bench" "$out_dir/$f" "$f" --prompts --json "$results/data.json"
  done
  for mode in "" --prompts --sft; do  # the rows kept for training live on disk (docs/data.md, "Memory")
    "$AREAL_BUILD/bench/areal_data_bench" "$out_dir/big.parquet" big.parquet $mode --json "$results/data.json"
  done
} | tee "$results/data.md"
