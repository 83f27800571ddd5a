"""TRL's GRPOTrainer on the benchmark's model, prompts and reward: the reference half of
bench/run_vs_trl.sh. One process on the CPU, the torch threads it is given; float32, or
with DTYPE bfloat16 the model loaded in bfloat16 and the trainer's bf16 on.

    trl_grpo.py MODEL_DIR PROMPTS.jsonl PROMPTS_PER_STEP GROUP NEW_TOKENS STEPS LR OUT.json [DTYPE]

PROMPTS.jsonl: {"prompt": text} rows, taken in order. Each step: PROMPTS_PER_STEP prompts x
GROUP sampled answers (temperature 1, no top-k/top-p, up to NEW_TOKENS tokens, the
tokenizer's EOS ends one), bench/reference/parity_reward.py's reward, group-normalized
advantages, one optimizer step on all answers (no KL, activations kept: areal-train's
defaults). Writes per step: its wall time and the part spent in generate().
"""
import json
import os
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_reward import even_length  # noqa: E402


def parity_rewards(prompts, completions, **kwargs):
    return [even_length(completions=c) for c in completions]


class StepClock(TrainerCallback):
    def __init__(self, generation_seconds):
        self.generation_seconds = generation_seconds
        self.steps = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()
        self.generation_seconds[0] = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append({"seconds": time.perf_counter() - self.start, "generation_seconds": self.generation_seconds[0]})


def main(model_dir, prompts_path, per_step, group, new_tokens, steps, lr, out_path, dtype="float32"):
    per_step, group, new_tokens, steps, lr = int(per_step), int(group), int(new_tokens), int(steps), float(lr)
    rows = [json.loads(line) for line in open(prompts_path)]
    dataset = Dataset.from_list([{"prompt": r["prompt"]} for r in rows[: per_step * steps]])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    generation_seconds = [0.0]
    generate = model.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        out = generate(*args, **kwargs)
        generation_seconds[0] += time.perf_counter() - start
        return out

    model.generate = timed_generate
    config = GRPOConfig(
        output_dir=os.path.join(os.path.dirname(out_path), "trl_run"), use_cpu=True, bf16=dtype == "bfloat16",
        per_device_train_batch_size=per_step * group, num_generations=group, max_completion_length=new_tokens,
        temperature=1.0, top_k=0, top_p=1.0, beta=0.0, learning_rate=lr, lr_scheduler_type="constant",
        warmup_steps=0, max_steps=steps, num_iterations=1, gradient_checkpointing=False, logging_steps=1,
        report_to=[], save_strategy="no", dataloader_num_workers=0, seed=0, shuffle_dataset=False)
    clock = StepClock(generation_seconds)
    trainer = GRPOTrainer(model=model, reward_funcs=parity_rewards, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    json.dump({"side": "trl", "steps": clock.steps, "prompts_per_step": per_step, "group": group,
               "new_tokens": new_tokens, "threads": torch.get_num_threads()}, open(out_path, "w"), indent=1)
    for i, s in enumerate(clock.steps):
        print(f"trl step {i + 1}: {s['seconds']:.2f} s, generation {s['generation_seconds']:.2f} s")


if __name__ == "__main__":
    main(*sys.argv[1:10])
