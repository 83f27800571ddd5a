"""FSDP2 initialization from a Hugging Face checkpoint, the two ways AReaL's users get
it, timed and measured per rank (the reference areal-train's --job init is compared to).

    mpirun -np N python fsdp2_init.py MODEL_DIR {areal,plain} OUT.json

  areal  memory-efficient, as AReaL's FSDP engine does it: rank 0 builds the model on
         the CPU from the checkpoint (from_pretrained) and takes its full state dict;
         the other ranks build it on the meta device; fully_shard every decoder layer and the
         root; then set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True).
  plain  every rank loads the whole checkpoint (from_pretrained), then fully_shard.
The model is transformers' own class for the checkpoint's config.json, in float32.
"""
import sys

import torch
import transformers
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

import fsdp2_common as common


def init_areal(model_dir, config, rank, device_mesh, device):
    if rank == 0:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        full_state = model.state_dict()  # the full state dict, sharing the loaded storage
    else:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        full_state = {}
    common.shard_like_areal(model, device_mesh)
    if rank != 0:
        model.to_empty(device=device)
    elif device.type != "cpu":
        model.to(device)
    set_model_state_dict(model, full_state,
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    if config.tie_word_embeddings:
        model.tie_weights()
    del full_state
    return model


def init_plain(model_dir, device_mesh, device):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    common.shard_like_areal(model, device_mesh)
    return model


def main(model_dir, mode, out):
    rank, world, device = common.setup()
    device_mesh = common.mesh(device)
    config = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):  # load transformers' lazily imported modules before measuring
        transformers.AutoModelForCausalLM.from_config(config)
    torch.distributed.barrier()
    with common.Measure() as m:
        model = init_areal(model_dir, config, rank, device_mesh, device) if mode == "areal" else \
            init_plain(model_dir, device_mesh, device)
        torch.distributed.barrier()
    # A checksum of rank 0's local shard of the embedding: both modes must load the same bytes.
    local = model.model.embed_tokens.weight.detach().to_local()
    records = common.gather_to_rank0({"rank": rank, "seconds": m.seconds, "peak_growth_bytes": m.peak_growth,
                                      "gpu_peak_bytes": m.gpu_peak,
                                      "embed_shard_sum": float(local.double().sum())})
    if rank == 0:
        common.write_json(out, {"mode": mode, "world_size": world, "ranks": records})
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
