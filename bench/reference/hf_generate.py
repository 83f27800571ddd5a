"""transformers' generate on the same model and prompts as areal_generation_bench, timed:
the reference half of bench/run_generation.sh.

    python hf_generate.py MODEL_DIR PROMPTS.json NEW_TOKENS STOPS OUT.json

Sampling at temperature 1 without top-k/top-p, the dynamic KV cache (generate's
default), float32. STOPS = 0: exactly NEW_TOKENS tokens per answer (min_new_tokens =
max_new_tokens, so no answer stops early). STOPS = n > 0: token ids 3 .. 3 + n - 1 are
end-of-sequence ids; the figure counts each answer's tokens up to and including its
stop (generate pads the finished rows until the last one ends). All prompts have the
same length, so there is no padding. A short untimed warm-up runs first.
"""
import json
import sys
import time

import torch
import transformers


def main(model_dir, prompts_path, new_tokens, stops, out):
    new_tokens, stops = int(new_tokens), int(stops)
    prompts = json.load(open(prompts_path))
    assert len({len(p) for p in prompts}) == 1, "the prompts must have one length (no padding)"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor(prompts, dtype=torch.long)
    stop_ids = list(range(3, 3 + stops))
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    if stops:
        kwargs["eos_token_id"] = stop_ids
    min_new = 0 if stops else new_tokens
    torch.manual_seed(0)
    with torch.no_grad():
        model.generate(ids[:4], max_new_tokens=4, min_new_tokens=min(4, min_new), **kwargs)  # warm-up
        start = time.perf_counter()
        out_ids = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=min_new, **kwargs)
        seconds = time.perf_counter() - start
    tokens = 0
    for row in out_ids[:, ids.shape[1]:].tolist():
        ends = [i for i, t in enumerate(row) if t in stop_ids]
        tokens += ends[0] + 1 if ends else len(row)
    assert stops or tokens == len(prompts) * new_tokens
    json.dump({"side": "transformers", "rows": len(prompts), "new_tokens": new_tokens, "stops": stops,
               "generated_tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds},
              open(out, "w"), indent=1)
    print(f"transformers: {len(prompts)} rows x up to {new_tokens} tokens ({stops} stop ids): {tokens} tokens, "
          f"{seconds:.2f} s, {tokens / seconds:.0f} tokens/s")


if __name__ == "__main__":
    main(*sys.argv[1:6])
