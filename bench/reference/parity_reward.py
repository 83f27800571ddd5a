"""The reward of bench/run_vs_trl.sh, AReaL-style (one answer per call): 1 when the answer's
text has an even number of characters, else 0. It varies between the answers of a prompt
whatever the model (a random model never earns a real task's reward), so both trainers'
advantages are non-zero and every step trains."""


def even_length(prompt=None, completions="", **kwargs):
    return float(len(completions) % 2 == 0)
