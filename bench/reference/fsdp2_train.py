"""FSDP2 training steps on CPU (gloo) or GPU (NCCL), the reference for areal-train's
training throughput: the same checkpoint, data, batch and optimizer as
`areal-train --job sft`, with FSDP2 as AReaL drives it (fully_shard per decoder layer
and the root, reshard_after_forward), with or without activation checkpointing (as
areal-train's actor.gradient_checkpointing true / false).

    mpirun -np N python fsdp2_train.py MODEL_DIR DATA.jsonl BATCH STEPS LR OUT.json CHECKPOINTING

CHECKPOINTING is true or false.

DATA.jsonl rows {"text": ...} are tokenized as areal-train's byte tokenizer does
(BOS 256, the UTF-8 bytes, EOS 257) and read in file order; each global batch of BATCH
rows is dealt out to the ranks (rank r takes rows r, r + N, ...). Rows of different
lengths are right-padded to the rank's longest, with an attention mask, as transformers
pads a batch. The loss is areal-train's: the next-token cross-entropy summed over the
real tokens and divided by the target tokens of the whole global batch; AdamW (betas
0.9/0.999, eps 1e-8, no weight decay), global gradient clipping at 1.0. Each step
records the global batch's target tokens (the useful ones: padding excluded).
"""
import sys
import time

import torch
import transformers

import fsdp2_common as common


def main(model_dir, data_path, batch, steps, lr, out, checkpointing):
    batch, steps, lr = int(batch), int(steps), float(lr)
    assert checkpointing in ("true", "false"), checkpointing
    rank, world, device = common.setup()
    rows = common.byte_rows(data_path)
    assert batch % world == 0 and len(rows) >= batch * steps
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    if checkpointing == "true":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()  # transformers checkpoints activations only in training mode
    common.shard_like_areal(model, common.mesh(device), reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    records = []
    with common.Measure() as m:
        for step in range(steps):
            start = time.perf_counter()
            mine = rows[step * batch + rank:(step + 1) * batch:world]
            ids, mask = common.padded_batch(mine, device)
            targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            target_tokens = (targets != -100).sum().to(torch.float64).reshape(1)
            torch.distributed.all_reduce(target_tokens)
            logits = model(input_ids=ids, attention_mask=mask).logits
            loss_sum = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                                                         targets.reshape(-1), ignore_index=-100, reduction="sum")
            optimizer.zero_grad()
            (loss_sum * (world / float(target_tokens))).backward()  # FSDP2 averages gradients over ranks
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            global_loss = loss_sum.detach().clone()
            torch.distributed.all_reduce(global_loss)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            records.append({"step": step + 1, "loss": float(global_loss) / float(target_tokens), "seconds": seconds,
                            "target_tokens": float(target_tokens), "padded_tokens_per_rank": ids.numel(),
                            "grad_norm": float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)})
    ranks = common.gather_to_rank0({"rank": rank, "peak_growth_bytes": m.peak_growth, "gpu_peak_bytes": m.gpu_peak,
                                    "peak_rss_bytes": common.peak_rss_bytes()})
    if rank == 0:
        common.write_json(out, {"world_size": world, "gradient_checkpointing": checkpointing == "true",
                                "steps": records, "ranks": ranks})
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:8])
