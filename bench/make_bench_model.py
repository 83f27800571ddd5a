"""Writes a random Qwen2-architecture checkpoint for the benchmarks: config.json plus
one model.safetensors, in float32 or bfloat16.

    make_bench_model.py OUT_DIR {float32,bfloat16} [0.5b|74m]

  0.5b  Qwen2.5-0.5B's shape (494 M parameters): the init benchmarks
  74m   hidden 640, 12 layers, vocab 32000 (74 M parameters): training throughput on CPUs

Does nothing when OUT_DIR already holds it. The weights are random (seeded): the
benchmark measures moving bytes, not what they mean.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file


SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2),
    "74m": dict(vocab_size=32000, hidden_size=640, intermediate_size=1792, num_hidden_layers=12,
                num_attention_heads=10, num_key_value_heads=2),
}


def main(out_dir, dtype_name, size="0.5b"):
    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        return
    dtype = getattr(torch, dtype_name)
    config = transformers.Qwen2Config(
        **SHAPES[size], max_position_embeddings=32768,
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
    main(*sys.argv[1:4])
