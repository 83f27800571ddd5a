"""Serves a Python environment class to areal-train (env: command:...).

    env: "command:python3 scripts/envs/worker.py scripts/envs/retry_env.py:RetryEnv"

areal-train starts env_workers of these per generation rank and keeps them for the run.
Each creates one CLASS() and reads one JSON object per line on stdin, the episode so far
(messages, last, turn, final, row: docs/agentic.md), calls its step(**request) and writes
the dict it returns as one JSON line: {"message": ..., "role": "user" or "tool"} to go on,
or {"done": true, "reward": r} to end. A step that raises ends the episode with reward 0
(the worker keeps serving); the error goes to stderr.
"""
import importlib.util
import json
import sys
import traceback


def load(spec):
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("env_module", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def main():
    if len(sys.argv) != 2 or ":" not in sys.argv[1]:
        sys.exit("usage: worker.py PATH/TO/module.py:CLASS")
    env = load(sys.argv[1])()
    for line in sys.stdin:
        try:
            reply = env.step(**json.loads(line))
        except Exception:  # one bad turn must not end the worker
            traceback.print_exc(file=sys.stderr)
            reply = {"done": True, "reward": 0.0}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
