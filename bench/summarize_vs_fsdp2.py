"""Collects one run of bench/run_vs_fsdp2.sh into vs_fsdp2.json, a markdown table
(vs_fsdp2.md) and a plot (vs_fsdp2.png), with the ratios areal-train / FSDP2 and the
issue's targets. Exits non-zero when the two sides' first-step losses disagree.

    summarize_vs_fsdp2.py WORK_DIR INIT_MODEL TRAIN_MODEL RESULTS_DIR LABEL WARMUP_STEPS
"""
import datetime
import glob
import json
import os
import platform
import re
import sys

import torch

from summarize_init import raw_read_seconds  # the same floor as the init benchmark

MIB = 1 << 20


def init_rows(work):
    rows = []
    for path in sorted(glob.glob(f"{work}/runs/init/areal_np*/init_stages.json")):
        np_, efficient = re.match(r".*areal_np(\d+)_(true|false)", path).groups()
        report = json.load(open(path))
        rows.append({"side": "areal-train", "mode": "memory-efficient" if efficient == "true" else "sliced",
                     "world_size": int(np_),
                     "seconds": [r["seconds"] for r in report["ranks"]],
                     "peak_growth_bytes": [r["peak_growth_bytes"] for r in report["ranks"]]})
    for path in sorted(glob.glob(f"{work}/fsdp2_init_*_np*.json")):
        report = json.load(open(path))
        rows.append({"side": "FSDP2", "mode": "memory-efficient" if report["mode"] == "areal" else "plain",
                     "world_size": report["world_size"],
                     "seconds": [r["seconds"] for r in report["ranks"]],
                     "peak_growth_bytes": [r["peak_growth_bytes"] for r in report["ranks"]]})
    return rows


def train_rows(work, warmup):
    rows = []
    for path in sorted(glob.glob(f"{work}/runs/train/areal_np*/stats.jsonl")):
        np_, ckpt, experts = re.match(r".*areal_np(\d+)_ckpt(true|false)(?:_e(\d+))?/", path).groups()
        np_ = int(np_)
        steps = [json.loads(l) for l in open(path) if l.strip()]
        memory = json.load(open(os.path.join(os.path.dirname(path), "train_memory.json")))
        timed = steps[warmup:]
        rows.append({"side": "areal-train", "world_size": np_, "checkpointing": ckpt == "true",
                     "experts": int(experts or 1), "losses": [s["loss"] for s in steps],
                     "tokens_per_second_per_rank": sum(s["tokens"] / np_ for s in timed) / sum(s["seconds"] for s in timed),
                     "peak_growth_bytes": memory["peak_growth_bytes"]})
    for path in sorted(glob.glob(f"{work}/fsdp2_train_np*.json")):
        report = json.load(open(path))
        timed = report["steps"][warmup:]
        rows.append({"side": "FSDP2", "world_size": report["world_size"],
                     "checkpointing": report["gradient_checkpointing"], "losses": [s["loss"] for s in report["steps"]],
                     "tokens_per_second_per_rank": sum(s["target_tokens"] / report["world_size"] for s in timed) /
                                                   sum(s["seconds"] for s in timed),
                     "peak_growth_bytes": [r["peak_growth_bytes"] for r in report["ranks"]]})
    return rows


def pack_rows(work, warmup):
    """Useful (target) tokens/s per rank of the variable-length runs."""
    rows = []
    for path in sorted(glob.glob(f"{work}/runs/pack/areal_np*/stats.jsonl")):
        np_, budget = (int(g) for g in re.match(r".*areal_np(\d+)_budget(\d+)", path).groups())
        steps = [json.loads(l) for l in open(path) if l.strip()]
        timed = steps[warmup:]
        rows.append({"side": "areal-train", "mode": "packed" if budget else "padded", "world_size": np_,
                     "max_tokens_per_mb": budget, "losses": [s["loss"] for s in steps],
                     "tokens_per_second_per_rank": sum(s["tokens"] / np_ for s in timed) / sum(s["seconds"] for s in timed)})
    for path in sorted(glob.glob(f"{work}/fsdp2_pack_np*.json")):
        report = json.load(open(path))
        timed = report["steps"][warmup:]
        rows.append({"side": "FSDP2", "mode": "padded", "world_size": report["world_size"],
                     "losses": [s["loss"] for s in report["steps"]],
                     "tokens_per_second_per_rank": sum(s["target_tokens"] / report["world_size"] for s in timed) /
                                                   sum(s["seconds"] for s in timed)})
    return rows


