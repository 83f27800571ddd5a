"""Collects the init_stages.json of every run of bench/run_init.sh into
bench/results/init.json, a markdown table (init.md) and a plot (init.png).

    summarize_init.py RUNS_DIR MODELS_DIR RESULTS_DIR
    summarize_init.py --evict FILE      # drops FILE's pages from the page cache
"""
import datetime
import json
import os
import platform
import sys
import time

MIB = 1 << 20


def evict(path):
    """Drops the file's clean pages from the page cache: the next read comes from disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read_seconds(path, cold=False):
    """Seconds to read the file's bytes once: from the page cache (best of 3, as the warm
    runs did), or from disk after evicting its pages (cold)."""
    buffer = bytearray(64 * MIB)
    view = memoryview(buffer)
    best = float("inf")
    for _ in range(1 if cold else 3):
        if cold:
            evict(path)
        start = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while f.readinto(view):
                pass
        best = min(best, time.perf_counter() - start)
    return best


def main(runs_dir, models_dir, results_dir):
    rows = []
    for dtype in sorted(os.listdir(runs_dir)):
        checkpoint = os.path.join(models_dir, f"qwen2_0p5b_{dtype}", "model.safetensors")
        raws = {"warm": raw_read_seconds(checkpoint), "cold": raw_read_seconds(checkpoint, cold=True)}
        for trial in sorted(os.listdir(os.path.join(runs_dir, dtype))):
            report = json.load(open(os.path.join(runs_dir, dtype, trial, "init_stages.json")))
            np_, efficient, cache = trial[2:].split("_")
            raw = raws[cache]
            for rank in report["ranks"]:
                bound = rank["shard_bytes"] + 2 * report["largest_unit_bytes"] + 128 * MIB
                rows.append({
                    "dtype": dtype, "world_size": int(np_), "memory_efficient": efficient == "true", "cache": cache,
                    "rank": rank["rank"], "seconds": rank["seconds"],
                    "peak_growth_bytes": rank["peak_growth_bytes"], "shard_bytes": rank["shard_bytes"],
                    "target_bytes": bound, "target_met": rank["peak_growth_bytes"] <= bound,
                    "checkpoint_bytes": os.path.getsize(checkpoint), "raw_read_seconds": raw,
                    "init_over_raw_read": rank["seconds"] / raw,
                    "stages": rank["stages"],
                })
    meta = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "model": "Qwen2.5-0.5B shape, random weights (494 M parameters)"}
    json.dump({"meta": meta, "rows": rows}, open(os.path.join(results_dir, "init.json"), "w"), indent=2)

    lines = [f"Measured {meta['date']} on {meta['cores']} cores; {meta['model']}. Peak = RSS high-water "
             "growth over the whole init; target = shard + 2 x largest unit + 128 MiB.", "",
             "| checkpoint | N | path | page cache | rank | time s | init / raw read | peak growth MiB | shard MiB | target MiB | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['world_size']} | {'rank-0 streaming' if r['memory_efficient'] else 'sliced'} "
                     f"| {r['cache']} | {r['rank']} | {r['seconds']:.2f} | {r['init_over_raw_read']:.1f} | "
                     f"{r['peak_growth_bytes'] / MIB:.0f} | {r['shard_bytes'] / MIB:.0f} | {r['target_bytes'] / MIB:.0f} | "
                     f"{'yes' if r['target_met'] else 'NO'} |")
    raws = sorted({(r['dtype'], r['cache'], r['raw_read_seconds'], r['checkpoint_bytes']) for r in rows})
    lines += [""] + [f"Raw read of the {d} checkpoint ({b / MIB:.0f} MiB, {c} page cache): {s:.2f} s"
                     for d, c, s, b in raws]
    open(os.path.join(results_dir, "init.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, key, scale, ylabel in ((axes[0], "peak_growth_bytes", MIB, "worst rank's peak memory growth (MiB)"),
                                   (axes[1], "seconds", 1, "slowest rank's init time (s)")):
        for efficient, marker in ((True, "o"), (False, "x")):
            for dtype in sorted({r["dtype"] for r in rows}):
                for cache, style in (("warm", "-"), ("cold", ":")):
                    worst = {}
                    for r in rows:
                        if r["memory_efficient"] == efficient and r["dtype"] == dtype and r["cache"] == cache:
                            worst[r["world_size"]] = max(worst.get(r["world_size"], 0), r[key] / scale)
                    ns = sorted(worst)
                    if ns:
                        ax.plot(ns, [worst[n] for n in ns], style, marker=marker,
                                label=f"{'streaming' if efficient else 'sliced'}, {dtype}, {cache}")
        ax.set_xlabel("ranks (N)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=7)
    fig.suptitle("areal-train init, 0.5 B parameters")
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "init.png"), dpi=100)


if __name__ == "__main__":
    if sys.argv[1] == "--evict":
        evict(sys.argv[2])
    else:
        main(*sys.argv[1:4])
