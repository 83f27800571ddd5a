"""A model of init time at cluster scale: rank-0 streaming, sliced reads, one reader per
node and FSDP2's two loads, for N = 8 ... 1024 ranks (8 per node), from bandwidths
measured on this machine (calibration) and stated cluster figures (assumptions).

    init_at_scale.py RESULTS_DIR      # reads RESULTS_DIR/init.json (bench/run_init.sh)

Writes init_at_scale.json, init_at_scale.md and init_at_scale.png to RESULTS_DIR.

Every path is a sum of phases, each phase bytes / bandwidth (or a count x a latency);
where several resources serve one phase at once, the slowest bounds it (max):

  alloc      every rank zero-fills its float32 shards (4 P_count / N bytes), except on the
             sliced path, which faults the pages in while reading into them
  read       the bytes a reader reads, bounded by one reader's bandwidth, the node's
             filesystem client and the shared filesystem's aggregate ceiling
  requests   per-file opens (metadata server, a few in parallel) and per-read latency
  send       rank 0's scatter (float32, (N-1)/N of the model through its link), the
             node reader's scatter within the node, or FSDP2's broadcast of every tensor
  verify     every rank fingerprints its shards: 4 P_count / N bytes

The calibration fits this machine's bandwidths on some measured runs (N = 1 and 4) and
predicts the others (N = 2, both paths, warm and cold page cache), printing the error.
"""
import json
import math
import os
import sys

GB = 1e9
MIB = 1 << 20


def phases(path, n, m):
    """Seconds of each phase of `path` on n ranks with machine/cluster figures m."""
    s = m["checkpoint_bytes"]
    fp32 = s * 4 / m["dtype_bytes"]  # the model as float32 master shards
    per_node = min(m["ranks_per_node"], n)
    nodes = math.ceil(n / m["ranks_per_node"])
    link = m["net_gbps"] if nodes > 1 else m["intra_gbps"]  # what rank 0's sends go through
    zero_fill = fp32 / n / (m["zero_fill_gbps"] * GB)
    out = {"alloc": 0.0 if path == "sliced" else zero_fill, "verify": fp32 / n / (m["verify_gbps"] * GB)}
    if path == "rank-0 streaming":  # read a piece, scatter it, next piece: the phases add up
        out["read"] = s / (min(m["stream_reader_gbps"], m["node_gbps"]) * GB)  # into a reused send buffer
        out["requests"] = m["files"] * m["open_s"]
        # the others' pieces through rank 0's link, its own piece a local copy
        out["send"] = fp32 * (n - 1) / n / (link * GB) + fp32 / n / (m["copy_gbps"] * GB)
    elif path == "sliced":  # every rank reads its 1/N, all at once
        out["read"] = max(s / n / (m["reader_gbps"] * GB), s * per_node / n / (m["node_gbps"] * GB),
                          s / (m["fs_gbps"] * GB))
        out["requests"] = (n * m["files"] * m["open_s"] / m["metadata_parallelism"] +
                           2 * m["units"] * m["request_s"])
        out["send"] = 0.0
    elif path == "one reader per node":  # a node's reader reads the node's slices, scatters within the node
        out["read"] = max(s * per_node / n / (min(m["reader_gbps"], m["node_gbps"]) * GB), s / (m["fs_gbps"] * GB))
        out["requests"] = (nodes * m["files"] * m["open_s"] / m["metadata_parallelism"] +
                           2 * m["units"] * per_node * m["request_s"])
        out["send"] = fp32 * per_node / n * (per_node - 1) / per_node / (m["intra_gbps"] * GB)
    elif path == "FSDP2 rank 0 + broadcast":  # AReaL's memory_efficient_load: rank 0 holds the state dict
        out["read"] = s / (min(m["reader_gbps"], m["node_gbps"]) * GB)
        out["requests"] = m["files"] * m["open_s"]
        out["send"] = s / (link * GB) if n > 1 else 0.0  # a pipelined broadcast: ~one model through each link
    elif path == "FSDP2 plain":  # every rank reads the whole checkpoint
        out["read"] = max(s / (m["reader_gbps"] * GB), s * per_node / (m["node_gbps"] * GB),
                          s * n / (m["fs_gbps"] * GB))
        out["requests"] = n * m["files"] * m["open_s"] / m["metadata_parallelism"]
        out["send"] = 0.0
    return out


