"""Encodes and decodes texts with the `tokenizers` package, the reference the C++
tokenizer is compared with.

    tokenize_reference.py TOKENIZER_JSON TEXTS_JSON

TEXTS_JSON holds a list of strings. Prints one JSON object: {"ids": [[...], ...],
"decoded": [...]}, encoded without added BOS/EOS (add_special_tokens=False) and
decoded with special tokens kept.
"""
import json
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
texts = json.load(open(sys.argv[2], encoding="utf-8"))
ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
print(json.dumps({"ids": ids, "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids]}))
