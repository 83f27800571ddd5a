"""Writes a random Qwen2.5-0.5B-shaped checkpoint (about 494 M parameters) for the init
benchmark: config.json plus one model.safetensors, in float32 or bfloat16.

    make_bench_model.py OUT_DIR {float32,bfloat16}

Does nothing when OUT_DIR already holds it. The weights are random (seeded): the
benchmark measures moving bytes, not what they mean.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file


def main(out_dir, dtype_name):
    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        return
    dtype = getattr(torch, dtype_name)
    config = transformers.Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, dtype=dtype_name)
    with torch.device("meta"):
        skeleton = transformers.Qwen2ForCausalLM(config)
    generator = torch.Generator().manual_seed(0)
    tensors = {name: (torch.randn(p.shape, generator=generator) * 0.02).to(dtype)
               for name, p in skeleton.named_parameters() if name != "lm_head.weight"}
    os.makedirs(out_dir + ".tmp", exist_ok=True)
    config.save_pretrained(out_dir + ".tmp")
    save_file(tensors, os.path.join(out_dir + ".tmp", "model.safetensors"), metadata={"format": "pt"})
    os.replace(out_dir + ".tmp", out_dir)
    print(f"wrote {out_dir}: {sum(t.numel() for t in tensors.values()) / 1e6:.1f} M parameters, {dtype_name}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
