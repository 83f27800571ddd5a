"""Writes a LoRA adapter with Hugging Face PEFT and the logits PEFT computes with it.

    peft_adapter_reference.py BASE_MODEL_DIR OUT_DIR

OUT_DIR gets PEFT's adapter directory (adapter_config.json, adapter_model.safetensors:
r 4, lora_alpha 8, every linear of the decoder layers, A and B both random so that the
adapter changes the logits) and reference_logits.safetensors with `input_ids` and the
adapted model's `logits`, for areal-train to start from the adapter and compare.
"""
import sys

import peft
import torch
import transformers
from safetensors.torch import save_file


def main(base, out):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0,
                             init_lora_weights=False, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, config).eval()
    model.save_pretrained(out)
    ids = torch.arange(12).view(2, 6) % model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    save_file({"input_ids": ids, "logits": logits.contiguous()}, f"{out}/reference_logits.safetensors")
    print(f"peft {peft.__version__}: adapter written to {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
