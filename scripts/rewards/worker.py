"""Serves an AReaL-style reward function to areal-train (reward_fn: command:...).

    reward_fn: "command:python3 scripts/rewards/worker.py scripts/rewards/gsm8k.py:gsm8k_reward_fn"

areal-train starts reward_workers of these per rank and keeps them for the run. Each
reads one JSON object per line on stdin, AReaL's reward_fn arguments (prompt,
completions, prompt_ids, completion_ids and every field of the dataset's row), calls
FUNCTION(**row) and writes the reward as one number per line. A function that raises
scores 0 for that answer (the worker keeps serving); the error goes to stderr.
"""
import importlib.util
import json
import sys
import traceback


def load(spec):
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("reward_module", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def main():
    if len(sys.argv) != 2 or ":" not in sys.argv[1]:
        sys.exit("usage: worker.py PATH/TO/module.py:FUNCTION")
    reward_fn = load(sys.argv[1])
    for line in sys.stdin:
        try:
            reward = float(reward_fn(**json.loads(line)))
        except Exception:  # one bad answer must not end the worker
            traceback.print_exc(file=sys.stderr)
            reward = 0.0
        sys.stdout.write(f"{reward}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
