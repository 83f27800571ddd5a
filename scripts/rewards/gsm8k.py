"""GSM8K's reward with Hugging Face math-verify, in AReaL's reward_fn shape.

    reward_fn: "command:python3 scripts/rewards/worker.py scripts/rewards/gsm8k.py:gsm8k_reward_fn"

`answer` is the dataset's reference ("... #### 72"); the completion is correct when
math-verify finds its final answer equal to the number after "####".
"""
from math_verify import parse, verify


def gsm8k_reward_fn(prompt, completions, prompt_ids, completion_ids, answer, **kwargs):
    reference = str(answer).split("####")[-1].strip().replace(",", "")
    gold = parse(reference)
    guess = parse(completions)
    return 1.0 if gold and guess and verify(gold, guess) else 0.0
