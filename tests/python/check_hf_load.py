"""Loads a checkpoint written by areal-train with `transformers` and compares logits.

    check_hf_load.py CHECKPOINT_DIR EXPECTED.safetensors

EXPECTED holds `input_ids` and the `logits` areal-train computed for them with the
weights it saved. Exit 0 when transformers agrees (fp32, max abs diff < 1e-4).
"""
import sys

import torch
import transformers
from safetensors.torch import load_file


def main(checkpoint, expected_path):
    expected = load_file(expected_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"]).logits.float()
    diff = (logits - expected["logits"]).abs().max().item()
    print(f"{type(model).__name__}: max abs diff {diff:.3g}")
    sys.exit(0 if diff < 1e-4 else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
