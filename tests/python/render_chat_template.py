"""Renders chat templates with transformers, the reference areal-train's Jinja module
is compared with.

    render_chat_template.py CASES_JSON

CASES_JSON holds a list of cases, each either
  {"template": TEXT, "context": {...}}: rendered by transformers' own Jinja environment
      (the one apply_chat_template compiles templates with), or
  {"model_dir": DIR, "messages": [...], "add_generation_prompt": B, "kwargs": {...}}:
      AutoTokenizer.from_pretrained(DIR).apply_chat_template(...) with the model's own
      template, giving the text and the token ids.
Prints a JSON list with one object per case: {"text": ..., "ids": [...]} or {"error": ...}.
"""
import json
import sys

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

cases = json.load(open(sys.argv[1], encoding="utf-8"))
tokenizers = {}
results = []
for case in cases:
    try:
        if "template" in case:
            results.append({"text": _compile_jinja_template(case["template"]).render(**case["context"])})
            continue
        directory = case["model_dir"]
        if directory not in tokenizers:
            tokenizers[directory] = AutoTokenizer.from_pretrained(directory)
        tok = tokenizers[directory]
        kwargs = dict(case.get("kwargs", {}))
        text = tok.apply_chat_template(case["messages"], tokenize=False,
                                       add_generation_prompt=case["add_generation_prompt"], **kwargs)
        ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=True,
                                      add_generation_prompt=case["add_generation_prompt"], **kwargs)["input_ids"]
        results.append({"text": text, "ids": list(ids)})
    except Exception as e:  # the C++ side must fail on the same case
        results.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(results, ensure_ascii=False))