def find(rows, **key):
    return next((r for r in rows if all(r[k] == v for k, v in key.items())), None)


def main(work, init_model, train_model, results, label, warmup):
    warmup = int(warmup)
    init, train, pack = init_rows(work), train_rows(work, warmup), pack_rows(work, warmup)
    raw = raw_read_seconds(os.path.join(init_model, "model.safetensors"))
    comparisons, failures = [], []
    # areal-train's rank-0 streaming against FSDP2's rank-0 load + broadcast (AReaL's
    # memory_efficient_load), its sliced reads against FSDP2's plain load (every rank
    # from_pretrained: AReaL's default), and its two paths against each other.
    for n in sorted({r["world_size"] for r in init}):
        for what, a_mode, f_side, f_mode, targets in (
                ("init, memory-efficient", "memory-efficient", "FSDP2", "memory-efficient",
                 {"peak_memory_ratio": 0.5, "time_ratio": 1.0}),
                ("init, sliced vs FSDP2 plain", "sliced", "FSDP2", "plain", {"peak_memory_ratio": 0.5, "time_ratio": 1.0}),
                ("init, sliced vs memory-efficient", "sliced", "areal-train", "memory-efficient",
                 {"peak_memory_ratio": 1.1, "time_ratio": 1.0})):
            a, f = find(init, side="areal-train", mode=a_mode, world_size=n), find(init, side=f_side, mode=f_mode, world_size=n)
            if a and f:
                comparisons.append({
                    "what": what, "world_size": n,
                    "areal_peak_growth_worst_rank": max(a["peak_growth_bytes"]),
                    "fsdp2_peak_growth_worst_rank": max(f["peak_growth_bytes"]),
                    "peak_memory_ratio": max(a["peak_growth_bytes"]) / max(f["peak_growth_bytes"]),
                    "areal_seconds": max(a["seconds"]), "fsdp2_seconds": max(f["seconds"]),
                    "time_ratio": max(a["seconds"]) / max(f["seconds"]), "raw_read_seconds": raw,
                    "targets": targets})
    ours = {(r["world_size"], r["checkpointing"], r["experts"]) for r in train if r["side"] == "areal-train"}
    for n, ckpt, e in sorted(ours, key=lambda k: (not k[1], k[0], k[2])):
        a = find(train, side="areal-train", world_size=n, checkpointing=ckpt, experts=e)
        f = find(train, side="FSDP2", world_size=n, checkpointing=ckpt)
        if a and f:
            loss_diff = abs(a["losses"][0] - f["losses"][0])
            if loss_diff > 1e-3 * abs(f["losses"][0]):
                failures.append(f"N={n}: first-step losses differ: areal-train {a['losses'][0]} vs FSDP2 {f['losses'][0]}")
            comparisons.append({
                "what": "training, checkpointing " + ("on" if ckpt else "off") + (f", e = {e}" if e > 1 else ""),
                "world_size": n, "experts": e,
                "areal_tokens_per_second_per_rank": a["tokens_per_second_per_rank"],
                "fsdp2_tokens_per_second_per_rank": f["tokens_per_second_per_rank"],
                "throughput_ratio": a["tokens_per_second_per_rank"] / f["tokens_per_second_per_rank"],
                "areal_peak_growth_worst_rank": max(a["peak_growth_bytes"]),
                "fsdp2_peak_growth_worst_rank": max(f["peak_growth_bytes"]),
                "peak_memory_ratio": max(a["peak_growth_bytes"]) / max(f["peak_growth_bytes"]),
                "areal_losses": a["losses"], "fsdp2_losses": f["losses"], "first_loss_abs_diff": loss_diff,
                "targets": {"throughput_ratio": 1.2, "peak_memory_ratio": 0.6 if n == 2 else 1.0}})
    for n in sorted({r["world_size"] for r in pack}):
        packed = find(pack, side="areal-train", mode="packed", world_size=n)
        padded = find(pack, side="areal-train", mode="padded", world_size=n)
        f = find(pack, side="FSDP2", world_size=n)
        if packed and padded and f:
            for other in (padded, f):  # the same data and loss: the first steps must agree
                if abs(packed["losses"][0] - other["losses"][0]) > 1e-3 * abs(other["losses"][0]):
                    failures.append(f"packing N={n}: first-step losses differ: packed {packed['losses'][0]} vs "
                                    f"{other['side']} {other['mode']} {other['losses'][0]}")
            comparisons.append({
                "what": "packing", "world_size": n, "max_tokens_per_mb": packed["max_tokens_per_mb"],
                "packed_tokens_per_second_per_rank": packed["tokens_per_second_per_rank"],
                "padded_tokens_per_second_per_rank": padded["tokens_per_second_per_rank"],
                "fsdp2_tokens_per_second_per_rank": f["tokens_per_second_per_rank"],
                "vs_padded": packed["tokens_per_second_per_rank"] / padded["tokens_per_second_per_rank"],
                "vs_fsdp2": packed["tokens_per_second_per_rank"] / f["tokens_per_second_per_rank"],
                "targets": {"vs_padded": 1.5, "vs_fsdp2": 1.5}})
    parts = os.environ.get("AREAL_BENCH_PARTS", "init training packing").split()
    expected = {"init": ["init, memory-efficient", "init, sliced vs FSDP2 plain", "init, sliced vs memory-efficient"],
                "training": ["training, checkpointing on", "training, checkpointing off"], "packing": ["packing"]}
    for what in [w for part in parts for w in expected[part]]:
        if not any(c["what"] == what for c in comparisons):
            failures.append(f"no '{what}' comparison: a run of one side failed (see its output above)")
    for c in comparisons:
        met = {}
        for key, bound in c["targets"].items():
            met[key] = c[key] >= bound if key in ("throughput_ratio", "vs_padded", "vs_fsdp2") else c[key] <= bound
        c["targets_met"] = met
    meta = {"date": datetime.date.today().isoformat(), "label": label, "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "torch": torch.__version__, "init_model": init_model, "train_model": train_model,
            "device": "cuda" if torch.cuda.is_available() else "cpu", "warmup_steps": warmup}
    suffix = "" if label == "full" else f"_{label}"
    with open(os.path.join(results, f"vs_fsdp2{suffix}.json"), "w") as out:
        json.dump({"meta": meta, "comparisons": comparisons, "init_runs": init, "train_runs": train, "pack_runs": pack},
                  out, indent=1)
    lines = [f"Measured {meta['date']} on {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, "
             f"{meta['device']}; ratios are areal-train / FSDP2 (targets in brackets), except the rows "
             "'sliced vs memory-efficient': areal-train's two init paths, sliced / rank-0 streaming.", "",
             "| what | N | peak mem growth, worst rank (areal / FSDP2) | ratio | time or tokens/s per rank (areal / FSDP2) | ratio |",
             "|---|---|---|---|---|---|"]
    for c in comparisons:
        if c["what"] == "packing":
            continue
        mem = f"{c['areal_peak_growth_worst_rank'] / MIB:.0f} / {c['fsdp2_peak_growth_worst_rank'] / MIB:.0f} MiB"
        if c["what"].startswith("training"):
            speed = f"{c['areal_tokens_per_second_per_rank']:.0f} / {c['fsdp2_tokens_per_second_per_rank']:.0f} tok/s"
            lines.append(f"| {c['what']} | {c['world_size']} | {mem} | {c['peak_memory_ratio']:.2f} "
                         f"[<= {c['targets']['peak_memory_ratio']}] | {speed} | "
                         f"{c['throughput_ratio']:.2f} [>= {c['targets']['throughput_ratio']}] |")
        else:
            bracket = f" [<= {c['targets']['peak_memory_ratio']}]"
            tbracket = f" [<= {c['targets']['time_ratio']}]"
            lines.append(f"| {c['what']} | {c['world_size']} | {mem} | {c['peak_memory_ratio']:.2f}{bracket} | "
                         f"{c['areal_seconds']:.2f} / {c['fsdp2_seconds']:.2f} s (raw read {raw:.2f} s) | "
                         f"{c['time_ratio']:.2f}{tbracket} |")
    packing = [c for c in comparisons if c["what"] == "packing"]
    if packing:
        lines += ["", "Variable-length rows: useful (non-padding) tokens/s per rank, areal-train packed "
                  "(actor.mb_spec.max_tokens_per_mb) vs padded and vs FSDP2 (padded), no checkpointing on any side.", "",
                  "| N | packed | padded | FSDP2 | packed / padded | packed / FSDP2 |", "|---|---|---|---|---|---|"]
        for c in packing:
            lines.append(f"| {c['world_size']} | {c['packed_tokens_per_second_per_rank']:.0f} | "
                         f"{c['padded_tokens_per_second_per_rank']:.0f} | {c['fsdp2_tokens_per_second_per_rank']:.0f} | "
                         f"{c['vs_padded']:.2f} [>= 1.5] | {c['vs_fsdp2']:.2f} [>= 1.5] |")
    with open(os.path.join(results, f"vs_fsdp2{suffix}.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        plot(comparisons, os.path.join(results, f"vs_fsdp2{suffix}.png"), meta)
    except ImportError:
        pass
    for f in failures:
        print("MISMATCH:", f)
    sys.exit(1 if failures else 0)


def plot(comparisons, path, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    init = {c["what"]: {r["world_size"]: r for r in comparisons if r["what"] == c["what"]} for c in comparisons}
    streamed, sliced = init.get("init, memory-efficient", {}), init.get("init, sliced vs FSDP2 plain", {})
    ns = sorted(set(streamed) | set(sliced))
    width = 0.2
    for ax, key_a, key_f, scale, title, unit in (
            (axes[0], "areal_peak_growth_worst_rank", "fsdp2_peak_growth_worst_rank", MIB,
             "init peak memory growth, worst rank", "MiB"),
            (axes[1], "areal_seconds", "fsdp2_seconds", 1, "init wall time", "s")):
        for i, (label, rows, key) in enumerate((("areal-train streamed", streamed, key_a),
                                                ("areal-train sliced", sliced, key_a),
                                                ("FSDP2 rank 0 + broadcast", streamed, key_f),
                                                ("FSDP2 plain", sliced, key_f))):
            xs = [x for x, n in enumerate(ns) if n in rows]
            ax.bar([x + (i - 1.5) * width for x in xs], [rows[ns[x]][key] / scale for x in xs], width, label=label)
        ax.set_xticks(list(range(len(ns))), [f"N={n}" for n in ns], fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    train = [c for c in comparisons if c["what"].startswith("training")]
    xs = list(range(len(train)))
    ax = axes[2]
    ax.bar([x - 0.19 for x in xs], [r["areal_tokens_per_second_per_rank"] for r in train], 0.38, label="areal-train")
    ax.bar([x + 0.19 for x in xs], [r["fsdp2_tokens_per_second_per_rank"] for r in train], 0.38, label="FSDP2")
    ax.set_xticks(xs, [f"N={r['world_size']}\n" + ("ckpt" if "checkpointing on" in r["what"] else "keep") +
                   (f"\ne{r['experts']}" if r.get("experts", 1) > 1 else "") for r in train],
                  fontsize=7)
    ax.set_title("training tokens/s per rank", fontsize=10)
    ax.set_ylabel("tokens/s")
    ax.legend(fontsize=8)
    fig.suptitle(f"areal-train vs PyTorch FSDP2 ({meta['device']}, {meta['cores']} cores, torch {meta['torch']}, "
                 f"{meta['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main(*sys.argv[1:7])
