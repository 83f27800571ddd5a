"""Draws a run's reward and accuracy against the step from its stats.jsonl.

    plot_stats.py RUN_DIR/stats.jsonl OUT.png [--title TEXT]

Top: the training reward mean (and, for episodes with a tool, the tool calls per
episode) per step.
Bottom: the held-out greedy accuracy at each evaluation, and with evaluator.n_samples
the sampled pass@1 and maj@n (docs/evaluation.md). Prints the held-out accuracy before
and after, one line each, for scripts to read.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stats")
    ap.add_argument("out")
    ap.add_argument("--title", default="GRPO")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.stats) if line.strip()]
    train = [r for r in rows if "reward_mean" in r]
    evals = [r for r in rows if "eval_accuracy" in r]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    if train:
        steps = [r["step"] for r in train]
        top.plot(steps, [r["reward_mean"] for r in train], lw=0.8, label="reward mean (sampled answers)")
        if "tool_calls_mean" in train[0]:  # episodes with a tool (docs/agentic.md)
            top.plot(steps, [r["tool_calls_mean"] for r in train], lw=0.8, label="tool calls per episode")
        top.set_ylabel("reward")
        top.set_ylim(-0.05, 1.05)
        top.grid(alpha=0.3)
        top.legend(loc="lower right")
    if evals:
        eval_steps = [r["step"] for r in evals]
        bottom.plot(eval_steps, [100 * r["eval_accuracy"] for r in evals], "o-", label="held-out greedy accuracy")
        sampled = [k for k in evals[0] if k == "eval_pass@1" or k.startswith("eval_maj@")]
        for key in sampled:  # evaluator.n_samples: every evaluation logs them
            bottom.plot(eval_steps, [100 * r[key] for r in evals], "s--", lw=0.8, label=key[len("eval_"):])
        bottom.set_ylabel("accuracy (%)")
        bottom.set_ylim(0, 100)
        bottom.grid(alpha=0.3)
        bottom.legend(loc="lower right")
    bottom.set_xlabel("step")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    if evals:
        print(f"held-out greedy accuracy before: {100 * evals[0]['eval_accuracy']:.1f}%")
        print(f"held-out greedy accuracy after: {100 * evals[-1]['eval_accuracy']:.1f}%")
        for key in [k for k in evals[0] if k.startswith(("eval_pass@", "eval_maj@"))]:
            print(f"held-out {key[len('eval_'):]} before -> after: {100 * evals[0][key]:.1f}% -> "
                  f"{100 * evals[-1][key]:.1f}%")
    if train and "tool_calls_mean" in train[0]:
        print(f"tool calls per episode (sampled): {train[0]['tool_calls_mean']:.2f} at step 1, "
              f"{train[-1]['tool_calls_mean']:.2f} at step {train[-1]['step']}")
    print(f"plot written to {args.out}")


if __name__ == "__main__":
    main()
