"""A corpus of (answer, reference) pairs in the shapes GSM8K and MATH solutions take,
each judged by Hugging Face math-verify: the reference the built-in `math` reward
(lib/areal/reward/reward.cpp) is checked against in tests/test_reward.cpp.

    math_verify_corpus.py N_PAIRS SEED > corpus.jsonl
    math_verify_corpus.py --file PAIRS.jsonl > judged.jsonl   # fixed pairs, judged

The second form judges hand-written pairs (tests/fixtures/math/real_answers.jsonl:
solutions as models write them to MATH-500 and GSM8K problems) the same way.

Each line: {"answer": ..., "reference": ..., "style": ..., "math_verify": 0 or 1}. For
GSM8K-style references ("... #### 72") math-verify gets the number after "####" as the
gold answer (scripts/rewards/gsm8k.py does the same); for MATH-style ones the whole
reference ("\\boxed{...}").
"""
import json
import random
import sys

from math_verify import parse, verify


def gsm8k_pair(rng):
    value = rng.choice([rng.randint(0, 99), rng.randint(100, 99999), -rng.randint(1, 500)])
    reference = f"{rng.choice(['Adding up', 'So', 'In total'])} the result is {value}.\n#### {value}"
    correct = rng.random() < 0.6
    guess = value if correct else value + rng.choice([-10, -1, 1, 2, 100])
    written = str(guess)
    if abs(guess) >= 1000 and rng.random() < 0.5:
        written = f"{guess:,}"
    form = rng.choice(["####", "answer", "boxed", "dollars", "sentence"])
    if form == "####":
        answer = f"Step by step: ... = {guess}.\n#### {written}"
    elif form == "answer":
        answer = f"Let me compute. The answer is {written}."
    elif form == "boxed":
        answer = f"Therefore the total is \\boxed{{{written}}}."
    elif form == "dollars":
        answer = f"She pays ${written}." if guess >= 0 else f"The change is {written}."
    else:
        answer = f"First 3 + 4 = 7, then the final count is {written}"
    return answer, reference, "gsm8k"


def harder_pair(rng):
    """Forms real solutions also take: LaTeX thousands, text units, an equation, a
    negative fraction, a percent, a square root."""
    kind = rng.choice(["thousands", "units", "equation", "negative_fraction", "percent", "sqrt"])
    correct = rng.random() < 0.6
    if kind == "thousands":
        value = rng.randint(1000, 99999)
        guess = value if correct else value + 1
        return f"The total is $\\boxed{{{guess // 1000}{{,}}{guess % 1000:03d}}}$.", f"\\boxed{{{value}}}", "math"
    if kind == "units":
        value = rng.randint(2, 300)
        guess = value if correct else value + 1
        return f"\\boxed{{{guess} \\text{{ cm}}}}", f"\\boxed{{{value}}}", "math"
    if kind == "equation":
        value = rng.randint(-20, 20)
        guess = value if correct else value + 1
        return f"Solving, \\boxed{{x = {guess}}}", f"\\boxed{{{value}}}", "math"
    if kind == "negative_fraction":
        b = rng.choice([2, 3, 5, 7])
        a = rng.randint(1, b - 1)
        guess = a if correct else a + b
        return f"\\boxed{{-\\frac{{{guess}}}{{{b}}}}}", f"\\boxed{{-\\frac{{{a}}}{{{b}}}}}", "math"
    if kind == "percent":
        value = rng.randint(1, 99)
        guess = value if correct else value + 1
        return f"So {guess}% of them.\n#### {guess}", f"{value} percent\n#### {value}", "gsm8k"
    n = rng.choice([2, 3, 5, 6, 7])
    guess = n if correct else n + 1
    return f"\\boxed{{\\sqrt{{{guess}}}}}", f"\\boxed{{\\sqrt{{{n}}}}}", "math"


def math_pair(rng):
    if rng.random() < 0.2:
        return harder_pair(rng)
    kind = rng.choice(["integer", "fraction", "decimal"])
    if kind == "integer":
        value = rng.randint(-50, 500)
        reference = f"\\boxed{{{value}}}"
        good = [str(value), f"{value}.0"] if rng.random() < 0.3 else [str(value)]
        bad = [str(value + rng.choice([-2, -1, 1, 3]))]
    elif kind == "fraction":
        b = rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 12])
        a = rng.choice([x for x in range(1, 3 * b) if x % b != 0])
        reference = f"\\boxed{{\\frac{{{a}}}{{{b}}}}}"
        good = [f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\frac{{{2 * a}}}{{{2 * b}}}"]
        bad = [f"\\frac{{{a + 1}}}{{{b}}}", f"{b}/{a}" if a != b else f"{a + 1}/{b}"]
    else:
        tenths = rng.randint(1, 999)
        value = tenths / 10
        reference = f"\\boxed{{{value}}}"
        good = [str(value), f"{value}0"]
        bad = [str(round(value + 0.1, 1))]
    correct = rng.random() < 0.6
    inner = rng.choice(good if correct else bad)
    answer = rng.choice([f"So the answer is $\\boxed{{{inner}}}$.", f"We get \\boxed{{{inner}}}", f"\\boxed{{{inner}}}"])
    return answer, reference, "math"


def judge(answer, reference, style):
    gold_text = reference.split("####")[-1].strip().replace(",", "") if style == "gsm8k" else reference
    gold, guess = parse(gold_text), parse(answer)
    judged = 1 if gold and guess and verify(gold, guess) else 0
    print(json.dumps({"answer": answer, "reference": reference, "style": style, "math_verify": judged}))


def main(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        judge(*(gsm8k_pair if rng.random() < 0.5 else math_pair)(rng))


def judge_file(path):
    for line in open(path, encoding="utf-8"):
        row = json.loads(line)
        judge(row["answer"], row["reference"], "gsm8k" if "####" in row["reference"] else "math")


if __name__ == "__main__":
    if sys.argv[1] == "--file":
        judge_file(sys.argv[2])
    else:
        main(int(sys.argv[1]), int(sys.argv[2]))
