"""Reads a TensorBoard event directory with TensorBoard's own reader and prints the
scalars as JSON: {"tag": [[step, value], ...], ...}.

    read_tensorboard.py EVENT_DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1])
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
