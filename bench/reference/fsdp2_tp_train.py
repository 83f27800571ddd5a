"""FSDP2 with PyTorch's tensor parallelism (torch.distributed.tensor.parallel) on a 2D
mesh, as torchtitan composes them: the reference for areal-train's `actor.backend:
fsdp:dDtT`. Each decoder layer's q/k/v and gate/up are ColwiseParallel, o_proj and
down_proj RowwiseParallel over the T ranks of a tensor-parallel group (consecutive
ranks, as areal-train's), the head ColwiseParallel with its logits left sharded over
the vocabulary and the loss computed under loss_parallel() (no rank holds whole
logits), the embedding RowwiseParallel (its vocabulary rows; tied to the head when the
model ties them); then fully_shard over the D data-parallel groups (each decoder layer,
then the root), reshard_after_forward, activations kept.

    mpirun -np N python fsdp2_tp_train.py MODEL_DIR DATA.jsonl BATCH STEPS LR OUT.json T

Rows are read and tokenized as fsdp2_train.py does (byte tokenizer); each global batch
of BATCH rows is dealt to the D groups (group g takes rows g, g + D, ...), the ranks of
a group share them. Loss: next-token cross-entropy summed over the real targets,
divided by the global batch's target tokens; AdamW as fsdp2_train.py, global clipping 1.0.
"""
import sys
import time

import torch
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module

import fsdp2_common as common


def clip_grad_norm(parameters, max_norm):
    """Global gradient clipping over parameters on two meshes (the layers' (dp, tp), the
    norms' and the embedding's dp), which clip_grad_norm_ cannot stack: each gradient's
    norm made whole first."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = [g.norm().full_tensor() if hasattr(g, "full_tensor") else g.norm() for g in grads]
    total = torch.stack([n.to(torch.float32) for n in norms]).pow(2).sum().sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total


def main(model_dir, data_path, batch, steps, lr, out, tensor):
    batch, steps, lr, tensor = int(batch), int(steps), float(lr), int(tensor)
    rank, world, device = common.setup()
    groups = world // tensor
    mesh = init_device_mesh(device.type, (groups, tensor), mesh_dim_names=("dp", "tp"))
    group = rank // tensor  # the dp coordinate: tensor groups are consecutive ranks
    rows = common.byte_rows(data_path)
    assert batch % groups == 0 and len(rows) >= batch * steps
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    model.config.use_cache = False
    model.train()
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], plan)
    parallelize_module(model, mesh["tp"], {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    if model.config.tie_word_embeddings:  # both hold the vocabulary's rows of the same weight
        model.lm_head.weight = model.model.embed_tokens.weight
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    records = []
    with common.Measure() as m:
        for step in range(steps):
            start = time.perf_counter()
            mine = rows[step * batch + group:(step + 1) * batch:groups]
            ids, mask = common.padded_batch(mine, device)
            targets = torch.cat([ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100),
                                 torch.full_like(ids[:, :1], -100)], dim=1)
            target_tokens = (targets != -100).sum().to(torch.float64).reshape(1) / tensor  # a group's ranks share rows
            torch.distributed.all_reduce(target_tokens)
            logits = model(input_ids=ids, attention_mask=mask).logits  # DTensor, sharded over the vocabulary
            with loss_parallel():
                loss_sum = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.reshape(-1),
                                                             ignore_index=-100, reduction="sum")
                optimizer.zero_grad()
                # FSDP2 averages over the D groups; the tensor group's ranks compute the same loss.
                (loss_sum * (groups / float(target_tokens))).backward()
            norm = clip_grad_norm(model.parameters(), 1.0)
            optimizer.step()
            loss_value = loss_sum.full_tensor() if hasattr(loss_sum, "full_tensor") else loss_sum
            global_loss = loss_value.detach().clone().reshape(1) / tensor
            torch.distributed.all_reduce(global_loss)
            seconds = time.perf_counter() - start
            records.append({"step": step + 1, "loss": float(global_loss) / float(target_tokens), "seconds": seconds,
                            "target_tokens": float(target_tokens),
                            "grad_norm": float(norm)})
    ranks = common.gather_to_rank0({"rank": rank, "peak_growth_bytes": m.peak_growth, "gpu_peak_bytes": m.gpu_peak,
                                    "peak_rss_bytes": common.peak_rss_bytes()})
    if rank == 0:
        common.write_json(out, {"world_size": world, "tensor_parallel": tensor, "steps": records, "ranks": ranks})
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:8])
