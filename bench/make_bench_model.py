"""Writes a random Qwen2-architecture checkpoint for the benchmarks: config.json plus
one model.safetensors, in float32 or bfloat16.

    make_bench_model.py OUT_DIR {float32,bfloat16} [0.5b|74m|ctx_60m|moe_0.7b|moe_130m] [TOKENIZER_DIR]

  0.5b      Qwen2.5-0.5B's shape (494 M parameters): the init benchmarks
  74m       hidden 640, 12 layers, vocab 32000 (74 M parameters): training throughput on CPUs
  ctx_60m   hidden 512, 8 layers, 8 heads, 4 key/value heads: context parallelism up to c = 4
  moe_0.7b  a Qwen3-MoE of 16 layers of 32 experts, top 4 (0.68 B parameters): MoE init
  moe_130m  a Qwen3-MoE of 12 layers of 16 experts, top 4 (131 M): MoE training on CPUs
The mixtures' experts are written as the Hub ships them, one tensor per expert. With
TOKENIZER_DIR, its tokenizer.json and tokenizer_config.json go with the model and the
vocabulary is the tokenizer's (its EOS the model's): for the benchmarks that read text.

Does nothing when OUT_DIR already holds it. The weights are random (seeded): the
benchmark measures moving bytes, not what they mean.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file


SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2),
    "74m": dict(vocab_size=32000, hidden_size=640, intermediate_size=1792, num_hidden_layers=12,
                num_attention_heads=10, num_key_value_heads=2),
    "ctx_60m": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                    num_attention_heads=8, num_key_value_heads=4),
    "moe_0.7b": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                     num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=32,
                     num_experts_per_tok=4, moe_intermediate_size=384, norm_topk_prob=True),
    "moe_130m": dict(vocab_size=32000, hidden_size=640, intermediate_size=1792, num_hidden_layers=12,
                     num_attention_heads=10, num_key_value_heads=2, head_dim=64, num_experts=16,
                     num_experts_per_tok=4, moe_intermediate_size=256, norm_topk_prob=True),
}


def hub_expert_tensors(name, tensor):
    """transformers 5 holds a layer's experts fused ([experts, 2 x inner, hidden] gate and
    up, [experts, hidden, inner] down); the Hub has one tensor per expert."""
    prefix = name.rsplit(".", 1)[0]  # model.layers.L.mlp.experts
    if name.endswith("gate_up_proj"):
        inner = tensor.shape[1] // 2
        out = {}
        for e in range(tensor.shape[0]):
            out[f"{prefix}.{e}.gate_proj.weight"] = tensor[e, :inner].contiguous()
            out[f"{prefix}.{e}.up_proj.weight"] = tensor[e, inner:].contiguous()
        return out
    return {f"{prefix}.{e}.down_proj.weight": tensor[e].contiguous() for e in range(tensor.shape[0])}


def main(out_dir, dtype_name, size="0.5b", tokenizer_dir=None):
    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        return
    dtype = getattr(torch, dtype_name)
    moe = size.startswith("moe")
    config_class, model_class = ((transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM) if moe
                                 else (transformers.Qwen2Config, transformers.Qwen2ForCausalLM))
    shape = dict(SHAPES[size])
    if tokenizer_dir:
        tokenizer = json.load(open(os.path.join(tokenizer_dir, "tokenizer.json")))
        ids = list(tokenizer["model"]["vocab"].values()) + [t["id"] for t in tokenizer.get("added_tokens", [])]
        eos = json.load(open(os.path.join(tokenizer_dir, "tokenizer_config.json")))["eos_token"]
        eos_id = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == eos)
        shape.update(vocab_size=max(ids) + 1, eos_token_id=eos_id, bos_token_id=eos_id, pad_token_id=eos_id)
    config = config_class(
        **shape, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, dtype=dtype_name)
    with torch.device("meta"):
        skeleton = model_class(config)
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, p in skeleton.named_parameters():
        if name == "lm_head.weight":
            continue
        tensor = (torch.randn(p.shape, generator=generator) * 0.02).to(dtype)
        tensors.update(hub_expert_tensors(name, tensor) if ".experts." in name else {name: tensor})
    os.makedirs(out_dir + ".tmp", exist_ok=True)
    config.save_pretrained(out_dir + ".tmp")
    for name in ("tokenizer.json", "tokenizer_config.json") if tokenizer_dir else ():
        shutil.copy(os.path.join(tokenizer_dir, name), out_dir + ".tmp")
    save_file(tensors, os.path.join(out_dir + ".tmp", "model.safetensors"), metadata={"format": "pt"})
    os.replace(out_dir + ".tmp", out_dir)
    print(f"wrote {out_dir}: {sum(t.numel() for t in tensors.values()) / 1e6:.1f} M parameters, {dtype_name}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
