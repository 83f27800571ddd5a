"""Loads a checkpoint written by areal-train with `transformers` and compares logits.

    check_hf_load.py CHECKPOINT_DIR EXPECTED.safetensors [CHECKPOINT_DIR EXPECTED ...]

EXPECTED holds `input_ids` and the `logits` areal-train computed for them with the
weights it saved. Exit 0 when transformers agrees on every pair (fp32, max abs diff <
1e-4); several pairs share one start of Python and transformers.
"""
import sys

import torch
import transformers
from safetensors.torch import load_file


def agrees(checkpoint, expected_path):
    expected = load_file(expected_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"]).logits.float()
    diff = (logits - expected["logits"]).abs().max().item()
    print(f"{checkpoint}: {type(model).__name__}: max abs diff {diff:.3g}")
    return diff < 1e-4


if __name__ == "__main__":
    pairs = list(zip(sys.argv[1::2], sys.argv[2::2]))
    assert pairs and len(sys.argv) % 2 == 1, __doc__
    results = [agrees(checkpoint, expected) for checkpoint, expected in pairs]  # every pair, then the verdict
    sys.exit(0 if all(results) else 1)