PATHS = ["rank-0 streaming", "sliced", "one reader per node", "FSDP2 rank 0 + broadcast", "FSDP2 plain"]


def calibrate(init_json):
    """This machine's figures, fitted on the float32 runs at N = 1 (readers, zero-fill,
    copy, verify) and N = 4 (scatter, the node's read ceiling), warm and cold page cache."""
    runs = json.load(open(init_json))["rows"]
    rows = [r for r in runs if r["dtype"] == "float32"]
    if not rows:
        sys.exit("init.json has no float32 rows: run bench/run_init.sh first")

    def stage(n, efficient, cache, name, rank=None):  # seconds in stage `name`: the slowest rank's, or `rank`'s
        got = [r["stages"][name]["seconds"] for r in rows
               if r["world_size"] == n and r["memory_efficient"] == efficient and r["cache"] == cache and
               rank in (None, r["rank"])]
        if not got:
            sys.exit(f"init.json lacks N={n} {'streaming' if efficient else 'sliced'} {cache}")
        return max(got)

    s = rows[0]["checkpoint_bytes"]
    fitted = {}
    for cache in ("warm", "cold"):
        m = {"checkpoint_bytes": s, "dtype_bytes": 4, "ranks_per_node": 8, "files": 1, "units": 26,
             "open_s": 0.0, "request_s": 0.0, "metadata_parallelism": 1, "fs_gbps": 1e9}
        m["zero_fill_gbps"] = s / stage(1, True, cache, "fsdp_shard") / GB
        m["stream_reader_gbps"] = s / stage(1, True, cache, "rank0_load") / GB  # no page faults: a reused buffer
        m["copy_gbps"] = s / stage(1, True, cache, "broadcast") / GB  # N = 1: the scatter is a copy
        m["verify_gbps"] = s / stage(1, False, cache, "verify") / GB
        m["reader_gbps"] = s / stage(1, False, cache, "sliced_read") / GB
        # N = 4 on one node: the sliced read is bounded by the node (disk or page cache)
        m["node_gbps"] = max(m["reader_gbps"], s / stage(4, False, cache, "sliced_read") / GB)
        # rank 0's own time in the scatters (the others' also holds their wait for its reads)
        m["intra_gbps"] = m["net_gbps"] = s * 3 / 4 / stage(4, True, cache, "broadcast", rank=0) / GB
        fitted[cache] = m
    checks = []
    for cache, m in fitted.items():
        for n in sorted({r["world_size"] for r in rows}):
            for efficient in (True, False):
                measured = max(r["seconds"] for r in rows if r["world_size"] == n and
                               r["memory_efficient"] == efficient and r["cache"] == cache)
                path = "rank-0 streaming" if efficient else "sliced"
                model = sum(phases(path, n, m).values())
                checks.append({"cache": cache, "world_size": n, "path": path, "measured_s": measured,
                               "model_s": model, "error": model / measured - 1,
                               "fitted_on": n in (1, 4)})
    return fitted, checks


