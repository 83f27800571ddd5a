"""A reward for tests of dynamic sampling: 1 when the answer's token ids sum to an odd
number, else 0. Deterministic, about half the answers score 1 whatever the model, so
some groups of answers carry a signal and some do not.

    reward_fn: "command:python3 scripts/rewards/worker.py tests/python/parity_reward.py:parity_reward_fn"
"""


def parity_reward_fn(completion_ids, **kwargs):
    return float(sum(completion_ids) % 2)
