"""An example environment: AReaL's multi-turn math in Python (the built-in
builtin:multi_turn_math does the same in C++). A right final answer ends the episode
with reward 1; a wrong one is answered with a hint to try again, until the last turn."""


def final_number(text):
    """The last number of the text, without thousands separators, or None."""
    number, found = "", None
    for ch in text + " ":
        if ch.isdigit() or (ch in ".-" and not number) or (ch == "," and number):
            number += ch
        else:
            digits = number.replace(",", "").rstrip(".")
            if any(c.isdigit() for c in digits):
                found = digits
            number = ""
    return found


class RetryEnv:
    def step(self, messages, last, turn, final, row):
        reference = str(row["answer"]).split("####")[-1].strip().replace(",", "")
        answer = final_number(last)
        if answer is not None and answer == reference:
            return {"done": True, "reward": 1.0}
        if final:
            return {"done": True, "reward": 0.0}
        return {"role": "user", "message": f"That is not right (turn {turn + 1}). Check your steps and try again."}