# The cluster the model is run for: stated figures, not measurements (change them here).
CLUSTER = {
    "checkpoint_bytes": 140e9,   # a 70 B model in bfloat16
    "dtype_bytes": 2,
    "ranks_per_node": 8,
    "files": 30,                 # safetensors shards of ~5 GB
    "units": 82,                 # 80 decoder layers + embedding + head
    "reader_gbps": 3.0,          # one process reading a shared filesystem (2-5 GB/s)
    "stream_reader_gbps": 3.0,
    "copy_gbps": 1000.0,         # rank 0's own piece, on the GPU
    "node_gbps": 12.5,           # a node's filesystem client: one 100 Gb/s link
    "fs_gbps": 100.0,            # the shared filesystem's aggregate ceiling
    "net_gbps": 25.0,            # a node's link to the others: 200 Gb/s InfiniBand
    "intra_gbps": 100.0,         # within a node (NVLink / shared memory), NCCL
    "zero_fill_gbps": 1000.0,    # shards on the GPU: zero-fill and fingerprint at device speed
    "verify_gbps": 1000.0,
    "open_s": 0.005,             # one open + header read on the metadata server
    "metadata_parallelism": 32,  # opens the metadata servers serve at once
    "request_s": 0.001,          # one read request's latency
}


def main(results):
    fitted, checks = calibrate(os.path.join(results, "init.json"))
    ns = [8 * 2 ** k for k in range(8)]  # 8 ... 1024
    scenarios = {"shared filesystem 100 GB/s": CLUSTER,
                 "shared filesystem 25 GB/s": dict(CLUSTER, fs_gbps=25.0),
                 "metadata-bound (50 ms opens)": dict(CLUSTER, open_s=0.05)}
    table = {name: {p: [sum(phases(p, n, m).values()) for n in ns] for p in PATHS} for name, m in scenarios.items()}
    json.dump({"calibration": {"fitted": fitted, "checks": checks}, "cluster": CLUSTER, "ranks": ns,
               "scenarios": {k: dict(v, figures=scenarios[k]) for k, v in table.items()}},
              open(os.path.join(results, "init_at_scale.json"), "w"), indent=1)

    lines = ["Calibration on this machine (bench/results/init.json, float32 0.5 B): bandwidths fitted on the "
             "N = 1 and N = 4 runs, the N = 2 runs predicted.", "",
             "| page cache | reader GB/s | node read GB/s | scatter GB/s | zero-fill GB/s | verify GB/s |",
             "|---|---|---|---|---|---|"]
    for cache, m in fitted.items():
        lines.append(f"| {cache} | {m['reader_gbps']:.2f} | {m['node_gbps']:.2f} | {m['intra_gbps']:.2f} | "
                     f"{m['zero_fill_gbps']:.2f} | {m['verify_gbps']:.2f} |")
    lines += ["", "| page cache | N | path | measured s | model s | error | |", "|---|---|---|---|---|---|---|"]
    for c in checks:
        lines.append(f"| {c['cache']} | {c['world_size']} | {c['path']} | {c['measured_s']:.2f} | {c['model_s']:.2f} | "
                     f"{100 * c['error']:+.0f}% | {'fitted' if c['fitted_on'] else 'predicted'} |")
    for name, rows in table.items():
        lines += ["", f"Init time (s) at cluster scale, {name}; 140 GB bfloat16 checkpoint, 8 ranks per node "
                  "(figures in bench/init_at_scale.py, CLUSTER):", "",
                  "| path | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
        for p in PATHS:
            lines.append(f"| {p} | " + " | ".join(f"{t:.1f}" for t in rows[p]) + " |")
    open(os.path.join(results, "init_at_scale.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(table), figsize=(5 * len(table), 4), sharey=True)
    for ax, (name, rows) in zip(axes, table.items()):
        for p in PATHS:
            ax.plot(ns, rows[p], marker="o", label=p)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
        ax.set_xlabel("ranks (8 per node)")
        ax.set_title(name, fontsize=10)
    axes[0].set_ylabel("init time (s), model")
    axes[0].legend(fontsize=7)
    fig.suptitle("Init time at cluster scale, 140 GB bfloat16 checkpoint (model: bench/init_at_scale.py)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(results, "init_at_scale.png"), dpi=100)


if __name__ == "__main__":
    main(sys.argv[1])
